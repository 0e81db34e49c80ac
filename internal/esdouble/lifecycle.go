package esdouble

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

var ilmPhases = []string{"hot", "warm", "cold", "frozen", "delete"}

func (d *Double) ilmPolicy(r *http.Request, name string) (any, *esError) {
	switch r.Method {
	case http.MethodGet:
		d.mu.Lock()
		p, ok := d.policies[name]
		d.mu.Unlock()
		if !ok {
			return nil, errf(http.StatusNotFound, "resource_not_found_exception", "Lifecycle policy not found: %s", name)
		}
		return map[string]any{name: map[string]any{"version": 1, "policy": p}}, nil
	case http.MethodPut:
	default:
		return nil, badRequest("method %s on ILM policy", r.Method)
	}
	if e := checkParams(r, "master_timeout", "timeout"); e != nil {
		return nil, e
	}
	var body struct {
		Policy json.RawMessage `json:"policy"`
	}
	if e := decodeBody(r, &body); e != nil {
		return nil, e
	}
	var pol struct {
		Phases map[string]struct {
			MinAge  string                    `json:"min_age"`
			Actions map[string]map[string]any `json:"actions"`
		} `json:"phases"`
		Meta map[string]any `json:"_meta"`
	}
	if err := json.Unmarshal(body.Policy, &pol); err != nil || len(pol.Phases) == 0 {
		return nil, errf(http.StatusBadRequest, "x_content_parse_exception", "[put_lifecycle_request] failed to parse field [policy]")
	}
	for ph, def := range pol.Phases {
		if !slices.Contains(ilmPhases, ph) {
			return nil, badRequest("Lifecycle does not support phase [%s]", ph)
		}
		if def.MinAge != "" {
			if _, err := parseTimeValue(def.MinAge); err != nil {
				return nil, badRequest("failed to parse setting [min_age] with value [%s]", def.MinAge)
			}
		}
		for a, opts := range def.Actions {
			switch {
			case a == "delete" && ph == "delete":
			case a == "rollover" && ph == "hot":
				for k, v := range opts {
					if s, _ := v.(string); k == "max_age" || k == "max_primary_shard_age" {
						if _, err := parseTimeValue(s); err != nil {
							return nil, badRequest("failed to parse [%s] value [%v]", k, v)
						}
					}
				}
			case a == "set_priority":
			default:
				return nil, badRequest("invalid action [%s] defined in phase [%s] (or the double does not know it)", a, ph)
			}
		}
	}
	d.mu.Lock()
	d.policies[name] = body.Policy
	d.mu.Unlock()
	return map[string]any{"acknowledged": true}, nil
}

// parseTimeValue reads an Elasticsearch time value: 30d, 12h, 90m, 10s, 0ms.
func parseTimeValue(s string) (time.Duration, error) {
	units := []struct {
		suffix string
		d      time.Duration
	}{{"ms", time.Millisecond}, {"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			var v int64
			if _, err := fmt.Sscanf(n, "%d", &v); err != nil || fmt.Sprint(v) != n || v < 0 {
				return 0, fmt.Errorf("bad time value %q", s)
			}
			return time.Duration(v) * u.d, nil
		}
	}
	return 0, fmt.Errorf("bad time value %q", s)
}

func (d *Double) dataStream(r *http.Request, name string) (any, *esError) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch r.Method {
	case http.MethodPut:
		if _, ok := d.dataStreams[name]; ok {
			return nil, errf(http.StatusBadRequest, "resource_already_exists_exception", "data_stream [%s] already exists", name)
		}
		if _, e := d.createDataStream(name); e != nil {
			return nil, e
		}
		return map[string]any{"acknowledged": true}, nil
	case http.MethodGet:
		b, ok := d.dataStreams[name]
		if !ok {
			return nil, errf(http.StatusNotFound, "index_not_found_exception", "no such index [%s]", name)
		}
		return map[string]any{"data_streams": []any{map[string]any{
			"name": name, "timestamp_field": map[string]any{"name": "@timestamp"},
			"indices": []any{map[string]any{"index_name": b}}, "generation": 1, "status": "GREEN",
			"template": "", "ilm_policy": d.indices[b].settings["index.lifecycle.name"],
		}}}, nil
	}
	return nil, badRequest("method %s on data stream", r.Method)
}

// createDataStream needs a matching template with data_stream; the double
// keeps one backing index per stream (it never rolls over).
func (d *Double) createDataStream(name string) (*index, *esError) {
	t := d.matchTemplate(name)
	if t == nil || !t.DataStream {
		return nil, badRequest("no matching index template found for data stream [%s]", name)
	}
	backing := fmt.Sprintf(".ds-%s-%s-000001", name, time.Now().UTC().Format("2006.01.02"))
	ix, e := newIndex(backing, t, nil)
	if e != nil {
		return nil, e
	}
	ix.hidden = true
	d.indices[backing] = ix
	d.dataStreams[name] = backing
	return ix, nil
}
