package live

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/engine"
)

// One gate judges every candidate: a check that refuses holds back a
// reload, a pushed revision, a shadow candidate and a promotion alike, and
// the live revision keeps serving. A check sees the revision it would
// replace.
func TestGateJudgesEverySource(t *testing.T) {
	ctx := context.Background()
	live := copyTree(t, quota)
	refuse := false
	var judged []string
	check := func(_ context.Context, cand, cur *engine.Snapshot) error {
		if cur != nil {
			judged = append(judged, cur.Revision+">"+cand.Revision)
		}
		if refuse {
			return errors.New("refused by the check")
		}
		return nil
	}
	e, err := New(ctx, quotaConfig(live), WithChecks(check))
	if err != nil {
		t.Fatal(err)
	}
	first := e.Snapshot()
	if first.Origin != e.LastReload().Origin || !strings.Contains(first.Origin, live) {
		t.Fatalf("origin %q, status %+v", first.Origin, e.LastReload())
	}

	cand := copyTree(t, quota)
	editFile(t, filepath.Join(cand, "policies/decisions/quota_check/data.json"), `"limit": 10`, `"limit": 11`)
	candSrc := Folders(filepath.Join(cand, "policies"), filepath.Join(cand, "schemas"), "")
	fs, err := engine.ReadFolders(quotaConfig(cand))
	if err != nil {
		t.Fatal(err)
	}
	good, err := e.Judge(ctx, candSrc)
	if err != nil {
		t.Fatal(err)
	}
	editFile(t, filepath.Join(live, "policies/decisions/quota_check/data.json"), `"limit": 10`, `"limit": 12`)

	refuse = true
	if _, err := e.Judge(ctx, candSrc); err == nil {
		t.Error("Judge passed a candidate the check refuses")
	}
	refused := func(what string, st ReloadStatus) {
		t.Helper()
		if st.OK || st.Changed || e.Snapshot() != first || !strings.Contains(fmt.Sprint(st.Problems), "refused by the check") {
			t.Errorf("%s: %+v, serving %s", what, st, e.Snapshot().Revision)
		}
	}
	refused("reload", e.Reload(ctx, "test"))
	st, _ := e.Activate(ctx, "bundle", Files("bundle", fs))
	refused("pushed revision", st)
	st, _ = e.Activate(ctx, "promote", Promote(good, "sre", candSrc.Origin(), false))
	refused("promotion", st)
	if _, ok := e.Promoted(); ok {
		t.Error("a refused promotion is in effect")
	}

	refuse = false
	st, err = e.Activate(ctx, "promote", Promote(good, "sre", candSrc.Origin(), false))
	if err != nil || !st.OK || e.Snapshot() != good || st.Promotion == nil || st.Promotion.From != first.Revision {
		t.Fatalf("promotion: %v %+v", err, st)
	}
	if h := e.ReloadHistory(); len(h) != 5 || h[0].Trigger != "promote" || h[0].Promotion == nil || h[4].Trigger != "start" {
		t.Errorf("history %+v, want the promotion on the record", h)
	}
	if want := first.Revision + ">" + good.Revision; judged[len(judged)-1] != want {
		t.Errorf("the check judged %v, want last %s", judged, want)
	}
}
