package live

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbiter-dev/arbiter/engine"
)

func TestSaveToAndFallback(t *testing.T) {
	root := copyTree(t, quota)
	cfg := quotaConfig(root)
	cfg.Tests = filepath.Join(root, "tests")
	good := mustLoad(t, cfg)
	state := t.TempDir()
	if err := good.SaveTo(state); err != nil {
		t.Fatal(err)
	}
	saved, ok := LastGood(state, cfg)
	if !ok {
		t.Fatal("nothing saved")
	}
	// The saved copy is the same content: the same revision, tests included.
	if again := mustJudge(t, saved); again.Revision != good.Revision || !again.Gated {
		t.Fatalf("saved copy loads as %s, want %s", again.Revision, good.Revision)
	}

	// Broken configured folders: the engine serves the saved revision and
	// reports why; fixing them activates them.
	policy := filepath.Join(root, "policies", "decisions", "quota_check", "policy.rego")
	editFile(t, policy, "reasons := [", "reasons := [[")
	var activated *engine.Snapshot
	e, err := New(context.Background(), cfg, Fallback(saved), OnActivate(func(s *engine.Snapshot) { activated = s }))
	if err != nil {
		t.Fatal(err)
	}
	if st := e.LastReload(); st.OK || st.Revision != good.Revision || len(st.Problems) < 2 {
		t.Fatalf("start status = %+v", st)
	}
	if _, err := e.Decide(context.Background(), "quota_check", []byte(`{"tenant":"t","used":1}`), engine.Options{}); err != nil {
		t.Fatal(err)
	}
	editFile(t, policy, "reasons := [[", "reasons := [")
	editFile(t, policy, "decision :=", "# Edited after the fallback.\ndecision :=")
	if st := e.Reload(context.Background(), "test"); !st.OK || !st.Changed || activated == nil || activated.Revision == good.Revision {
		t.Fatalf("reload after the fix = %+v", st)
	}

	// Saving the new revision flips current and keeps one older copy.
	if err := activated.SaveTo(state); err != nil {
		t.Fatal(err)
	}
	if again, _ := LastGood(state, cfg); mustJudge(t, again).Revision != activated.Revision {
		t.Error("current does not point at the newest save")
	}
	entries, _ := os.ReadDir(state)
	dirs := 0
	for _, en := range entries {
		if en.IsDir() {
			dirs++
		}
	}
	if dirs != 2 {
		t.Errorf("%d saved copies, want the current and the previous one", dirs)
	}

	// Without a saved copy, New's error stands.
	if _, ok := LastGood(t.TempDir(), cfg); ok {
		t.Error("an empty state folder has a saved copy")
	}
}

// mustJudge builds src's revision through the gate of an engine with no
// revision of its own.
func mustJudge(t *testing.T, src Source) *engine.Snapshot {
	t.Helper()
	e, _ := New(context.Background(), engine.Config{}, Pushed())
	snap, err := e.Judge(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}
