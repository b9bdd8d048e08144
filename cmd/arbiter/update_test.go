package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/internal/golden"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

// TestTestUpdate: an intended edit (the diff corpus's budget +1 and -1,
// on its frozen copy of the policies and fixtures) fails fixtures; `arbiter
// test --update` re-records them, printing each change field by field
// (golden), and rewrites only their want_result members: every note and
// input, and every other fixture file, stays byte for byte. On stderr it
// names each re-recorded fixture whose name or note repeats words of its
// old result that the new one lacks (golden: the words come from the
// results, so which fixtures are named is the engine's to say). Then
// `arbiter test` passes, and a second --update changes nothing.
func TestTestUpdate(t *testing.T) {
	t.Parallel()
	for _, edit := range []string{"budget_plus_one", "budget_minus_one"} {
		t.Run(edit, func(t *testing.T) {
			t.Parallel()
			testUpdate(t, edit)
		})
	}
}

// editedBase copies the diff corpus's frozen base to a temporary folder,
// applies the corpus's edit there, and returns the folder and the
// arguments that point arbiter test at it.
func editedBase(t *testing.T, edit string) (string, []string) {
	t.Helper()
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("../../diff/testdata/base")); err != nil {
		t.Fatal(err)
	}
	var e struct {
		Edits []struct{ File, Old, New string } `json:"edits"`
	}
	testfiles.ReadJSON(t, filepath.Join("../../diff/testdata/edits", edit, "edit.json"), &e)
	for _, x := range e.Edits {
		testfiles.Edit(t, filepath.Join(root, x.File), x.Old, x.New)
	}
	return root, []string{"--policies", filepath.Join(root, "policies"), "--schemas", filepath.Join(root, "schemas"), "--tests", filepath.Join(root, "policy_test")}
}

func testUpdate(t *testing.T, edit string) {
	root, args := editedBase(t, edit)
	before := readTree(t, filepath.Join(root, "policy_test"))

	if out, _, code := runCLI(t, nil, append([]string{"test"}, args...)...); code != exitError {
		t.Fatalf("test after the edit: exit %d, want 1\n%s", code, out)
	}
	out, stderr, code := runCLI(t, nil, append([]string{"test", "--update"}, args...)...)
	if code != exitOK {
		t.Fatalf("test --update: exit %d\n%s%s", code, out, stderr)
	}
	golden.Check(t, "testdata/update/"+edit+".txt", golden.Mask([]byte(out), root))
	golden.Check(t, "testdata/update/"+edit+".stderr.txt", golden.Mask([]byte(stderr), root))

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
	if out, stderr, code := runCLI(t, nil, append([]string{"test", "--update"}, args...)...); code != exitOK || !strings.Contains(out, "updated 0 fixtures") || stderr != "" {
		t.Errorf("a second --update: exit %d\n%s%s", code, out, stderr)
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
	testUpdateJSON(t, edit, out, golden.Mask([]byte(stderr), root))
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

// testUpdateJSON: --update --format json on another copy with the same
// edit writes one JSON document on stdout, whose "update" holds the fixtures
// the text run re-recorded, each with the stale words the text run named
// on stderr; its stderr is the text run's.
func testUpdateJSON(t *testing.T, edit, textOut string, textErr []byte) {
	root, args := editedBase(t, edit)
	out, stderr, code := runCLI(t, nil, append([]string{"test", "--update", "--format", "json"}, args...)...)
	if code != exitOK {
		t.Fatalf("test --update --format json: exit %d\n%s%s", code, out, stderr)
	}
	if got := golden.Mask([]byte(stderr), root); string(got) != string(textErr) {
		t.Errorf("stderr with --format json differs from the text run's:\n%s", golden.Diff(textErr, got))
	}
	var rep struct {
		Results []json.RawMessage `json:"results"`
		Update  struct {
			Updated []struct {
				Name  string   `json:"name"`
				Diff  string   `json:"diff"`
				Stale []string `json:"stale_words"`
			} `json:"updated"`
			NotUpdated []json.RawMessage `json:"not_updated"`
		} `json:"update"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, out)
	}
	if len(rep.Results) == 0 {
		t.Error("the JSON report has no test results")
	}
	stale := 0
	for _, c := range rep.Update.Updated {
		if !strings.Contains(textOut, "updated "+c.Name+" (") || c.Diff == "" {
			t.Errorf("JSON: %s (diff %q) is not a change the text run printed", c.Name, c.Diff)
		}
		if len(c.Stale) == 0 {
			if strings.Contains(string(textErr), " "+c.Name+" (") {
				t.Errorf("JSON: %s has no stale words; the text run named it", c.Name)
			}
			continue
		}
		stale++
		line := ""
		for _, l := range strings.Split(string(textErr), "\n") {
			if strings.Contains(l, " "+c.Name+" (") {
				line = l
			}
		}
		for _, w := range c.Stale {
			if !strings.Contains(line, strconv.Quote(w)) {
				t.Errorf("JSON: %s is stale for %q; the text run's stderr says %q", c.Name, w, line)
			}
		}
	}
	if n := countLines(textOut, func(l string) bool { return strings.HasPrefix(l, "updated ") && strings.HasSuffix(l, "):") }); len(rep.Update.Updated) != n {
		t.Errorf("JSON lists %d re-recorded fixtures, the text run %d", len(rep.Update.Updated), n)
	}
	if n := countLines(string(textErr), func(l string) bool { return strings.HasSuffix(l, ": reword it") }); stale != n || n == 0 {
		t.Errorf("JSON has %d fixtures with stale words, the text run's stderr names %d (this edit must name some)", stale, n)
	}
}

// countLines counts the lines of s that match.
func countLines(s string, match func(string) bool) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if match(l) {
			n++
		}
	}
	return n
}
