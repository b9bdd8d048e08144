package shadow

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// TestSelfCheckCatchesADisagreement: a compiled answer handed to the
// self-check wrong, as a compiler bug would make it, is decided again by
// topdown on the shadow's workers; the disagreement turns the compiled path
// off for the decision, and is counted and logged with both answers.
func TestSelfCheckCatchesADisagreement(t *testing.T) {
	var logged testfiles.Buffer
	sh := New(Config{CPU: 8, SelfCheck: 1, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	t.Cleanup(func() { _ = sh.Close(context.Background()) })
	cfg := configOf(access)
	cfg.Tests = "" // the requests' answers only
	cfg.SelfCheck = func(c engine.Recheck) {
		c.Compiled = ast.MustParseTerm(`{"tampered": true}`).Value
		sh.SelfCheck(c)
	}
	live := load(t, cfg)
	if !live.Compiled()[0].Compiled {
		t.Fatalf("the test decision does not run compiled: %+v", live.Compiled()[0])
	}
	if _, err := live.Decide(context.Background(), decisionName, []byte(`{"tenant":"a","used":3}`), engine.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := wait.For(30*time.Second, func() bool { return !live.Compiled()[0].Compiled }); !ok {
		t.Fatalf("the disagreement did not turn the compiled path off: %+v", live.Compiled()[0])
	}
	if ci := live.Compiled()[0]; !strings.Contains(ci.Reason, "self-check") {
		t.Errorf("reason: %q", ci.Reason)
	}
	if _, ok := wait.For(10*time.Second, func() bool { return strings.Contains(logged.String(), "compiled evaluation disagrees") }); !ok {
		t.Fatalf("not logged: %s", logged.String())
	}
	if l := logged.String(); !strings.Contains(l, `compiled="{\"tampered\":true}"`) || !strings.Contains(l, "decision="+decisionName) || !strings.Contains(l, `topdown="{`) {
		t.Errorf("log: %s", l)
	}
	want := fmt.Sprintf(`
# HELP arbiter_compiled_disagreements_total Sampled decisions on which the compiled evaluation and topdown disagreed (each turns the compiled path off for the decision until the next reload).
# TYPE arbiter_compiled_disagreements_total counter
arbiter_compiled_disagreements_total{decision=%q} 1
# HELP arbiter_selfcheck_samples_total Compiled decisions sampled by the self-check, by outcome: checked (decided again by topdown and compared), inconclusive (topdown ran out of time), expired (the shadow's CPU budget did not come within its timeout, or the stop came first), dropped (the queue was full by count or bytes) or too_large (an input over the self-check's byte bound, never copied).
# TYPE arbiter_selfcheck_samples_total counter
arbiter_selfcheck_samples_total{outcome="checked"} 1
arbiter_selfcheck_samples_total{outcome="dropped"} 0
arbiter_selfcheck_samples_total{outcome="expired"} 0
arbiter_selfcheck_samples_total{outcome="inconclusive"} 0
arbiter_selfcheck_samples_total{outcome="too_large"} 0
`, decisionName)
	if err := testutil.CollectAndCompare(sh.Collector(), strings.NewReader(want), "arbiter_compiled_disagreements_total", "arbiter_selfcheck_samples_total"); err != nil {
		t.Error(err)
	}
	// Now on topdown: nothing more is handed to the self-check.
	if _, err := live.Decide(context.Background(), decisionName, []byte(`{"tenant":"a","used":3}`), engine.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := sh.SelfChecked(); n != 1 {
		t.Errorf("%d checked, want 1", n)
	}
}

// TestSelfCheckQueueIsBoundedInBytes: the copies of the inputs waiting for
// a check (or being checked) never exceed SelfCheckBytes, whatever their
// number, and an input larger than SelfCheckBytes is never copied. A live
// decision in flight holds the worker paused while the queue is filled.
func TestSelfCheckQueueIsBoundedInBytes(t *testing.T) {
	sh := New(Config{CPU: 8, SelfCheck: 1, SelfCheckBytes: 100, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = sh.Close(context.Background()) })
	live := load(t, configOf(access))
	sh.LiveStart()
	body := func(n int) []byte { return []byte(fmt.Sprintf(`{"tenant": %q, "used": 1}`, strings.Repeat("t", n))) }
	check := func(b []byte) engine.Recheck {
		return engine.Recheck{Snapshot: live, Decision: decisionName, Input: b, Compiled: ast.Null{}}
	}
	sh.SelfCheck(check(body(200))) // larger than the bound: never queued
	small := len(body(10))
	fit := 100 / small
	for range 10 {
		sh.SelfCheck(check(body(10)))
	}
	if got, want := [3]uint64{sh.checks.n[checked].Load(), sh.checks.n[dropped].Load(), sh.checks.n[tooLarge].Load()}, [3]uint64{0, uint64(10 - fit), 1}; got != want && got != [3]uint64{1, want[1], 1} {
		t.Errorf("checked, dropped, too large: %v, want %v", got, want)
	}
	if b := sh.checks.q.Bytes(); b != int64(fit*small) {
		t.Errorf("%d bytes held, want %d", b, fit*small)
	}
	sh.LiveEnd()
	if _, ok := wait.For(30*time.Second, func() bool { return sh.SelfChecked() == uint64(fit) }); !ok {
		t.Fatalf("%d checked, want %d", sh.SelfChecked(), fit)
	}
}

// TestSelfCheckCountsEverySample: a sampled answer that could not be
// compared is counted as what became of it, never as checked: topdown out
// of time (inconclusive; the compiled path stays on), or the shadow's CPU
// budget not given within its timeout (expired). The time topdown took is
// counted too.
func TestSelfCheckCountsEverySample(t *testing.T) {
	count := func(sh *Shadow) (n [len(checkOutcomes)]uint64) {
		for i := range n {
			n[i] = sh.checks.n[i].Load()
		}
		return n
	}
	t.Run("inconclusive", func(t *testing.T) {
		sh := New(Config{CPU: 8, SelfCheck: 1, Logger: slog.New(slog.DiscardHandler)})
		t.Cleanup(func() { _ = sh.Close(context.Background()) })
		live := loopingWithin(t, 20*time.Millisecond) // topdown loops past its deadline on this input
		sh.SelfCheck(engine.Recheck{Snapshot: live, Decision: decisionName, Input: []byte(`{"tenant":"loop","used":1}`), Compiled: ast.Null{}})
		if _, ok := wait.For(30*time.Second, func() bool { return count(sh) != [len(checkOutcomes)]uint64{} }); !ok {
			t.Fatal("the sample was never counted")
		}
		if got := count(sh); got != [len(checkOutcomes)]uint64{inconclusive: 1} {
			t.Errorf("%v by %v, want one inconclusive", got, checkOutcomes)
		}
		if !live.Compiled()[0].Compiled {
			t.Errorf("an inconclusive check turned the compiled path off: %+v", live.Compiled()[0])
		}
		if sh.checks.evalNS.Load() <= 0 {
			t.Error("topdown's time on the check was not counted")
		}
	})
	t.Run("expired", func(t *testing.T) {
		sh := New(Config{CPU: 8, SelfCheck: 1, Timeout: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		t.Cleanup(func() { _ = sh.Close(context.Background()) })
		sh.budget.spend(time.Hour) // a debt of 7.5 minutes at 8 cores: the check's budget never comes within 10 ms
		live := load(t, configOf(access))
		sh.SelfCheck(engine.Recheck{Snapshot: live, Decision: decisionName, Input: []byte(`{"tenant":"a","used":3}`), Compiled: ast.Null{}})
		if _, ok := wait.For(30*time.Second, func() bool { return count(sh) != [len(checkOutcomes)]uint64{} }); !ok {
			t.Fatal("the sample was never counted")
		}
		if got := count(sh); got != [len(checkOutcomes)]uint64{expired: 1} {
			t.Errorf("%v by %v, want one expired", got, checkOutcomes)
		}
	})
}
