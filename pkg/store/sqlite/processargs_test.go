package sqlite

import (
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/vocab"
)

// TestProcessArgsReuse: a row's values are its own whatever the rows
// before it held, those it repeats sharing the earlier row's box.
func TestProcessArgsReuse(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	a := process("1-1", "id-a", 0)
	a.Namespace, a.Pod, a.Container, a.Filename = "team", "web", "app", "/bin/true"
	a.Start, a.Attribution = t0, vocab.AttributionInherited
	b := a // repeats a but for its key, pod and start
	b.ProcessID, b.Pod, b.Start = "2-2", "db", t0.Add(time.Second)
	c := b // goes back to a's pod; its exit set
	c.ProcessID, c.Pod, c.Exit, c.ExitCode = "3-3", "web", t0.Add(2*time.Second), ptr(1)
	rows := []join.Process{a, b, c, c}
	var pa processArgs
	for i := range rows {
		if err := pa.add(&rows[i], int64(7+i%2)); err != nil {
			t.Fatal(err)
		}
	}
	if len(pa.args) != len(rows)*processColumns {
		t.Fatalf("%d values for %d rows", len(pa.args), len(rows))
	}
	for i := range rows {
		var fresh processArgs // what the row alone binds
		if err := fresh.add(&rows[i], int64(7+i%2)); err != nil {
			t.Fatal(err)
		}
		if got := pa.args[i*processColumns : (i+1)*processColumns]; !reflect.DeepEqual(got, fresh.args) {
			t.Errorf("row %d binds\n%v\nalone it binds\n%v", i, got, fresh.args)
		}
	}
	// Positive control: the pod of row 1 differs from row 0's.
	if pa.args[4] == pa.args[processColumns+4] {
		t.Errorf("rows 0 and 1 bind one pod, %v", pa.args[4])
	}
	if !sameBox(pa.args[3], pa.args[processColumns+3]) {
		t.Errorf("row 1 boxed its namespace again")
	}
}

// sameBox reports whether two arguments are one interface value.
func sameBox(a, b any) bool {
	type eface struct{ typ, data uintptr }
	return (*eface)(unsafe.Pointer(&a)).data == (*eface)(unsafe.Pointer(&b)).data
}
