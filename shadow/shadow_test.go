package shadow

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/internal/testsignal"
)

// access is a decision that exists only in these tests: its refusals
// carry an error string from data, and its result schema says which
// outcome allows. Candidates are copies of it with files edited, as a
// reliability engineer would edit them.
const (
	access       = "testdata/access"
	accessData   = "policies/decisions/access_check/data.json"
	accessPolicy = "policies/decisions/access_check/policy.rego"
	accessInput  = "schemas/access_check/input.json"
	accessCases  = "tests/fixtures/access_check/cases.json"
	decisionName = "access_check"
)

// copyAccess copies the test decision into a fresh folder and returns it.
func copyAccess(t testing.TB) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(access)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func configOf(root string) engine.Config {
	return engine.Config{Policies: filepath.Join(root, "policies"), Schemas: filepath.Join(root, "schemas"), Tests: filepath.Join(root, "tests")}
}

// load builds a Snapshot through the gate, tests and fixtures included.
func load(t testing.TB, cfg engine.Config) *engine.Snapshot {
	t.Helper()
	s, err := engine.Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// edit replaces every old by new in root/rel, failing when old is absent.
func edit(t testing.TB, root, rel, old, new string) {
	t.Helper()
	path := filepath.Join(root, rel)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	testfiles.Edit(t, path, old, new) // fails when old is absent
	if n := strings.Count(string(b), old); n > 1 {
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(b), old, new)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// request is one request of the traffic: its body, and whether it came
// through OPA's Data API path.
type request struct {
	name    string
	body    string
	wrapped bool
}

// traffic is what the tests send: answers that allow and refuse, input
// errors, both paths. Which class each falls in depends on the candidate.
var traffic = []request{
	{"within quota", `{"tenant":"a","used":3}`, false},
	{"at the limit", `{"tenant":"b","used":10}`, false},
	{"far over", `{"tenant":"c","used":50}`, false},
	{"suspended", `{"tenant":"d","used":1,"suspended":true}`, false},
	{"largest counter", `{"tenant":"e","used":18446744073709551615}`, false},
	{"negative", `{"tenant":"f","used":-1}`, false},
	{"duplicate key", `{"tenant":"g","used":1,"used":2}`, false},
	{"not json", "\xff{", false},
	{"data api, over", `{"input":{"tenant":"h","used":11}}`, true},
	{"data api, no input", `{"inputs":{}}`, true},
	{"tenant z, within", `{"tenant":"z","used":1}`, false},
	{"tenant z, over", `{"tenant":"z","used":50}`, false},
}

// harness does in process what the server does for a decision request:
// decide with the live Snapshot, build the decision-log record, answer,
// and then hand the record to the shadow. It collects each shadowed
// decision's result by decision id.
type harness struct {
	live *engine.Snapshot
	sh   *Shadow
	log  *decisionlog.Logger // nil: records are not written

	mu      sync.Mutex
	results map[string]*Result
	pending sync.WaitGroup
}

func newHarness(t *testing.T, live *engine.Snapshot, cfg Config) *harness {
	h := &harness{live: live, sh: New(cfg), results: map[string]*Result{}}
	t.Cleanup(func() { _ = h.sh.Close(context.Background()) })
	return h
}

// serve answers one request and returns its record once the answer is
// "written"; the candidate, if any, decides later, elsewhere.
func (h *harness) serve(r request) decisionlog.Record {
	path := "/v1/decisions/" + decisionName
	if r.wrapped {
		path = "/v1/data/decisions/" + decisionName + "/decision"
	}
	rec := decisionlog.Record{Decision: decisionName, Path: path, Revision: h.live.Revision, Time: time.Now().UTC()}
	d, err := h.live.Decide(context.Background(), decisionName, []byte(r.body), engine.Options{DataAPIBody: r.wrapped})
	if err != nil {
		e := engine.AsError(err)
		rec.DecisionID = uuid.NewString()
		rec.Error = &decisionlog.RecordError{Code: string(e.Code), Message: e.Message}
		if json.Valid([]byte(r.body)) {
			rec.Input = []byte(r.body)
		} else {
			rec.BodyBase64 = base64.StdEncoding.EncodeToString([]byte(r.body))
		}
	} else {
		rec.DecisionID, rec.Input, rec.Result = d.ID, bytes.Clone(d.Input), d.Result
	}
	ticket := h.sh.Sample(rec, func(res *Result) {
		h.mu.Lock()
		h.results[rec.DecisionID] = res
		h.mu.Unlock()
		h.pending.Done()
	})
	if ticket != nil {
		h.pending.Add(1)
	}
	if h.log != nil {
		h.log.Log(rec)
	}
	// The answer is written here; only then does the candidate get it.
	ticket.Start()
	return rec
}

// wait returns once every shadowed decision has its result.
func (h *harness) wait(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		h.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the shadow did not judge every sampled decision within a minute")
	}
}

// serveAll sends the whole traffic and returns each request's record by
// request name.
func (h *harness) serveAll(t *testing.T) map[string]decisionlog.Record {
	t.Helper()
	out := map[string]decisionlog.Record{}
	for _, r := range traffic {
		out[r.name] = h.serve(r)
	}
	h.wait(t)
	return out
}

func candidate(snap *engine.Snapshot) *Candidate {
	return &Candidate{Snapshot: snap, Origin: "test", LoadedAt: time.Now()}
}

// everything is a configuration that shadows every decision, with room in
// the queue for all of the traffic.
var everything = Config{Rate: 1, Queue: 64, CPU: 8}

// The first case: a candidate that allows one more case (the quota
// limit raised by one, in data, with its tests passing) is reported as
// refuse_to_allow with that case's decision id, and its promotion is
// refused; the live revision keeps serving.
func TestCandidateAllowingOneMoreCaseIsRefused(t *testing.T) {
	root := copyAccess(t)
	live := load(t, configOf(root))
	cand := copyAccess(t)
	edit(t, cand, accessData, `"limit": 10`, `"limit": 11`)
	h := newHarness(t, live, everything)
	h.sh.Set(candidate(load(t, configOf(cand))))

	recs := h.serveAll(t)
	rep, ok := h.sh.Report()
	if !ok {
		t.Fatal("no report")
	}
	atLimit := recs["at the limit"].DecisionID
	if rep.Count(RefuseToAllow) != 1 || len(rep.Examples(RefuseToAllow)) != 1 || rep.Examples(RefuseToAllow)[0] != atLimit {
		t.Fatalf("refuse_to_allow %d %v, want 1 with %s (the request at the limit); report %+v", rep.Count(RefuseToAllow), rep.Examples(RefuseToAllow), atLimit, rep)
	}
	if rep.Classes[0].Class != RefuseToAllow || rep.Decisions[0].Classes[0].Class != RefuseToAllow {
		t.Errorf("refuse_to_allow is not first: %+v", rep)
	}
	if rep.Count(Same) != rep.Total-1 {
		t.Errorf("every other request should be the same: %+v", rep.Classes)
	}
	if res := h.results[atLimit]; res == nil || res.Class != RefuseToAllow || res.Candidate.Revision != h.sh.Candidate().Snapshot.Revision {
		t.Errorf("the result handed back for %s: %+v", atLimit, res)
	}

	activated := false
	p, err := h.sh.Promote(context.Background(), PromoteOptions{Gate: Gate{MinDecisions: 1, Forbidden: DefaultForbidden}, By: "sre"},
		func(context.Context, *Candidate, bool) (string, error) { activated = true; return live.Revision, nil })
	if !errors.Is(err, ErrRefused) || activated || p.Promoted {
		t.Fatalf("promotion: %v, activated %v, %+v", err, activated, p)
	}
	if len(p.Refusals) != 1 || !strings.Contains(p.Refusals[0], "refuse_to_allow") || !strings.Contains(p.Refusals[0], atLimit) {
		t.Errorf("refusals %q, want one naming refuse_to_allow and %s", p.Refusals, atLimit)
	}
	if h.sh.Candidate() == nil {
		t.Error("a refused candidate left the shadow")
	}

	// Forced, it goes live, and the record says so.
	p, err = h.sh.Promote(context.Background(), PromoteOptions{Gate: Gate{MinDecisions: 1, Forbidden: DefaultForbidden}, Force: true, By: "sre"},
		func(context.Context, *Candidate, bool) (string, error) { activated = true; return live.Revision, nil })
	if err != nil || !activated || !p.Promoted || !p.Forced || len(p.Refusals) != 1 || p.By != "sre" || p.From != live.Revision {
		t.Fatalf("forced promotion: %v, %+v", err, p)
	}
	if h.sh.Candidate() != nil {
		t.Error("the promoted candidate is still in shadow")
	}
}

// The second case: a candidate that only changes the error string
// its refusals carry (data and the fixtures that pin it) is promoted by the
// default gate; its changes are error_changed.
func TestCandidateChangingOnlyAnErrorStringIsPromoted(t *testing.T) {
	live := load(t, configOf(copyAccess(t)))
	cand := copyAccess(t)
	edit(t, cand, accessData, `"access_denied"`, `"access_refused"`)
	edit(t, cand, accessCases, `"access_denied"`, `"access_refused"`)
	candSnap := load(t, configOf(cand))
	h := newHarness(t, live, everything)
	h.sh.Set(candidate(candSnap))

	recs := h.serveAll(t)
	rep, _ := h.sh.Report()
	for name, rec := range recs {
		res := h.results[rec.DecisionID]
		if res == nil {
			continue // not redecidable: never sampled
		}
		want := Same
		if rec.Result != nil && strings.Contains(string(rec.Result), "access_denied") {
			want = ErrorChanged
		}
		if res.Class != want {
			t.Errorf("%s: %s, want %s (live %s, candidate %s)", name, res.Class, want, rec.Result, res.Candidate.Result)
		}
	}
	if rep.Count(ErrorChanged) == 0 || rep.Count(ErrorChanged)+rep.Count(Same) != rep.Total {
		t.Fatalf("report %+v", rep.Classes)
	}

	var got *Candidate
	p, err := h.sh.Promote(context.Background(), PromoteOptions{Revision: candSnap.Revision, Gate: Gate{MinDecisions: rep.Total, Forbidden: DefaultForbidden}, By: "sre"},
		func(_ context.Context, c *Candidate, _ bool) (string, error) { got = c; return live.Revision, nil })
	if err != nil || !p.Promoted || p.Forced || len(p.Refusals) != 0 || got == nil || got.Snapshot != candSnap || p.Revision != candSnap.Revision {
		t.Fatalf("promotion: %v, %+v", err, p)
	}
}

func TestPromoteChecksWhatIsInShadow(t *testing.T) {
	live := load(t, configOf(copyAccess(t)))
	h := newHarness(t, live, everything)
	never := func(context.Context, *Candidate, bool) (string, error) { t.Fatal("activated"); return "", nil }
	if _, err := h.sh.Promote(context.Background(), PromoteOptions{}, never); !errors.Is(err, ErrNoCandidate) {
		t.Fatalf("no candidate: %v", err)
	}
	h.sh.Set(candidate(live))
	var re *RevisionError
	if _, err := h.sh.Promote(context.Background(), PromoteOptions{Revision: "0123"}, never); !errors.As(err, &re) || re.Have != live.Revision {
		t.Fatalf("another revision: %v", err)
	}
	if _, err := h.sh.Promote(context.Background(), PromoteOptions{Gate: Gate{MinDecisions: 1}}, never); !errors.Is(err, ErrRefused) {
		t.Fatalf("nothing judged yet: %v", err)
	}
	boom := errors.New("activation failed")
	if _, err := h.sh.Promote(context.Background(), PromoteOptions{}, func(context.Context, *Candidate, bool) (string, error) { return "", boom }); !errors.Is(err, boom) || h.sh.Candidate() == nil {
		t.Fatalf("failed activation: %v, candidate %v", err, h.sh.Candidate())
	}
}

// looping is a candidate that, for tenant "loop", signals and then loops
// until its deadline (an hour: only the shadow stopping ends it), through
// ten billion pairs of two small ranges, in constant memory.
func looping(t *testing.T) *engine.Snapshot {
	root := copyAccess(t)
	edit(t, root, accessPolicy, "reasons := [", testsignal.Loop("loop")+"reasons := [")
	cfg := configOf(root)
	cfg.EvalTimeout = time.Hour
	return load(t, cfg)
}

// The third case, in process: while the candidate loops (it has
// reached its loop, signalled by the policy itself, and has an hour to
// go), live decisions are answered, every one, and the candidate's
// evaluation is still running when they are: the queue behind it fills
// and drops (counted) instead of making anyone wait. No clock is read.
func TestLoopingCandidateNeverDelaysLiveAnswers(t *testing.T) {
	live := load(t, configOf(copyAccess(t)))
	h := newHarness(t, live, Config{Rate: 1, Queue: 4, Workers: 1, CPU: 8})
	h.sh.Set(candidate(looping(t)))
	started := testsignal.On(t, "loop")

	loopRec := h.serve(request{"loop", `{"tenant":"loop","used":1}`, false})
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the candidate never reached its loop")
	}

	const n = 50
	answered := make(chan int, 1)
	go func() {
		for i := range n {
			rec := h.serve(traffic[i%4]) // four requests that the live revision answers
			if rec.Result == nil {
				answered <- -1
				return
			}
		}
		answered <- n
	}()
	select {
	case got := <-answered:
		if got != n {
			t.Fatal("a live request had no answer")
		}
	case <-time.After(time.Minute):
		t.Fatal("live answers waited for the looping candidate")
	}
	h.mu.Lock()
	_, finished := h.results[loopRec.DecisionID]
	h.mu.Unlock()
	st := h.sh.Stats()
	if finished || st.InFlight != 1 {
		t.Fatalf("the candidate's evaluation is not running any more (finished %v, in flight %d)", finished, st.InFlight)
	}
	if st.Sampled != n+1 || st.Dropped != n-4 || st.Queued != 4 {
		t.Errorf("stats %+v: want %d sampled, %d dropped, 4 queued", st, n+1, n-4)
	}

	// Stopping the shadow ends the loop; every record gets its answer
	// (nil: not judged), so that none waits for ever.
	if err := h.sh.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.wait(t)
	if st := h.sh.Stats(); st.Abandoned != 5 || st.InFlight != 0 {
		t.Errorf("after close: %+v, want the loop and the 4 queued abandoned", st)
	}
	if res := h.results[loopRec.DecisionID]; res != nil {
		t.Errorf("a cut-off evaluation was judged: %+v", res)
	}
}

