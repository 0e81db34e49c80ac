package elasticsearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Field types shared by the mappings. Times are date_nanos so that a
// session or process keeps the nanosecond clock SQLite keeps; raw JSON
// (audit events, alert payloads) is an unindexed string so it comes back
// byte for byte.
var (
	kw        = map[string]any{"type": "keyword"}
	long      = map[string]any{"type": "long"}
	boolean   = map[string]any{"type": "boolean"}
	nanos     = map[string]any{"type": "date_nanos"}
	rawString = map[string]any{"type": "keyword", "index": false, "doc_values": false}
	disabled  = map[string]any{"type": "object", "enabled": false}
)

// fieldTypes are the two types a cluster may lack: wildcard and
// match_only_text come from x-pack modules that Elastic's test
// distribution does not carry. Without them a command line is a keyword
// (the same case-sensitive wildcard query; lines past ignore_above are
// stored but not searchable) and a message is text.
type fieldTypes struct {
	cmdline, message map[string]any
}

var (
	// fullTypes are ECS's: command_line is a wildcard field, searchable
	// by substring at any length.
	fullTypes  = fieldTypes{map[string]any{"type": "wildcard"}, map[string]any{"type": "match_only_text"}}
	basicTypes = fieldTypes{map[string]any{"type": "keyword", "ignore_above": 8191}, map[string]any{"type": "text"}}
)

func obj(props map[string]any) map[string]any { return map[string]any{"properties": props} }

var orchestratorFields = obj(map[string]any{
	"type": kw, "namespace": kw,
	"resource": obj(map[string]any{"name": kw, "type": kw, "id": kw}),
})

func eventFields() map[string]any {
	return obj(map[string]any{
		"kind": kw, "category": kw, "type": kw, "action": kw, "dataset": kw, "id": kw,
		"start": nanos, "end": nanos, "severity": long, "outcome": kw,
	})
}

func sessionMappings(ft fieldTypes) map[string]any {
	return map[string]any{"dynamic": "strict", "properties": map[string]any{
		"@timestamp": nanos,
		"event":      eventFields(),
		"user": obj(map[string]any{
			"name": kw, "id": kw, "group": obj(map[string]any{"name": kw}),
			"effective": obj(map[string]any{"name": kw, "id": kw, "group": obj(map[string]any{"name": kw})}),
		}),
		"source":       obj(map[string]any{"ip": map[string]any{"type": "ip", "ignore_malformed": true}}),
		"user_agent":   obj(map[string]any{"original": kw}),
		"orchestrator": orchestratorFields,
		"container":    obj(map[string]any{"name": kw}),
		"process":      obj(map[string]any{"args": kw, "command_line": ft.cmdline}),
		"http":         obj(map[string]any{"response": obj(map[string]any{"status_code": long})}),
		"url":          obj(map[string]any{"original": ft.cmdline}),
		"correlator": obj(map[string]any{
			"audit_id": kw, "users": kw, "groups": kw, "verb": kw, "subresource": kw,
			"decision": kw, "reason": rawString, "stages": kw, "flags": kw, "env": rawString,
			"stdin": boolean, "tty": boolean, "updated_at": nanos, "source_ips": kw,
			"user_extra": disabled, "impersonated": disabled, "ports": kw, "annotations": disabled,
			"spo_exec_request_uid": kw, "conflicts": disabled,
		}),
	}}
}

func processMappings(ft fieldTypes) map[string]any {
	return map[string]any{"dynamic": "strict", "properties": map[string]any{
		"@timestamp": nanos,
		"event":      eventFields(),
		"process": obj(map[string]any{
			"entity_id": kw, "pid": long, "executable": kw, "args": kw, "command_line": ft.cmdline,
			"start": nanos, "end": nanos, "exit_code": long,
			"parent": obj(map[string]any{"pid": long, "entity_id": kw}),
			"user":   obj(map[string]any{"id": kw}),
		}),
		"container":    obj(map[string]any{"id": kw, "name": kw}),
		"orchestrator": orchestratorFields,
		"correlator": obj(map[string]any{
			"audit_id": kw, "claimed_audit_id": kw, "attribution": kw, "confidence": map[string]any{"type": "double"},
			"candidates": kw, "source": kw, "flags": kw, "session_root_id": kw,
			"exec_time": nanos, "argv_truncated": boolean, "spo_exec_request_uid": kw,
			"record_delay_seconds": map[string]any{"type": "double"}, "pending_until": nanos,
			// The joiner's input evidence, kept for it alone: never queried.
			"evidence": disabled,
		}),
	}}
}

func auditMappings() map[string]any {
	return map[string]any{"dynamic": "strict", "properties": map[string]any{
		"@timestamp": nanos,
		"event":      eventFields(),
		"correlator": obj(map[string]any{"audit_id": kw, "stage": kw, "audit_event": rawString}),
	}}
}

func alertMappings(ft fieldTypes) map[string]any {
	return map[string]any{"dynamic": "strict", "properties": map[string]any{
		"@timestamp": nanos,
		"event":      eventFields(),
		"rule":       obj(map[string]any{"name": kw}),
		"message":    ft.message,
		"process":    obj(map[string]any{"entity_id": kw}),
		"correlator": obj(map[string]any{
			"audit_id": kw, "process_id": kw, "severity": kw, "payload": rawString,
			"alert": obj(map[string]any{"status": kw, "resolved_at": nanos, "resolution": kw}),
		}),
	}}
}

