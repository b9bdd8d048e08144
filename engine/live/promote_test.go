package live

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/arbiter-dev/arbiter/engine"
)

// A promotion holds while the configured source holds what it held when
// the candidate was promoted, and ends when the source changes.
func TestPromotionHoldsUntilTheSourceChanges(t *testing.T) {
	live := copyTree(t, quota)
	var activated []string
	eng, err := New(context.Background(), quotaConfig(live), OnActivate(func(s *engine.Snapshot) { activated = append(activated, s.Revision) }))
	if err != nil {
		t.Fatal(err)
	}
	source := eng.Snapshot()

	cand := copyTree(t, quota)
	editFile(t, filepath.Join(cand, "policies/decisions/quota_check/data.json"), `"limit": 10`, `"limit": 11`)
	candSnap := mustLoad(t, quotaConfig(cand))
	st, err := eng.Activate(context.Background(), "promote", Promote(candSnap, "sre", cand, false))
	if err != nil || st.Promotion == nil {
		t.Fatalf("promotion: %v, status %+v", err, st)
	}
	p := *st.Promotion
	if eng.Snapshot() != candSnap || p.From != source.Revision || p.SourceRevision != source.Revision || p.By != "sre" {
		t.Fatalf("promotion %+v, active %s", p, eng.Snapshot().Revision)
	}
	if got, ok := eng.Promoted(); !ok || got.Revision != candSnap.Revision {
		t.Fatalf("Promoted() = %+v, %v", got, ok)
	}
	if st := eng.LastReload(); st.Trigger != "promote" || st.Revision != candSnap.Revision {
		t.Errorf("last reload %+v", st)
	}

	// The source unchanged: a reload (a file event, SIGHUP) keeps it.
	st = eng.Reload(context.Background(), "test")
	if !st.OK || st.Changed || eng.Snapshot() != candSnap {
		t.Fatalf("a reload of the unchanged source: %+v, active %s", st, eng.Snapshot().Revision)
	}
	// So does the same revision from elsewhere (a bundle activation).
	fs, err := engine.ReadFolders(quotaConfig(live))
	if err != nil {
		t.Fatal(err)
	}
	st, _ = eng.Activate(context.Background(), "bundle", Files("", fs))
	if !st.OK || st.Changed || eng.Snapshot() != candSnap {
		t.Fatalf("the source's revision again: %+v", st)
	}

	// The source edited: its revision goes live, the promotion ends.
	editFile(t, filepath.Join(live, "policies/decisions/quota_check/data.json"), `"limit": 10`, `"limit": 12`)
	st = eng.Reload(context.Background(), "test")
	if !st.OK || !st.Changed || eng.Snapshot().Revision == candSnap.Revision || eng.Snapshot().Revision == source.Revision {
		t.Fatalf("a reload of the edited source: %+v", st)
	}
	if _, ok := eng.Promoted(); ok {
		t.Error("the promotion outlived a change of its source")
	}
	if len(activated) != 3 || activated[0] != source.Revision || activated[1] != candSnap.Revision || activated[2] != eng.Snapshot().Revision {
		t.Errorf("OnActivate saw %v", activated)
	}
}
