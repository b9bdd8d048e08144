package shadow

import (
	"context"
	"sync"
	"time"
)

// budget bounds the CPU that shadow evaluations take: a token bucket of
// evaluation time that refills at rate seconds per second (the cores the
// candidate may use) and holds at most burst (budgetBurst). A worker pays
// for the time it ran (wall-clock, never less than the CPU one goroutine
// used) at every pause point of its evaluation, and waits there while the
// bucket is in debt. So a candidate, slow or looping, runs at most a
// couple of milliseconds at a stretch and rate cores over any longer
// span: at 0.1 cores, 2 ms of evaluation, then 18 ms of rest.
type budget struct {
	rate  float64 // seconds of evaluation per second
	burst float64 // seconds

	mu     sync.Mutex
	tokens float64 // seconds; negative is a debt
	last   time.Time

	now   func() time.Time                                 // time.Now, except in tests
	sleep func(ctx context.Context, d time.Duration) error // sleepCtx, except in tests
}

// budgetBurst is the most evaluation time the bucket holds: how long a
// candidate may run at a stretch before it rests to its rate.
const budgetBurst = 2 * time.Millisecond

func newBudget(rate float64) *budget {
	burst := budgetBurst.Seconds()
	return &budget{rate: rate, burst: burst, tokens: burst, last: time.Now(), now: time.Now, sleep: sleepCtx}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (b *budget) refill(now time.Time) {
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
}

// wait returns once the bucket holds no debt, or ctx's error, and how long
// it waited.
func (b *budget) wait(ctx context.Context) (time.Duration, error) {
	start := b.now()
	for {
		b.mu.Lock()
		b.refill(b.now())
		debt := -b.tokens
		b.mu.Unlock()
		if debt <= 0 {
			return b.now().Sub(start), nil
		}
		if err := b.sleep(ctx, time.Duration(debt/b.rate*float64(time.Second))+time.Millisecond); err != nil {
			return b.now().Sub(start), err
		}
	}
}

// spend pays for an evaluation that took d.
func (b *budget) spend(d time.Duration) {
	b.mu.Lock()
	b.refill(b.now())
	b.tokens -= d.Seconds()
	b.mu.Unlock()
}
