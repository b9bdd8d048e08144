// Package golden compares what a test produces with a file under the
// test's testdata/ that the code itself wrote, so that an intended change of
// output is one command and a reviewed diff, and an unintended one fails:
//
//	go test ./server/ -run TestErrorDocuments -update
//
// The -update flag is registered by this package in every test binary that
// imports it.
package golden

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with what the code produces now")

// Check compares got with the golden file at path (relative to the test's
// package folder); with -update it writes got there instead.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
		return
	}
	hint := fmt.Sprintf("if the new output is right: go test ./%s -run '^%s$' -update, and review the diff of %s", pkgDir(), strings.SplitN(t.Name(), "/", 2)[0], path)
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, hint)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the output differs from %s:\n%s%s", path, Diff(want, got), hint)
	}
}

// Diff lists the lines that differ between want and got, with their line
// numbers, at most 20.
func Diff(want, got []byte) string {
	w := strings.Split(string(want), "\n")
	g := strings.Split(string(got), "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl == gl {
			continue
		}
		fmt.Fprintf(&b, "line %d:\n  golden: %s\n  now:    %s\n", i+1, wl, gl)
		shown++
	}
	return b.String()
}

// pkgDir is the test's package folder relative to the module root, for the
// command in the failure message.
func pkgDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "..."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, _ := filepath.Rel(dir, wd) // dir holds wd, both absolute: it cannot fail
			return filepath.ToSlash(rel)
		}
		if filepath.Dir(dir) == dir {
			return "..."
		}
	}
}

var (
	uuidRE     = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	revisionRE = regexp.MustCompile(`("policy_revision": ?)"[0-9a-f]+"`)
)

// Mask replaces what differs from run to run in Arbiter's answers: decision
// ids (UUIDs) by <uuid>, policy revisions by <revision>, and dir, a
// temporary folder the test made, by $DIR.
func Mask(b []byte, dir string) []byte {
	b = uuidRE.ReplaceAll(b, []byte("<uuid>"))
	b = revisionRE.ReplaceAll(b, []byte(`$1"<revision>"`))
	if dir != "" {
		b = bytes.ReplaceAll(b, []byte(dir), []byte("$DIR"))
	}
	return b
}
