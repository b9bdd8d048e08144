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
	n             [len(checkOutcomes)]atomic.Uint64
	evalNS        atomic.Int64      // the time topdown took on them, pauses aside
	disagreements map[string]uint64 // by decision, under classMu
}

// checkOutcomes are what becomes of a sampled answer, each counted once:
// decided again and compared (a disagreement is checked, and counted by
// decision too), topdown out of time (inconclusive), the shadow's CPU
// budget not given within Config.Timeout or the stop (expired), the queue
// full (dropped), the input over Config.SelfCheckBytes (too_large).
var checkOutcomes = [...]string{"checked", "inconclusive", "expired", "dropped", "too_large"}

const (
	checked = iota
	inconclusive
	expired
	dropped
	tooLarge
)

// SelfCheck samples one compiled answer of the live revision for the
// self-check. It never blocks: the request's answer does not wait for it.
func (s *Shadow) SelfCheck(c engine.Recheck) {
	if rand.Float64() >= s.cfg.SelfCheck {
		return
	}
	n := int64(len(c.Input))
	if n > s.cfg.SelfCheckBytes {
		s.checks.n[tooLarge].Add(1)
		return
	}
	c.Input = bytes.Clone(c.Input) // the body's buffer goes back to the server's pool with the answer
	if ok, _ := s.checks.q.Put(c, n); !ok {
		s.checks.n[dropped].Add(1)
	}
}

// SelfChecked is how many sampled answers the self-check decided again.
func (s *Shadow) SelfChecked() uint64 { return s.checks.n[checked].Load() }

// recheck decides one sampled answer again, as a candidate's decision is
// (evaluate), bounded by Config.Timeout: past it, as past topdown's own
// deadline, the check is inconclusive.
func (s *Shadow) recheck(c engine.Recheck) {
	defer s.checks.q.Done(int64(len(c.Input)))
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	var d *engine.Disagreement
	concluded := false
	if _, err := s.budget.wait(ctx); err != nil {
		s.checks.n[expired].Add(1) // the budget never came (stopping, or the timeout)
		return
	}
	s.checks.evalNS.Add(int64(s.evaluate(ctx, nil, func(ctx context.Context) { d, concluded = c.Run(ctx) })))
	if !concluded {
		s.checks.n[inconclusive].Add(1)
		return
	}
	s.checks.n[checked].Add(1)
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
