package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/arbiter-dev/arbiter/internal/golden"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

// quotaSide copies the quota test decision (engine/testdata/quota) to
// root, its result schema saying that allow: true allows.
func quotaSide(t *testing.T, root string) {
	t.Helper()
	if err := os.CopyFS(root, os.DirFS("../../engine/testdata/quota")); err != nil {
		t.Fatal(err)
	}
	testfiles.Edit(t, filepath.Join(root, "schemas", "quota_check", "result.json"), `"x-arbiter-outcome": "allow",`, `"x-arbiter-outcome": "allow", "x-arbiter-allow": [true],`)
}

// TestDiffCommand: arbiter diff proves an unchanged revision changes
// nothing (exit 0), finds the input a raised limit newly allows (exit 1,
// the example in the text output with its fields marked), and exits 2 on
// bad arguments.
func TestDiffCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old, new := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	quotaSide(t, old)
	quotaSide(t, new)
	tests := []string{"--tests", filepath.Join(old, "tests")}

	out, stderr, code := runCLI(t, nil, append(append([]string{"diff"}, tests...), old, new)...)
	if code != exitOK {
		t.Fatalf("same revision: exit %d, want 0\n%s%s", code, out, stderr)
	}
	golden.Check(t, "testdata/diff/same.txt", golden.Mask([]byte(out), dir))

	testfiles.Edit(t, filepath.Join(new, "policies", "decisions", "quota_check", "data.json"), `"limit": 10`, `"limit": 11`)
	out, stderr, code = runCLI(t, nil, append(append([]string{"diff"}, tests...), old, new)...)
	if code != exitError {
		t.Fatalf("raised limit: exit %d, want 1\n%s%s", code, out, stderr)
	}
	golden.Check(t, "testdata/diff/raised_limit.txt", golden.Mask([]byte(out), dir))
	out, _, code = runCLI(t, nil, append(append([]string{"diff", "--format", "json"}, tests...), old, new)...)
	if code != exitError {
		t.Fatalf("raised limit, json: exit %d, want 1", code)
	}
	golden.Check(t, "testdata/diff/raised_limit.json", golden.Mask([]byte(out), dir))

	if _, _, code := runCLI(t, nil, "diff", old); code != exitInput {
		t.Errorf("one side: exit %d, want 2", code)
	}
}
