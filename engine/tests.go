package engine

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/arbiter-dev/arbiter/internal/jsonenc"
	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// TestOptions select and report the policy tests of a test folder.
type TestOptions struct {
	Tests    string // folder with *_test.rego files and fixtures/<decision>/*.json
	Run      string // regular expression selecting tests and fixtures by name
	Coverage bool   // measure coverage of the policy files by the Rego tests
}

// TestResult is the outcome of one Rego test or one fixture.
type TestResult struct {
	Kind     string        `json:"kind"` // "rego" or "fixture"
	Name     string        `json:"name"` // package.test_name, or decision/case
	File     string        `json:"file"`
	Line     int           `json:"line,omitempty"`
	Pass     bool          `json:"pass"`
	Skip     bool          `json:"skip,omitempty"`
	Message  string        `json:"message,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// TestReport is the outcome of a test run.
type TestReport struct {
	Results  []TestResult  `json:"results"`
	Setup    []Problem     `json:"setup_problems,omitempty"`
	Skipped  []SkippedFile `json:"skipped_files,omitempty"`
	Coverage *Coverage     `json:"coverage,omitempty"`
}

// Coverage of the policy files (tests excluded) by the Rego tests.
type Coverage struct {
	Percent float64            `json:"percent"`
	Files   map[string]float64 `json:"files"`
	// NotCovered lists file:line ranges no test reached.
	NotCovered []string `json:"not_covered,omitempty"`
}

// Counts returns how many tests passed, failed and were skipped.
func (r *TestReport) Counts() (pass, fail, skip int) {
	for _, t := range r.Results {
		switch {
		case t.Skip:
			skip++
		case t.Pass:
			pass++
		default:
			fail++
		}
	}
	return pass, fail + len(r.Setup), skip
}

// Problems lists the setup problems and failed tests, each located.
func (r *TestReport) Problems() []Problem {
	probs := append([]Problem(nil), r.Setup...)
	for _, t := range r.Results {
		if !t.Pass && !t.Skip {
			probs = append(probs, Problem{File: t.File, Line: t.Line, Message: fmt.Sprintf("%s %s failed: %s", t.Kind, t.Name, t.Message)})
		}
	}
	return probs
}

// RunTests builds a Snapshot from cfg (without the test gate) and runs the
// Rego tests and fixtures of opts.Tests against it.
func RunTests(ctx context.Context, cfg Config, opts TestOptions) (*TestReport, error) {
	cfg.Tests = ""
	b, err := build(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return b.snap.runTests(ctx, b, opts)
}

func (s *Snapshot) runTests(ctx context.Context, b *sourcedSnapshot, opts TestOptions) (*TestReport, error) {
	var filter *regexp.Regexp
	if opts.Run != "" {
		var err error
		if filter, err = regexp.Compile(opts.Run); err != nil {
			return nil, fmt.Errorf("--run: %w", err)
		}
	}
	r := newTreeReader(ctx, b.cfg)
	suite, probs := b.loadSuite(r, opts.Tests)
	s.testSrc = suite.files
	s.Skipped = append(s.Skipped, r.skipped...)
	key := passedKey(s, suite, opts)
	if rep, ok := passed.get(key); ok && len(probs) == 0 {
		return rep, nil
	}
	rep := &TestReport{Setup: probs, Skipped: r.skipped}
	// The gate's fixtures run under the test timeout, not the request
	// deadline of the Snapshot they judge.
	gate := *s
	gate.timeout = s.testTimeout
	// Fixtures run beside the Rego tests: a reload is gated on both, and
	// halving its latency is what makes an edit live within a second.
	fixtureResults := make(chan []TestResult, 1)
	go func() {
		var out []TestResult
		for _, fx := range suite.fixtures {
			if filter != nil && !filter.MatchString(fx.Decision+"/"+fx.Name) {
				continue
			}
			out = append(out, gate.RunFixture(ctx, fx))
		}
		fixtureResults <- out
	}()
	err := s.runRego(ctx, b, suite, opts, rep)
	rep.Results = append(rep.Results, <-fixtureResults...)
	if err != nil {
		return nil, err
	}
	if len(rep.Problems()) == 0 && ctx.Err() == nil {
		passed.add(key, rep)
	}
	return rep, nil
}

// passed remembers the reports of the gates passed in this process, by
// everything a gate reads: the revision (policies, data, schemas), the test
// files, the test timeout and the input bound. A gate is a function of
// these alone (the sandbox refuses the clock, randomness and I/O), so a
// candidate judged already (a file touched, a bundle downloaded again
// without an ETag, every test that loads the repository) is not judged
// again. Failures are never kept: a timeout may pass under less load.
var passed = &passMemo{}

// passMemo holds the last few passed reports; a report is never modified
// once kept (callers only read it).
type passMemo struct {
	mu   sync.Mutex
	keys []string
	reps []*TestReport
}

const passMemoSize = 16

// get finds nothing for "", which add never keeps.
func (m *passMemo) get(key string) (*TestReport, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := slices.Index(m.keys, key); i >= 0 {
		return m.reps[i], true
	}
	return nil, false
}

func (m *passMemo) add(key string, rep *TestReport) {
	if key == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if slices.Contains(m.keys, key) {
		return
	}
	if len(m.keys) == passMemoSize {
		m.keys, m.reps = m.keys[1:], m.reps[1:]
	}
	m.keys, m.reps = append(m.keys, key), append(m.reps, rep)
}

// passedKey names a gate run for passed; "" for runs that are not the
// whole gate (a --run filter, coverage), which are never remembered.
func passedKey(s *Snapshot, st *suite, opts TestOptions) string {
	if opts.Run != "" || opts.Coverage {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00", s.Hash, s.testTimeout, s.maxValues)
	for _, f := range st.files {
		fmt.Fprintf(h, "%s\x00%d\x00", f.rel, len(f.data))
		h.Write(f.data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// suite is the content of a test folder.
type suite struct {
	modules  map[string]*ast.Module
	data     map[string]any
	fixtures []Fixture
	files    []sourceFile
}

func loadSuite(r *treeReader, dir string) (*suite, []Problem) {
	files, probs := r.read(dir, ".rego", ".json")
	if len(probs) > 0 {
		return &suite{}, probs
	}
	return parseSuite(files)
}

// parseSuite parses the test modules, test data and fixtures of files.
func parseSuite(files []sourceFile) (*suite, []Problem) {
	modules, data, probs := parsePolicies(files)
	fixtures, p := parseFixtures(files)
	return &suite{modules: modules, data: data, fixtures: fixtures, files: files}, append(probs, p...)
}

func (s *Snapshot) runRego(ctx context.Context, b *sourcedSnapshot, st *suite, opts TestOptions, rep *TestReport) error {
	if len(st.modules) == 0 {
		return nil
	}
	modules := b.withTests(st)
	data := deepCopy(b.data).(map[string]any)
	if err := mergeObjects(data, deepCopy(st.data).(map[string]any), nil); err != nil {
		rep.Setup = append(rep.Setup, Problem{File: opts.Tests, Message: "test data: " + err.Error()})
		return nil
	}
	store := inmem.NewFromObjectWithOpts(data, inmem.OptRoundTripOnWrite(false))
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return err
	}
	defer store.Abort(ctx, txn)

	var cov *cover.Cover
	runner := tester.NewRunner().
		SetCompiler(newCompiler(b.caps, b.schemaSet).WithEnablePrintStatements(true)).
		SetStore(store).
		SetModules(modules).
		CapturePrintOutput(true).
		SetTimeout(s.testTimeout).
		Filter(opts.Run)
	if opts.Coverage {
		cov = cover.New()
		runner = runner.SetCoverageQueryTracer(cov)
	}
	ch, err := runner.RunTests(ctx, txn)
	if err != nil {
		rep.Setup = append(rep.Setup, errProblems(opts.Tests, err)...)
		return nil
	}
	for r := range ch {
		tr := TestResult{Kind: "rego", Name: strings.TrimPrefix(r.Package, "data.") + "." + r.Name, Pass: !r.Fail && r.Error == nil, Skip: r.Skip, Duration: r.Duration}
		if r.Location != nil {
			tr.File, tr.Line = r.Location.File, r.Location.Row
		}
		switch {
		case r.Error != nil:
			tr.Message = r.Error.Error()
		case r.Fail:
			tr.Message = "test rule was false or undefined"
			if r.FailedAt != nil {
				tr.Message = fmt.Sprintf("failed at %s:%d: %s", r.FailedAt.Location.File, r.FailedAt.Location.Row, r.FailedAt.String())
			}
		}
		if len(r.Output) > 0 && !tr.Pass {
			tr.Message += "\n" + strings.TrimSpace(string(r.Output))
		}
		rep.Results = append(rep.Results, tr)
	}
	if cov != nil {
		rep.Coverage = policyCoverage(cov.Report(modules), b.modules)
	}
	return nil
}

// withTests returns copies of the policy and test modules together: a
// compiler annotates the modules it compiles, and the Snapshot's own must
// stay as they were.
func (b *sourcedSnapshot) withTests(st *suite) map[string]*ast.Module {
	modules := make(map[string]*ast.Module, len(b.modules)+len(st.modules))
	for _, from := range []map[string]*ast.Module{b.modules, st.modules} {
		for k, m := range from {
			modules[k] = m.Copy()
		}
	}
	return modules
}

func policyCoverage(r cover.Report, policies map[string]*ast.Module) *Coverage {
	c := &Coverage{Files: map[string]float64{}}
	covered, notCovered := 0, 0
	for file := range policies {
		fr, ok := r.Files[file]
		if !ok {
			c.Files[file] = 0
			continue
		}
		covered += fr.CoveredLines
		notCovered += fr.NotCoveredLines
		c.Files[file] = fr.Coverage
		for _, rg := range fr.NotCovered {
			c.NotCovered = append(c.NotCovered, fmt.Sprintf("%s:%d-%d", file, rg.Start.Row, rg.End.Row))
		}
	}
	sort.Strings(c.NotCovered)
	if covered+notCovered > 0 {
		c.Percent = 100 * float64(covered) / float64(covered+notCovered)
	}
	return c
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = deepCopy(e)
		}
		return a
	default:
		return v
	}
}

// Fixture is one recorded case: an input (or a raw body) and the result or
// error it must produce. Fixtures live in <tests>/fixtures/<decision>/*.json,
// each file an object mapping case names to fixtures; stock OPA loads the
// same files as data.fixtures.<decision>.<case>.
type Fixture struct {
	Decision   string          `json:"-"`
	Name       string          `json:"-"`
	File       string          `json:"-"`
	Note       string          `json:"note"`
	Input      json.RawMessage `json:"input"`
	Body       *string         `json:"body"`
	WantResult json.RawMessage `json:"want_result"`
	WantError  *WantError      `json:"want_error"`
}

// WantError is the error a fixture expects.
type WantError struct {
	Code        Code   `json:"code"`
	ViolationAt string `json:"violation_at"`
}

func parseFixtures(files []sourceFile) ([]Fixture, []Problem) {
	var out []Fixture
	var probs []Problem
	seen := map[string]string{}
	for _, f := range files {
		parts := strings.Split(f.rel, "/")
		if len(parts) != 3 || parts[0] != "fixtures" || filepath.Ext(f.rel) != ".json" {
			continue
		}
		decision := parts[1]
		if _, p := decodeJSON(f); p != nil {
			probs = append(probs, p...)
			continue
		}
		var cases map[string]json.RawMessage
		if err := json.Unmarshal(f.data, &cases); err != nil {
			probs = append(probs, Problem{File: f.path, Message: "a fixture file maps case names to fixtures: " + err.Error()})
			continue
		}
		for name, raw := range cases {
			fx := Fixture{Decision: decision, Name: name, File: f.path}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			key := decision + "/" + name
			prev, dup := seen[key]
			var why string
			switch err := dec.Decode(&fx); {
			case err != nil:
				why = ": " + err.Error()
			case (fx.Input == nil) == (fx.Body == nil):
				why = ": needs exactly one of input and body"
			case (fx.WantResult == nil) == (fx.WantError == nil):
				why = ": needs exactly one of want_result and want_error"
			case dup:
				why = " is also defined in " + prev
			}
			if why != "" {
				probs = append(probs, Problem{File: f.path, Message: "fixture " + name + why})
				continue
			}
			seen[key] = f.path
			out = append(out, fx)
		}
	}
	slices.SortFunc(out, func(a, b Fixture) int {
		return cmp.Or(strings.Compare(a.Decision, b.Decision), strings.Compare(a.Name, b.Name))
	})
	return out, probs
}

// LoadFixtures reads the fixtures of a test folder.
func LoadFixtures(dir string) ([]Fixture, error) {
	files, probs := newTreeReader(context.Background(), Config{}).read(dir, ".json")
	if len(probs) > 0 {
		return nil, &LoadError{Problems: probs}
	}
	fx, probs := parseFixtures(files)
	if len(probs) > 0 {
		return fx, &LoadError{Problems: probs}
	}
	return fx, nil
}

// RequestBody is the body a fixture sends: its raw body, or its input.
func (fx Fixture) RequestBody() []byte {
	if fx.Body != nil {
		return []byte(*fx.Body)
	}
	return fx.Input
}

// RunFixture decides one fixture through the full Decide path (decoding,
// schema validation, evaluation, result validation) and compares.
func (s *Snapshot) RunFixture(ctx context.Context, fx Fixture) TestResult {
	start := time.Now()
	tr := TestResult{Kind: "fixture", Name: fx.Decision + "/" + fx.Name, File: fx.File}
	d, err := s.Decide(ctx, fx.Decision, fx.RequestBody(), Options{})
	tr.Duration = time.Since(start)
	tr.Message = CheckOutcome(fx, d, err)
	tr.Pass = tr.Message == ""
	return tr
}

// CheckOutcome compares a decision (or error) with what a fixture wants and
// returns "" when they agree, or what differs.
func CheckOutcome(fx Fixture, d *Decision, err error) string {
	if fx.WantError != nil {
		if err == nil {
			return fmt.Sprintf("want error %s, got result %s", fx.WantError.Code, d.Result)
		}
		e := AsError(err)
		if e.Code != fx.WantError.Code {
			return fmt.Sprintf("want error %s, got %s: %s", fx.WantError.Code, e.Code, e.Message)
		}
		if fx.WantError.ViolationAt != "" {
			var paths []string
			for _, v := range e.Violations {
				if v.Path == fx.WantError.ViolationAt {
					return ""
				}
				paths = append(paths, fmt.Sprintf("%q", v.Path))
			}
			return fmt.Sprintf("want a violation at %q, got violations at %s", fx.WantError.ViolationAt, strings.Join(paths, ", "))
		}
		return ""
	}
	if err != nil {
		e := AsError(err)
		return fmt.Sprintf("want result, got error %s: %s %v", e.Code, e.Message, e.Violations)
	}
	if !SameJSON(d.Result, fx.WantResult) {
		return "result differs:\n" + FieldDiff(fx.WantResult, d.Result)
	}
	return ""
}

// FieldDiff lists, one line each, the members of two result objects that
// differ, in want's key order (the fixture's), then the members only got
// has: "  /reasons: want [...], got [...]". Results that are not both
// objects are shown whole.
func FieldDiff(want, got []byte) string {
	keys, wm, okW := orderedObject(want)
	gkeys, gm, okG := orderedObject(got)
	if !okW || !okG {
		return fmt.Sprintf("  want %s\n  got  %s\n", jsonenc.Compact(want), jsonenc.Compact(got))
	}
	var b strings.Builder
	for _, k := range keys {
		g, ok := gm[k]
		switch {
		case !ok:
			fmt.Fprintf(&b, "  /%s: want %s, got no member\n", jsonptr.Escape(k), jsonenc.Compact(wm[k]))
		case !SameJSON(wm[k], g):
			fmt.Fprintf(&b, "  /%s: want %s, got %s%s\n", jsonptr.Escape(k), jsonenc.Compact(wm[k]), jsonenc.Compact(g), elementDiff(wm[k], g))
		}
	}
	for _, k := range gkeys {
		if _, ok := wm[k]; !ok {
			fmt.Fprintf(&b, "  /%s: want no member, got %s\n", jsonptr.Escape(k), jsonenc.Compact(gm[k]))
		}
	}
	return b.String()
}

// elementDiff says which elements two arrays do not share (the reason
// codes a fixture wants and the result lacks, and the other way round).
func elementDiff(want, got []byte) string {
	var w, g []json.RawMessage
	if json.Unmarshal(want, &w) != nil || json.Unmarshal(got, &g) != nil {
		return ""
	}
	// only lists the elements of a that b lacks.
	only := func(a, b []json.RawMessage) (out []string) {
		for _, x := range a {
			if !slices.ContainsFunc(b, func(y json.RawMessage) bool { return SameJSON(x, y) }) {
				out = append(out, jsonenc.Compact(x))
			}
		}
		return out
	}
	missing, extra := only(w, g), only(g, w)
	if len(missing) == 0 && len(extra) == 0 {
		return " (the same elements, in another order or number)"
	}
	out := ""
	if len(missing) > 0 {
		out += "; missing " + strings.Join(missing, ", ")
	}
	if len(extra) > 0 {
		out += "; extra " + strings.Join(extra, ", ")
	}
	return " (" + out[2:] + ")"
}

// orderedObject decodes a JSON object, keeping its key order.
func orderedObject(b []byte) ([]string, map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil || m == nil {
		return nil, nil, false
	}
	spans, ok := memberSpans(b, 0)
	return slices.SortedFunc(maps.Keys(spans), func(x, y string) int { return spans[x].order - spans[y].order }), m, ok
}

// SameJSON reports whether two JSON texts hold the same value, numbers
// compared by their literal text.
func SameJSON(a, b []byte) bool {
	decode := func(b []byte) (v any, err error) {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		err = d.Decode(&v)
		return
	}
	x, errX := decode(a)
	y, errY := decode(b)
	return errX == nil && errY == nil && reflect.DeepEqual(x, y)
}

// Fixtures returns the fixtures of the test folder that gated s (none
// when it was built without one): the inputs a diff of s starts its
// examples from, and the what-if page its first input.
func (s *Snapshot) Fixtures() []Fixture {
	fx, _ := parseFixtures(s.testSrc)
	return fx
}
