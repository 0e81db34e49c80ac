package elasticsearch

import (
	"context"
	"encoding/json"
	"fmt"
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
	cmdline   = map[string]any{"type": "wildcard"} // ECS types command_line as wildcard: case-sensitive substring search at any length
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

func sessionMappings() map[string]any {
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
		"process":      obj(map[string]any{"args": kw, "command_line": cmdline}),
		"http":         obj(map[string]any{"response": obj(map[string]any{"status_code": long})}),
		"url":          obj(map[string]any{"original": cmdline}),
		"correlator": obj(map[string]any{
			"audit_id": kw, "users": kw, "groups": kw, "verb": kw, "subresource": kw,
			"decision": kw, "reason": rawString, "stages": kw, "flags": kw, "env": rawString,
			"stdin": boolean, "tty": boolean, "updated_at": nanos, "source_ips": kw,
			"user_extra": disabled, "impersonated": disabled, "ports": kw, "annotations": disabled,
			"spo_exec_request_uid": kw, "conflicts": disabled,
		}),
	}}
}

func processMappings() map[string]any {
	return map[string]any{"dynamic": "strict", "properties": map[string]any{
		"@timestamp": nanos,
		"event":      eventFields(),
		"process": obj(map[string]any{
			"entity_id": kw, "pid": long, "executable": kw, "args": kw, "command_line": cmdline,
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

func alertMappings() map[string]any {
	return map[string]any{"dynamic": "strict", "properties": map[string]any{
		"@timestamp": nanos,
		"event":      eventFields(),
		"rule":       obj(map[string]any{"name": kw}),
		"message":    map[string]any{"type": "match_only_text"},
		"process":    obj(map[string]any{"entity_id": kw}),
		"correlator": obj(map[string]any{
			"audit_id": kw, "process_id": kw, "severity": kw, "payload": rawString,
		}),
	}}
}

// names are the indices and the data stream of one prefix.
type names struct {
	sessions, processes, audit, alerts, policy string
}

func namesFor(prefix string) names {
	return names{
		sessions: prefix + "-sessions", processes: prefix + "-processes", audit: prefix + "-audit",
		alerts: prefix + "-alerts", policy: prefix + "-alerts",
	}
}

// ilmPolicy rolls the alerts data stream over daily and, with a retention,
// deletes its backing indices that much later. Sessions, processes and
// audit records are not under ILM: ILM deletes whole indices, which would
// drop running processes and the sessions that started them; they age out
// through DeleteOlderThan instead, with SQLite's rules.
func ilmPolicy(retention time.Duration) map[string]any {
	phases := map[string]any{
		"hot": map[string]any{"actions": map[string]any{
			"rollover": map[string]any{"max_age": "1d", "max_primary_shard_size": "50gb"},
		}},
	}
	if retention > 0 {
		phases["delete"] = map[string]any{
			"min_age": fmt.Sprintf("%ds", int64(retention.Round(time.Second)/time.Second)),
			"actions": map[string]any{"delete": map[string]any{}},
		}
	}
	return map[string]any{"policy": map[string]any{
		"phases": phases,
		"_meta":  map[string]any{"managed_by": "correlator"},
	}}
}

// install puts the ILM policy, the index templates, the three indices and
// the alerts data stream, and brings the mappings of those that already
// existed up to their template's; each step is idempotent.
func (c *conn) install(ctx context.Context, n names, retention time.Duration, alertsOnly bool) error {
	if err := c.put(ctx, "/_ilm/policy/"+n.policy, ilmPolicy(retention), ""); err != nil {
		return fmt.Errorf("installing ILM policy %s: %w", n.policy, err)
	}
	tmpl := func(pattern string, mappings map[string]any, dataStream bool) map[string]any {
		t := map[string]any{
			"index_patterns": []string{pattern},
			"priority":       200,
			"template":       map[string]any{"mappings": mappings},
			"_meta":          map[string]any{"managed_by": "correlator"},
		}
		if dataStream {
			t["data_stream"] = map[string]any{}
			t["template"].(map[string]any)["settings"] = map[string]any{"index.lifecycle.name": n.policy}
		}
		return t
	}
	type item struct {
		name     string
		mappings map[string]any
		stream   bool
	}
	items := []item{{n.alerts, alertMappings(), true}}
	if !alertsOnly {
		items = append(items, item{n.sessions, sessionMappings(), false},
			item{n.processes, processMappings(), false}, item{n.audit, auditMappings(), false})
	}
	for _, it := range items {
		if err := c.put(ctx, "/_index_template/"+it.name, tmpl(it.name, it.mappings, it.stream), ""); err != nil {
			return fmt.Errorf("installing index template %s: %w", it.name, err)
		}
		path := "/" + it.name
		if it.stream {
			path = "/_data_stream/" + it.name
		}
		if err := c.put(ctx, path, nil, "resource_already_exists_exception"); err != nil {
			return fmt.Errorf("creating %s: %w", it.name, err)
		}
		// A template shapes only indices created after it, so one that
		// already existed (an upgrade) still has the mapping it was created
		// with, and strict mapping would refuse every document carrying a
		// field added since. Putting the current properties adds those
		// fields; one whose type changed fails here rather than at write.
		if err := c.put(ctx, "/"+it.name+"/_mapping", it.mappings, ""); err != nil {
			return fmt.Errorf("updating mapping of %s: %w", it.name, err)
		}
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
