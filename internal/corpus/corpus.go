// Package corpus generates realistic, schema-valid decision inputs for the
// benchmarks: many distinct bootstrap_restart (and some failure_disposition)
// inputs derived from the recorded fixtures of policy_test/, and Runner
// states grown to a given size.
//
// Every input starts from a fixture whose expected result is recorded, and is
// changed only in ways whose effect on the decision the contract fixes: fields
// no rule reads are varied freely, identifiers are renamed consistently (so
// every equality and inequality between them survives), and a refusal is
// added only by a change that makes one named rule fail. Input.Allowed is
// therefore known by construction, without evaluating any rule; the tests
// check it against the engine.
//
// The package reads the fixture files itself rather than through
// engine.LoadFixtures: the engine's own benchmarks import it, and an import
// of engine here would be a cycle.
package corpus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// Input is one generated request body.
type Input struct {
	// Decision names the decision, e.g. "bootstrap_restart".
	Decision string
	// Name says where the input comes from: its index and the fixture it was
	// derived from, for messages.
	Name string
	// Body is the input document (not wrapped in {"input": ...}).
	Body []byte
	// Allowed is the expected outcome: allow for bootstrap_restart, a
	// retryable_failure disposition for failure_disposition.
	Allowed bool
}

// Mix counts inputs by decision and outcome.
type Mix struct {
	Decision         string
	Allowed, Refused int
	MinBytes         int
	MedianBytes      int
	MaxBytes         int
}

// Summarize counts the inputs per decision, in decision order.
func Summarize(inputs []Input) []Mix {
	sizes := map[string][]int{}
	counts := map[string]*Mix{}
	var names []string
	for _, in := range inputs {
		m, ok := counts[in.Decision]
		if !ok {
			m = &Mix{Decision: in.Decision}
			counts[in.Decision] = m
			names = append(names, in.Decision)
		}
		if in.Allowed {
			m.Allowed++
		} else {
			m.Refused++
		}
		sizes[in.Decision] = append(sizes[in.Decision], len(in.Body))
	}
	sort.Strings(names)
	out := make([]Mix, 0, len(names))
	for _, n := range names {
		m := counts[n]
		s := sizes[n]
		sort.Ints(s)
		m.MinBytes, m.MedianBytes, m.MaxBytes = s[0], s[len(s)/2], s[len(s)-1]
		out = append(out, *m)
	}
	return out
}

const (
	bootstrapRestart   = "bootstrap_restart"
	failureDisposition = "failure_disposition"
)

// seed is one fixture with a recorded result.
type seed struct {
	decision string
	name     string
	input    []byte // the fixture's input document
	allowed  bool
	reasons  map[string]bool
}

// doc decodes a fresh, mutable copy of the seed's input, numbers exact.
func (s seed) doc() map[string]any {
	var d map[string]any
	dec := json.NewDecoder(bytes.NewReader(s.input))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		panic(fmt.Sprintf("corpus: fixture %s decoded once already: %v", s.name, err))
	}
	return d
}

// loadSeeds reads the fixtures with a recorded result. dir is a test folder
// (policy_test, as for engine.LoadFixtures) or its fixtures/ folder.
func loadSeeds(dir string) (map[string][]seed, error) {
	root := dir
	if fi, err := os.Stat(filepath.Join(dir, "fixtures")); err == nil && fi.IsDir() {
		root = filepath.Join(dir, "fixtures")
	}
	out := map[string][]seed{}
	for _, decision := range []string{bootstrapRestart, failureDisposition} {
		files, err := filepath.Glob(filepath.Join(root, decision, "*.json"))
		if err != nil {
			return nil, err
		}
		sort.Strings(files)
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			var cases map[string]struct {
				Input      json.RawMessage `json:"input"`
				WantResult json.RawMessage `json:"want_result"`
			}
			if err := json.Unmarshal(data, &cases); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			names := make([]string, 0, len(cases))
			for n := range cases {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				c := cases[n]
				if c.Input == nil || c.WantResult == nil {
					continue // rejected inputs are no decision
				}
				var res struct {
					Allow       bool     `json:"allow"`
					Disposition string   `json:"disposition"`
					Reasons     []string `json:"reasons"`
				}
				if err := json.Unmarshal(c.WantResult, &res); err != nil {
					return nil, fmt.Errorf("%s: %s: want_result: %w", f, n, err)
				}
				s := seed{decision: decision, name: filepath.Base(f) + ":" + n, input: c.Input, reasons: map[string]bool{}}
				for _, r := range res.Reasons {
					s.reasons[r] = true
				}
				if decision == bootstrapRestart {
					s.allowed = res.Allow
				} else {
					s.allowed = res.Disposition == "retryable_failure"
				}
				out[decision] = append(out[decision], s)
			}
		}
	}
	for _, d := range []string{bootstrapRestart, failureDisposition} {
		var allowed, refused int
		for _, s := range out[d] {
			if s.allowed {
				allowed++
			} else {
				refused++
			}
		}
		if allowed == 0 || refused == 0 {
			return nil, fmt.Errorf("corpus: %s needs allowed and refused fixtures with want_result in %s (found %d and %d)", d, root, allowed, refused)
		}
	}
	return out, nil
}

