package shadow

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/internal/testsignal"
)

// waitStat polls the shadow's stats until cond holds, within a generous
// deadline.
func waitStat(t *testing.T, sh *Shadow, what string, cond func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st := sh.Stats()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never (stats %+v)", what, st)
		}
		time.Sleep(time.Millisecond)
	}
}

func loopingWithin(t *testing.T, timeout time.Duration) *engine.Snapshot {
	root := copyAccess(t)
	testfiles.Edit(t, root+"/"+accessPolicy, "reasons := [", testsignal.Loop("loop")+"reasons := [")
	cfg := configOf(root)
	cfg.EvalTimeout = timeout
	return load(t, cfg)
}

// While a live decision is in flight, the candidate's evaluation pauses,
// in the middle of its loop; it goes on when none is.
func TestCandidatePausesWhileLiveDecisionsAreInFlight(t *testing.T) {
	live := load(t, configOf(copyAccess(t)))
	h := newHarness(t, live, Config{Rate: 1, Workers: 1, CPU: 8})
	h.sh.Set(candidate(loopingWithin(t, time.Hour)))
	reachLoop(t, h)
	h.sh.LiveStart()
	waitStat(t, h.sh, "the looping evaluation pausing for a live decision", func(s Stats) bool { return s.Paused == 1 && s.InFlight == 1 })
	h.sh.LiveEnd()
	waitStat(t, h.sh, "the looping evaluation going on", func(s Stats) bool { return s.Paused == 0 && s.InFlight == 1 })
}

// No candidate evaluation starts while a live decision is in flight.
func TestCandidateStartsWhenLiveIsIdle(t *testing.T) {
	live := load(t, configOf(copyAccess(t)))
	h := newHarness(t, live, Config{Rate: 1, Workers: 1, CPU: 8})
	h.sh.Set(candidate(live))
	h.sh.LiveStart()
	rec := h.serve(traffic[0])
	waitStat(t, h.sh, "the worker waiting for the live decision", func(s Stats) bool { return s.Paused == 1 })
	h.mu.Lock()
	_, done := h.results[rec.DecisionID]
	h.mu.Unlock()
	if done {
		t.Fatal("the candidate decided while a live decision was in flight")
	}
	h.sh.LiveEnd()
	h.wait(t)
	if res := h.results[rec.DecisionID]; res == nil || res.Class != Same {
		t.Fatalf("result %+v", res)
	}
}

// A candidate that loops until its deadline is a candidate_error, and the
// default gate refuses it; its deadline counts only the time it runs, so
// it is a candidate_error even when live traffic held it paused for longer
// than its deadline. Only a decision paused past the shadow's wall-clock
// bound (Config.Timeout) is expired: counted, not judged.
func TestLoopingCandidateIsACandidateErrorWhateverItWaited(t *testing.T) {
	const deadline = 200 * time.Millisecond
	live := load(t, configOf(copyAccess(t)))
	loop := request{"loop", `{"tenant":"loop","used":1}`, false}

	h := newHarness(t, live, Config{Rate: 1, Workers: 1, CPU: 8})
	h.sh.Set(candidate(loopingWithin(t, deadline)))
	rec := h.serve(loop)
	h.wait(t)
	res := h.results[rec.DecisionID]
	if res == nil || res.Class != CandidateError || res.Candidate.Error.Code != string(engine.CodePolicyTimeout) {
		t.Fatalf("the looping candidate: %+v", res)
	}
	if _, err := h.sh.Promote(context.Background(), PromoteOptions{Gate: Gate{MinDecisions: 1, Forbidden: DefaultForbidden}},
		func(context.Context, *Candidate, bool) (string, error) { return "", nil }); !errors.Is(err, ErrRefused) {
		t.Fatalf("its promotion: %v", err)
	}

	h = newHarness(t, live, Config{Rate: 1, Workers: 1, CPU: 8})
	h.sh.Set(candidate(loopingWithin(t, deadline)))
	id := reachLoop(t, h)
	h.sh.LiveStart()
	waitStat(t, h.sh, "the looping evaluation pausing", func(s Stats) bool { return s.Paused == 1 })
	time.Sleep(2 * deadline) // longer than its deadline, paused
	h.sh.LiveEnd()
	h.wait(t)
	if res := h.results[id]; res == nil || res.Class != CandidateError {
		t.Fatalf("a looping candidate paused past its deadline: %+v", res)
	}
	if st := h.sh.Stats(); st.PausedSeconds < (2*deadline).Seconds() || st.Expired != 0 {
		t.Errorf("stats %+v: want it paused twice its deadline and judged", st)
	}

	h = newHarness(t, live, Config{Rate: 1, Workers: 1, CPU: 8, Timeout: 3 * deadline})
	h.sh.Set(candidate(loopingWithin(t, time.Hour)))
	id = reachLoop(t, h)
	h.sh.LiveStart()
	waitStat(t, h.sh, "the decision paused past the wall-clock bound", func(s Stats) bool { return s.Expired == 1 && s.InFlight == 0 })
	h.sh.LiveEnd()
	h.wait(t)
	if res := h.results[id]; res != nil {
		t.Fatalf("an expired decision was judged: %+v", res)
	}
	if rep, _ := h.sh.Report(); rep.Total != 0 {
		t.Errorf("report %+v", rep)
	}
}

// The CPU budget holds inside one evaluation: a candidate that loops,
// with a budget of a hundredth of a core, rests between short stretches
// while its evaluation goes on.
func TestBudgetThrottlesARunningEvaluation(t *testing.T) {
	live := load(t, configOf(copyAccess(t)))
	h := newHarness(t, live, Config{Rate: 1, Workers: 1, CPU: 0.01})
	h.sh.Set(candidate(loopingWithin(t, time.Hour)))
	reachLoop(t, h)
	waitStat(t, h.sh, "the running evaluation waiting for its budget", func(s Stats) bool { return s.InFlight == 1 && s.ThrottledSeconds > 0.05 })
}

// reachLoop serves a decision whose candidate loops and returns its id once
// the candidate's evaluation has reached its loop.
func reachLoop(t *testing.T, h *harness) string {
	t.Helper()
	started := testsignal.On(t, "loop")
	rec := h.serve(request{"loop", `{"tenant":"loop","used":1}`, false})
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the candidate never reached its loop")
	}
	return rec.DecisionID
}
