package shadow

import (
	"context"
	"testing"
	"time"
)

// fakeClock drives a budget without sleeping: sleep advances the clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }
func (c *fakeClock) sleep(_ context.Context, d time.Duration) error {
	c.t = c.t.Add(d)
	return nil
}

// A candidate whose every evaluation runs for its whole deadline is held to
// the budget's rate: over any run, evaluation time is at most the burst,
// plus rate times the elapsed time, plus the one evaluation that started
// within budget and overran it.
func TestBudgetHoldsARunawayCandidateToItsRate(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		eval time.Duration
	}{
		{0.25, 2 * time.Second},
		{0.5, 150 * time.Millisecond},
		{1, 10 * time.Second},
		{0.1, time.Millisecond},
	} {
		clock := &fakeClock{t: time.Unix(1e9, 0)}
		b := newBudget(tc.rate)
		b.now, b.sleep, b.last = clock.now, clock.sleep, clock.t
		start := clock.t
		var spent, waited time.Duration
		for range 1000 {
			w, err := b.wait(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			waited += w
			clock.t = clock.t.Add(tc.eval) // the evaluation runs to its deadline
			b.spend(tc.eval)
			spent += tc.eval
		}
		elapsed := clock.t.Sub(start)
		bound := time.Duration(tc.rate*float64(time.Second)) + time.Duration(tc.rate*float64(elapsed)) + tc.eval
		if spent > bound {
			t.Errorf("rate %v, evaluations of %v: %v evaluating in %v, more than %v", tc.rate, tc.eval, spent, elapsed, bound)
		}
		if waited == 0 {
			t.Errorf("rate %v, evaluations of %v: never throttled", tc.rate, tc.eval)
		}
		t.Logf("rate %v, evaluations of %v: %.3f cores on average", tc.rate, tc.eval, spent.Seconds()/elapsed.Seconds())
	}
}

func TestBudgetWaitEndsWithItsContext(t *testing.T) {
	b := newBudget(0.001)
	b.spend(time.Hour) // a debt of an hour at a thousandth of a core
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.wait(ctx); err == nil {
		t.Fatal("wait returned without the budget or an error")
	}
}
