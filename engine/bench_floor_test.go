//go:build benchfloor

package engine

import (
	"context"
	"testing"

	"github.com/arbiter-dev/arbiter/engine/testdata/floor"
	"github.com/arbiter-dev/arbiter/internal/corpus"
)

// The hand-written floor of the benchmarks (testdata/floor) restates the
// rules in Go, so it is built only with -tags benchfloor, which only
// `make bench` (bench/e2e) sets: a rule edit never needs a Go edit to pass
// `make test`, and leaves this floor behind until someone brings it along.

func init() {
	floorDecide = func(tb testing.TB) func(string, []byte) ([]byte, error) {
		tb.Helper()
		r, err := floor.Load(repo.Policies)
		if err != nil {
			tb.Fatal(err)
		}
		return r.Decide
	}
}

// TestFloorMatchesEngine decides the benchmark corpus and every fixture with
// a recorded result with the engine and with the floor: a difference means
// the floor no longer states the policy's rules, and its figures in
// docs/BENCHMARKS.md are of other rules. make bench runs it before the
// benchmarks (CI does not: a rule edit must not need a Go edit to pass CI).
//
//	go test -tags benchfloor -run TestFloorMatchesEngine ./engine/
func TestFloorMatchesEngine(t *testing.T) {
	s := mustLoad(t, repo)
	decide := floorDecide(t)
	inputs := mustCorpus(t, s)
	fixtures := repoFixtures(t)
	for _, fx := range fixtures {
		if fx.WantResult != nil && fx.Input != nil {
			inputs = append(inputs, corpus.Input{Decision: fx.Decision, Name: "fixture " + fx.Decision + "/" + fx.Name, Body: fx.Input})
		}
	}
	failed := 0
	for _, in := range inputs {
		d, err := s.Decide(context.Background(), in.Decision, in.Body, Options{})
		if err != nil {
			t.Fatalf("%s: engine: %v", in.Name, err)
		}
		got, err := decide(in.Decision, in.Body)
		if err != nil {
			t.Errorf("%s: floor: %v", in.Name, err)
		} else if !SameJSON(d.Result, got) {
			t.Errorf("%s: the engine and the floor disagree\nengine: %s\nfloor:  %s\ninput: %s", in.Name, d.Result, got, in.Body)
		} else {
			continue
		}
		if failed++; failed >= 20 {
			t.Fatal("stopping after 20 differences")
		}
	}
	t.Logf("%d inputs decided alike by the engine and the floor", len(inputs))
}
