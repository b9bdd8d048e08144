package engine

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A Background evaluation with Options.Topdown runs on topdown, the
// authority, even for a decision that runs compiled, calls its pause
// function as it goes, and decides what any other evaluation decides.
func TestBackgroundEvaluationsPause(t *testing.T) {
	root := copyTree(t, quota)
	editFile(t, filepath.Join(root, quotaPolicy), "reasons := [",
		"failures contains [3, \"never\"] if {\n\tsome i in numbers.range(1, 20000)\n\ti < 0\n}\n\nreasons := [")
	s := mustLoad(t, quotaConfig(root))
	if !s.Compiled()[0].Compiled {
		t.Fatalf("the decision does not run compiled: %+v", s.Compiled())
	}
	ctx := context.Background()
	for _, body := range []string{`{"tenant":"t","used":10}`, `{"tenant":"t","used":1}`} {
		want, err := s.Decide(ctx, "quota_check", []byte(body), Options{})
		if err != nil {
			t.Fatal(err)
		}
		var paused int
		got, err := s.Decide(Background(ctx, func() { paused++ }), "quota_check", []byte(body), Options{Topdown: true})
		if err != nil || !SameJSON(got.Result, want.Result) {
			t.Fatalf("in the background: %v %v, want %s", got, err, want.Result)
		}
		// 20000 iterations of a loop, a pause every 32 expressions.
		if paused < 20000/32 {
			t.Errorf("%s: paused %d times", body, paused)
		}
	}
}

// A Background evaluation's deadline counts the time it runs: paused for
// twice its deadline, it goes on evaluating afterwards, and still ends
// with policy_timeout at its deadline of running time.
func TestBackgroundDeadlineCountsRunningTime(t *testing.T) {
	const timeout = 100 * time.Millisecond
	root := copyTree(t, quota)
	editFile(t, filepath.Join(root, quotaPolicy), "reasons := [",
		"failures contains [3, \"never\"] if {\n\tsome i in numbers.range(1, 100000)\n\tsome j in numbers.range(1, 100000)\n\ti == j + 100000\n}\n\nreasons := [")
	cfg := quotaConfig(root)
	cfg.EvalTimeout = timeout
	s := mustLoad(t, cfg)
	var calls, after atomic.Int64
	held := make(chan struct{})
	release := make(chan struct{})
	pause := func() {
		if calls.Add(1) == 1 {
			close(held)
			<-release
			return
		}
		after.Add(1)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Decide(Background(context.Background(), pause), "quota_check", []byte(`{"tenant":"t","used":1}`), Options{Topdown: true})
		done <- err
	}()
	<-held
	time.Sleep(2 * timeout) // its wall-clock deadline passes while it is paused
	close(release)
	err := <-done
	if e := AsError(err); e.Code != CodePolicyTimeout || !strings.Contains(e.Message, "exceeded "+timeout.String()) {
		t.Fatalf("%v, want policy_timeout at its deadline", err)
	}
	if after.Load() == 0 {
		t.Fatal("the evaluation stopped when it was released: its paused time counted against its deadline")
	}
}
