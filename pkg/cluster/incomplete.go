package cluster

import "errors"

// ErrPartial marks an answer some nodes did not give: the others' items
// stand, the missing nodes are named.
var ErrPartial = errors.New("partial answer")

// ErrNoAnswer marks an answer no node gave: every node asked failed.
var ErrNoAnswer = errors.New("no node answered")

// Incomplete is an answer some or all of the nodes asked did not give.
// It is ErrPartial, or ErrNoAnswer when none answered.
type Incomplete struct {
	// Nodes is how many nodes were asked; Unreachable are those that
	// did not answer.
	Nodes       int
	Unreachable []Failure
}

// None reports whether no node answered.
func (e *Incomplete) None() bool { return len(e.Unreachable) >= e.Nodes }

func (e *Incomplete) Error() string { return e.sentinel().Error() }

// Is makes errors.Is see ErrPartial or ErrNoAnswer.
func (e *Incomplete) Is(target error) bool { return target == e.sentinel() }

func (e *Incomplete) sentinel() error {
	if e.None() {
		return ErrNoAnswer
	}
	return ErrPartial
}

// Incomplete is nil when every node asked answered, else an *Incomplete.
func (a Answer[T]) Incomplete() error {
	if len(a.Unreachable) == 0 {
		return nil
	}
	return &Incomplete{Nodes: a.Nodes, Unreachable: a.Unreachable}
}
