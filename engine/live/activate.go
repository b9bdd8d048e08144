package live

import (
	"context"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
)

// Activate is the one way a revision goes live: src's candidate passes the
// gate, or it is refused and the active Snapshot keeps serving. The outcome
// is recorded (status, history, counts) and returned with the gate's
// refusal, a *engine.LoadError. A candidate whose revision and content are
// those of the active Snapshot changes nothing.
func (e *Engine) Activate(ctx context.Context, trigger string, src Source) (ReloadStatus, error) {
	st := ReloadStatus{Trigger: trigger}
	err := e.try(ctx, &st, src)
	e.record(&st)
	return st, err
}

// try judges src's candidate and activates it, filling in st.
func (e *Engine) try(ctx context.Context, st *ReloadStatus, src Source) error {
	start := time.Now()
	if st.At.IsZero() {
		st.At = start.UTC()
	}
	st.Origin = src.Origin()
	e.running.Store(&ReloadProgress{Since: st.At, Trigger: st.Trigger})
	defer e.running.Store(nil)
	ctx, cancel := e.deadline(ctx)
	defer cancel()
	snap, err := e.build(ctx, src)
	err = e.activate(ctx, st, src, snap, err)
	st.Duration = time.Since(start)
	return err
}

// activate swaps in snap when it is a good candidate that passes the gate's
// checks and differs from the active Snapshot, and records the outcome in
// st. Activations take turns here, so the checks judge the very Snapshot
// snap replaces and the hooks see activations in order.
func (e *Engine) activate(ctx context.Context, st *ReloadStatus, src Source, snap *engine.Snapshot, err error) error {
	e.swap.Lock()
	defer e.swap.Unlock()
	cur := e.current.Load()
	if cur != nil {
		st.Revision = cur.Revision
	}
	e.mu.Lock()
	if err == nil && e.closed { // whoever asks: a reload, a bundle, a promotion
		err = errStopping
	}
	e.mu.Unlock()
	promo, isPromo := src.(promotion)
	if err == nil {
		st.Candidate, st.Skipped = snap.Revision, snap.Skipped
		if !isPromo && (same(snap, cur) || e.keepsPromotion(snap)) {
			st.OK = true // nothing new, or the source has not changed since a promotion
			return nil
		}
		err = e.check(ctx, snap, cur)
	}
	if err != nil {
		st.Candidate, st.Problems = "", engine.ProblemsOf(err)
		if le, ok := err.(*engine.LoadError); ok {
			st.Skipped = le.Skipped
		}
		return err
	}
	var p *Promotion
	if isPromo {
		p = promo.record(cur, e.promoted.Load())
		st.Promotion = p
	}
	st.OK, st.Changed, st.Revision = true, !same(snap, cur), snap.Revision
	if st.Changed && cur != nil {
		st.From = cur.Revision
	}
	e.current.Store(snap)
	e.promoted.Store(p)
	for _, fn := range e.hooks {
		fn(snap)
	}
	return nil
}

// same reports whether a is b's revision with b's content and gate outcome.
func same(a, b *engine.Snapshot) bool {
	return b != nil && a.Revision == b.Revision && a.Hash == b.Hash && a.Gated == b.Gated
}

// record makes st the last outcome, in the history and the counts.
func (e *Engine) record(st *ReloadStatus) {
	if st.OK {
		e.reloadsOK.Add(1)
	} else {
		e.reloadsFailed.Add(1)
	}
	e.setLast(st)
}
