package main

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readmeBlock returns the first fenced block after the README's heading.
func readmeBlock(t *testing.T, heading string) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), heading+"\n\n```\n")
	if !ok {
		t.Fatalf("README.md has no block under %q", heading)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// TestReadmeCommandLine: the README's command-line block shows each
// command with the flags of the usage text (serve's flags have their own
// table there, as its usage defers to -h).
func TestReadmeCommandLine(t *testing.T) {
	block := readmeBlock(t, "## Command line")
	documented := synopses(strings.ReplaceAll("\n"+block, "\narbiter ", "\n  arbiter "))
	for name, synopsis := range usageSynopses(t) {
		doc, ok := documented[name]
		if !ok {
			t.Errorf("README.md's command-line block lacks arbiter %s", name)
			continue
		}
		if strings.Contains(synopsis, "-h for every flag") {
			continue
		}
		if got, want := synopsisFlags(doc), synopsisFlags(synopsis); !maps.Equal(got, want) {
			t.Errorf("README.md shows arbiter %s with %v, the usage text with %v", name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
	}
}

// TestReadmeLayout: the README's layout block has one line per folder, and
// every Go package of the repository (every folder holding .go files,
// testdata aside) has exactly one line there; every folder it names exists.
func TestReadmeLayout(t *testing.T) {
	root := filepath.Join("..", "..")
	listed := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(readmeBlock(t, "## Layout"), "\n"), "\n") {
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
			t.Errorf("the package %s has %d lines in the README's layout, want 1", pkg, n)
		}
	}
	for dir, n := range listed {
		if n > 1 && !packages[dir] {
			t.Errorf("%s has %d lines in the README's layout, want 1", dir, n)
		}
	}
}
