package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/arbiter-dev/arbiter/engine/ireval"
	"github.com/arbiter-dev/arbiter/internal/defaults"
)

// Load reads, compiles and checks the configured folders and returns a
// Snapshot ready to serve, or a *LoadError listing every problem found.
// When cfg.Tests is set, the policy tests and fixtures must pass too.
func Load(ctx context.Context, cfg Config) (*Snapshot, error) {
	b, err := build(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Tests == "" {
		return b.snap, nil
	}
	return b.test(ctx, cfg.Tests)
}

// test passes b's Snapshot through its tests and fixtures (those of the
// test folder dir, or held in memory), or refuses it.
func (b *sourcedSnapshot) test(ctx context.Context, dir string) (*Snapshot, error) {
	rep, err := b.snap.runTests(ctx, b, TestOptions{Tests: dir})
	if err != nil {
		return nil, err
	}
	if probs := rep.Problems(); len(probs) > 0 {
		return nil, &LoadError{Problems: probs, Skipped: b.snap.Skipped}
	}
	b.snap.Gated = true
	return b.snap, nil
}

// sourcedSnapshot is a Snapshot with what it was built from (modules, data,
// schemas, capabilities, source files), for the gate's tests and checks.
type sourcedSnapshot struct {
	snap       *Snapshot
	cfg        Config
	modules    map[string]*ast.Module
	data       map[string]any
	schemaSet  *ast.SchemaSet
	caps       *ast.Capabilities
	policySrcs []sourceFile
	testFiles  []sourceFile // tests held in memory (a bundle's); nil: read cfg.Tests
}

func build(ctx context.Context, cfg Config) (*sourcedSnapshot, error) {
	r := newTreeReader(ctx, cfg)
	policyFiles, probs := r.read(cfg.Policies, ".rego", ".json", ".yaml", ".yml")
	schemaFiles, p := r.read(cfg.Schemas, ".json")
	if probs = append(probs, p...); len(probs) > 0 {
		return nil, &LoadError{Problems: probs, Skipped: r.skipped}
	}
	b, err := buildFrom(cfg, policyFiles, schemaFiles)
	if err != nil {
		if le, ok := err.(*LoadError); ok {
			le.Skipped = r.skipped
		}
		return nil, err
	}
	b.snap.Skipped = r.skipped
	return b, nil
}

// buildFrom compiles files already read, from folders or from a bundle.
func buildFrom(cfg Config, policyFiles, schemaFiles []sourceFile) (*sourcedSnapshot, error) {
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

	modules, data, probs := parsePolicies(policyFiles)
	if len(modules) == 0 && len(probs) == 0 {
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
	snap := &Snapshot{
		Revision:    revision,
		Hash:        revision,
		Files:       files,
		LoadedAt:    time.Now().UTC(),
		decisions:   map[string]*decisionDef{},
		timeout:     defaults.Positive(cfg.EvalTimeout, DefaultEvalTimeout),
		testTimeout: defaults.Positive(cfg.TestTimeout, DefaultTestTimeout),
		maxValues:   cfg.MaxInputValues,
		policySrc:   policyFiles,
		schemaSrc:   schemaFiles,
		data:        data,
	}
	probs = append(probs, snap.discover(compiler, store, modules, schemaDocs)...)
	if len(probs) > 0 {
		return nil, &LoadError{Problems: probs}
	}
	snap.compileDecisions(cfg, compiler, store, modules)
	return &sourcedSnapshot{snap: snap, cfg: cfg, modules: modules, data: data, schemaSet: schemaSet, caps: caps, policySrcs: policyFiles}, nil
}

func newCompiler(caps *ast.Capabilities, ss *ast.SchemaSet) *ast.Compiler {
	return ast.NewCompiler().
		WithCapabilities(caps).
		WithSchemas(ss).
		WithUseTypeCheckAnnotations(true).
		WithStrict(true).
		WithDefaultRegoVersion(ast.RegoV1)
}

// compileDecisions plans every decision's query with OPA's planner and
// compiles the plans. Nothing here can fail a load: a decision that does
// not compile runs on topdown.
func (s *Snapshot) compileDecisions(cfg Config, c *ast.Compiler, store storage.Store, modules map[string]*ast.Module) {
	s.selfCheck = cfg.SelfCheck
	ctx := context.Background()
	data, dataErr := storeData(ctx, store)
	entry := func(name string) string { return "decisions/" + name + "/decision" }
	entries := make([]string, len(s.names))
	for i, n := range s.names {
		entries[i] = entry(n)
	}
	// One plan for all decisions; when one of them does not plan, each is
	// planned on its own so that the others still compile. The plan also
	// says what each reason rule reads (evidence.go), compiled or not.
	policy, err := ireval.Plan(ctx, modules, c.Capabilities(), entries...)
	for _, n := range s.names {
		def := s.decisions[n]
		cd := &compiledDecision{}
		def.compiled = cd
		p := policy
		if err != nil {
			var perr error
			if p, perr = ireval.Plan(ctx, modules, c.Capabilities(), entry(n)); perr != nil {
				cd.reason = perr.Error()
				def.planErr = perr.Error()
				continue
			}
		}
		def.plan = p
		def.reads = ruleReads(p, store, def.name, def.rules)
		if dataErr != nil {
			cd.reason = dataErr.Error()
			continue
		}
		prog, err := ireval.Compile(p, entry(n), data)
		if err != nil {
			cd.reason = err.Error()
			continue
		}
		if why := indexedComprehension(c, prog); why != "" {
			cd.reason = why
			continue
		}
		if p := prog.InputProjection(); p != nil && !p.All {
			cd.proj = p
		}
		cd.prog = prog
	}
}

// storeData reads the whole data document as topdown reads base documents
// from the store, converted once.
func storeData(ctx context.Context, store storage.Store) (ast.Value, error) {
	doc, err := storage.ReadOne(ctx, store, storage.RootPath)
	if err != nil {
		return nil, fmt.Errorf("reading data: %w", err)
	}
	if obj, ok := doc.(map[string]any); ok {
		if _, ok := obj[string(ast.SystemDocumentKey)]; ok {
			// topdown hides data.system from reads of the whole document.
			return nil, errors.New("data holds a system document, which topdown hides from data")
		}
	}
	v, err := ast.InterfaceToValue(doc)
	if err != nil {
		return nil, fmt.Errorf("converting data: %w", err)
	}
	return v, nil
}

// indexedComprehension reports a comprehension that topdown evaluates
// through a comprehension index in any rule the program can reach. Topdown
// then evaluates the comprehension's body for every element, not only the
// ones the enclosing query binds: a builtin error there is an error in
// topdown and possibly not in the plan, which evaluates it per binding.
func indexedComprehension(c *ast.Compiler, prog *ireval.Program) string {
	for _, name := range prog.Functions() {
		// Plan functions are named g<generation>.<rule ref>.
		_, path, ok := strings.Cut(name, ".")
		if !ok {
			continue
		}
		ref, err := ast.ParseRef(path)
		if err != nil {
			return "function " + name + " names no rule"
		}
		for _, r := range c.GetRules(ref) {
			found := ""
			ast.WalkTerms(r, func(t *ast.Term) bool {
				if found == "" && ast.IsComprehension(t.Value) && c.ComprehensionIndex(t) != nil {
					found = fmt.Sprintf("%s:%d: topdown indexes this comprehension, so it evaluates it otherwise than the plan", r.Location.File, t.Location.Row)
				}
				return found != ""
			})
			if found != "" {
				return found
			}
		}
	}
	return ""
}
