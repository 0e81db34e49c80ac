package testutil

import (
	"fmt"
	"testing"
	"time"
)

// EventuallyBound only stops a broken test from hanging: waits end when
// their condition holds, so a busy machine makes them slower, never red.
const EventuallyBound = 60 * time.Second

// Eventually polls cond until it holds, failing the test with what if it
// has not after EventuallyBound. Nothing is timed: the poll interval only
// paces the checks.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, EventuallyBound, what, cond)
}

// EventuallyWithin is Eventually with its own bound, for a test whose
// bound tells two mechanisms apart (one that would answer only after it).
func EventuallyWithin(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// EventuallyNil polls check until it returns nil, failing the test with its
// last error if it has not after EventuallyBound.
func EventuallyNil(t testing.TB, check func() error) {
	t.Helper()
	deadline := time.Now().Add(EventuallyBound)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Until polls check until it reports done or an error, for waits that run
// off the test's goroutine (they cannot fail the test themselves): the
// error, or a timeout naming what after EventuallyBound.
func Until(what string, check func() (done bool, err error)) error {
	deadline := time.Now().Add(EventuallyBound)
	for {
		done, err := check()
		if done || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
