// Package wait is the one way a test waits for something another goroutine
// or process does: it polls a condition, never sleeps for a guessed time.
// The first polls are a millisecond apart, then twice as far each time, up
// to 100 ms: a condition met soon is seen soon, and a long wait (a poll
// delay, a stall, a restart) asks ten times a second, not a thousand, which
// matters when the condition is a request to the server under test. The
// limit only ends a test that would hang; it asserts no speed.
package wait

import (
	"testing"
	"time"
)

// For polls cond until it holds or limit has passed, and returns how long
// it waited and whether cond held.
func For(limit time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		if cond() {
			return time.Since(start), true
		}
		if time.Since(start) > limit {
			return time.Since(start), false
		}
		time.Sleep(pause)
	}
}

// Until is For that fails t when cond has not held within limit, saying
// what did not happen.
func Until(t testing.TB, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	took, ok := For(limit, cond)
	if !ok {
		t.Fatalf("timed out after %s waiting for %s", limit, what)
	}
	return took
}

// Within runs fn and fails t when it has not returned after a generous
// bound (a minute): for guarantees about never hanging, where a hung test
// must say so rather than wait for the test binary's own timeout.
func Within(t testing.TB, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s did not return: it hangs", what)
	}
}
