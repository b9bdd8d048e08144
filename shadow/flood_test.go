package shadow

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
)

// Issue 18: a flood cannot starve the promotion gate. A live decision in
// flight holds the candidate's one worker paused on the first decision; the
// queue behind it fills, and the rest of the traffic is dropped, the one
// request the loosened candidate (the limit raised by one, in data) allows
// among it. Every decision the candidate judged is the same, yet the gate
// refuses while the dropped ones are not judged, and says how many there
// are; it still refuses while their records are not in the decision log.
// Once they are, a promotion judges them from it: the loosened candidate
// is refused for the request at the limit, a candidate that changes
// nothing is promoted.
func TestFloodedCandidateIsNotPromotedUnjudged(t *testing.T) {
	live := load(t, configOf(copyAccess(t)))
	loosened := copyAccess(t)
	edit(t, loosened, accessData, `"limit": 10`, `"limit": 11`)
	within, atLimit := traffic[0], traffic[1]
	const queue, flood = 4, 20
	for _, tc := range []struct {
		name     string
		cand     *engine.Snapshot
		promoted bool
	}{
		{"loosened", load(t, configOf(loosened)), false},
		{"unchanged", live, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "decisions.log")
			h := newHarness(t, live, Config{Rate: 1, Queue: queue, Workers: 1, CPU: 8, DecisionLog: logPath})
			h.sh.Set(candidate(tc.cand))

			h.sh.LiveStart()
			recs := []decisionlog.Record{h.serve(within)}
			waitStat(t, h.sh, "the worker paused on the first decision", func(s Stats) bool { return s.Paused == 1 })
			for range queue {
				recs = append(recs, h.serve(within))
			}
			loose := h.serve(atLimit) // the queue is full: dropped
			recs = append(recs, loose)
			for range flood {
				recs = append(recs, h.serve(within))
			}
			h.sh.LiveEnd()
			h.wait(t)
			if st := h.sh.Stats(); st.Judged != queue+1 || st.Dropped != flood+1 || h.results[loose.DecisionID] != nil {
				t.Fatalf("stats %+v, the request at the limit judged %+v: want %d judged and the rest dropped", st, h.results[loose.DecisionID], queue+1)
			}

			gate := Gate{MinDecisions: queue + 1, Forbidden: DefaultForbidden}
			activated := false
			promote := func() (Promotion, error) {
				return h.sh.Promote(context.Background(), PromoteOptions{Gate: gate, By: "sre"},
					func(context.Context, *Candidate, bool) (string, error) { activated = true; return live.Revision, nil })
			}
			rep, _ := h.sh.Report()
			if refusals := gate.Refusals(rep); rep.Total != queue+1 || rep.Dropped != flood+1 || rep.LaterJudged != 0 || len(refusals) != 1 {
				t.Errorf("before promotion: report %d judged, %d dropped, %d later judged; refusals %q", rep.Total, rep.Dropped, rep.LaterJudged, refusals)
			}
			p, err := promote()
			if !errors.Is(err, ErrRefused) || activated || p.Promoted {
				t.Fatalf("flooded, the records not in the log: promotion %v, activated %v, refusals %q", err, activated, p.Refusals)
			}
			if p.Report.Dropped != flood+1 || p.Report.LaterJudged != 0 || !strings.Contains(strings.Join(p.Refusals, "\n"), "not in the decision log") {
				t.Errorf("report %d dropped, %d later judged; refusals %q", p.Report.Dropped, p.Report.LaterJudged, p.Refusals)
			}

			lg, err := decisionlog.Open(decisionlog.Options{Path: logPath})
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range recs {
				lg.Log(rec)
			}
			if err := lg.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			p, err = promote()
			if p.Report.Total != queue+1+flood+1 || p.Report.Dropped != flood+1 || p.Report.LaterJudged != flood+1 {
				t.Errorf("after catching up: report %d judged, %d dropped, %d later judged", p.Report.Total, p.Report.Dropped, p.Report.LaterJudged)
			}
			if tc.promoted {
				if err != nil || !activated || !p.Promoted || len(p.Refusals) != 0 {
					t.Fatalf("every dropped decision judged the same: promotion %v, activated %v, refusals %q", err, activated, p.Refusals)
				}
				return
			}
			if !errors.Is(err, ErrRefused) || activated || len(p.Refusals) != 1 ||
				!strings.Contains(p.Refusals[0], string(RefuseToAllow)) || !strings.Contains(p.Refusals[0], loose.DecisionID) {
				t.Fatalf("the dropped request at the limit judged: promotion %v, activated %v, refusals %q; want refuse_to_allow naming %s", err, activated, p.Refusals, loose.DecisionID)
			}
		})
	}
}
