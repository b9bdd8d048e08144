package diff

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/shadow"
)

// The states of a diff a Runner runs.
const (
	StateQueued  = "queued"
	StateRunning = "running"
	StateDone    = "done"
	StateFailed  = "failed" // an error, or past the Runner's timeout
)

// Status is one diff of a Runner: two revisions, how far it is, and its
// report once done.
type Status struct {
	Old      string     `json:"old_revision"`
	New      string     `json:"new_revision"`
	State    string     `json:"state"`
	Queued   time.Time  `json:"queued_at"`
	Started  *time.Time `json:"started_at,omitempty"`
	Finished *time.Time `json:"finished_at,omitempty"`
	Error    string     `json:"error,omitempty"`
	Report   *Report    `json:"report,omitempty"`
	// Carried: the report is the one the new revision's bundle carried
	// (arbiter build --diff-against), not one this replica ran.
	Carried bool `json:"carried,omitempty"`
}

// Runner runs the diffs a server needs, off its activation and answer
// paths: the live revision against the one it replaced (Activated), and the
// candidate in shadow against the live revision (Candidate). One diff runs
// at a time, on the Runner's one goroutine, each within the timeout; each of
// the two has at most one diff queued or running, and a newer one cancels
// it (through its context). Finished diffs are kept by their two revisions,
// the last maxKept, so that the reload history can show them.
type Runner struct {
	timeout time.Duration
	log     *slog.Logger
	child   *Child // nil: in this process

	mu         sync.Mutex
	live, cand *engine.Snapshot
	slots      [2]*job // slotLive, slotShadow: the newest diff of each
	kept       []*job  // finished, oldest first
	wake       chan struct{}

	ctx  context.Context
	stop context.CancelFunc
}

const (
	slotLive = iota
	slotShadow
)

// maxKept bounds the finished diffs a Runner keeps: one per entry of the
// reload history, and the shadow candidate's.
const maxKept = live.MaxReloadHistory + 2

type job struct {
	st               Status
	oldHash, newHash string
	// old and new are held only until the diff ends: a kept diff must not
	// keep two compiled revisions alive.
	old, new *engine.Snapshot
	cancel   context.CancelFunc
}

// of reports whether j is the diff of old against new (their revisions
// and contents).
func (j *job) of(old, new *engine.Snapshot) bool {
	return j.st.Old == old.Revision && j.st.New == new.Revision && j.oldHash == old.Hash && j.newHash == new.Hash
}

// NewRunner starts a Runner whose diffs each stop at timeout, each in a
// child process when child is not nil (as arbiter serve runs them: its
// end without a report, or its timeout, is every answer unknown), else in
// this process.
func NewRunner(timeout time.Duration, log *slog.Logger, child *Child) *Runner {
	if log == nil {
		log = slog.Default()
	}
	r := &Runner{timeout: timeout, log: log, child: child, wake: make(chan struct{}, 1)}
	r.ctx, r.stop = context.WithCancel(context.Background())
	go r.work()
	return r
}

// Close cancels the diff running and stops the Runner (a child process or
// a solver is killed with it); it does not wait for it to end.
func (r *Runner) Close() { r.stop() }

// Activated is told of each revision made live (live.OnActivate): it
// diffs it against the one it replaced, and the candidate in shadow, if
// any, against it.
func (r *Runner) Activated(s *engine.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.live
	r.live = s
	if prev != nil && prev.Revision != s.Revision {
		r.queue(slotLive, prev, s)
	}
	if r.cand != nil {
		r.queue(slotShadow, s, r.cand)
	}
}

// Candidate is told of each candidate put in shadow (nil: none any more):
// it diffs it against the live revision (shadow.Prover).
func (r *Runner) Candidate(c *engine.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cand = c
	if c == nil {
		r.cancelSlot(slotShadow)
		return
	}
	if r.live != nil {
		r.queue(slotShadow, r.live, c)
	}
}

