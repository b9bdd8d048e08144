package norules

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/build/constraint"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/util"
)

// root is the repository, seen from this package's folder.
const root = "../.."

// snake is what a reason code or an outcome looks like: lower-case words
// joined by underscores. Words without an underscore ("allow", "suspended")
// are ordinary English in Go too, and are left to the fixtures.
var snake = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)+$`)

// word is a whole word of Go source, as a name would appear in it: quoted,
// in a comment or as part of a path.
var word = regexp.MustCompile(`[A-Za-z0-9_]+`)

// TestGoNamesNoRule reads the rules generically (OPA's parser over every
// policy file, the fixtures as JSON) and fails on any Go file that names
// what it found: a snake_case string literal of a policy or of its data (a
// reason code, an outcome, a data key such as a budget's name), a decision
// or library package, or a fixture case. The hand-written benchmark floor
// restates the rules on purpose, behind the benchfloor build tag that only
// make bench sets, and is left out; so is every file built only with it.
func TestGoNamesNoRule(t *testing.T) {
	names := ruleNames(t)
	if len(names) == 0 {
		t.Fatal("no names found under policies/ and policy_test/fixtures/")
	}
	t.Logf("%d names from policies/ and policy_test/fixtures/", len(names))
	var hits []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "bin", "var":
				return filepath.SkipDir
			}
			if filepath.ToSlash(path) == root+"/engine/testdata/floor" {
				return filepath.SkipDir // the floor: behind benchfloor
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if onlyWithBenchfloor(src) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		sc := bufio.NewScanner(bytes.NewReader(src))
		sc.Buffer(nil, 1<<20)
		for line := 1; sc.Scan(); line++ {
			for _, w := range word.FindAllString(sc.Text(), -1) {
				if from, ok := names[w]; ok {
					hits = append(hits, fmt.Sprintf("%s:%d: names %q (%s)", rel, line, w, from))
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) > 0 {
		t.Errorf("Go names a rule (take outcomes from the fixtures or from golden files, and edit the test decision of engine/testdata/quota):\n%s", strings.Join(hits, "\n"))
	}
}

// onlyWithBenchfloor reports whether a Go file's build constraint holds
// only with the benchfloor tag.
func onlyWithBenchfloor(src []byte) bool {
	for _, line := range strings.Split(string(src), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "package ") {
			return false
		}
		if !constraint.IsGoBuild(line) {
			continue
		}
		expr, err := constraint.Parse(line)
		if err != nil {
			return false
		}
		with := expr.Eval(func(tag string) bool { return tag == "benchfloor" || tag == "linux" || tag == "unix" })
		without := expr.Eval(func(tag string) bool { return tag == "linux" || tag == "unix" })
		return with && !without
	}
	return false
}

// ruleNames maps each name the policies and fixtures define to where it
// was found.
func ruleNames(t *testing.T) map[string]string {
	t.Helper()
	names := map[string]string{}
	add := func(name, from string) {
		if _, ok := names[name]; !ok {
			names[name] = from
		}
	}
	walkFiles(t, filepath.Join(root, "policies"), func(path string, src []byte) {
		rel, _ := filepath.Rel(root, path)
		switch filepath.Ext(path) {
		case ".rego":
			m, err := ast.ParseModuleWithOpts(path, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			// The package: decisions.NAME names a decision, lib.NAME a
			// library; data and the namespace are no names.
			if pkg := m.Package.Path; len(pkg) > 2 {
				last := pkg[len(pkg)-1].Value.(ast.String)
				add(string(last), "package "+m.Package.Path.String()[len("data."):]+" in "+rel)
			}
			ast.WalkTerms(m, func(term *ast.Term) bool {
				if s, ok := term.Value.(ast.String); ok && snake.MatchString(string(s)) {
					add(string(s), fmt.Sprintf("string in %s:%d", rel, row(term)))
				}
				return false
			})
		case ".json", ".yaml", ".yml":
			var doc any
			if err := util.Unmarshal(src, &doc); err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			v, err := ast.InterfaceToValue(doc)
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			ast.WalkTerms(v, func(term *ast.Term) bool {
				if s, ok := term.Value.(ast.String); ok && snake.MatchString(string(s)) {
					add(string(s), "data in "+rel)
				}
				return false
			})
		}
	})
	// A call's operator is a ref too (x in y is internal.member_2): the
	// parts of builtin names are OPA's, not the policies'.
	for _, b := range ast.Builtins {
		for _, part := range strings.Split(b.Name, ".") {
			delete(names, part)
		}
	}
	walkFiles(t, filepath.Join(root, "policy_test", "fixtures"), func(path string, src []byte) {
		if filepath.Ext(path) != ".json" {
			return
		}
		rel, _ := filepath.Rel(root, path)
		var cases map[string]json.RawMessage
		if err := json.Unmarshal(src, &cases); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		for _, name := range slices.Sorted(maps.Keys(cases)) {
			add(name, "fixture case in "+rel)
		}
	})
	return names
}

func row(t *ast.Term) int {
	if t.Location == nil {
		return 0
	}
	return t.Location.Row
}

// walkFiles calls f with every regular file below dir.
func walkFiles(t *testing.T, dir string, f func(path string, src []byte)) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f(path, src)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
