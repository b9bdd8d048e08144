package main

import (
	"fmt"
	"go/build"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocLinks: every relative link of README.md and docs/*.md points to a
// file that exists and, with a #fragment into a Markdown file, to one of
// its headings, so that moving a section cannot leave a link behind.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	checked := 0
	for _, file := range docFiles(t, root) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range markdownLinks(string(text)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s links to %s, which does not exist", rel(root, file), target)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			dtext, err := os.ReadFile(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(headingAnchors(string(dtext)), frag) {
				t.Errorf("%s links to %s: %s has no heading #%s", rel(root, file), target, rel(root, dest), frag)
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no relative link to check")
	}
}

// docFiles are the Markdown files the doc tests read: docs/*.md and the
// README.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(files, filepath.Join(root, "README.md"))
}

func rel(root, path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(r)
}

var (
	linkRE       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpanRE   = regexp.MustCompile("`[^`\n]*`")
	anchorDropRE = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// markdownLinks lists the targets of the inline links and images of a
// Markdown text, outside fenced blocks and code spans.
func markdownLinks(text string) []string {
	var out []string
	for _, line := range proseLines(text) {
		for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(line, ""), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// headingAnchors lists the anchors GitHub gives the headings of a Markdown
// text: lower case, punctuation dropped, spaces as hyphens, a repeated one
// suffixed -1, -2, ...
func headingAnchors(text string) []string {
	var out []string
	count := map[string]int{}
	for _, line := range proseLines(text) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := strings.ReplaceAll(anchorDropRE.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		if n := count[a]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", a, n))
		} else {
			out = append(out, a)
		}
		count[a]++
	}
	return out
}

// proseLines is the lines of a Markdown text outside fenced code blocks.
func proseLines(text string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// TestArchitectureImports: docs/ARCHITECTURE.md's list of arrows is
// exactly the imports between the repository's packages (test files
// aside, as go/build reads them), and every arrow of its diagram is one of
// them.
func TestArchitectureImports(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(mod), "\n")
	module := strings.TrimSpace(strings.TrimPrefix(first, "module")) + "/"

	actual := map[string][]string{} // package -> the repository's packages it imports
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		switch d.Name() {
		case ".git", "node_modules", "testdata", "bin", "var":
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		var deps []string
		for _, imp := range pkg.Imports {
			if dep, ok := strings.CutPrefix(imp, module); ok {
				deps = append(deps, dep)
			}
		}
		if len(deps) > 0 {
			actual[rel(root, path)] = deps
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(actual) == 0 {
		t.Fatal("found no import between the repository's packages")
	}

	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSuffix(markdownBlock(t, string(doc), "imports another of the repository", "```\n"), "\n"), "\n") {
		pkg, deps, ok := strings.Cut(line, "->")
		pkg = strings.TrimSpace(pkg)
		if !ok || pkg == "" {
			t.Errorf("docs/ARCHITECTURE.md: arrow line %q: want PACKAGE -> IMPORTS", line)
			continue
		}
		if _, dup := listed[pkg]; dup {
			t.Errorf("docs/ARCHITECTURE.md lists %s twice", pkg)
		}
		listed[pkg] = strings.Fields(deps)
	}
	for _, pkg := range slices.Sorted(maps.Keys(actual)) {
		want := slices.Sorted(slices.Values(actual[pkg]))
		if got, ok := listed[pkg]; !ok {
			t.Errorf("docs/ARCHITECTURE.md lacks the line %s -> %s", pkg, strings.Join(want, " "))
		} else if !slices.Equal(slices.Sorted(slices.Values(got)), want) {
			t.Errorf("docs/ARCHITECTURE.md: %s -> %s; the code: %s -> %s", pkg, strings.Join(got, " "), pkg, strings.Join(want, " "))
		}
	}
	for pkg := range listed {
		if _, ok := actual[pkg]; !ok {
			t.Errorf("docs/ARCHITECTURE.md lists %s, which imports none of the repository's packages", pkg)
		}
	}

	arrows := mermaidArrowRE.FindAllStringSubmatch(markdownBlock(t, string(doc), "## The packages and their arrows", "```mermaid\n"), -1)
	if len(arrows) == 0 {
		t.Fatal("docs/ARCHITECTURE.md's diagram has no arrow")
	}
	for _, a := range arrows {
		if !slices.Contains(actual[a[1]], a[2]) {
			t.Errorf("docs/ARCHITECTURE.md draws %s --> %s, but %s does not import %s", a[1], a[2], a[1], a[2])
		}
	}
}

var mermaidArrowRE = regexp.MustCompile(`\w+\["([^"]+)"\]\s*-->\s*\w+\["([^"]+)"\]`)

// markdownBlock returns the first fenced block that opens with fence after
// the text after.
func markdownBlock(t *testing.T, doc, after, fence string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, after)
	if ok {
		_, rest, ok = strings.Cut(rest, fence)
	}
	if !ok {
		t.Fatalf("no %q block after %q", strings.TrimSpace(fence), after)
	}
	block, _, _ := strings.Cut(rest, "```")
	return block
}

// TestDocTestCommands: every `go test ... -run PATTERN ./pkg/` of README.md
// and docs/*.md names tests that exist: each alternative of the pattern's
// top level matches a test, fuzz target or example of one of the packages
// given (a renamed or moved test would leave the command matching nothing,
// and go test still says ok).
func TestDocTestCommands(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	testFunc := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Example)\w*)\(`)
	namesIn := func(pkg string) []string {
		var names []string
		tests, _ := filepath.Glob(filepath.Join(root, pkg, "*_test.go"))
		for _, f := range tests {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
				names = append(names, m[1])
			}
		}
		return names
	}
	command := regexp.MustCompile(`go test [^\x60\n]*?-run[ =]('[^']*'|"[^"]*"|\S+)([^\x60\n#]*)`)
	checked := 0
	for _, file := range docFiles(t, root) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range command.FindAllStringSubmatch(string(text), -1) {
			pattern := strings.Trim(m[1], `'"`)
			var pkgs []string
			for _, f := range strings.Fields(m[0]) {
				if strings.HasPrefix(f, "./") && !strings.Contains(f, "...") {
					pkgs = append(pkgs, strings.Trim(f, "./"))
				}
			}
			if pattern == "^$" || len(pkgs) == 0 {
				continue
			}
			var names []string
			for _, p := range pkgs {
				names = append(names, namesIn(p)...)
			}
			top, _, _ := strings.Cut(pattern, "/") // what follows a slash names subtests
			for _, alt := range topLevelAlternatives(top) {
				re, err := regexp.Compile(alt)
				if err != nil {
					t.Errorf("%s: %q: %v", filepath.Base(file), m[0], err)
					continue
				}
				checked++
				if !slices.ContainsFunc(names, re.MatchString) {
					t.Errorf("%s: %q: %q matches no test of %v", filepath.Base(file), m[0], alt, pkgs)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("%d test names checked in the docs' commands, want the 50 and more they hold", checked)
	}
}

// topLevelAlternatives splits a regexp at the | outside parentheses.
func topLevelAlternatives(re string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range re {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case '|':
			if depth == 0 {
				out = append(out, re[start:i])
				start = i + 1
			}
		}
	}
	return append(out, re[start:])
}
