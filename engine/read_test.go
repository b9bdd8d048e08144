package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/internal/wait"
)

// TestLoadReadsOnlyRegularFiles: a FIFO (which blocks a reader forever) and
// a symlink to /dev/zero (which never ends) with policy extensions are
// skipped and reported; the candidate loads from the rest.
func TestLoadReadsOnlyRegularFiles(t *testing.T) {
	root := copyTree(t, quota)
	pol := filepath.Join(root, "policies")
	if err := syscall.Mkfifo(filepath.Join(pol, "blocked.rego"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(pol, "zero.json")); err != nil {
		t.Fatal(err)
	}
	var snap *Snapshot
	var err error
	wait.Within(t, "Load with a FIFO and /dev/zero in the policies", func() { snap, err = Load(context.Background(), quotaConfig(root)) })
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range snap.Skipped {
		got[filepath.Base(s.File)] = s.Reason
	}
	if len(got) != 2 || !strings.Contains(got["blocked.rego"], "not a regular file") || !strings.Contains(got["zero.json"], "not a regular file") {
		t.Errorf("skipped = %+v, want blocked.rego and zero.json as not regular files", snap.Skipped)
	}
	// arbiter check tells the engineer before it ships.
	var probs []Problem
	wait.Within(t, "Check", func() { probs, _ = Check(context.Background(), quotaConfig(root), "") })
	if n := strings.Count(problemLines(probs), "skipped: not a regular file"); n != 2 {
		t.Errorf("check reports %d skipped files, want 2:\n%s", n, problemLines(probs))
	}
}

// problemLines joins problems one a line, for messages.
func problemLines(p []Problem) string {
	var b strings.Builder
	for _, x := range p {
		b.WriteString(x.String() + "\n")
	}
	return b.String()
}

// TestLoadCapsFileSize: a file over the cap is a problem naming it, never
// read whole and never silently left out.
func TestLoadCapsFileSize(t *testing.T) {
	root := copyTree(t, quota)
	big := filepath.Join(root, "policies", "big.json")
	if err := os.WriteFile(big, []byte(`{"pad":"`+strings.Repeat("x", 4096)+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := quotaConfig(root)
	cfg.MaxFileBytes = 4096
	probs := loadProblems(t, cfg)
	if len(probs) != 1 || probs[0].File != big || !strings.Contains(probs[0].Message, "over the limit of 4096 bytes") {
		t.Errorf("problems = %v, want one naming %s", probs, big)
	}
	cfg.MaxFileBytes = 8192
	mustLoad(t, cfg)
}

// TestGateUsesItsOwnTimeout: the reload gate's fixtures run under
// TestTimeout, so a request deadline too short for a busy machine (here:
// one nanosecond) cannot refuse a good candidate. The repository's own
// policies, so that each fixture's evaluation outlasts the nanosecond.
func TestGateUsesItsOwnTimeout(t *testing.T) {
	cfg := Config{Policies: "../policies", Schemas: "../schemas", Tests: repoTests, EvalTimeout: time.Nanosecond}
	snap, err := Load(context.Background(), cfg)
	if err != nil {
		t.Fatalf("the gate used the request deadline: %v", err)
	}
	if !snap.Gated {
		t.Error("a Snapshot that passed the gate is not marked Gated")
	}
	// The Snapshot itself keeps the request deadline.
	if snap.timeout != time.Nanosecond {
		t.Errorf("the Snapshot's evaluation deadline is %s, want the configured 1ns", snap.timeout)
	}
}
