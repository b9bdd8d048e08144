package ui

import (
	"encoding/json"
	"html"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/shadow"
)

var segRE = regexp.MustCompile(`<rect class="[^"]*" x="[^"]*" y="[^"]*" width="[^"]*" height="[^"]*" data-count="(\d+)" (?:data-other="\d+"|data-reason="([^"]*)")`)

// chartCounts sums, per reason ("" for "other"), the segments of one
// chart of a page.
func chartCounts(t *testing.T, body, id string) map[string]int {
	t.Helper()
	start := strings.Index(body, `<figure class="chart" id="`+id+`"`)
	if start < 0 {
		t.Fatalf("no chart %s:\n%s", id, body)
	}
	end := strings.Index(body[start:], "</figure>")
	got := map[string]int{}
	for _, m := range segRE.FindAllStringSubmatch(body[start:start+end], -1) {
		n, _ := strconv.Atoi(m[1])
		got[html.UnescapeString(m[2])] += n
	}
	return got
}

// TestChartsCountTheRingsRefusals: without a store the charts count the
// ring's refusals (as the engine's Verdict reads them) by reason: over
// time, per revision and per replica the same counts; a reason of markup
// is text; the page says its source and window; a decision filter
// narrows them; and with the store down, the ring is charted, said.
func TestChartsCountTheRingsRefusals(t *testing.T) {
	h := newHarness(t, Config{})
	for i := range 50 { // the most frequent reason
		hostile := h.all[0].rec
		hostile.DecisionID, hostile.Result = "hostile-"+strconv.Itoa(i), json.RawMessage(`{"reasons":["<script>alert(1)</script>"]}`)
		h.ring.Add(hostile)
	}

	want := func(decision string) (map[string]int, int) {
		counts, total := map[string]int{}, 0
		for _, e := range h.ring.Query(Filter{Decision: decision}, 0, 1<<20).Entries {
			v, _ := h.eng.Snapshot().Verdict(e.Record.Decision)
			if ok, _ := v.Allows(e.Record.Result); ok {
				continue
			}
			seen := map[string]bool{}
			for _, r := range e.Reasons[:min(len(e.Reasons), decisionstore.MaxReasonsPerRefusal)] {
				if !seen[r] {
					seen[r] = true
					counts[r]++
					total++
				}
			}
			if len(e.Reasons) == 0 {
				counts[""]++
				total++
			}
		}
		return counts, total
	}
	for _, decision := range []string{"", h.all[0].rec.Decision} {
		status, body := h.get(t, "/ui/charts?decision="+url.QueryEscape(decision))
		if status != 200 || !strings.Contains(body, `data-source="memory"`) || !strings.Contains(body, "read from this replica's memory") {
			t.Fatalf("status %d; the charts do not say they read the ring:\n%s", status, body)
		}
		if strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("a reason of markup is not text on the charts")
		}
		wantCounts, total := want(decision)
		for _, id := range []string{"chart-time", "chart-revision", "chart-replica"} {
			got := chartCounts(t, body, id)
			sum := 0
			for reason, n := range got {
				sum += n
				if reason != "" && n != wantCounts[reason] {
					t.Errorf("decision %q, %s: reason %q counted %d, want %d", decision, id, reason, n, wantCounts[reason])
				}
			}
			if sum != total {
				t.Errorf("decision %q, %s: %d reasons counted, want %d", decision, id, sum, total)
			}
		}
	}

	down := newHarness(t, Config{Store: &fakeStore{down: true}})
	if status, body := down.get(t, "/ui/charts"); status != 200 || !strings.Contains(body, `id="store-down"`) || !strings.Contains(body, `data-source="memory"`) ||
		len(chartCounts(t, body, "chart-time")) == 0 {
		t.Errorf("the charts with the store down: status %d; want the ring's refusals under a notice:\n%s", status, body)
	}
}

// TestDecisionPageShowsTheShadowAnswer: a candidate's outcome record, as
// the pipeline hands it to the ring after its decision, shows on the
// decision's page with its revision, result and whether it agreed; a
// decision without one says none was recorded.
func TestDecisionPageShowsTheShadowAnswer(t *testing.T) {
	h := newHarness(t, Config{})
	agreed, differed, none := h.all[0].rec, h.all[1].rec, h.all[2].rec
	h.ring.Write([]decisionlog.Record{
		{DecisionID: agreed.DecisionID, Time: agreed.Time, Decision: agreed.Decision, Path: agreed.Path,
			Shadow: &decisionlog.Shadow{Revision: "candidate-1", Class: string(shadow.Same), Result: agreed.Result}},
		{DecisionID: differed.DecisionID, Time: differed.Time, Decision: differed.Decision, Path: differed.Path,
			Shadow: &decisionlog.Shadow{Revision: "candidate-1", Class: string(shadow.AllowToRefuse), Error: &decisionlog.RecordError{Code: "policy_error"}}},
	})
	for _, c := range []struct {
		id, want string
	}{
		{agreed.DecisionID, `data-revision="candidate-1" data-class="` + string(shadow.Same) + `" data-agreed="true"`},
		{differed.DecisionID, `data-revision="candidate-1" data-class="` + string(shadow.AllowToRefuse) + `" data-agreed="false" data-outcome="error"`},
		{none.DecisionID, `No shadow candidate's answer was recorded for this decision; this server runs no shadow evaluation`},
	} {
		if status, body := h.get(t, "/ui/decisions/"+url.PathEscape(c.id)); status != 200 || !strings.Contains(body, c.want) {
			t.Errorf("decision %s: status %d, want %s in:\n%s", c.id, status, c.want, body)
		}
	}
}

// archiveOf is a decision log holding one decision and its candidates'
// answers.
type archiveOf struct {
	rec     decisionlog.Record
	shadows []decisionlog.Shadow
}

func (a archiveOf) Lookup(id string) (decisionlog.Record, []decisionlog.Shadow, bool, error) {
	if id != a.rec.DecisionID {
		return decisionlog.Record{}, nil, false, nil
	}
	return a.rec, a.shadows, true, nil
}

// TestDecisionPageShowsAShadowAnswerOnce: a decision whose input the ring
// gave up is read whole from the log, which holds the same candidate's
// answer the ring kept with it: the page shows it once, not once per
// place it was found.
func TestDecisionPageShowsAShadowAnswerOnce(t *testing.T) {
	big := newHarness(t, Config{}).all[0].rec
	big.DecisionID = "big-input"
	big.Input = putAt(t, big.Input, []string{"zz-blob"}, strings.Repeat("x", DefaultMaxKeptInput+1))
	sh := decisionlog.Shadow{Revision: "candidate-1", Class: string(shadow.Same), Result: big.Result}
	h := newHarness(t, Config{Archive: archiveOf{big, []decisionlog.Shadow{sh}}})
	h.ring.Write([]decisionlog.Record{big,
		{DecisionID: big.DecisionID, Time: big.Time, Decision: big.Decision, Path: big.Path, Shadow: &sh}})
	if e, ok := h.ring.Get(big.DecisionID); !ok || !e.InputDropped || len(e.Shadows) != 1 {
		t.Fatalf("the ring does not hold the decision without its input and with its answer: %v %+v", ok, e)
	}
	status, body := h.get(t, "/ui/decisions/"+big.DecisionID)
	if n := strings.Count(body, `class="shadow-answer `); status != 200 || n != 1 {
		t.Errorf("status %d, %d shadow answers shown, want 1:\n%s", status, n, body)
	}
}
