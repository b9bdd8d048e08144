package engine

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
)

// Check runs every static check a reliability engineer needs before a
// change ships, without running the Rego tests: policies compile and
// type-check against their schemas, use only allowed builtins, are
// formatted as `opa fmt` formats them; the test modules compile; and every
// fixture input is accepted or rejected by its schema as the fixture says.
// It says too which decisions of the build run compiled (nil when it
// failed).
func Check(ctx context.Context, cfg Config, tests string) (probs []Problem, compiled []CompiledInfo) {
	cfg.Tests, cfg.SelfCheck = "", nil
	b, err := build(ctx, cfg)
	if err != nil {
		return ProblemsOf(err), nil
	}
	compiled = b.snap.Compiled()
	probs = formatProblems(b.policySrcs)
	r := newTreeReader(ctx, cfg)
	defer func() {
		// A file that a reload would skip is worth knowing before it ships.
		for _, sk := range append(b.snap.Skipped, r.skipped...) {
			probs = append(probs, Problem{File: sk.File, Message: "skipped: " + sk.Reason})
		}
	}()
	if tests == "" {
		return probs, compiled
	}
	st, p := loadSuite(r, tests)
	probs = append(probs, p...)
	probs = append(probs, formatProblems(st.files)...)
	probs = append(probs, b.checkTestModules(st)...)
	for _, fx := range st.fixtures {
		if msg := b.snap.checkFixtureSchema(fx); msg != "" {
			probs = append(probs, Problem{File: fx.File, Message: fmt.Sprintf("fixture %s: %s", fx.Name, msg)})
		}
	}
	return probs, compiled
}

// checkTestModules compiles the test modules together with the policies,
// as `opa check --strict` would.
func (b *sourcedSnapshot) checkTestModules(st *suite) []Problem {
	if len(st.modules) == 0 {
		return nil
	}
	c := newCompiler(b.caps, b.schemaSet).WithEnablePrintStatements(true)
	c.Compile(b.withTests(st))
	if c.Failed() {
		return astProblems(c.Errors)
	}
	return nil
}

// checkFixtureSchema reports a fixture whose input its schema treats
// otherwise than the fixture expects.
func (s *Snapshot) checkFixtureSchema(fx Fixture) string {
	def, ok := s.decisions[fx.Decision]
	if !ok {
		return fmt.Sprintf("no decision named %q (fixtures/<decision>/ must name one)", fx.Decision)
	}
	var got Code
	if _, err := s.parseInput(context.Background(), def, fx.RequestBody(), Options{}); err != nil {
		got = AsError(err).Code
	}
	var want Code
	if fx.WantError != nil {
		want = fx.WantError.Code
		if want != CodeMalformedJSON && want != CodeInputSchemaInvalid {
			return "" // decided by the policy, not the schema
		}
	}
	switch {
	case got == want:
		return ""
	case want == "":
		return fmt.Sprintf("wants a result, but its input is rejected (%s)", got)
	case got == "":
		return fmt.Sprintf("wants %s, but its input is valid", want)
	default:
		return fmt.Sprintf("wants %s, but its input gives %s", want, got)
	}
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
