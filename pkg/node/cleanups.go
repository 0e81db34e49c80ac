package node

import (
	"errors"
	"fmt"
)

// cleanups runs the closers of what run started, last first, and joins
// their errors so none is dropped.
type cleanups struct {
	steps []cleanup
}

type cleanup struct {
	what string
	fn   func() error
}

func (c *cleanups) add(what string, fn func() error) { c.steps = append(c.steps, cleanup{what, fn}) }

func (c *cleanups) run() error {
	var errs []error
	for i := len(c.steps) - 1; i >= 0; i-- {
		if err := c.steps[i].fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.steps[i].what, err))
		}
	}
	c.steps = nil
	return errors.Join(errs...)
}
