package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/topdown"
)

// pauseEvery is how many topdown expressions a background evaluation
// evaluates between two calls of its pause function.
const pauseEvery = 32

type backgroundKey struct{}

// background is the state of one background evaluation: its pause
// function and how long it has spent in it.
type background struct {
	pause    func()
	pausedNS atomic.Int64
	since    atomic.Int64 // unix nanoseconds of the pause in progress, 0 when running
}

// Background marks the decisions made with ctx as background work (a
// candidate revision in shadow), which the caller decides on topdown
// (Options.Topdown): topdown calls pause every few dozen expressions (the
// compiled program never does); pause may block
// until the process has time to spare. What they decide does not change,
// and their deadline counts only the time they run: time spent in pause
// does not bring a background evaluation closer to policy_timeout.
func Background(ctx context.Context, pause func()) context.Context {
	return context.WithValue(ctx, backgroundKey{}, &background{pause: pause})
}

func backgroundOf(ctx context.Context) *background {
	b, _ := ctx.Value(backgroundKey{}).(*background)
	return b
}

func (b *background) wait() {
	start := time.Now()
	b.since.Store(start.UnixNano())
	b.pause()
	b.since.Store(0)
	b.pausedNS.Add(int64(time.Since(start)))
}

// paused is the time spent paused so far, the pause in progress included.
func (b *background) paused() time.Duration {
	p := b.pausedNS.Load()
	if s := b.since.Load(); s != 0 {
		p += time.Now().UnixNano() - s
	}
	return time.Duration(p)
}

// pausingCancel pauses in Cancelled, which topdown calls before every
// expression it evaluates (and numbers.range in its loop).
type pausingCancel struct {
	c topdown.Cancel
	b *background
	n atomic.Uint32
}

func (c *pausingCancel) Cancel() { c.c.Cancel() }

func (c *pausingCancel) Cancelled() bool {
	if c.n.Add(1)%pauseEvery == 0 {
		c.b.wait()
	}
	return c.c.Cancelled()
}

// newCancel is topdown's cancellation for an evaluation with ctx: one that
// pauses when ctx is Background.
func newCancel(ctx context.Context) topdown.Cancel {
	c := topdown.NewCancel()
	if b := backgroundOf(ctx); b != nil {
		return &pausingCancel{c: c, b: b}
	}
	return c
}

// stopper is a deadline timer.
type stopper interface{ Stop() bool }

// afterRunning calls f once the evaluation with ctx has run for d: d from
// now for a request, d plus whatever time it spends paused for a
// Background evaluation.
func afterRunning(ctx context.Context, d time.Duration, f func()) stopper {
	b := backgroundOf(ctx)
	if b == nil {
		return time.AfterFunc(d, f)
	}
	t := &runningTimer{b: b, f: f, counted: b.paused()}
	t.mu.Lock()
	t.t = time.AfterFunc(d, t.fire)
	t.mu.Unlock()
	return t
}

// runningTimer is a deadline that moves by the time its evaluation spent
// paused.
type runningTimer struct {
	mu      sync.Mutex
	t       *time.Timer
	b       *background
	f       func()
	counted time.Duration // paused time already added to the deadline
	stopped bool
}

func (r *runningTimer) fire() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	if p := r.b.paused(); p > r.counted {
		r.t.Reset(p - r.counted)
		r.counted = p
		r.mu.Unlock()
		return
	}
	r.stopped = true
	r.mu.Unlock()
	r.f()
}

func (r *runningTimer) Stop() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	was := !r.stopped
	r.stopped = true
	r.t.Stop()
	return was
}
