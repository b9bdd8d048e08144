package corpus

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/arbiter-dev/arbiter/engine"
)

const tests = "../../policy_test"

func load(t *testing.T) *engine.Snapshot {
	t.Helper()
	s, err := engine.Load(context.Background(), engine.Config{Policies: "../../policies", Schemas: "../../schemas"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// decided keeps the inputs the engine decides, as the benchmarks do.
func decided(s *engine.Snapshot) Keep {
	return func(decision string, body []byte) bool {
		_, err := s.Decide(context.Background(), decision, body, engine.Options{})
		return err == nil
	}
}

// TestGenerate: the corpus has the inputs asked for, distinct, from every
// decision with fixtures, of realistic sizes, and as varied in outcome as
// the fixtures are (outcomes as the engine labels them; the test knows no
// rule).
func TestGenerate(t *testing.T) {
	const n = 1000
	s := load(t)
	tried := 0
	keep := decided(s)
	inputs, err := Generate(tests, n, 1, func(decision string, body []byte) bool {
		tried++
		return keep(decision, body)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) != n {
		t.Fatalf("got %d inputs, want %d", len(inputs), n)
	}
	if tried > 2*n {
		t.Errorf("%d candidates for %d inputs: the generic changes break most inputs", tried, n)
	}
	fixtures, err := engine.LoadFixtures(tests)
	if err != nil {
		t.Fatal(err)
	}
	fixtureOutcomes := map[string]map[string]bool{}
	for _, fx := range fixtures {
		if fx.Input == nil || fx.WantResult == nil {
			continue
		}
		d, err := s.Decide(context.Background(), fx.Decision, fx.Input, engine.Options{})
		if err != nil {
			t.Fatalf("%s/%s: %v", fx.Decision, fx.Name, err)
		}
		if fixtureOutcomes[fx.Decision] == nil {
			fixtureOutcomes[fx.Decision] = map[string]bool{}
		}
		fixtureOutcomes[fx.Decision][d.Outcome] = true
	}
	seen := map[string]bool{}
	outcomes := map[string]map[string]bool{}
	for _, in := range inputs {
		if seen[string(in.Body)] {
			t.Errorf("%s: duplicate body", in.Name)
		}
		seen[string(in.Body)] = true
		d, err := s.Decide(context.Background(), in.Decision, in.Body, engine.Options{})
		if err != nil {
			t.Fatalf("%s: kept, yet not decided: %v", in.Name, err)
		}
		if outcomes[in.Decision] == nil {
			outcomes[in.Decision] = map[string]bool{}
		}
		outcomes[in.Decision][d.Outcome] = true
	}
	mix := Summarize(inputs)
	t.Logf("mix: %+v, outcomes %v, %d candidates", mix, outcomes, tried)
	if len(mix) != len(fixtureOutcomes) {
		t.Errorf("the corpus has %d decisions, the fixtures %d: %+v", len(mix), len(fixtureOutcomes), mix)
	}
	for d, want := range fixtureOutcomes {
		if len(want) > 1 && len(outcomes[d]) < 2 {
			t.Errorf("%s: the fixtures have outcomes %v, the corpus only %v", d, want, outcomes[d])
		}
	}
	// Most inputs are a few KB; a few reach tens of KB.
	var sizes []int
	for _, in := range inputs {
		sizes = append(sizes, len(in.Body))
	}
	slices.Sort(sizes)
	if median, largest := sizes[len(sizes)/2], sizes[len(sizes)-1]; median > 8<<10 || largest < 20<<10 {
		t.Errorf("sizes median %d, max %d: want a median of a few KB and some tens of KB", median, largest)
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	all := func(string, []byte) bool { return true }
	a, err := Generate(tests, 200, 7, all)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(tests, 200, 7, all)
	c, _ := Generate(tests, 200, 8, all)
	same := func(x, y []Input) bool {
		return slices.EqualFunc(x, y, func(p, q Input) bool { return bytes.Equal(p.Body, q.Body) && p.Decision == q.Decision })
	}
	if !same(a, b) {
		t.Error("the same seed gave different corpora")
	}
	if same(a, c) {
		t.Error("different seeds gave the same corpus")
	}
}

func TestSized(t *testing.T) {
	s := load(t)
	for _, size := range []int{64 << 10, 1 << 20} {
		decision, body, err := Sized(tests, size, decided(s))
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > size || len(body) < size-8<<10 {
			t.Errorf("Sized(%d) is %d bytes", size, len(body))
		}
		if _, err := s.Decide(context.Background(), decision, body, engine.Options{}); err != nil {
			t.Errorf("Sized(%d): %v", size, err)
		}
		_, again, _ := Sized(tests, size, decided(s))
		if !bytes.Equal(body, again) {
			t.Errorf("Sized(%d) is not deterministic", size)
		}
	}
}
