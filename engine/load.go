package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/arbiter-dev/arbiter/engine/input"
)

// Config names the folders a Snapshot is built from. It is a plain struct:
// flags and environment variables are read in cmd, never here.
type Config struct {
	Policies string // Rego modules and their data.json files
	Schemas  string // <decision>/input.json and <decision>/result.json
	// Tests, when set, holds *_test.rego files and fixtures/<decision>/*.json.
	// A candidate Snapshot only becomes active when all of them pass.
	Tests string
	// EvalTimeout bounds one evaluation; zero means DefaultEvalTimeout.
	EvalTimeout time.Duration
	// MaxInputValues caps the JSON values of one input (body_too_large
	// beyond it); zero means input.DefaultMaxValues.
	MaxInputValues int
	// SelfCheck, when set, re-decides a sample of compiled decisions with
	// topdown in the background (engine/compiled.go).
	SelfCheck *SelfCheck
}

// DefaultEvalTimeout bounds one policy evaluation when Config leaves it zero.
const DefaultEvalTimeout = 2 * time.Second

// Problem is one reason a set of files cannot be served, located in a file.
type Problem struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	switch {
	case p.File == "":
		return p.Message
	case p.Line > 0:
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
	default:
		return fmt.Sprintf("%s: %s", p.File, p.Message)
	}
}

// LoadError lists every problem found while building a Snapshot.
type LoadError struct {
	Problems []Problem
}

