package shadow

import (
	"context"
	"sync"
	"time"
)

// budget bounds the CPU that shadow evaluations take on average: a token
// bucket of evaluation time that refills at rate seconds per second (the
// cores the candidate may use) and holds at most burst. A worker waits for
// the bucket to be non-negative before it starts an evaluation and pays
// for it afterwards with the evaluation's wall-clock time, which is never
// less than the CPU one goroutine used. So a candidate that runs to its
// deadline on every request is held to rate cores over time, however slow
// it is: after a two-second evaluation at 0.25 cores, the workers rest
// about six seconds and the queue fills and drops meanwhile.
type budget struct {
	rate  float64 // seconds of evaluation per second
	burst float64 // seconds

	mu     sync.Mutex
	tokens float64 // seconds; negative is a debt
	last   time.Time

	now   func() time.Time                                 // time.Now, except in tests
	sleep func(ctx context.Context, d time.Duration) error // sleepCtx, except in tests
}

func newBudget(rate float64) *budget {
	return &budget{rate: rate, burst: rate, tokens: rate, last: time.Now(), now: time.Now, sleep: sleepCtx}
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
