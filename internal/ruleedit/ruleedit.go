// Package ruleedit marks the tests whose outcome a rule edit cannot change.
// .ci/rule-edit edits the rules of a copy of the repository (Rego, data,
// fixtures) and runs `make test` there with -short, which runs what a rule
// edit can change; make test runs everything.
//
// A test is not about the rules when it reads no file a rule edit changes
// (OPA's conformance suite, the evaluator's own Rego, the binary's help),
// or when its subject is the process, its transport, its flags, its bundle
// downloads, its decision log or its decision store, and the repository's
// policies reach it only as a revision that passes its gate and its
// fixtures only as inputs to send and answers to compare: a rule edit that
// passes `arbiter test` leaves both as the test wants them.
package ruleedit

import "testing"

// Skip skips t under -short: t is not about the rules. A benchmark is
// never skipped: make test runs none, and make bench-quick runs each once
// with -short, as a short run.
func Skip(t testing.TB) {
	t.Helper()
	if _, bench := t.(*testing.B); testing.Short() && !bench {
		t.Skip("not about the rules: -short runs what a rule edit can change (.ci/rule-edit)")
	}
}
