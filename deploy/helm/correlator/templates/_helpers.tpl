{{/* Names, labels and the agent's configuration file. */}}

{{- define "correlator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "correlator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "correlator.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "correlator.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "correlator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "correlator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "correlator.labels" -}}
{{ include "correlator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: correlator
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "correlator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "correlator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "correlator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "correlator.bridgeTLSSecret" -}}
{{- default (printf "%s-bridge-tls" (include "correlator.fullname" .)) .Values.bridge.tls.existingSecret -}}
{{- end -}}

{{- define "correlator.tokenSecret" -}}
{{- default (printf "%s-token" (include "correlator.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{/*
The agent's config file: agent.config plus the keys the chart owns. Keys
are `correlator run` flag names.
*/}}
{{- define "correlator.agentConfig" -}}
{{- $c := deepCopy .Values.agent.config -}}
{{- $_ := set $c "token-file" "/etc/correlator/token/token" -}}
{{- if .Values.criSocket -}}
{{- $_ := set $c "cri-socket" .Values.criSocket -}}
{{- end -}}
{{- if .Values.audit.logFiles -}}
{{- $_ := set $c "audit-log" .Values.audit.logFiles -}}
{{- end -}}
{{- if .Values.elasticsearch.enabled -}}
{{- $_ := set $c "store" "elasticsearch" -}}
{{- $_ := set $c "es-url" (required "elasticsearch.url is required when elasticsearch.enabled" .Values.elasticsearch.url) -}}
{{- $_ := set $c "es-index-period" .Values.elasticsearch.indexPeriod -}}
{{- if eq .Values.elasticsearch.retention.by "shipper" -}}
{{- if not .Values.controlPlane.enabled -}}{{- fail "elasticsearch.retention.by=shipper needs controlPlane.enabled" -}}{{- end -}}
{{- $_ := set $c "es-retention" "off" -}}
{{- else if ne .Values.elasticsearch.retention.by "agents" -}}
{{- fail "elasticsearch.retention.by: want agents or shipper" -}}
{{- end -}}
{{- with .Values.elasticsearch.retention.maxAge -}}{{- $_ := set $c "retention" . -}}{{- end -}}
{{- if .Values.elasticsearch.apiKeySecret -}}
{{- $_ := set $c "es-api-key-file" "/etc/correlator/elasticsearch/api-key" -}}
{{- end -}}
{{- end -}}
{{- if .Values.alerts.sinks -}}
{{- $_ := set $c "alert-sink" .Values.alerts.sinks -}}
{{- end -}}
{{- if .Values.alerts.rules -}}
{{- $_ := set $c "rules" "/etc/correlator/config/rules.yaml" -}}
{{- end -}}
{{- if .Values.auth.kubernetes -}}
{{- $_ := set $c "auth-kubernetes" true -}}
{{- end -}}
{{- if and .Values.bridge.enabled (not (has .Values.bridge.key (default list $c.keys))) -}}
{{- $_ := set $c "keys" (append (default list $c.keys) .Values.bridge.key) -}}
{{- end -}}
{{- if .Values.tls.existingSecret -}}
{{- $_ := set $c "tls-cert" "/etc/correlator/tls/tls.crt" -}}
{{- $_ := set $c "tls-key" "/etc/correlator/tls/tls.key" -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/* The responder role bindings' subjects. */}}
{{- define "correlator.responders" -}}
{{- range .Values.responder.users }}
- kind: User
  apiGroup: rbac.authorization.k8s.io
  name: {{ . | quote }}
{{- end }}
{{- range .Values.responder.groups }}
- kind: Group
  apiGroup: rbac.authorization.k8s.io
  name: {{ . | quote }}
{{- end }}
{{- end -}}