// alertsPolicy deletes an alerts index retention after it was created.
// It is installed only where the cluster has ILM, for an alert sink
// whose store is not Elasticsearch; elsewhere the store's retention pass
// drops alert indices with the rest.
func alertsPolicy(retention time.Duration) map[string]any {
	return map[string]any{"policy": map[string]any{
		"phases": map[string]any{"delete": map[string]any{
			"min_age": fmt.Sprintf("%ds", int64(retention.Round(time.Second)/time.Second)),
			"actions": map[string]any{"delete": map[string]any{}},
		}},
		"_meta": map[string]any{"managed_by": "correlator"},
	}}
}

// hasILM probes the cluster for index lifecycle management: Elastic's
// test distribution and Elastic Cloud Serverless have none, and the store
// needs none.
func (c *conn) hasILM(ctx context.Context) bool {
	return c.do(ctx, http.MethodGet, "/_ilm/status", nil, nil, nil) == nil
}

func kindMappings(k kind, ft fieldTypes) map[string]any {
	switch k {
	case kindSessions:
		return sessionMappings(ft)
	case kindProcesses:
		return processMappings(ft)
	case kindAudit:
		return auditMappings()
	}
	return alertMappings(ft)
}

// probeTypes tells whether the cluster has the wildcard field type, by
// simulating an index of one such field (nothing is created).
func (c *conn) probeTypes(ctx context.Context) (fieldTypes, error) {
	body := map[string]any{"index_patterns": []string{"correlator-probe-x"},
		"template": map[string]any{"mappings": obj(map[string]any{"c": fullTypes.cmdline, "m": fullTypes.message})}}
	err := c.do(ctx, http.MethodPost, "/_index_template/_simulate", nil, body, nil)
	var ae *apiError
	switch {
	case err == nil:
		return fullTypes, nil
	case errors.As(err, &ae) && ae.Status == http.StatusBadRequest:
		return basicTypes, nil
	}
	return fieldTypes{}, fmt.Errorf("probing the cluster's field types: %w", err)
}

// install puts the index templates of the period and carried indices and
// the meta index, and brings the mappings of indices that already existed
// up to their template's; each step is idempotent. It never needs ILM:
// with alertsILM (a sink's retention on a cluster that has ILM) the alerts
// template names a delete policy.
func (c *conn) install(ctx context.Context, n names, alertsILM time.Duration, alertsOnly bool) error {
	ft, err := c.probeTypes(ctx)
	if err != nil {
		return err
	}
	kinds := []kind{kindAlerts}
	if !alertsOnly {
		kinds = append(kinds, kindSessions, kindProcesses, kindAudit)
	}
	policy := ""
	if alertsILM > 0 && c.hasILM(ctx) {
		policy = n.prefix + "-alerts"
		if err := c.put(ctx, "/_ilm/policy/"+policy, alertsPolicy(alertsILM), ""); err != nil {
			return fmt.Errorf("installing ILM policy %s: %w", policy, err)
		}
	}
	for _, k := range kinds {
		settings := map[string]any{}
		if c.cfg.Shards > 0 {
			settings["index.number_of_shards"] = c.cfg.Shards
		}
		if c.cfg.Replicas > 0 {
			settings["index.number_of_replicas"] = c.cfg.Replicas
		}
		if k == kindAlerts && policy != "" {
			settings["index.lifecycle.name"] = policy
		}
		tmpl := map[string]any{
			"index_patterns": []string{n.templatePattern(k)},
			"priority":       200,
			"template":       map[string]any{"mappings": kindMappings(k, ft), "settings": settings},
			"_meta":          map[string]any{"managed_by": "correlator"},
		}
		name := n.prefix + "-" + string(k) + "-period"
		if err := c.put(ctx, "/_index_template/"+name, tmpl, ""); err != nil {
			return fmt.Errorf("installing index template %s: %w", name, err)
		}
		// A template shapes only indices created after it, so one that
		// already existed (an upgrade) still has the mapping it was
		// created with, and strict mapping would refuse every document
		// carrying a field added since. Putting the current properties
		// adds those fields; one whose type changed fails here.
		for _, target := range []string{n.templatePattern(k), n.legacy(k)} {
			err := c.do(ctx, http.MethodPut, "/"+target+"/_mapping",
				url.Values{"ignore_unavailable": {"true"}, "allow_no_indices": {"true"}}, kindMappings(k, ft), nil)
			var ae *apiError
			if err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusNotFound) {
				return fmt.Errorf("updating mapping of %s: %w", target, err)
			}
		}
	}
	if err := c.put(ctx, "/"+n.meta, map[string]any{"mappings": map[string]any{"dynamic": false}},
		"resource_already_exists_exception"); err != nil {
		return fmt.Errorf("creating %s: %w", n.meta, err)
	}
	return nil
}

// validPrefix reports whether p makes legal index names.
func validPrefix(p string) bool {
	if p == "" || p != strings.ToLower(p) || strings.ContainsAny(p, `\/*?"<>| ,#:`) ||
		strings.HasPrefix(p, "_") || strings.HasPrefix(p, "-") || strings.HasPrefix(p, "+") || strings.HasPrefix(p, ".") {
		return false
	}
	return len(p) < 200
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only static maps are marshalled here
	}
	return b
}
