package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestGateRemembersOnlyWhatPassed: a candidate that passed the gate is not
// judged again in this process, and the memory can never let anything else
// through: a failing test added, the failure gone again, a policy byte
// changed and another test timeout are each judged by what the gate reads.
func TestGateRemembersOnlyWhatPassed(t *testing.T) {
	root := copyTree(t, quota)
	cfg := quotaConfig(root)
	cfg.Tests = filepath.Join(root, "tests")
	ctx := context.Background()
	load := func() error { _, err := Load(ctx, cfg); return err }
	remembered := func() int {
		passed.mu.Lock()
		defer passed.mu.Unlock()
		return len(passed.keys)
	}

	if err := load(); err != nil {
		t.Fatalf("the copy does not pass its own gate: %v", err)
	}
	kept := remembered()
	if err := load(); err != nil || remembered() != kept {
		t.Fatalf("the same candidate again: %v, %d remembered after %d", err, remembered(), kept)
	}

	failing := filepath.Join(cfg.Tests, "zz_failing_test.rego")
	if err := os.WriteFile(failing, []byte("package zz_failing_test\n\ntest_fails if false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := load(); err == nil {
			t.Fatalf("load %d with a failing test passed the gate", i+1)
		}
	}
	if remembered() != kept {
		t.Errorf("a failed gate was remembered: %d after %d", remembered(), kept)
	}
	if err := os.Remove(failing); err != nil {
		t.Fatal(err)
	}
	if err := load(); err != nil || remembered() != kept {
		t.Fatalf("the passing candidate once more: %v, %d remembered after %d", err, remembered(), kept)
	}

	policy := firstRego(t, cfg.Policies)
	b, err := os.ReadFile(policy)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policy, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := load(); err != nil || remembered() != kept+1 {
		t.Fatalf("a policy byte changed: %v, %d remembered, want %d (judged anew)", err, remembered(), kept+1)
	}
	cfg.TestTimeout = DefaultTestTimeout + time.Second
	if err := load(); err != nil || remembered() != kept+2 {
		t.Fatalf("another test timeout: %v, %d remembered, want %d (judged anew)", err, remembered(), kept+2)
	}
}

// firstRego is the first .rego file under dir.
func firstRego(t *testing.T, dir string) string {
	t.Helper()
	var found string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && found == "" && filepath.Ext(path) == ".rego" {
			found = path
		}
		return err
	})
	if found == "" {
		t.Fatalf("no .rego file in %s", dir)
	}
	return found
}