func (e *LoadError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return fmt.Sprintf("%d problem(s):\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// Snapshot is everything needed to decide, compiled once and never mutated:
// requests hold on to the Snapshot they started with while a reload builds
// the next one.
type Snapshot struct {
	Revision string    // content hash of every policy, data and schema file, or a bundle's manifest revision
	Hash     string    // content hash of every policy, data and schema file
	Files    []string  // the files it was built from
	LoadedAt time.Time // when it was built

	decisions map[string]*decisionDef
	names     []string
	timeout   time.Duration
	maxValues int
	checker   *selfChecker // nil: no self-check (engine/compiled.go)

	// The bytes it was built from, for SaveTo: policies, schemas, and the
	// tests that gated it (when a test folder was configured).
	policySrc, schemaSrc, testSrc []sourceFile
}

// decisionDef is one decision of a Snapshot.
type decisionDef struct {
	name        string
	title       string
	description string
	inputSchema *jsonschema.Schema
	input       *input.Schema // the input schema, prepared for the one-pass walk
	result      *jsonschema.Schema
	inputDoc    any // the input schema as loaded, for GET /v1/decisions
	resultDoc   any
	outcomeKey  string // result member that labels metrics, see OutcomeKeyword
	query       rego.PreparedEvalQuery
	rules       []RuleInfo
	reads       []ruleEvidence    // per rule, what it reads of the input (evidence.go)
	compiled    *compiledDecision // engine/compiled.go
}

// RuleInfo describes one reason rule of a decision, taken from its METADATA.
type RuleInfo struct {
	Rank        json.Number `json:"rank"`
	Reason      string      `json:"reason"`
	Title       string      `json:"title"`
	Description string      `json:"description,omitempty"`
	File        string      `json:"file"`
	Line        int         `json:"line"`
}

// DecisionInfo is the public description of one decision.
type DecisionInfo struct {
	Name         string     `json:"name"`
	Title        string     `json:"title,omitempty"`
	Description  string     `json:"description,omitempty"`
	Path         string     `json:"path"`
	InputSchema  any        `json:"input_schema"`
	ResultSchema any        `json:"result_schema"`
	Rules        []RuleInfo `json:"rules"`
}

// Decisions lists the decisions of the Snapshot, sorted by name.
func (s *Snapshot) Decisions() []DecisionInfo {
	out := make([]DecisionInfo, 0, len(s.names))
	for _, n := range s.names {
		d := s.decisions[n]
		out = append(out, DecisionInfo{
			Name: n, Title: d.title, Description: d.description,
			Path:        "/v1/data/decisions/" + n + "/decision",
			InputSchema: d.inputDoc, ResultSchema: d.resultDoc, Rules: d.rules,
		})
	}
	return out
}

// Names lists the decision names, sorted.
func (s *Snapshot) Names() []string { return append([]string(nil), s.names...) }

// OutcomeKeyword is the result-schema keyword naming the result member that
// labels a decision's outcome in metrics (default "outcome").
const OutcomeKeyword = "x-arbiter-outcome"

var decisionName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// sourceFile is one file read into memory: everything of a Snapshot is built
// from one read of each file, so the revision names exactly what is compiled.
type sourceFile struct {
	path string // as shown to users: the configured folder joined with rel
	rel  string // slash-separated, relative to the folder
	data []byte
}

// Load reads, compiles and checks the configured folders and returns a
// Snapshot ready to serve, or a *LoadError listing every problem found.
// When cfg.Tests is set, the policy tests and fixtures must pass too.
func Load(ctx context.Context, cfg Config) (*Snapshot, error) {
	b, err := build(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Tests != "" {
		rep, err := b.snap.runTests(ctx, b, TestOptions{Tests: cfg.Tests})
		if err != nil {
			return nil, err
		}
		if probs := rep.Problems(); len(probs) > 0 {
			return nil, &LoadError{Problems: probs}
		}
	}
	return b.snap, nil
}

// built is a Snapshot with what it was built from, for tests and checks.
type built struct {
	snap       *Snapshot
	cfg        Config
	modules    map[string]*ast.Module
	data       map[string]any
	schemaSet  *ast.SchemaSet
	caps       *ast.Capabilities
	policySrcs []sourceFile
	testFiles  []sourceFile // tests held in memory (a bundle's); nil: read cfg.Tests
}

func build(cfg Config) (*built, error) {
	policyFiles, err := readTree(cfg.Policies, ".rego", ".json", ".yaml", ".yml")
	if err != nil {
		return nil, &LoadError{Problems: []Problem{{File: cfg.Policies, Message: err.Error()}}}
	}
	schemaFiles, err := readTree(cfg.Schemas, ".json")
	if err != nil {
		return nil, &LoadError{Problems: []Problem{{File: cfg.Schemas, Message: err.Error()}}}
	}
	return buildFrom(cfg, policyFiles, schemaFiles)
}

// buildFrom compiles files already read, from folders or from a bundle.
func buildFrom(cfg Config, policyFiles, schemaFiles []sourceFile) (*built, error) {
	var probs []Problem
	h := sha256.New()
	var files []string
	for _, group := range [][]sourceFile{policyFiles, schemaFiles} {
		for _, f := range group {
			fmt.Fprintf(h, "%s\x00%d\x00", f.rel, len(f.data))
			h.Write(f.data)
			files = append(files, f.path)
		}
		h.Write([]byte{0xff})
	}
	revision := hex.EncodeToString(h.Sum(nil))[:16]

	modules, data, p := parsePolicies(policyFiles)
	probs = append(probs, p...)
	if len(modules) == 0 && len(p) == 0 {
		probs = append(probs, Problem{File: cfg.Policies, Message: "no .rego files found"})
	}

	schemaSet, schemaDocs, p := parseSchemas(schemaFiles)
	probs = append(probs, p...)

	caps := Capabilities()
	probs = append(probs, refusedBuiltins(modules)...)
	if len(probs) > 0 {
		return nil, &LoadError{Problems: probs}
	}

	compiler := newCompiler(caps, schemaSet)
	compiler.Compile(modules)
	if compiler.Failed() {
		return nil, &LoadError{Problems: astProblems(compiler.Errors)}
	}

	store := inmem.NewFromObjectWithOpts(data, inmem.OptRoundTripOnWrite(false))
	timeout := cfg.EvalTimeout
	if timeout <= 0 {
		timeout = DefaultEvalTimeout
	}
	snap := &Snapshot{
		Revision:  revision,
		Hash:      revision,
		Files:     files,
		LoadedAt:  time.Now().UTC(),
		decisions: map[string]*decisionDef{},
		timeout:   timeout,
		maxValues: cfg.MaxInputValues,
		policySrc: policyFiles,
		schemaSrc: schemaFiles,
	}
	probs = append(probs, snap.discover(compiler, store, modules, schemaDocs)...)
	if len(probs) > 0 {
		return nil, &LoadError{Problems: probs}
	}
	snap.compileDecisions(cfg, compiler, store, modules)
	return &built{snap: snap, cfg: cfg, modules: modules, data: data, schemaSet: schemaSet, caps: caps, policySrcs: policyFiles}, nil
}

func newCompiler(caps *ast.Capabilities, ss *ast.SchemaSet) *ast.Compiler {
	return ast.NewCompiler().
		WithCapabilities(caps).
		WithSchemas(ss).
		WithUseTypeCheckAnnotations(true).
		WithStrict(true).
		WithDefaultRegoVersion(ast.RegoV1)
}

// readTree reads every file with one of exts below root, following a root
// that is a symlink (folders swapped in by a symlink flip) and skipping dot
// files and editor leftovers, which are never part of a policy.
func readTree(root string, exts ...string) ([]sourceFile, error) {
	if root == "" {
		return nil, fmt.Errorf("no folder configured")
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	var out []sourceFile
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if p != real && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "#") || strings.HasSuffix(name, "~")) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		ext := filepath.Ext(name)
		if !contains(exts, ext) {
			return nil
		}
		rel, err := filepath.Rel(real, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, sourceFile{path: filepath.Join(root, rel), rel: filepath.ToSlash(rel), data: data})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out, err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// parsePolicies parses Rego modules and places data files at the path of
// their folder, as OPA does (policies/decisions/x/data.json is data.decisions.x).
func parsePolicies(files []sourceFile) (map[string]*ast.Module, map[string]any, []Problem) {
	var probs []Problem
	modules := map[string]*ast.Module{}
	data := map[string]any{}
	for _, f := range files {
		switch filepath.Ext(f.rel) {
		case ".rego":
			m, err := ast.ParseModuleWithOpts(f.path, string(f.data), ast.ParserOptions{ProcessAnnotation: true, RegoVersion: ast.RegoV1})
			if err != nil {
				probs = append(probs, errProblems(f.path, err)...)
				continue
			}
			modules[f.path] = m
		case ".yaml", ".yml":
			probs = append(probs, Problem{File: f.path, Message: "data files must be JSON (.json)"})
		default:
			doc, err := input.Decode(f.data)
			if err != nil {
				probs = append(probs, Problem{File: f.path, Message: err.Error()})
				continue
			}
			if err := mergeAt(data, dirPath(f.rel), doc); err != nil {
				probs = append(probs, Problem{File: f.path, Message: err.Error()})
			}
		}
	}
	return modules, data, probs
}

func dirPath(rel string) []string {
	dir := filepath.ToSlash(filepath.Dir(rel))
	if dir == "." {
		return nil
	}
	return strings.Split(dir, "/")
}

// mergeAt merges doc into root at path, refusing to overwrite a value.
func mergeAt(root map[string]any, path []string, doc any) error {
	node := root
	for _, k := range path {
		next, ok := node[k]
		if !ok {
			m := map[string]any{}
			node[k] = m
			node = m
			continue
		}
		m, ok := next.(map[string]any)
		if !ok {
			return fmt.Errorf("data conflict at %s", strings.Join(path, "."))
		}
		node = m
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return fmt.Errorf("a data file must hold a JSON object")
	}
	return mergeObjects(node, obj, path)
}

func mergeObjects(dst, src map[string]any, path []string) error {
	for k, v := range src {
		existing, ok := dst[k]
		if !ok {
			dst[k] = v
			continue
		}
		a, aok := existing.(map[string]any)
		b, bok := v.(map[string]any)
		if !aok || !bok {
			return fmt.Errorf("data conflict at %s", strings.Join(append(path, k), "."))
		}
		if err := mergeObjects(a, b, append(path, k)); err != nil {
			return err
		}
	}
	return nil
}

// parseSchemas decodes every schema file and keys it as `opa check -s` does:
// schemas/NAME/input.json is schema.NAME.input.
func parseSchemas(files []sourceFile) (*ast.SchemaSet, map[string]schemaDoc, []Problem) {
	var probs []Problem
	ss := ast.NewSchemaSet()
	docs := map[string]schemaDoc{}
	for _, f := range files {
		doc, err := input.Decode(f.data)
		if err != nil {
			probs = append(probs, Problem{File: f.path, Message: err.Error()})
			continue
		}
		key := strings.TrimSuffix(f.rel, ".json")
		ref := ast.Ref{ast.SchemaRootDocument}
		for _, part := range strings.Split(key, "/") {
			ref = append(ref, ast.StringTerm(part))
		}
		ss.Put(ref, doc)
		docs[key] = schemaDoc{path: f.path, doc: doc}
	}
	return ss, docs, probs
}

type schemaDoc struct {
	path string
	doc  any
}

// discover finds the decisions: every package decisions.NAME with a rule
// named decision. Nothing here knows any decision by name.
func (s *Snapshot) discover(c *ast.Compiler, store storage.Store, modules map[string]*ast.Module, schemas map[string]schemaDoc) []Problem {
	var probs []Problem
	found := map[string]string{} // name -> file declaring it
	for file, m := range modules {
		path := m.Package.Path
		if len(path) != 3 || !path[1].Equal(ast.StringTerm("decisions")) {
			continue
		}
		name, ok := path[2].Value.(ast.String)
		if !ok {
			continue
		}
		for _, r := range m.Rules {
			if r.Head.Name.String() == "decision" || r.Head.Ref().String() == "decision" {
				found[string(name)] = file
			}
		}
	}
	names := make([]string, 0, len(found))
	for n := range found {
		names = append(names, n)
	}
	sort.Strings(names)
	as := c.GetAnnotationSet()
	for _, name := range names {
		file := found[name]
		if !decisionName.MatchString(name) {
			probs = append(probs, Problem{File: file, Message: fmt.Sprintf("decision name %q must match %s", name, decisionName)})
			continue
		}
		def := &decisionDef{name: name}
		in, okIn := schemas[name+"/input"]
		out, okOut := schemas[name+"/result"]
		if !okIn || !okOut {
			probs = append(probs, Problem{File: file, Message: fmt.Sprintf("decision %s needs schemas %s/input.json and %s/result.json in the schema folder", name, name, name)})
			continue
		}
		var err error
		if def.inputSchema, err = compileSchema(in.path, in.doc); err != nil {
			probs = append(probs, Problem{File: in.path, Message: err.Error()})
			continue
		}
		def.input = input.NewSchema(def.inputSchema)
		if def.result, err = compileSchema(out.path, out.doc); err != nil {
			probs = append(probs, Problem{File: out.path, Message: err.Error()})
			continue
		}
		def.inputDoc, def.resultDoc = in.doc, out.doc
		def.outcomeKey = "outcome"
		if obj, ok := out.doc.(map[string]any); ok {
			if k, ok := obj[OutcomeKeyword].(string); ok {
				def.outcomeKey = k
			}
		}
		pkg := ast.MustParseRef("data.decisions." + name)
		if !declaresInputSchema(as, pkg, name) {
			probs = append(probs, Problem{File: file, Line: 1, Message: fmt.Sprintf("package decisions.%s must declare `schemas: [{input: schema.%s.input}]` in its package METADATA so that every input reference is type-checked", name, name)})
			continue
		}
		def.title, def.description, def.rules = describe(as, pkg)
		def.reads = ruleReads(c, pkg, def.rules)
		pq, err := rego.New(
			rego.Query(pkg.String()+".decision"),
			rego.Compiler(c),
			rego.Store(store),
			rego.StrictBuiltinErrors(true),
		).PrepareForEval(context.Background())
		if err != nil {
			probs = append(probs, Problem{File: file, Message: "preparing query: " + err.Error()})
			continue
		}
		def.query = pq
		s.decisions[name] = def
		s.names = append(s.names, name)
	}
	if len(found) == 0 {
		probs = append(probs, Problem{Message: "no decision found: a decision is a package decisions.NAME with a rule named decision"})
	}
	for key, sd := range schemas {
		dir, _, _ := strings.Cut(key, "/")
		if _, ok := found[dir]; !ok {
			probs = append(probs, Problem{File: sd.path, Message: fmt.Sprintf("schema for unknown decision %q (no package decisions.%s with a decision rule)", dir, dir)})
		}
	}
	sort.Slice(probs, func(i, j int) bool { return probs[i].String() < probs[j].String() })
	return probs
}

func declaresInputSchema(as *ast.AnnotationSet, pkg ast.Ref, name string) bool {
	want := ast.MustParseRef("schema." + name + ".input")
	for _, a := range as.Flatten() {
		if !a.Path.Equal(pkg) || a.Annotations.Scope != "package" {
			continue
		}
		for _, sa := range a.Annotations.Schemas {
			if sa.Path.Equal(ast.InputRootRef) && sa.Schema.Equal(want) {
				return true
			}
		}
	}
	return false
}

// describe reads the package title and the reason rules of a decision from
// its METADATA. A reason rule is an annotated rule whose head key is a
// literal [rank, "code"]: the engine learns every reason from the policy
// files, so adding one never touches Go.
func describe(as *ast.AnnotationSet, pkg ast.Ref) (title, description string, rules []RuleInfo) {
	for _, a := range as.Flatten() {
		ann := a.Annotations
		if a.Path.Equal(pkg) && ann.Scope == "package" {
			title, description = ann.Title, ann.Description
			continue
		}
		r := a.GetRule()
		if r == nil || !a.Path.HasPrefix(pkg) || r.Head.Key == nil || ann.Title == "" {
			continue
		}
		arr, ok := r.Head.Key.Value.(*ast.Array)
		if !ok || arr.Len() != 2 {
			continue
		}
		rank, ok1 := arr.Elem(0).Value.(ast.Number)
		code, ok2 := arr.Elem(1).Value.(ast.String)
		if !ok1 || !ok2 {
			continue
		}
		rules = append(rules, RuleInfo{Rank: json.Number(rank), Reason: string(code), Title: ann.Title, Description: strings.TrimSpace(ann.Description), File: r.Location.File, Line: r.Location.Row})
	}
	sort.SliceStable(rules, func(i, j int) bool {
		return ast.NumberCompare(ast.Number(rules[i].Rank), ast.Number(rules[j].Rank)) < 0
	})
	return title, description, rules
}

func astProblems(errs ast.Errors) []Problem {
	out := make([]Problem, 0, len(errs))
	for _, e := range errs {
		p := Problem{Message: e.Message}
		if e.Code != "" {
			p.Message = e.Code + ": " + e.Message
		}
		if e.Location != nil {
			p.File, p.Line = e.Location.File, e.Location.Row
		}
		out = append(out, p)
	}
	return out
}

func errProblems(file string, err error) []Problem {
	if errs, ok := err.(ast.Errors); ok {
		return astProblems(errs)
	}
	return []Problem{{File: file, Message: err.Error()}}
}

// formatProblems reports Rego files that `opa fmt` would change.
func formatProblems(files []sourceFile) []Problem {
	var probs []Problem
	for _, f := range files {
		if filepath.Ext(f.rel) != ".rego" {
			continue
		}
		want, err := format.SourceWithOpts(f.path, f.data, format.Opts{RegoVersion: ast.RegoV1})
		if err != nil {
			probs = append(probs, errProblems(f.path, err)...)
			continue
		}
		if string(want) != string(f.data) {
			probs = append(probs, Problem{File: f.path, Line: firstDiffLine(f.data, want), Message: "not formatted as `opa fmt` would (run `make fmt`)"})
		}
	}
	return probs
}

func firstDiffLine(a, b []byte) int {
	line := 1
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return line
		}
		if a[i] == '\n' {
			line++
		}
	}
	return line
}
