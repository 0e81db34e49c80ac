package sqlite

import (
	"context"
	"database/sql"
	"testing"

	"github.com/execid/correlator/pkg/store"
)

// TestCommandTestedInPodIndex: a command search in a pod reads each row's
// command from processes_pod's entry (the index's third column) and seeks
// into the table only for a row that passes, rather than for every row of
// the pod it walks.
func TestCommandTestedInPodIndex(t *testing.T) {
	s := openTest(t)
	var root int
	if err := s.r.QueryRow(`SELECT rootpage FROM sqlite_schema WHERE type = 'index' AND name = 'processes_pod'`).Scan(&root); err != nil {
		t.Fatal(err)
	}
	f := store.ProcessFilter{Command: "curl", Pod: "p"}
	for _, m := range []commandMatch{{ids: []any{int64(1), int64(2)}, first: 1, last: 2}, {all: true, first: 1, last: 2}} {
		q, args, err := processesListing(f, false, m).query("", 100)
		if err != nil {
			t.Fatal(err)
		}
		code := explain(t, s, q, args)
		cursor, readsCommand := -1, false
		for _, op := range code {
			if op.opcode == "OpenRead" && op.p2 == root {
				cursor = op.p1
			}
			if op.opcode == "Column" && op.p1 == cursor && op.p2 == 2 {
				readsCommand = true
			}
		}
		if cursor < 0 || !readsCommand {
			t.Errorf("%+v: processes_pod opened as cursor %d, its command column read: %v; want the command tested on the index entry\n%v",
				m, cursor, readsCommand, code)
		}
	}
}

// vdbeOp is a line of EXPLAIN: an opcode and its first two operands.
type vdbeOp struct {
	opcode string
	p1, p2 int
}

func explain(t *testing.T, s *Store, q string, args []any) []vdbeOp {
	t.Helper()
	rows, err := s.r.QueryContext(context.Background(), "EXPLAIN "+q, args...)
	if err != nil {
		t.Fatalf("explaining %s: %v", q, err)
	}
	defer rows.Close()
	var ops []vdbeOp
	for rows.Next() {
		var addr, p3, p5 int
		var op vdbeOp
		var p4, comment sql.NullString
		if err := rows.Scan(&addr, &op.opcode, &op.p1, &op.p2, &p3, &p4, &p5, &comment); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ops
}
