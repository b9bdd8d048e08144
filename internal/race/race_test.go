package race

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A test that skips under -race runs only through the Makefile's
// NORACE_TESTS, in the run without it. One missing from that list would
// run nowhere: every test function that calls Skip must be named there,
// and every name there must be such a test.
func TestEverySkippedTestRunsWithout(t *testing.T) {
	const root = "../.."
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^NORACE_TESTS\s*:=((?:.*\\\n)*.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile has no NORACE_TESTS")
	}
	listed := strings.Fields(strings.ReplaceAll(string(m[1]), "\\", " "))
	slices.Sort(listed)

	var skipping []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Skip" {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "race" {
						skipping = append(skipping, fn.Name.Name)
						return false
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(skipping)
	skipping = slices.Compact(skipping)
	if len(skipping) == 0 {
		t.Fatal("no test calls race.Skip: is the walk looking in the right place?")
	}
	if !slices.Equal(skipping, listed) {
		t.Errorf("tests that skip under -race: %v\nMakefile's NORACE_TESTS: %v", skipping, listed)
	}
}
