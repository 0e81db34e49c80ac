package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/execid/correlator/pkg/node"
	"github.com/execid/correlator/pkg/store/elasticsearch"
)

// esFlags binds the Elasticsearch connection flags, shared by the store,
// the audit lookup, the alert sink and `audit ship`.
func esFlags(fs *pflag.FlagSet, es *elasticsearch.Connection) {
	*es = elasticsearch.Connection{Config: elasticsearch.DefaultConfig(), PasswordEnv: "CORRELATOR_ES_PASSWORD"}
	fs.StringArrayVar(&es.URLs, "es-url", nil, "Elasticsearch node URL (repeatable)")
	fs.StringVar(&es.APIKeyFile, "es-api-key-file", "", "file holding the Elasticsearch API key (base64 id:key)")
	fs.StringVar(&es.Username, "es-username", "", "Elasticsearch user (basic auth; the password comes from $CORRELATOR_ES_PASSWORD)")
	fs.StringVar(&es.CACert, "es-ca-cert", "", "PEM file of CAs that signed the cluster's certificates")
	fs.StringVar(&es.IndexPrefix, "es-index-prefix", "correlator", "prefix of correlator's indices and alert data stream")
	fs.StringVar(&es.Refresh, "es-refresh", "false", "bulk refresh mode: false, wait_for or true")
	fs.DurationVar(&es.Retention, "es-alert-retention", 90*24*time.Hour, "ILM delete age of the alerts data stream")
}

// alertFlags binds the rules and sinks.
func alertFlags(fs *pflag.FlagSet, o *node.AlertConfig) {
	fs.StringVar(&o.RulesFile, "rules", "", "YAML alert rules (default: the shipped rules)")
	fs.StringArrayVar(&o.Sinks, "alert-sink", nil, "alert destination (repeatable): file:PATH, webhook:URL, splunk-hec:URL, "+
		"syslog+udp://HOST:PORT, syslog+tcp://…, syslog+tls://… (?format=cef), elasticsearch:URL")
	fs.StringVar(&o.SpoolDir, "alert-spool-dir", "/var/lib/correlator/alerts", "on-disk spool of undelivered alerts, one directory per sink")
	fs.Int64Var(&o.SpoolBytes, "alert-spool-max-bytes", 256<<20, "bound of each sink's spool; the oldest alerts are dropped past it")
	fs.StringArrayVar(&o.AllowGroups, "alert-shell-allow-group", []string{"system:masters"},
		"groups whose interactive shells the shipped rules do not alert on (repeatable)")
	fs.StringVar(&o.TokenFile, "alert-token-file", "", "bearer token (webhook) or HEC token (splunk-hec) for the HTTP sinks")
	fs.StringVar(&o.CAFile, "alert-ca-file", "", "PEM file of CAs for the HTTPS and syslog+tls sinks")
}
