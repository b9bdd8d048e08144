package live

import (
	"context"
	"testing"

	"github.com/arbiter-dev/arbiter/engine"
)

// The repository's own policies, schemas and tests.
var repoWithTests = engine.Config{Policies: "../../policies", Schemas: "../../schemas", Tests: "../../policy_test"}

// An Engine with no Snapshot takes its first one from Activate, keeps it
// when a candidate fails, and reports both; Reload answers the last
// activation.
func TestPushedEngineActivate(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, engine.Config{}, Pushed())
	if err != nil || e.Snapshot() != nil {
		t.Fatalf("a pushed engine starts with a snapshot: %v", err)
	}
	fs, err := engine.ReadFolders(repoWithTests)
	if err != nil {
		t.Fatal(err)
	}
	fs.Revision = "one"
	st, err := e.Activate(ctx, "bundle", Files("bundle b", fs))
	if err != nil || !st.OK || !st.Changed || e.Snapshot() == nil || e.Snapshot().Revision != "one" || st.Origin != "bundle b" || e.Snapshot().Origin != "bundle b" {
		t.Fatalf("first activation: %v %+v", err, st)
	}
	bad := fs
	bad.Revision, bad.Schemas = "two", nil
	st, err = e.Activate(ctx, "bundle", Files("bundle b", bad))
	if err == nil || st.OK || len(st.Problems) == 0 || e.Snapshot().Revision != "one" || st.Revision != "one" {
		t.Fatalf("a failed candidate: %+v, serving %s", st, e.Snapshot().Revision)
	}
	if re := e.Reload(ctx, "api"); re.Trigger != "bundle" || re.OK {
		t.Fatalf("a reload of a pushed engine = %+v, want the last activation", re)
	}
	st, err = e.Activate(ctx, "bundle", Files("bundle b", fs))
	if err != nil || !st.OK || st.Changed {
		t.Fatalf("the same revision again: %+v", st)
	}
	if ok, failed := e.ReloadCounts(); ok != 2 || failed != 1 {
		t.Fatalf("counts ok=%d failed=%d, want 2 and 1", ok, failed)
	}
	// After Close nothing goes live, from a bundle or a promotion alike:
	// the stop lets go of the state folder an activation saves into.
	e.Close()
	other := fs
	other.Revision = "three"
	if st, err = e.Activate(ctx, "bundle", Files("bundle b", other)); err == nil || st.OK || e.Snapshot().Revision != "one" {
		t.Fatalf("an activation after Close: %v %+v, serving %s", err, st, e.Snapshot().Revision)
	}
}
