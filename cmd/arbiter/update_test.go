package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/internal/golden"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

// TestTestUpdate: an intended edit (the diff corpus's budget +1, on its
// frozen copy of the policies and fixtures) fails fixtures; `arbiter test
// --update` re-records them, printing each change field by field (golden),
// and rewrites only their want_result members: every note and input, and
// every other fixture file, stays byte for byte. Then `arbiter test`
// passes, and a second --update changes nothing.
func TestTestUpdate(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("../../diff/testdata/base")); err != nil {
		t.Fatal(err)
	}
	var e struct {
		Edits []struct{ File, Old, New string } `json:"edits"`
	}
	testfiles.ReadJSON(t, "../../diff/testdata/edits/budget_plus_one/edit.json", &e)
	for _, x := range e.Edits {
		testfiles.Edit(t, filepath.Join(root, x.File), x.Old, x.New)
	}
	before := readTree(t, filepath.Join(root, "policy_test"))
	args := []string{"--policies", filepath.Join(root, "policies"), "--schemas", filepath.Join(root, "schemas"), "--tests", filepath.Join(root, "policy_test")}

	if out, _, code := runCLI(t, nil, append([]string{"test"}, args...)...); code != exitError {
		t.Fatalf("test after the edit: exit %d, want 1\n%s", code, out)
	}
	out, stderr, code := runCLI(t, nil, append([]string{"test", "--update"}, args...)...)
	if code != exitOK {
		t.Fatalf("test --update: exit %d\n%s%s", code, out, stderr)
	}
	golden.Check(t, "testdata/update/budget_plus_one.txt", golden.Mask([]byte(out), root))

	after := readTree(t, filepath.Join(root, "policy_test"))
	for file, old := range before {
		if strings.Contains(out, filepath.Base(file)+")") {
			sameButWants(t, file, old, after[file])
		} else if after[file] != old {
			t.Errorf("%s changed, but no fixture of it was updated", file)
		}
	}
	if out, _, code := runCLI(t, nil, append([]string{"test"}, args...)...); code != exitOK {
		t.Errorf("test after --update: exit %d\n%s", code, out)
	}
	if out, _, code := runCLI(t, nil, append([]string{"test", "--update"}, args...)...); code != exitOK || !strings.Contains(out, "updated 0 fixtures") {
		t.Errorf("a second --update: exit %d\n%s", code, out)
	}
	if again := readTree(t, filepath.Join(root, "policy_test")); len(again) != len(after) {
		t.Error("a second --update changed the files")
	} else {
		for f, b := range after {
			if again[f] != b {
				t.Errorf("a second --update rewrote %s", f)
			}
		}
	}
}

// readTree reads every file below dir, by path.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameButWants fails unless the fixture files old and new hold the same
// cases, in the same order, each with the same members but want_result,
// byte for byte, and the lines outside the want_results unchanged.
func sameButWants(t *testing.T, file, old, new string) {
	t.Helper()
	var o, n map[string]map[string]json.RawMessage
	if json.Unmarshal([]byte(old), &o) != nil || json.Unmarshal([]byte(new), &n) != nil || len(o) != len(n) {
		t.Fatalf("%s: the cases differ after --update", file)
	}
	for name, oc := range o {
		nc := n[name]
		for k, v := range oc {
			if k != "want_result" && string(nc[k]) != string(v) {
				t.Errorf("%s: %s/%s changed: %s -> %s", file, name, k, v, nc[k])
			}
		}
		if len(nc) != len(oc) {
			t.Errorf("%s: %s has other members after --update", file, name)
		}
	}
	if outsideWants(old) != outsideWants(new) {
		t.Errorf("%s: text outside the want_results changed", file)
	}
}

// outsideWants is a fixture file's text with every want_result value cut
// out (up to the case's closing line).
func outsideWants(s string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.SplitAfter(s, "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), `"want_result"`):
			in = true
		case in && (line == "  },\n" || line == "  }\n"):
			in = false
		}
		if !in {
			b.WriteString(line)
		}
	}
	return b.String()
}