// queue makes old against new the diff of slot, unless it is already, or
// kept finished. Called with r.mu held.
func (r *Runner) queue(slot int, old, new *engine.Snapshot) {
	if j := r.slots[slot]; j != nil && j.of(old, new) {
		return
	}
	if j := r.find(old.Revision, new.Revision); j != nil && j.st.State == StateDone && j.of(old, new) {
		r.cancelSlot(slot)
		r.slots[slot] = j
		return
	}
	r.cancelSlot(slot)
	now := time.Now().UTC()
	if rep, ok := Carried(old, new); ok {
		// One proof per revision, made where it was built.
		j := &job{st: Status{Old: old.Revision, New: new.Revision, State: StateDone, Queued: now, Started: &now, Finished: &now, Report: rep, Carried: true},
			oldHash: old.Hash, newHash: new.Hash}
		r.slots[slot] = j
		r.keep(j)
		return
	}
	r.slots[slot] = &job{st: Status{Old: old.Revision, New: new.Revision, State: StateQueued, Queued: now},
		oldHash: old.Hash, newHash: new.Hash, old: old, new: new}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// cancelSlot cancels the diff of slot when it has not finished: a queued
// one never starts, a running one stops at its next check.
func (r *Runner) cancelSlot(slot int) {
	j := r.slots[slot]
	r.slots[slot] = nil
	if j == nil || (j.st.State != StateQueued && j.st.State != StateRunning) {
		return
	}
	if j.cancel != nil {
		j.cancel()
	}
	if j.st.State == StateQueued {
		j.old, j.new = nil, nil
	}
	j.st.State = StateFailed
	j.st.Error = "cancelled: a newer revision replaced it"
}

// find returns the newest diff of old against new, finished or not.
// Called with r.mu held.
func (r *Runner) find(old, new string) *job {
	for _, j := range r.slots {
		if j != nil && j.st.Old == old && j.st.New == new {
			return j
		}
	}
	for i := len(r.kept) - 1; i >= 0; i-- {
		if j := r.kept[i]; j.st.Old == old && j.st.New == new {
			return j
		}
	}
	return nil
}

func (r *Runner) work() {
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.wake:
		}
		for r.runNext() {
		}
	}
}

// runNext runs one queued diff (the live revision's first), and reports
// whether there was one.
func (r *Runner) runNext() bool {
	r.mu.Lock()
	var j *job
	for _, s := range r.slots {
		if s != nil && s.st.State == StateQueued {
			j = s
			break
		}
	}
	if j == nil || r.ctx.Err() != nil {
		r.mu.Unlock()
		return false
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.timeout)
	defer cancel()
	j.cancel = cancel
	now := time.Now().UTC()
	j.st.State, j.st.Started = StateRunning, &now
	old, new := j.old, j.new
	r.mu.Unlock()

	rep, err := r.child.run(ctx, old, new)

	r.mu.Lock()
	defer r.mu.Unlock()
	j.old, j.new = nil, nil
	if j.st.State != StateRunning { // cancelled by a newer one
		return true
	}
	end := time.Now().UTC()
	j.st.Finished = &end
	switch {
	case err == nil && rep != nil && (r.child != nil || ctx.Err() == nil):
		// A child's report says unknown for what did not finish.
		j.st.State, j.st.Report = StateDone, rep
	case errors.Is(err, context.DeadlineExceeded) || err == nil:
		j.st.State, j.st.Error = StateFailed, fmt.Sprintf("did not finish within %s (--diff-timeout)", r.timeout)
	default:
		j.st.State, j.st.Error = StateFailed, err.Error()
	}
	r.keep(j)
	return true
}

// keep records a finished diff (the last maxKept) and logs it. Called
// with r.mu held.
func (r *Runner) keep(j *job) {
	r.kept = append(r.kept, j)
	if len(r.kept) > maxKept {
		r.kept = slices.Delete(r.kept, 0, len(r.kept)-maxKept)
	}
	r.logDone(j)
}