// Replay and live shadow classify the same traffic the same way: the
// records the live path logged, read back from the log file and judged as
// `arbiter replay` judges them, fall in the classes the live shadow put
// them in, decision by decision, over a candidate that produces every
// class.
func TestReplayClassifiesAsLiveShadowDoes(t *testing.T) {
	live := load(t, configOf(copyAccess(t)))
	cand := copyAccess(t)
	edit(t, cand, accessData, `{"limit": 10, "denied_error": "access_denied"}`, `{"limit": 11, "denied_error": "access_refused"}`)
	edit(t, cand, accessCases, `"access_denied"`, `"access_refused"`)
	edit(t, cand, accessInput, `"maximum": 18446744073709551615`, `"maximum": 1000000`)
	edit(t, cand, accessPolicy, `failures contains [2, "tenant_suspended"] if input.suspended == true`,
		"failures contains [2, \"tenant_suspended\"] if input.suspended == true\n\nfailures contains [2, \"tenant_suspended\"] if input.tenant == \"z\"")
	candSnap := load(t, configOf(cand))

	logPath := filepath.Join(t.TempDir(), "decisions.log")
	lg, err := decisionlog.Open(decisionlog.Options{Path: logPath})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, live, everything)
	h.log = lg
	h.sh.Set(candidate(candSnap))
	h.serveAll(t)
	if err := lg.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	offline := NewTally(100)
	judged := 0
	warnings, err := decisionlog.ReadFile(logPath, func(_ int, rec decisionlog.Record) error {
		req, skip := FromRecord(rec)
		liveRes := h.results[rec.DecisionID]
		if skip != "" {
			if liveRes != nil {
				t.Errorf("%s: replay skips it (%s), the live shadow judged it %s", rec.DecisionID, skip, liveRes.Class)
			}
			return nil
		}
		j := Judge(context.Background(), candSnap, req)
		offline.Add(j.Decision, j.Class, j.DecisionID)
		judged++
		switch {
		case liveRes == nil:
			t.Errorf("%s: replay judges it %s, the live shadow did not judge it", rec.DecisionID, j.Class)
		case liveRes.Class != j.Class:
			t.Errorf("%s: replay %s, live %s", rec.DecisionID, j.Class, liveRes.Class)
		}
		return nil
	})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("reading the log: %v %v", err, warnings)
	}
	liveRep, _ := h.sh.Report()
	offRep := offline.Report()
	for _, c := range Classes {
		if liveRep.Count(c) != offRep.Count(c) {
			t.Errorf("%s: live %d, replay %d", c, liveRep.Count(c), offRep.Count(c))
		}
		if liveRep.Count(c) == 0 {
			t.Errorf("the traffic has no %s: the comparison does not cover it", c)
		}
	}
	if judged != len(h.results) || judged < len(traffic)-1 {
		t.Errorf("replay judged %d records, the live shadow %d, of %d requests", judged, len(h.results), len(traffic))
	}
}

