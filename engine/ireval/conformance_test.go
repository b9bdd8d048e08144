package ireval

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/test/cases"

	"github.com/arbiter-dev/arbiter/internal/race"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
)

// TestOPAConformanceCases decides every case of OPA's own evaluation test
// suite (v1/test/cases/testdata/v1 of the OPA module in use, the suite
// topdown and OPA's Wasm target are tested with) through topdown and
// through the compiled plan. Cases the evaluator does not compile are
// counted, never failed; a compiled answer that differs from topdown's is
// a failure. The expected results recorded in the cases are not used: the
// reference is topdown.
func TestOPAConformanceCases(t *testing.T) {
	ruleedit.Skip(t)
	race.Skip(t)
	dir := opaCasesDir(t)
	set, err := cases.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	counts := map[verdict]int{}
	why := map[string]int{}
	var deferrals []string
	for _, tc := range set.Sorted().Cases {
		if len(tc.Env) > 0 {
			continue // reads the environment through opa.runtime
		}
		name := strings.TrimPrefix(tc.Filename, dir+string(filepath.Separator)) + "/" + tc.Note
		dc := diffCase{name: name, query: tc.Query, modules: map[string]string{}}
		for i, m := range tc.Modules {
			dc.modules[fmt.Sprintf("module-%d.rego", i)] = m
		}
		if tc.Data != nil {
			dc.data = *tc.Data
		}
		switch {
		case tc.InputTerm != nil:
			term, err := ast.ParseTerm(*tc.InputTerm)
			if err != nil {
				continue
			}
			dc.input = term.Value
		case tc.Input != nil:
			v, err := ast.InterfaceToValue(*tc.Input)
			if err != nil {
				continue
			}
			dc.input = v
		}
		r := runDiff(ctx, dc)
		counts[r.verdict]++
		switch r.verdict {
		case disagree:
			t.Errorf("%s: %s\n  query: %s", name, indent(r.describe()), tc.Query)
		case unsupportedPlan:
			why[firstWords(r.why)]++
		case deferred:
			deferrals = append(deferrals, name+": "+r.why)
		}
	}
	total := counts[agree] + counts[deferred] + counts[unsupportedPlan] + counts[disagree]
	t.Logf("%d cases: %d agree, %d deferred to topdown, %d not compiled, %d disagree",
		total, counts[agree], counts[deferred], counts[unsupportedPlan], counts[disagree])
	for _, d := range deferrals {
		t.Logf("deferred: %s", d)
	}
	reasons := make([]string, 0, len(why))
	for w, n := range why {
		reasons = append(reasons, fmt.Sprintf("%4d %s", n, w))
	}
	sort.Strings(reasons)
	t.Logf("not compiled:\n%s", strings.Join(reasons, "\n"))
	// The suite must actually run compiled: most cases use the builtins
	// and statements the evaluator implements.
	if counts[agree] < total/2 {
		t.Errorf("only %d of %d cases ran compiled and agreed", counts[agree], total)
	}
}

func firstWords(s string) string {
	f := strings.Fields(s)
	if len(f) > 4 {
		f = f[:4]
	}
	return strings.Join(f, " ")
}

// opaCasesDir finds the suite in the source of the OPA module this binary
// was built with: the directory of package cases itself, or the module
// cache.
func opaCasesDir(t *testing.T) string {
	t.Helper()
	pc := reflect.ValueOf(cases.Load).Pointer()
	file, _ := runtime.FuncForPC(pc).FileLine(pc)
	candidates := []string{filepath.Join(filepath.Dir(file), "testdata", "v1")}
	if out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/open-policy-agent/opa").Output(); err == nil {
		candidates = append(candidates, filepath.Join(strings.TrimSpace(string(out)), "v1", "test", "cases", "testdata", "v1"))
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && st.IsDir() {
			return c
		}
	}
	t.Fatalf("OPA's test cases not found (tried %v)", candidates)
	return ""
}