func (r *Runner) logDone(j *job) {
	args := []any{"old", j.st.Old, "new", j.st.New, "seconds", j.st.Finished.Sub(*j.st.Started).Seconds(), "carried", j.st.Carried}
	if j.st.State != StateDone {
		r.log.Warn("diff failed", append(args, "err", j.st.Error)...)
		return
	}
	for _, c := range Questions {
		args = append(args, QuestionName(c), j.st.Report.Proof(c).Verdict)
	}
	if p := j.st.Report.Proof(shadow.RefuseToAllow); p.Verdict == Found {
		r.log.Warn("diff: the new revision allows an input the old one refuses", append(args, "decision", p.Decision)...)
		return
	}
	r.log.Info("diff done", args...)
}

// Live returns the diff of the live revision against the one it replaced,
// false when there is none (the first revision, or no change since).
func (r *Runner) Live() (Status, bool) { return r.slot(slotLive) }

// Shadow returns the diff of the candidate in shadow against the live
// revision, false without a candidate.
func (r *Runner) Shadow() (Status, bool) { return r.slot(slotShadow) }

func (r *Runner) slot(i int) (Status, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j := r.slots[i]; j != nil {
		return j.st, true
	}
	return Status{}, false
}

// Get returns the newest diff of revision old against new, false when
// none was run (or it is no longer kept).
func (r *Runner) Get(old, new string) (Status, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j := r.find(old, new); j != nil {
		return j.st, true
	}
	return Status{}, false
}

// Proofs says what is known now of cand against the live revision
// (shadow.Prover).
func (r *Runner) Proofs(cand *engine.Snapshot) shadow.Proofs {
	r.mu.Lock()
	live := r.live
	var st Status
	if j := r.slots[slotShadow]; j != nil && live != nil && cand != nil && j.of(live, cand) {
		st = j.st
	}
	r.mu.Unlock()
	return st.Proofs()
}

// Proofs is the status's answer per question, all decisions together
// (shadow.Proofs): found when one decision has an example, else unknown
// when one has no proof, else none; running while it runs, absent when it
// failed or never ran.
func (st Status) Proofs() shadow.Proofs {
	out := shadow.Proofs{}
	for _, c := range Questions {
		switch {
		case st.State == StateQueued || st.State == StateRunning:
			out[c] = shadow.Proof{Verdict: shadow.VerdictRunning}
		case st.State == StateDone:
			out[c] = st.Report.Proof(c)
		case st.State == StateFailed:
			out[c] = shadow.Proof{Verdict: shadow.VerdictAbsent, Reason: "the diff failed: " + st.Error}
		default:
			out[c] = shadow.Proof{Verdict: shadow.VerdictAbsent, Reason: "no diff of this candidate against the live revision"}
		}
	}
	return out
}

// Proof is the report's answer to question q, all decisions together.
func (rep *Report) Proof(q shadow.Class) shadow.Proof {
	var unknown *shadow.Proof
	bounds := map[string][]string{}
	for _, name := range rep.Names() {
		a := rep.Decisions[name].Get(q)
		switch a.Verdict {
		case None:
			bounds[a.Bounds] = append(bounds[a.Bounds], name)
		case Found:
			return shadow.Proof{Verdict: shadow.VerdictFound, Decision: name, Reason: "the example differs at " + fieldList(a.Fields)}
		case Unknown:
			if unknown == nil {
				unknown = &shadow.Proof{Verdict: shadow.VerdictUnknown, Decision: name, Reason: a.Reason}
			}
		}
	}
	if unknown != nil {
		return *unknown
	}
	var over []string
	for _, b := range slices.Sorted(maps.Keys(bounds)) {
		over = append(over, b+" (decisions "+strings.Join(bounds[b], ", ")+")")
	}
	return shadow.Proof{Verdict: shadow.VerdictNone, Reason: "over " + strings.Join(over, "; ")}
}

func fieldList(fields []string) string {
	if len(fields) == 0 {
		return "no field of the fixture it started from"
	}
	return fmt.Sprint(fields)
}
