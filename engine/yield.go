package engine

import (
	"context"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/topdown"
)

// pauseEvery is how many topdown expressions a background evaluation
// evaluates between two calls of its pause function (the compiled
// evaluator calls it every 128 steps, at every other context check).
const pauseEvery = 32

type backgroundKey struct{}

// Background marks the decisions made with ctx as background work (a
// candidate revision in shadow): every few evaluation steps their
// evaluation calls pause, which may block until the process has time to
// spare. What they decide does not change; their evaluation deadline keeps
// running while they are paused.
//
// Topdown calls it from its per-expression cancellation check (and
// numbers.range from its loop), the compiled evaluator from its periodic
// context check.
func Background(ctx context.Context, pause func()) context.Context {
	return &pausingContext{Context: context.WithValue(ctx, backgroundKey{}, pause), pause: pause}
}

// pausingContext pauses in Err, which the compiled evaluator calls every
// 64 steps.
type pausingContext struct {
	context.Context
	pause func()
	n     atomic.Uint32
}

func (c *pausingContext) Err() error {
	if c.n.Add(1)%2 == 0 {
		c.pause()
	}
	return c.Context.Err()
}

// pausingCancel pauses in Cancelled, which topdown calls before every
// expression it evaluates.
type pausingCancel struct {
	c     topdown.Cancel
	pause func()
	n     atomic.Uint32
}

func (c *pausingCancel) Cancel() { c.c.Cancel() }

func (c *pausingCancel) Cancelled() bool {
	if c.n.Add(1)%pauseEvery == 0 {
		c.pause()
	}
	return c.c.Cancelled()
}

// newCancel is topdown's cancellation for an evaluation with ctx: one that
// pauses when ctx is Background.
func newCancel(ctx context.Context) topdown.Cancel {
	c := topdown.NewCancel()
	if pause, ok := ctx.Value(backgroundKey{}).(func()); ok {
		return &pausingCancel{c: c, pause: pause}
	}
	return c
}
