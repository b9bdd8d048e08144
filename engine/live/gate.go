package live

import (
	"context"
	"errors"
	"fmt"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/defaults"
)

// The gate judges every candidate, whatever its source: it builds the
// Snapshot (parse, compile, type-check against the schemas, the policy
// tests and fixtures; engine.Load) within engine.Config.ReloadTimeout, then
// runs each GateCheck against the live revision. A candidate that fails any
// of it is a *engine.LoadError and never goes live.

// GateCheck is one judgement of the gate after the build, of cand against the
// live Snapshot (nil before the first one). An error refuses cand; its
// message is the problem reported.
type GateCheck func(ctx context.Context, cand, live *engine.Snapshot) error

// Judge builds src's current revision through the gate without making it
// live (a candidate for the shadow).
func (e *Engine) Judge(ctx context.Context, src Source) (*engine.Snapshot, error) {
	ctx, cancel := e.deadline(ctx)
	defer cancel()
	snap, err := e.build(ctx, src)
	if err != nil {
		return nil, err
	}
	return snap, e.check(ctx, snap, e.current.Load())
}

func (e *Engine) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, defaults.Positive(e.cfg.ReloadTimeout, engine.DefaultReloadTimeout))
}

// build runs apart so that the deadline holds even where it cannot be
// checked (compiling): a build still running at the deadline is abandoned,
// its result dropped, and the next candidate is not held up.
func (e *Engine) build(ctx context.Context, src Source) (*engine.Snapshot, error) {
	type built struct {
		snap *engine.Snapshot
		err  error
	}
	ch := make(chan built, 1)
	cfg := e.cfg
	go func() {
		snap, err := src.candidate(ctx, cfg)
		ch <- built{snap, err}
	}()
	select {
	case b := <-ch:
		return b.snap, b.err
	case <-ctx.Done():
		msg := fmt.Sprintf("the reload did not finish within %s (--reload-timeout); the candidate was abandoned", defaults.Positive(cfg.ReloadTimeout, engine.DefaultReloadTimeout))
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			msg = "the candidate was abandoned: " + ctx.Err().Error()
		}
		return nil, &engine.LoadError{Problems: []engine.Problem{{Message: msg}}, Abandoned: true}
	}
}

func (e *Engine) check(ctx context.Context, cand, live *engine.Snapshot) error {
	for _, c := range e.checks {
		if err := c(ctx, cand, live); err != nil {
			return &engine.LoadError{Problems: engine.ProblemsOf(err), Skipped: cand.Skipped}
		}
	}
	return nil
}
