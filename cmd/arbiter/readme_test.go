package main

import (
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// docBlock returns the first fenced block right under a heading of a
// Markdown file (a path from the repository's root).
func docBlock(t *testing.T, file, heading string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(text), heading+"\n\n```\n")
	if !ok {
		t.Fatalf("%s has no block under %q", file, heading)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// TestReadmeLayout: the layout block of docs/ARCHITECTURE.md (the README
// links it) has one line per folder, and
// every Go package of the repository (every folder holding .go files,
// testdata aside) has exactly one line there; every folder it names exists.
func TestReadmeLayout(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	listed := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(docBlock(t, "docs/ARCHITECTURE.md", "## Layout"), "\n"), "\n") {
		dir, _, _ := strings.Cut(line, " ")
		if dir == "" || !strings.HasSuffix(dir, "/") {
			t.Errorf("layout line %q: want one line per folder, starting with the folder and /", line)
			continue
		}
		listed[dir]++
		if st, err := os.Stat(filepath.Join(root, dir)); err != nil || !st.IsDir() {
			t.Errorf("the layout names %s, which is no folder here", dir)
		}
	}
	packages := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata", "bin", "var":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			packages[filepath.ToSlash(rel)+"/"] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range slices.Sorted(maps.Keys(packages)) {
		if n := listed[pkg]; n != 1 {
			t.Errorf("the package %s has %d lines in the layout of docs/ARCHITECTURE.md, want 1", pkg, n)
		}
	}
	for dir, n := range listed {
		if n > 1 && !packages[dir] {
			t.Errorf("%s has %d lines in the layout of docs/ARCHITECTURE.md, want 1", dir, n)
		}
	}
}

// TestReadmeStockOPATest: the command the README gives an OPA user for the
// Rego tests, run with the stock opa binary (OPA_BIN, set by make test)
// from the repository's root, runs more than zero tests and passes. (`opa
// test policies` passes too, silently, having run none: the tests live in
// policy_test/.)
func TestReadmeStockOPATest(t *testing.T) {
	t.Parallel()
	bin := os.Getenv("OPA_BIN")
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("OPA_BIN is not set: run through `make test`")
		}
		t.Skip("OPA_BIN not set (make test sets it to the stock opa binary)")
	}
	text, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, line := range strings.Split(string(text), "\n") {
		if cmd, ok := strings.CutPrefix(strings.TrimPrefix(line, "bin/"), "opa test "); ok {
			cmd, _, _ = strings.Cut(cmd, "#")
			args = append([]string{"test"}, strings.Fields(cmd)...)
			break
		}
	}
	if args == nil {
		t.Fatal("the README has no line starting `bin/opa test ` or `opa test `")
	}
	cmd := exec.Command(bin, append(args, "--format", "json")...)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("opa %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var results []json.RawMessage
	if err := json.Unmarshal(out, &results); err != nil || len(results) == 0 {
		t.Fatalf("opa %s ran %d tests (%v):\n%s", strings.Join(args, " "), len(results), err, out)
	}
	t.Logf("opa %s: %d tests", strings.Join(args, " "), len(results))
}