// Generate returns n distinct inputs, the same for the same fixtures, n and
// seed: about nine in ten are bootstrap_restart inputs (a little under half
// of them allowed), the rest failure_disposition inputs.
func Generate(fixturesDir string, n int, seed int64) ([]Input, error) {
	seeds, err := loadSeeds(fixturesDir)
	if err != nil {
		return nil, err
	}
	g := newGen(seeds, seed)
	nFD := n / 10
	nBR := n - nFD
	out := make([]Input, 0, n)
	seen := map[string]bool{}
	add := func(decision string, count int, next func() (string, map[string]any, bool)) error {
		for made, tries := 0, 0; made < count; tries++ {
			if tries > 50*count+1000 {
				return fmt.Errorf("corpus: could not make %d distinct %s inputs", count, decision)
			}
			from, doc, allowed := next()
			body := encode(doc)
			if seen[string(body)] {
				continue
			}
			seen[string(body)] = true
			out = append(out, Input{Decision: decision, Name: fmt.Sprintf("%s/%04d from %s", decision, len(out), from), Body: body, Allowed: allowed})
			made++
		}
		return nil
	}
	if err := add(bootstrapRestart, nBR, g.bootstrapRestart); err != nil {
		return nil, err
	}
	if err := add(failureDisposition, nFD, g.failureDisposition); err != nil {
		return nil, err
	}
	// Interleave the decisions so that a prefix or a rotation of the corpus
	// has the same mix as the whole.
	g.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out, nil
}

// encode writes JSON as a caller would: no HTML escaping, numbers verbatim.
func encode(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("corpus: encoding a generated document: %v", err))
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// gen holds the state of one Generate call.
type gen struct {
	rng *rand.Rand
	// allowed and refused bootstrap_restart seeds.
	allowed, refused []seed
	fd               []seed
	// exhaustedAttempt is the smallest claim.providerAttempt of a fixture
	// refused for retry_budget_exhausted: any attempt at or above it is
	// exhausted too, whatever the budget in data.json.
	exhaustedAttempt uint64
	// nonPermanent are failureCodes recorded as not permanent.
	nonPermanent []string
	// ids renames identifiers within one input.
	ids map[string]string
}

func newGen(seeds map[string][]seed, s int64) *gen {
	g := &gen{rng: rand.New(rand.NewPCG(uint64(s), 0x9e3779b97f4a7c15)), exhaustedAttempt: 3}
	found := false
	for _, sd := range seeds[bootstrapRestart] {
		if sd.allowed {
			g.allowed = append(g.allowed, sd)
		} else {
			g.refused = append(g.refused, sd)
		}
		if sd.reasons["retry_budget_exhausted"] {
			if a, ok := u64(getPath(sd.doc(), "claim", "providerAttempt")); ok && (!found || a < g.exhaustedAttempt) {
				g.exhaustedAttempt, found = a, true
			}
		}
	}
	codes := map[string]bool{}
	for _, sd := range seeds[failureDisposition] {
		g.fd = append(g.fd, sd)
		if !sd.reasons["permanent_failure_code"] {
			if c, ok := sd.doc()["failureCode"].(string); ok && !codes[c] {
				codes[c] = true
				g.nonPermanent = append(g.nonPermanent, c)
			}
		}
	}
	sort.Strings(g.nonPermanent)
	return g
}

func (g *gen) pick(s []seed) seed { return s[g.rng.IntN(len(s))] }

func (g *gen) chance(p float64) bool { return g.rng.Float64() < p }

func (g *gen) between(lo, hi int) int { return lo + g.rng.IntN(hi-lo+1) }

// bootstrapRestart makes one input: an allowed fixture varied without
// changing its outcome, a refused fixture likewise, or an allowed fixture
// with one or two changes that each make a rule fail.
func (g *gen) bootstrapRestart() (string, map[string]any, bool) {
	g.ids = map[string]string{}
	switch r := g.rng.Float64(); {
	case r < 0.45:
		s := g.pick(g.allowed)
		d := s.doc()
		g.neutral(d, s)
		return s.name, d, true
	case r < 0.65:
		s := g.pick(g.refused)
		d := s.doc()
		g.neutral(d, s)
		return s.name, d, false
	default:
		s := g.pick(g.allowed)
		d := s.doc()
		g.neutral(d, s)
		names := g.refuse(d, 1+g.rng.IntN(2))
		return s.name + " + " + names, d, false
	}
}

// failureDisposition varies a failure_disposition fixture within its row.
func (g *gen) failureDisposition() (string, map[string]any, bool) {
	s := g.pick(g.fd)
	d := s.doc()
	attempt, _ := u64(d["attempt"])
	switch {
	case s.reasons["permanent_failure_code"]:
		d["attempt"] = num(uint64(g.between(1, 6)))
	case s.reasons["retry_budget_exhausted"]:
		if attempt < 1<<62 {
			d["attempt"] = num(attempt + uint64(g.rng.IntN(4)))
		}
		d["failureCode"] = g.nonPermanent[g.rng.IntN(len(g.nonPermanent))]
	default: // within the budget: any attempt from 1 up to the recorded one
		if attempt >= 1 {
			d["attempt"] = num(1 + g.rng.Uint64N(attempt))
		}
		d["failureCode"] = g.nonPermanent[g.rng.IntN(len(g.nonPermanent))]
	}
	for _, k := range []string{"checkpointPresent", "providerEventsSeen"} {
		switch g.rng.IntN(3) {
		case 0:
			delete(d, k)
		default:
			d[k] = g.chance(0.5)
		}
	}
	return s.name, d, s.allowed
}

func getPath(d map[string]any, path ...string) any {
	var cur any = d
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func obj(d map[string]any, k string) map[string]any {
	m, _ := d[k].(map[string]any)
	return m
}

func u64(v any) (uint64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	u, err := strconv.ParseUint(string(n), 10, 64)
	return u, err == nil
}

func num(u uint64) json.Number { return json.Number(strconv.FormatUint(u, 10)) }
