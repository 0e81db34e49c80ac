package meta

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParsePodMap checks that parsePodMap never panics, that what it accepts
// is a valid index, and that its result survives a JSON round trip. Seeds are
// in testdata/fuzz/FuzzParsePodMap.
func FuzzParsePodMap(f *testing.F) {
	f.Add([]byte(`[{"containerID":"` + cidA + `","podUID":"` + uidA + `","namespace":"default","pod":"web-0","container":"nginx"}]`))
	f.Add([]byte("- podUID: " + uidA + "\n  namespace: default\n  pod: web-0\n"))
	f.Add([]byte("- podUID: " + uidA + "\n  labels: {app: web, version: 2, empty: ''}\n- containerID: " + cidA + "\n  labels: {}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4<<10 {
			return // big inputs only slow the minimizer down
		}
		entries, err := parsePodMap(data)
		if err != nil {
			return
		}
		if _, err := NewStatic(entries); err != nil {
			t.Fatalf("parsePodMap accepted entries NewStatic rejects: %v", err)
		}
		out, err := json.Marshal(entries)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parsePodMap(out)
		if err != nil {
			t.Fatalf("re-parsing %s: %v", out, err)
		}
		if !reflect.DeepEqual(entries, again) {
			t.Fatalf("round trip changed the map:\n%+v\n%+v", entries, again)
		}
	})
}
