package decisionstore

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
)

// TestRefusalsAgree: the store's aggregate query and TallyRefusals (the
// ring's) chart the same refusals the same way, on the repository's
// fixtures decided by its policies (a refusal as the engine's Verdict
// reads it), over three replicas and four revisions, with a record of
// more reasons than a refusal counts, repeated, and names of markup: every
// bar, series and lumped "other" alike, under each filter and bound; and
// each series counts exactly the refusals that give its reason.
func TestRefusalsAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eng, err := live.New(ctx, engine.Config{Policies: "../policies", Schemas: "../schemas"})
	if err != nil {
		t.Fatal(err)
	}
	snap := eng.Snapshot()
	outcomeKey := func(decision string) string {
		v, _ := snap.Verdict(decision)
		return v.OutcomeKey
	}
	allow := map[string][]string{}
	for _, d := range snap.Decisions() {
		v, _ := snap.Verdict(d.Name)
		for _, a := range v.Allow {
			allow[d.Name] = append(allow[d.Name], fmt.Sprint(a))
		}
	}
	recs := fixtureRecords(t)
	for i := range recs {
		if i%4 != 0 {
			recs[i].rec.Revision += "-" + strconv.Itoa(i%4)
		}
	}
	// A hand-written refusal: more reasons than are counted, repeated,
	// and one that is markup.
	many := recs[len(recs)-1]
	many.rec.DecisionID += "-many"
	many.rec.Error = nil
	var rs []string
	for i := range MaxReasonsPerRefusal + 4 {
		rs = append(rs, fmt.Sprintf(`"r%d<b>"`, i%(MaxReasonsPerRefusal+2)))
	}
	many.rec.Result = []byte(`{"reasons":[` + strings.Join(rs, ",") + `]}`)
	recs = append(recs, many)

	url := cluster.DB(t)
	open(t, url)
	storeRecordsWith(t, url, recs, SinkConfig{OutcomeKey: outcomeKey})
	reader := NewReader(open(t, url).Pool())

	// Newest first, as the store orders them; each as a chart reads it.
	slices.SortFunc(recs, func(a, b stored) int {
		if c := b.rec.Time.Truncate(time.Microsecond).Compare(a.rec.Time.Truncate(time.Microsecond)); c != 0 {
			return c
		}
		return strings.Compare(b.rec.DecisionID, a.rec.DecisionID)
	})
	decisions := func(f Filter) func(func(Refusal) bool) {
		return func(yield func(Refusal) bool) {
			for _, s := range recs {
				if !matches(f, s) {
					continue
				}
				out, reasons := s.rec.Summary(outcomeKey(s.rec.Decision))
				code := ""
				if s.rec.Error != nil {
					code = s.rec.Error.Code
				}
				if !yield(Refusal{Time: s.rec.Time, Decision: s.rec.Decision, Revision: s.rec.Revision, Replica: s.replica, Outcome: out, ErrorCode: code, Reasons: reasons}) {
					return
				}
			}
		}
	}
	first, last := recs[len(recs)-1].rec.Time, recs[0].rec.Time
	whole := NewWindow(first.Add(-time.Minute), last.Add(time.Minute))
	half := NewWindow(first.Add(last.Sub(first)/2), last.Add(time.Second))
	cases := []struct {
		name string
		q    RefusalQuery
	}{
		{"every refusal", RefusalQuery{Window: whole}},
		{"two series, one group", RefusalQuery{Window: whole, Series: 2, Groups: 1}},
		{"the newest five", RefusalQuery{Window: whole, MaxRefusals: 5}},
		{"one decision", RefusalQuery{Window: whole, Filter: Filter{Decision: recs[0].rec.Decision}}},
		{"one replica", RefusalQuery{Window: whole, Filter: Filter{Replica: testReplicas[1]}}},
		{"a revision", RefusalQuery{Window: whole, Filter: Filter{Revision: recs[0].rec.Revision}}},
		{"half the window", RefusalQuery{Window: half}},
		{"no allowance known", RefusalQuery{Window: whole, Allow: map[string][]string{}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := c.q
			if q.Allow == nil {
				q.Allow = allow
			}
			got, err := reader.Refusals(ctxT(t), q)
			if err != nil {
				t.Fatal(err)
			}
			f := q.bounds().Filter
			want := TallyRefusals(q, decisions(f))
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("the store's chart differs from the ring's:\nstore %+v\nring  %+v", got, want)
			}
			if got.Refusals == 0 || len(got.Reasons) == 0 {
				t.Fatalf("no refusal charted: %+v", got)
			}
			if q.MaxRefusals == 0 {
				checkSeries(t, q, got, recs, f, outcomeKey, snap)
			} else if !got.More || got.Refusals != q.MaxRefusals {
				t.Errorf("bounded to %d: %d counted, more %v", q.MaxRefusals, got.Refusals, got.More)
			}
		})
	}
}

