package corpus

import (
	"bytes"
	"context"
	"encoding/json"
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

type outcome struct {
	Allow       *bool    `json:"allow"`
	Disposition string   `json:"disposition"`
	Reasons     []string `json:"reasons"`
}

func decide(t *testing.T, s *engine.Snapshot, decision string, body []byte) outcome {
	t.Helper()
	d, err := s.Decide(context.Background(), decision, body, engine.Options{})
	if err != nil {
		t.Fatalf("%s: %v (%+v)", decision, err, engine.AsError(err).Violations)
	}
	var o outcome
	if err := json.Unmarshal(d.Result, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestGenerate decides every generated input with the engine: each must be
// schema-valid (a decision, not an error) and have the outcome the generator
// claims for it by construction.
func TestGenerate(t *testing.T) {
	const n = 1000
	inputs, err := Generate(tests, n, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) != n {
		t.Fatalf("got %d inputs, want %d", len(inputs), n)
	}
	s := load(t)
	seen := map[string]bool{}
	for _, in := range inputs {
		if seen[string(in.Body)] {
			t.Errorf("%s: duplicate body", in.Name)
		}
		seen[string(in.Body)] = true
		o := decide(t, s, in.Decision, in.Body)
		got := o.Disposition == "retryable_failure"
		if o.Allow != nil {
			got = *o.Allow
		}
		if got != in.Allowed {
			t.Errorf("%s: engine says allowed=%v (reasons %v), generator said %v\n%s", in.Name, got, o.Reasons, in.Allowed, in.Body)
		}
	}
	mix := Summarize(inputs)
	t.Logf("mix: %+v", mix)
	if len(mix) != 2 {
		t.Fatalf("want both decisions in the corpus, got %+v", mix)
	}
	for _, m := range mix {
		if m.Allowed == 0 || m.Refused == 0 {
			t.Errorf("%s: want allowed and refused inputs, got %+v", m.Decision, m)
		}
	}
	br := mix[0]
	if f := float64(br.Allowed) / float64(br.Allowed+br.Refused); f < 0.25 || f > 0.6 {
		t.Errorf("bootstrap_restart allowed fraction %.2f, want between 0.25 and 0.6", f)
	}
	// Most Runner states are a few KB; a few reach tens of KB.
	if br.MedianBytes > 8<<10 || br.MaxBytes < 20<<10 {
		t.Errorf("bootstrap_restart sizes median %d, max %d: want a median of a few KB and some tens of KB", br.MedianBytes, br.MaxBytes)
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	a, err := Generate(tests, 200, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(tests, 200, 7)
	c, _ := Generate(tests, 200, 8)
	same := func(x, y []Input) bool {
		return slices.EqualFunc(x, y, func(p, q Input) bool { return bytes.Equal(p.Body, q.Body) && p.Allowed == q.Allowed })
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
		body, err := Sized(tests, size)
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > size || len(body) < size-8<<10 {
			t.Errorf("Sized(%d) is %d bytes", size, len(body))
		}
		o := decide(t, s, "bootstrap_restart", body)
		if !slices.Equal(o.Reasons, []string{"runner_outbox_not_empty"}) {
			t.Errorf("Sized(%d): reasons %v, want only runner_outbox_not_empty", size, o.Reasons)
		}
		again, _ := Sized(tests, size)
		if !bytes.Equal(body, again) {
			t.Errorf("Sized(%d) is not deterministic", size)
		}
	}
}
