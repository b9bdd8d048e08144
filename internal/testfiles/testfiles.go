// Package testfiles edits and reads the copies of policy, data and schema files that
// tests make, as an engineer's editor would.
package testfiles

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// Edit replaces the first old by new in the file at path, writing a
// temporary file and renaming it over the original as editors do. It fails
// the test when old is absent, so that an edit that silently does nothing
// cannot make a test pass.
func Edit(t testing.TB, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s does not contain %q", path, old)
	}
	tmp := path + ".tmp~"
	if err := os.WriteFile(tmp, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// ReadJSON decodes the JSON file at path into v, failing the test when it
// cannot be read or decoded.
func ReadJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// CopyTree copies the folder src into a fresh temporary folder of t and
// returns it.
func CopyTree(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}