// checkSeries holds a chart against the records: its refusals are those
// the engine's Verdict does not allow, each series counts the refusals
// giving its reason, and each set of bars sums to the same.
func checkSeries(t *testing.T, q RefusalQuery, got Refusals, recs []stored, f Filter, outcomeKey func(string) string, snap *engine.Snapshot) {
	t.Helper()
	refusals, byReason := 0, map[string]int{}
	for _, s := range recs {
		if !matches(f, s) {
			continue
		}
		v, _ := snap.Verdict(s.rec.Decision)
		allowed, _ := v.Allows(s.rec.Result)
		if len(q.Allow) == 0 {
			allowed = false
		}
		if allowed && s.rec.Error == nil {
			continue
		}
		refusals++
		_, reasons := s.rec.Summary(outcomeKey(s.rec.Decision))
		switch {
		case s.rec.Error != nil:
			reasons = []string{s.rec.Error.Code}
		case len(reasons) == 0:
			reasons = []string{""} // none given
		}
		seen := map[string]bool{}
		for _, r := range reasons[:min(len(reasons), MaxReasonsPerRefusal)] {
			if !seen[r] {
				seen[r] = true
				byReason[r]++
			}
		}
	}
	if got.Refusals != refusals || got.More {
		t.Errorf("%d refusals charted (more: %v), want %d", got.Refusals, got.More, refusals)
	}
	sum := func(ts []Tally, s int) (n int) {
		for _, x := range ts {
			n += x.Counts[s]
		}
		return n
	}
	for i, r := range got.Reasons {
		if n := sum(got.Time, i); n != byReason[r] || sum(got.Revisions, i) != n || sum(got.Replicas, i) != n {
			t.Errorf("reason %q: %d over time, %d by revision, %d by replica; %d refusals give it", r, n, sum(got.Revisions, i), sum(got.Replicas, i), byReason[r])
		}
	}
	if got.OtherReasons != len(byReason)-len(got.Reasons) {
		t.Errorf("%d reasons lumped, want %d", got.OtherReasons, len(byReason)-len(got.Reasons))
	}
}

// TestNewWindow: a window is at most MaxBuckets buckets of a step that
// fits, from a multiple of the step to one, covering the range asked.
func TestNewWindow(t *testing.T) {
	at := time.Date(2026, 12, 6, 1, 23, 45, 678, time.UTC)
	for _, span := range []time.Duration{time.Second, 59 * time.Second, time.Hour, 25 * time.Hour, 400 * 24 * time.Hour} {
		w := NewWindow(at.Add(-span), at)
		if n := w.Buckets(); n < 1 || n > MaxBuckets || w.Since.After(at.Add(-span)) || w.Until.Before(at) ||
			!w.Since.Equal(w.Since.Truncate(w.Step)) || !w.Until.Equal(w.Until.Truncate(w.Step)) {
			t.Errorf("%v: window %v to %v by %v (%d buckets)", span, w.Since, w.Until, w.Step, n)
		}
	}
}
