package sqlite

import (
	"fmt"

	"github.com/execid/correlator/pkg/join"
)

// processArgs builds the process statements' values, processColumns a
// row. Each is of a type database/sql passes as is (int64, string, ...):
// another (uint32, int, a named string type) goes through its reflection
// converter, one allocation a value. Boxing a string or an int64 into an
// argument allocates too, and a batch's rows repeat most of theirs (one
// pod, one session, one binary): a value equal to the previous row's in
// its column reuses that row's box.
type processArgs struct {
	args    []any
	strs    [processColumns]string // the previous row's values ...
	ints    [processColumns]int64
	boxes   [processColumns]any // ... and their boxes
	scratch [640]byte
}

// add appends p's values, command being its argv's id.
func (a *processArgs) add(p *join.Process, command int64) error {
	if p.ProcessID == "" {
		return fmt.Errorf("checking process: empty process ID")
	}
	var exitCode any
	if p.ExitCode != nil {
		exitCode = int64(*p.ExitCode)
	}
	detail, err := processDetailJSON(a.scratch[:0], p)
	if err != nil {
		return err
	}
	a.args = append(a.args,
		p.ProcessID, a.int(1, command), a.str(2, p.Filename), a.str(3, p.Namespace), a.str(4, p.Pod),
		a.str(5, p.Container), nanos(p.Start), nanos(p.ExecTime), nullNanos(p.Exit), exitCode,
		a.str(10, p.AuditID), a.str(11, p.ClaimedAuditID), a.str(12, p.SPOExecRequestUID),
		a.str(13, string(p.Attribution)), string(detail),
	)
	return nil
}

// str is column i's value s, boxed once while the rows repeat it.
func (a *processArgs) str(i int, s string) any {
	if a.boxes[i] == nil || a.strs[i] != s {
		a.strs[i], a.boxes[i] = s, s
	}
	return a.boxes[i]
}

// int is column i's value n, boxed once while the rows repeat it.
func (a *processArgs) int(i int, n int64) any {
	if a.boxes[i] == nil || a.ints[i] != n {
		a.ints[i], a.boxes[i] = n, n
	}
	return a.boxes[i]
}
