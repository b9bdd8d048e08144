// Package corpus generates many distinct decision inputs for the benchmarks
// from the recorded fixtures of policy_test/, and Runner states grown to a
// given size.
//
// It knows nothing of the rules and names no decision: every input starts
// from a fixture input and is changed generically (a member swapped for the
// member at the same place in another fixture of the same decision, and a
// Runner's history of realistic size written into any Runner state). What
// each input decides is whatever the engine says; the only check applied is
// the caller's keep function, which benchmarks pass to keep the inputs the
// engine decides (schema-valid ones).
//
// The package reads the fixture files itself rather than through
// engine.LoadFixtures: the engine's own benchmarks import it, and an import
// of engine here would be a cycle.
package corpus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Input is one generated request body.
type Input struct {
	// Decision names the decision of the fixture it was derived from.
	Decision string
	// Name says where the input comes from: its index and the fixture it was
	// derived from, for messages.
	Name string
	// Body is the input document (not wrapped in {"input": ...}).
	Body []byte
}

// Keep reports whether a generated input is wanted; a benchmark keeps those
// the engine decides, so that every input costs a whole decision.
type Keep func(decision string, body []byte) bool

// Mix describes the inputs of one decision.
type Mix struct {
	Decision    string
	Count       int
	MinBytes    int
	MedianBytes int
	MaxBytes    int
}

// Summarize describes the inputs per decision, in decision order.
func Summarize(inputs []Input) []Mix {
	sizes := map[string][]int{}
	for _, in := range inputs {
		sizes[in.Decision] = append(sizes[in.Decision], len(in.Body))
	}
	out := make([]Mix, 0, len(sizes))
	for _, n := range slices.Sorted(maps.Keys(sizes)) {
		s := sizes[n]
		slices.Sort(s)
		out = append(out, Mix{Decision: n, Count: len(s), MinBytes: s[0], MedianBytes: s[len(s)/2], MaxBytes: s[len(s)-1]})
	}
	return out
}

// seed is one fixture input of a decided fixture.
type seed struct {
	decision string
	name     string
	input    []byte
}

// doc decodes a fresh, mutable copy of the seed's input, numbers exact.
func (s seed) doc() any { return decode(s.input) }

func decode(b []byte) any {
	var d any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		panic(fmt.Sprintf("corpus: a document decoded once already: %v", err))
	}
	return d
}

// loadSeeds reads the inputs of the fixtures that record a result (the
// others are inputs the engine must reject), every decision of dir: a test
// folder (policy_test, as for engine.LoadFixtures) or its fixtures/ folder.
func loadSeeds(dir string) ([]seed, error) {
	root := dir
	if fi, err := os.Stat(filepath.Join(dir, "fixtures")); err == nil && fi.IsDir() {
		root = filepath.Join(dir, "fixtures")
	}
	files, err := filepath.Glob(filepath.Join(root, "*", "*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	var out []seed
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
		decision := filepath.Base(filepath.Dir(f))
		for _, n := range slices.Sorted(maps.Keys(cases)) {
			if c := cases[n]; c.Input != nil && c.WantResult != nil {
				out = append(out, seed{decision: decision, name: decision + "/" + filepath.Base(f) + ":" + n, input: c.Input})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("corpus: no fixture with an input and a want_result in %s", root)
	}
	return out, nil
}

// Generate returns n distinct inputs that keep accepts, the same for the
// same fixtures, n and seed. Each decision's share is its share of the
// fixtures.
func Generate(fixturesDir string, n int, seed int64, keep Keep) ([]Input, error) {
	seeds, err := loadSeeds(fixturesDir)
	if err != nil {
		return nil, err
	}
	g := newGen(seeds, seed)
	out := make([]Input, 0, n)
	seen := map[string]bool{}
	for tries := 0; len(out) < n; tries++ {
		if tries > 50*n+1000 {
			return nil, fmt.Errorf("corpus: could make only %d of %d distinct inputs that keep accepts", len(out), n)
		}
		s := g.seeds[g.rng.IntN(len(g.seeds))]
		doc := s.doc()
		from := g.vary(doc, s)
		body := encode(doc)
		if seen[string(body)] || !keep(s.decision, body) {
			continue
		}
		seen[string(body)] = true
		out = append(out, Input{Decision: s.decision, Name: fmt.Sprintf("%04d from %s%s", len(out), s.name, from), Body: body})
	}
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

// gen holds the state of one Generate or Sized call.
type gen struct {
	rng   *rand.Rand
	seeds []seed
	// members maps a decision and the path of an object member to every
	// value (encoded) that member has in that decision's fixtures.
	members map[string]map[string][][]byte
}

func newGen(seeds []seed, s int64) *gen {
	g := &gen{rng: rand.New(rand.NewPCG(uint64(s), 0x9e3779b97f4a7c15)), seeds: seeds, members: map[string]map[string][][]byte{}}
	for _, sd := range seeds {
		m := g.members[sd.decision]
		if m == nil {
			m = map[string][][]byte{}
			g.members[sd.decision] = m
		}
		walkMembers(sd.doc(), "", func(path string, v any) {
			m[path] = append(m[path], encode(v))
		})
	}
	return g
}

// walkMembers calls f with the path and value of every object member in v,
// at any depth outside arrays, parents before children.
func walkMembers(v any, path string, f func(path string, v any)) {
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		p := path + "/" + k
		f(p, obj[k])
		walkMembers(obj[k], p, f)
	}
}

func (g *gen) chance(p float64) bool { return g.rng.Float64() < p }

func (g *gen) between(lo, hi int) int { return lo + g.rng.IntN(hi-lo+1) }

// vary changes doc, an input of seed s, and says how: up to three members
// take the value they have in another fixture of the same decision, and
// every Runner state gets a history.
func (g *gen) vary(doc any, s seed) string {
	from := ""
	for range g.rng.IntN(4) {
		var paths []string
		walkMembers(doc, "", func(path string, _ any) { paths = append(paths, path) })
		if len(paths) == 0 {
			break
		}
		p := paths[g.rng.IntN(len(paths))]
		values := g.members[s.decision][p]
		if len(values) == 0 {
			continue
		}
		setMember(doc, p, decode(values[g.rng.IntN(len(values))]))
		from += " " + p
	}
	walkRunnerStates(doc, g.history)
	if from != "" {
		from = " with" + from + " from other fixtures"
	}
	return from
}

// setMember replaces the member at path (as walkMembers gives it).
func setMember(doc any, path string, v any) {
	cur := doc
	keys := strings.Split(path[1:], "/")
	for i, k := range keys {
		obj, ok := cur.(map[string]any)
		if !ok {
			return
		}
		if i == len(keys)-1 {
			obj[k] = v
			return
		}
		cur = obj[k]
	}
}

// walkRunnerStates calls f on every object in v that has the members a
// Runner's durable state holds its history in.
func walkRunnerStates(v any, f func(rs map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		_, outbox := x["outbox"].([]any)
		_, commands := x["processedCommands"].(map[string]any)
		if outbox && commands {
			f(x)
		}
		for _, c := range x {
			walkRunnerStates(c, f)
		}
	case []any:
		for _, c := range x {
			walkRunnerStates(c, f)
		}
	}
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
