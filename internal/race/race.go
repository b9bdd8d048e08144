//go:build race

// Package race says whether the race detector is on, for the tests that
// skip under it: the deterministic, single-goroutine differential suites,
// which cost five to ten times as much under -race while the detector has
// nothing to find in them. make test runs them without it (the
// Makefile's NORACE_TESTS), so every one runs once.
package race

// Enabled is true in a -race build.
const Enabled = true
