package shadow

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/queue"
)

// The self-check lane: the live revision's compiled answers (handed over by
// engine.Config.SelfCheck) are sampled at Config.SelfCheck and decided again
// by topdown (engine.Recheck) on the shadow's workers, within its CPU budget
// and pausing for live traffic as a candidate does. Its queue is its own,
// bounded by selfCheckQueue checks and Config.SelfCheckBytes of inputs; a
// larger input is never copied (the differential tests and fuzz targets
// cover large inputs instead). A disagreement turns the compiled path off
// for the decision until the next reload, and is counted and logged.

// DefaultSelfCheckBytes bounds the inputs waiting for a check: a typical
// Runner state is a few KB; re-deciding a state of megabytes with topdown
// would cost more CPU than the rate promises.
const (
	DefaultSelfCheckBytes = 1 << 20
	selfCheckQueue        = 64
)

// lane is the self-check's queue and account.
type lane struct {
	q             *queue.Queue[engine.Recheck]
	n             [3]atomic.Uint64  // checked, dropped, too_large
	disagreements map[string]uint64 // by decision, under classMu
}

// SelfCheck samples one compiled answer of the live revision for the
// self-check. It never blocks: the request's answer does not wait for it.
func (s *Shadow) SelfCheck(c engine.Recheck) {
	if rand.Float64() >= s.cfg.SelfCheck {
		return
	}
	n := int64(len(c.Input))
	if n > s.cfg.SelfCheckBytes {
		s.checks.n[2].Add(1)
		return
	}
	c.Input = bytes.Clone(c.Input) // the body's buffer goes back to the server's pool with the answer
	if ok, _ := s.checks.q.Put(c, n); !ok {
		s.checks.n[1].Add(1)
	}
}

// SelfChecked is how many sampled answers the self-check decided again.
func (s *Shadow) SelfChecked() uint64 { return s.checks.n[0].Load() }

// recheck decides one sampled answer again, as a candidate's decision is
// (evaluate), bounded by Config.Timeout: past it, as past topdown's own
// deadline, the check is inconclusive.
func (s *Shadow) recheck(c engine.Recheck) {
	defer s.checks.q.Done(int64(len(c.Input)))
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	var d *engine.Disagreement
	if _, err := s.budget.wait(ctx); err != nil {
		return // the budget never came (stopping, or the timeout): not checked
	}
	s.checks.n[0].Add(1)
	s.evaluate(ctx, nil, func(ctx context.Context) { d = c.Run(ctx) })
	if d == nil {
		return
	}
	s.classMu.Lock()
	s.checks.disagreements[d.Decision]++
	s.classMu.Unlock()
	input := string(d.Input)
	if len(input) > 4096 {
		input = fmt.Sprintf("(%d bytes, in the decision log)", len(d.Input))
	}
	s.log.Error("compiled evaluation disagrees with topdown; the decision runs on topdown until the next reload",
		"decision", d.Decision, "revision", d.Revision, "compiled", d.Compiled, "topdown", d.Topdown, "input", input)
}