func TestMetrics(t *testing.T) {
	live := load(t, configOf(copyAccess(t)))
	cand := copyAccess(t)
	edit(t, cand, accessData, `"limit": 10`, `"limit": 11`)
	h := newHarness(t, live, everything)
	candSnap := load(t, configOf(cand))
	h.sh.Set(candidate(candSnap))
	h.serveAll(t)
	want := fmt.Sprintf(`
# HELP arbiter_shadow_candidate_info The candidate revision in shadow (1), absent when none is.
# TYPE arbiter_shadow_candidate_info gauge
arbiter_shadow_candidate_info{revision=%q} 1
# HELP arbiter_shadow_decisions_total Live decisions judged by a candidate revision in shadow, by decision and class (refuse_to_allow is the dangerous one).
# TYPE arbiter_shadow_decisions_total counter
arbiter_shadow_decisions_total{class="allow_to_refuse",decision="access_check"} 0
arbiter_shadow_decisions_total{class="candidate_error",decision="access_check"} 0
arbiter_shadow_decisions_total{class="error_changed",decision="access_check"} 0
arbiter_shadow_decisions_total{class="reasons_changed",decision="access_check"} 0
arbiter_shadow_decisions_total{class="refuse_to_allow",decision="access_check"} 1
arbiter_shadow_decisions_total{class="same",decision="access_check"} 11
# HELP arbiter_shadow_dropped_total Sampled decisions not judged: the queue was full (queue_full), the candidate changed or the shadow stopped first (abandoned), it was paused for live traffic or its CPU budget past its wall-clock bound (expired), or the record could not be decided again (unjudged).
# TYPE arbiter_shadow_dropped_total counter
arbiter_shadow_dropped_total{reason="abandoned"} 0
arbiter_shadow_dropped_total{reason="expired"} 0
arbiter_shadow_dropped_total{reason="queue_full"} 0
arbiter_shadow_dropped_total{reason="unjudged"} 0
# HELP arbiter_shadow_sampled_total Live decisions picked for shadow evaluation.
# TYPE arbiter_shadow_sampled_total counter
arbiter_shadow_sampled_total 12
`, candSnap.Revision)
	if err := testutil.CollectAndCompare(h.sh.Collector(), strings.NewReader(want),
		"arbiter_shadow_candidate_info", "arbiter_shadow_decisions_total", "arbiter_shadow_dropped_total", "arbiter_shadow_sampled_total"); err != nil {
		t.Error(err)
	}
}
