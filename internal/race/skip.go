// Package race says whether the race detector is on, for the tests that
// skip under it (Skip): the deterministic, single-goroutine differential
// suites, which cost five to ten times as much under -race while the
// detector has nothing to find in them. make test runs them without it
// (the Makefile's NORACE_TESTS, which TestEverySkippedTestRunsWithout holds
// to the tests that call Skip), so every one runs once.
package race

import "testing"

// Skip skips t in a -race build, saying why when the reason is not the
// usual one (one goroutine, nothing for the detector to find).
func Skip(t testing.TB, why ...string) {
	t.Helper()
	if Enabled {
		t.Skip(append(why, "one goroutine, nothing for -race to find")[0] + ": make test runs it without")
	}
}
