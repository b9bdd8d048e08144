package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/arbiter-dev/arbiter/internal/defaults"
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
	// TestTimeout bounds each Rego test and fixture of the reload gate; zero
	// means DefaultTestTimeout. It is not EvalTimeout: a gate that shared
	// the request deadline would refuse a good candidate on a busy machine.
	TestTimeout time.Duration
	// ReloadTimeout bounds a whole reload, reading, compiling and testing
	// included; zero means DefaultReloadTimeout.
	ReloadTimeout time.Duration
	// MaxFileBytes caps each file read; zero means DefaultMaxFileBytes.
	MaxFileBytes int64
	// SelfCheck, when set, is handed every answer of a compiled program, on
	// the request path (it must not block): package shadow decides a sample
	// of them again with topdown in the background (engine/compiled.go).
	SelfCheck func(Recheck)
}

// Defaults of Config.
const (
	DefaultEvalTimeout   = 2 * time.Second
	DefaultTestTimeout   = 10 * time.Second
	DefaultReloadTimeout = time.Minute
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
