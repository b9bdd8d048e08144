package shadow

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/defaults"
	"github.com/arbiter-dev/arbiter/internal/queue"
)

// Defaults of Config.
const (
	DefaultRate       = 1.0
	DefaultQueue      = 1024
	DefaultQueueBytes = 16 << 20
	DefaultWorkers    = 1
	DefaultCPU        = 0.1
	DefaultTimeout    = time.Minute
)

// Config bounds what shadow evaluation may take from the live service. The
// zero value of each field means its default. cmd fills it from flags.
type Config struct {
	// Rate is the fraction of live decisions offered to the candidate, in
	// (0, 1].
	Rate float64
	// Queue and QueueBytes bound the decisions waiting for the candidate,
	// by count and by the bytes of their inputs and results. A decision
	// that finds the queue full is not shadowed, and counted as dropped.
	Queue      int
	QueueBytes int64
	// Workers is how many candidate evaluations run at once.
	Workers int
	// CPU is the cores the candidate's evaluations may use on average
	// (see budget), over any span longer than a few milliseconds; 0.1 is
	// a tenth of one core.
	CPU float64
	// Timeout bounds the wall-clock time of one candidate decision,
	// parsing and pauses included: past it the decision is expired, not
	// judged. The candidate's own evaluation deadline (its EvalTimeout)
	// counts only the time it runs (engine.Background), and past it the
	// decision is a candidate_error.
	Timeout time.Duration
	// Examples is how many decision ids a report keeps per decision and
	// class.
	Examples int
	// MinDecisions is the promotion gate's minimum of judged decisions:
	// the progress toward it is in the queue-full warning.
	MinDecisions uint64
	// DecisionLog is the decision log file the server writes ("" or "-":
	// none the shadow can read). A promotion reads there the inputs of the
	// sampled decisions the candidate dropped, to judge them first.
	DecisionLog string
	// Logger receives the shadow's own warnings; nil means slog.Default().
	Logger *slog.Logger
	// SelfCheck is the fraction of the live revision's compiled answers
	// the self-check decides again (selfcheck.go); 0: none. SelfCheckBytes
	// bounds the inputs waiting for it.
	SelfCheck      float64
	SelfCheckBytes int64
	// Prover, when set, is told of each candidate and proves it against
	// the live revision (the semantic diff); the promotion gate states its
	// proofs beside the judged decisions (Report.Evidence, Gate.ProofRefusals).
	Prover Prover
}

// Candidate is a revision that went through the gate and runs in shadow.
type Candidate struct {
	Snapshot *engine.Snapshot
	// Origin says where it was read from: its folders, or a bundle's URL.
	Origin   string
	LoadedAt time.Time
	// LoadedBy is the caller that loaded it, "" when it came from flags.
	LoadedBy string
}

// Result is what the candidate made of one sampled decision.
type Result struct {
	Judgement
	Duration time.Duration
}

// Shadow holds at most one candidate and judges sampled live decisions
// with it, off the request path: Sample decides (cheaply, before the
// answer) whether a decision is shadowed, and Ticket.Start, called after
// the answer is written, queues it for the shadow's own workers. Nothing
// the candidate does reaches a caller: its workers are bounded in number
// and in CPU, its queue in count and bytes, and its evaluations by their
// own deadline.
type Shadow struct {
	cfg    Config
	log    *slog.Logger
	budget *budget
	jobs   *queue.Queue[*Ticket]
	checks lane // the self-check's (selfcheck.go)

	cur  atomic.Pointer[run] // nil: no candidate
	last atomic.Pointer[run] // the candidate Stats account for: cur, or the last one

	adminMu sync.Mutex // serialises Set, Clear and Promote
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup

	total      counts // over every candidate, for the metrics
	inflight   atomic.Int64
	promotions [3]atomic.Uint64 // promoted, forced, refused

	// busy counts the live decisions in flight (LiveStart, LiveEnd); the
	// candidate's evaluations pause while it is not zero. idle receives a
	// token when it drops to zero; paused counts the workers waiting.
	busy, paused atomic.Int64
	starts       atomic.Uint64 // live decisions started, ever
	idle         chan struct{}

	classMu sync.Mutex
	classes map[string][6]uint64 // cumulative over candidates, for metrics
}

// run is one candidate's time in shadow: a new candidate starts a new
// tally and cancels what the previous one was still evaluating.
type run struct {
	cand   *Candidate
	tally  *Tally
	n      counts // its Stats
	ctx    context.Context
	cancel context.CancelFunc
}

// counts are the account of Stats, one counter per kind.
type counts [numCounts]atomic.Int64

const (
	cSampled = iota
	cJudged
	cDropped
	cAbandoned
	cExpired
	cUnjudged
	cEvalNS
	cWaitNS
	cPausedNS
	numCounts
)

// add counts v of kind k for r's candidate and in the totals; nothing for
// the self-check (r nil), which has its own account.
func (s *Shadow) add(r *run, k int, v int64) {
	if r != nil {
		s.total[k].Add(v)
		r.n[k].Add(v)
	}
}

// New starts a Shadow's workers; it holds no candidate yet.
func New(cfg Config) *Shadow {
	if cfg.Rate <= 0 || cfg.Rate > 1 {
		cfg.Rate = DefaultRate
	}
	lim := queue.Limits{Items: cfg.Queue, Bytes: cfg.QueueBytes}.Or(queue.Limits{Items: DefaultQueue, Bytes: DefaultQueueBytes})
	cfg.Queue, cfg.QueueBytes = lim.Items, lim.Bytes
	defaults.Set(&cfg.Workers, DefaultWorkers)
	defaults.Set(&cfg.CPU, DefaultCPU)
	defaults.Set(&cfg.Timeout, DefaultTimeout)
	defaults.Set(&cfg.Examples, DefaultExamples)
	defaults.Set(&cfg.SelfCheckBytes, DefaultSelfCheckBytes)
	s := &Shadow{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), budget: newBudget(cfg.CPU), jobs: queue.New[*Ticket](lim), classes: map[string][6]uint64{}, idle: make(chan struct{}, 1)}
	s.checks = lane{q: queue.New[engine.Recheck](queue.Limits{Items: selfCheckQueue, Bytes: cfg.SelfCheckBytes, HoldBytes: true}), disagreements: map[string]uint64{}}
	s.ctx, s.stop = context.WithCancel(context.Background())
	for range cfg.Workers {
		s.wg.Add(1)
		go s.work()
	}
	return s
}

// Config returns the configuration in effect, defaults filled in.
func (s *Shadow) Config() Config { return s.cfg }

// Set makes c the candidate. The previous one stops: what it was still
// evaluating is abandoned, and the new one starts a new report.
func (s *Shadow) Set(c *Candidate) {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	ctx, cancel := context.WithCancel(s.ctx)
	r := &run{cand: c, tally: NewTally(s.cfg.Examples), ctx: ctx, cancel: cancel}
	if old := s.cur.Swap(r); old != nil {
		old.cancel()
	}
	s.last.Store(r)
	if s.ctx.Err() != nil { // closed meanwhile
		s.cur.CompareAndSwap(r, nil)
		cancel()
		return
	}
	if s.cfg.Prover != nil {
		s.cfg.Prover.Candidate(c.Snapshot)
	}
}

// Clear stops shadowing and returns the candidate it held, nil if none.
func (s *Shadow) Clear() *Candidate {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	return s.clear()
}

func (s *Shadow) clear() *Candidate {
	old := s.cur.Swap(nil)
	if old == nil {
		return nil
	}
	old.cancel()
	if s.cfg.Prover != nil {
		s.cfg.Prover.Candidate(nil)
	}
	return old.cand
}

// Proofs is what the Prover knows now of the candidate in shadow against
// the live revision (every class absent without a Prover or a candidate).
func (s *Shadow) Proofs() Proofs {
	r := s.cur.Load()
	if r == nil || s.cfg.Prover == nil {
		return Proofs{}
	}
	return s.cfg.Prover.Proofs(r.cand.Snapshot)
}

// Candidate returns the candidate in shadow, nil if none.
func (s *Shadow) Candidate() *Candidate {
	if r := s.cur.Load(); r != nil {
		return r.cand
	}
	return nil
}

// Report returns the impact of the candidate so far, and false when there
// is no candidate.
func (s *Shadow) Report() (Report, bool) {
	r := s.cur.Load()
	if r == nil {
		return Report{}, false
	}
	return r.tally.Report(), true
}

// Ticket is one sampled live decision on its way to the candidate. Its
// done function is called exactly once: with the candidate's result, or
// with nil when the decision was dropped, abandoned or could not be
// decided again.
type Ticket struct {
	s    *Shadow
	run  *run
	rec  decisionlog.Record
	done func(*Result)
	over atomic.Bool
}

// Sample decides whether the decision logged as rec is shadowed: there is a
// candidate, the sampler picks it, and it is a record that can be decided
// again. It returns nil when not. It reads nothing of the input and copies
// nothing, so that it costs the live request next to nothing; rec's
// slices are kept and must not be modified afterwards.
func (s *Shadow) Sample(rec decisionlog.Record, done func(*Result)) *Ticket {
	r := s.cur.Load()
	if r == nil || !Redecidable(&rec) {
		return nil
	}
	if s.cfg.Rate < 1 && rand.Float64() >= s.cfg.Rate {
		return nil
	}
	s.add(r, cSampled, 1)
	if s.jobs.Len() >= s.cfg.Queue {
		// Full already (a slow candidate, or one paused by steady load):
		// dropped here, so that the live request pays for nothing more.
		s.jobs.Drop(queue.Full, 1)
		s.drop(r, rec.DecisionID, nil)
		return nil
	}
	return &Ticket{s: s, run: r, rec: rec, done: done}
}

// Start queues the ticket for the candidate. It is called once the live
// answer is written, never blocks, and is a no-op on a nil Ticket. A full
// queue drops the ticket (counted).
func (t *Ticket) Start() {
	if t == nil {
		return
	}
	switch ok, why := t.s.jobs.Put(t, int64(len(t.rec.Input)+len(t.rec.Result)+len(t.rec.BodyBase64))); {
	case why == queue.Closed:
		t.s.abandon(t)
	case !ok:
		t.s.drop(t.run, t.rec.DecisionID, t)
	}
}

// drop counts a sampled decision that finds the queue full; r owes its
// judgement until a promotion judges it from the decision log.
func (s *Shadow) drop(r *run, id string, t *Ticket) {
	r.tally.Drop(id)
	s.add(r, cDropped, 1)
	if n := s.jobs.Dropped(queue.Full); n&(n-1) == 0 { // 1, 2, 4, 8, ...: a flood warns a few times, not per request
		flag, bound := "--shadow-queue", fmt.Sprint(s.cfg.Queue)
		if s.jobs.Len() < s.cfg.Queue {
			flag, bound = "--shadow-queue-bytes", fmt.Sprint(s.cfg.QueueBytes)
		}
		attrs := []any{"flag", flag, "bound", bound, "dropped_total", n}
		if s.cfg.MinDecisions > 0 {
			attrs = append(attrs, "progress", Progress(r.tally.Report(), s.cfg.MinDecisions))
		}
		s.log.Warn("shadow queue full: decisions not shadowed; raise "+flag+" to hold longer bursts (or --shadow-cpu if the candidate never catches up)", attrs...)
	}
	t.finish(nil)
}

func (t *Ticket) finish(r *Result) {
	if t != nil && t.over.CompareAndSwap(false, true) && t.done != nil {
		t.done(r)
	}
}

func (s *Shadow) work() {
	defer s.wg.Done()
	var one []*Ticket
	var check []engine.Recheck
	for s.ctx.Err() == nil {
		if check, _ = s.checks.q.Take(check[:0], 1); len(check) == 1 { // the live revision's first
			s.recheck(check[0])
			check[0] = engine.Recheck{}
			continue
		}
		if one, _ = s.jobs.Take(one[:0], 1); len(one) == 0 {
			select {
			case <-s.ctx.Done():
			case <-s.jobs.Ready():
			case <-s.checks.q.Ready():
			}
			continue
		}
		s.judge(one[0])
		one[0] = nil
	}
}

func (s *Shadow) judge(t *Ticket) {
	r := t.run
	if s.cur.Load() != r || r.ctx.Err() != nil {
		s.abandon(t)
		return
	}
	waited, err := s.budget.wait(r.ctx)
	s.add(r, cWaitNS, int64(waited))
	if err != nil {
		s.abandon(t)
		return
	}
	req, skip := FromRecord(t.rec)
	if skip != "" {
		s.add(r, cUnjudged, 1)
		t.finish(nil)
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, s.cfg.Timeout)
	defer cancel()
	j, d := s.judgeWith(ctx, r, req)
	switch {
	case r.ctx.Err() != nil:
		// Replaced, promoted or closed while it ran: its answer, cut off,
		// says nothing about the candidate.
		s.abandon(t)
		return
	case ctx.Err() != nil:
		// Paused for live traffic (or its budget) past Config.Timeout:
		// that says nothing about the candidate either, and it is owed.
		s.add(r, cExpired, 1)
		r.tally.Drop(t.rec.DecisionID)
		t.finish(nil)
		return
	}
	r.tally.Add(j.Decision, j.Class, j.DecisionID)
	s.count(j.Decision, j.Class)
	s.add(r, cJudged, 1)
	t.finish(&Result{Judgement: j, Duration: d})
}

// judgeWith judges req with r's candidate, within ctx, and returns the time
// it ran.
func (s *Shadow) judgeWith(ctx context.Context, r *run, req Request) (j Judgement, d time.Duration) {
	req.Options.Topdown = true // background work runs on the authority, the evaluator that pauses
	d = s.evaluate(ctx, r, func(ctx context.Context) { j = Judge(ctx, r.cand.Snapshot, req) })
	return j, d
}

// evaluate runs eval (r's candidate's, or the self-check's when r is nil)
// within ctx, and returns the time it ran. It runs on time the live
// decisions leave idle, within its CPU budget: it starts when no live
// decision is in flight, and every few dozen evaluation steps it pays for
// the time it ran, pauses while a live decision is in flight (going on
// after a quiet millisecond) and while the budget is in debt
// (engine.Background). Its deadline counts only the time it runs.
func (s *Shadow) evaluate(ctx context.Context, r *run, eval func(context.Context)) time.Duration {
	var paused time.Duration
	seen := s.starts.Load()
	idle := func() {
		d := s.waitIdle(ctx, &seen)
		s.add(r, cPausedNS, int64(d))
		paused += d
	}
	idle()
	mark := time.Now()
	pause := func() {
		s.budget.spend(time.Since(mark))
		idle()
		w, _ := s.budget.wait(ctx)
		s.add(r, cWaitNS, int64(w))
		paused += w
		mark = time.Now()
	}
	if r != nil {
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
	}
	start := time.Now()
	eval(engine.Background(ctx, pause))
	s.budget.spend(time.Since(mark))
	d := time.Since(start)
	d -= min(d, paused)
	s.add(r, cEvalNS, int64(d))
	return d
}

// LiveStart and LiveEnd bracket every live decision request: while any is
// in flight, the candidate's evaluations pause, so that a candidate, slow
// or looping, only ever runs on time the live path leaves idle. They cost
// the live request two atomic additions.
func (s *Shadow) LiveStart() {
	s.busy.Add(1)
	s.starts.Add(1)
}

// LiveEnd ends what LiveStart began.
func (s *Shadow) LiveEnd() {
	if s.busy.Add(-1) == 0 {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

// idleRecheck bounds how long a paused worker waits before looking again
// (the idle token wakes one worker; others, if any, look on their own).
const idleRecheck = 5 * time.Millisecond

// quiet is how long no live decision may have started before a paused
// evaluation goes on: under steady load the gaps between requests are
// shorter, and the candidate waits for the load to ease instead of
// running in them.
const quiet = time.Millisecond

// waitIdle returns at once when no live decision has started since seen
// and none is in flight; otherwise once none is in flight and none has
// started for a quiet millisecond (or ctx ended), and how long it waited.
// seen is the count of live starts the evaluation last went on after.
func (s *Shadow) waitIdle(ctx context.Context, seen *uint64) time.Duration {
	if s.busy.Load() <= 0 && s.starts.Load() == *seen {
		return 0
	}
	start := time.Now()
	s.paused.Add(1)
	t := time.NewTimer(idleRecheck)
	for ctx.Err() == nil {
		for s.busy.Load() > 0 && ctx.Err() == nil {
			select {
			case <-s.idle:
			case <-t.C:
				t.Reset(idleRecheck)
			case <-ctx.Done():
			}
		}
		n := s.starts.Load()
		t.Reset(quiet) // no stale tick after a Reset since Go 1.23
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Reset(idleRecheck)
		if s.busy.Load() <= 0 && s.starts.Load() == n {
			*seen = n
			break
		}
	}
	t.Stop()
	s.paused.Add(-1)
	return time.Since(start)
}

func (s *Shadow) abandon(t *Ticket) {
	s.add(t.run, cAbandoned, 1)
	t.finish(nil)
}

func (s *Shadow) count(decision string, c Class) {
	s.classMu.Lock()
	row := s.classes[decision]
	row[c.index()]++
	s.classes[decision] = row
	s.classMu.Unlock()
}

// Close stops the workers, cancelling the evaluations in flight, and
// finishes every ticket still queued (with nil: abandoned). It returns
// ctx's error when a worker does not stop in time.
func (s *Shadow) Close(ctx context.Context) error {
	s.jobs.Close() // no ticket enters now, so taking what is queued finishes every one
	s.checks.q.Close()
	s.stop() // before adminMu: it ends a promotion's catchUp too
	s.adminMu.Lock()
	s.clear()
	s.adminMu.Unlock()
	stopped := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(stopped)
	}()
	var err error
	select {
	case <-stopped:
	case <-ctx.Done():
		err = fmt.Errorf("shadow: workers still evaluating at close: %w", ctx.Err())
	}
	left, _ := s.jobs.Take(nil, 0)
	for _, t := range left {
		s.abandon(t)
	}
	return err
}

// Stats is the account of the decisions offered to one candidate: the one
// in shadow (the one its report counts), or the last one when none is.
// Queued, InFlight and Paused are the shadow's now.
type Stats struct {
	// Sampled decisions were picked for the candidate. Each is queued, in
	// flight, or has ended judged (counted in the report of its
	// candidate), dropped (the queue was full), abandoned
	// (the candidate changed or the shadow closed first), expired (paused
	// for live traffic or its budget past Config.Timeout) or unjudged (its
	// record could not be decided again).
	Sampled   uint64 `json:"sampled"`
	Judged    uint64 `json:"judged"`
	Dropped   uint64 `json:"dropped"`
	Abandoned uint64 `json:"abandoned"`
	Expired   uint64 `json:"expired"`
	Unjudged  uint64 `json:"unjudged"`
	Queued    int    `json:"queued"`
	InFlight  int64  `json:"in_flight"`
	// Paused is how many evaluations wait for live traffic now.
	Paused int64 `json:"paused"`
	// EvaluationSeconds is the time the workers spent evaluating,
	// ThrottledSeconds the time they waited for the CPU budget, and
	// PausedSeconds the time they waited for live traffic.
	EvaluationSeconds float64 `json:"evaluation_seconds"`
	ThrottledSeconds  float64 `json:"throttled_seconds"`
	PausedSeconds     float64 `json:"paused_seconds"`
}

// Stats returns the account of the candidate in shadow, or of the last
// one (zero before the first).
func (s *Shadow) Stats() Stats {
	if r := s.last.Load(); r != nil {
		return s.stats(&r.n)
	}
	return s.stats(new(counts))
}

// stats is the account of n, with the shadow's queue and workers now.
func (s *Shadow) stats(n *counts) Stats {
	u := func(k int) uint64 { return uint64(n[k].Load()) }
	sec := func(k int) float64 { return time.Duration(n[k].Load()).Seconds() }
	return Stats{
		Sampled: u(cSampled), Judged: u(cJudged), Dropped: u(cDropped), Abandoned: u(cAbandoned), Expired: u(cExpired), Unjudged: u(cUnjudged),
		Queued: s.jobs.Len(), InFlight: s.inflight.Load(), Paused: s.paused.Load(),
		EvaluationSeconds: sec(cEvalNS), ThrottledSeconds: sec(cWaitNS), PausedSeconds: sec(cPausedNS),
	}
}

// ErrNoCandidate is returned by Promote when no candidate is loaded.
var ErrNoCandidate = errors.New("no candidate is loaded in shadow")

// ErrRefused is returned by Promote when the gate refuses; the Promotion
// says why.
var ErrRefused = errors.New("the promotion gate refused the candidate")

// RevisionError is returned by Promote when the candidate in shadow is not
// the revision the operator meant to promote.
type RevisionError struct{ Want, Have string }

func (e *RevisionError) Error() string {
	return fmt.Sprintf("the candidate in shadow is revision %s, not %s", e.Have, e.Want)
}

// PromoteOptions say what to promote and on what evidence.
type PromoteOptions struct {
	// Revision, when set, is the candidate revision whose report the
	// operator read; another candidate in shadow is not promoted.
	Revision string
	Gate     Gate
	// Force promotes even when the gate refuses (the refusals are still
	// reported and logged).
	Force bool
	// By is the caller asking.
	By string
}

// Promotion is the record of one promotion attempt: who asked, what, on
// what evidence, and whether it happened.
type Promotion struct {
	At       time.Time `json:"at"`
	By       string    `json:"by,omitempty"`
	Revision string    `json:"policy_revision"`
	Origin   string    `json:"origin,omitempty"`
	// From is the live revision it replaced (set by the caller's activate).
	From     string   `json:"from_revision,omitempty"`
	Promoted bool     `json:"promoted"`
	Forced   bool     `json:"forced"`
	Gate     Gate     `json:"gate"`
	Refusals []string `json:"refusals"`
	Report   Report   `json:"report"`
	// Evidence is the strongest evidence per class of Proved: the diff's
	// proof or example, or the decisions judged.
	Evidence []Evidence `json:"evidence"`
}

// Promote makes the candidate live when its report passes o.Gate (or
// o.Force), once it has judged the sampled decisions the candidate dropped
// (catchUp): activate is handed the candidate, and whether the promotion
// is forced past refusals, and swaps it in; then the
// shadow holds no candidate any more (the candidate is what is live). It
// returns ErrNoCandidate, a *RevisionError, ErrRefused, or activate's
// error, always with the Promotion record of the attempt when there was a
// candidate.
func (s *Shadow) Promote(ctx context.Context, o PromoteOptions, activate func(ctx context.Context, c *Candidate, forced bool) (from string, err error)) (Promotion, error) {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	r := s.cur.Load()
	if r == nil {
		return Promotion{}, ErrNoCandidate
	}
	p := Promotion{At: time.Now().UTC(), By: o.By, Revision: r.cand.Snapshot.Revision, Origin: r.cand.Origin, Gate: o.Gate, Refusals: []string{}}
	if o.Revision != "" && o.Revision != p.Revision {
		return p, &RevisionError{Want: o.Revision, Have: p.Revision}
	}
	why := s.catchUp(ctx, r)
	p.Report = r.tally.Report()
	proofs := s.Proofs() // r's: adminMu keeps it the candidate
	p.Evidence = p.Report.Evidence(proofs)
	p.Refusals = append(p.Refusals, o.Gate.Refusals(p.Report)...)
	p.Refusals = append(p.Refusals, o.Gate.ProofRefusals(proofs)...)
	p.Refusals = append(p.Refusals, why...)
	if len(p.Refusals) > 0 && !o.Force {
		s.promotions[2].Add(1)
		return p, ErrRefused
	}
	from, err := activate(ctx, r.cand, len(p.Refusals) > 0)
	if err != nil {
		s.promotions[2].Add(1)
		return p, err
	}
	p.From, p.Promoted, p.Forced = from, true, len(p.Refusals) > 0
	if p.Forced {
		s.promotions[1].Add(1)
	} else {
		s.promotions[0].Add(1)
	}
	s.clear()
	return p, nil
}

// errPausedTooLong stops catchUp: live traffic held one of its evaluations
// past Config.Timeout.
var (
	errPausedTooLong = errors.New("paused for live traffic past the shadow's timeout")
	errAllRead       = errors.New("every dropped decision found")
)

// catchUp judges with r's candidate the sampled decisions it dropped,
// reading their records from the decision log (the file, then the backups
// the writer rotated it into), as shadow evaluations run: within the CPU
// budget, on time live decisions leave idle. It returns why some remain
// owed: each keeps the gate refusing.
func (s *Shadow) catchUp(ctx context.Context, r *run) []string {
	var why []string
	owed := r.tally.Owed()
	if rep := r.tally.Report(); rep.Dropped-rep.LaterJudged > uint64(len(owed)) {
		why = append(why, fmt.Sprintf("more decisions were dropped than the %d whose ids are kept: load the candidate again to start a new report", maxOwed))
	}
	if len(owed) == 0 {
		return why
	}
	if s.cfg.DecisionLog == "" || s.cfg.DecisionLog == "-" {
		return append(why, "no decision log file to read the dropped decisions from (--decision-log)")
	}
	// Close ends it, as it ends the workers' evaluations.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.ctx, cancel)()
	want := make(map[string]bool, len(owed))
	for _, id := range owed {
		want[id] = true
	}
	var cannot []string
	err := decisionlog.ReadLog(s.cfg.DecisionLog, func(rec decisionlog.Record) error {
		if len(want) == 0 {
			return errAllRead
		}
		if !want[rec.DecisionID] || !rec.IsDecision() {
			return nil
		}
		delete(want, rec.DecisionID)
		req, skip := FromRecord(rec)
		if skip != "" {
			cannot = append(cannot, rec.DecisionID+" ("+skip+")")
			return nil
		}
		jctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
		w, _ := s.budget.wait(jctx)
		s.add(r, cWaitNS, int64(w))
		j, _ := s.judgeWith(jctx, r, req)
		if jctx.Err() != nil {
			return cmp.Or(ctx.Err(), errPausedTooLong)
		}
		r.tally.AddLate(j.Decision, j.Class, j.DecisionID)
		s.count(j.Decision, j.Class)
		return nil
	})
	switch {
	case errors.Is(err, errPausedTooLong):
		return append(why, "judging the dropped decisions was "+err.Error()+": promote again when the load eases")
	case err != nil && !errors.Is(err, errAllRead):
		return append(why, "judging the dropped decisions from the decision log: "+err.Error())
	}
	if len(cannot) > 0 {
		why = append(why, fmt.Sprintf("%d dropped decisions cannot be decided again from their records, e.g. %s", len(cannot), cannot[0]))
	}
	if len(want) > 0 {
		var id string
		for id = range want {
			break
		}
		why = append(why, fmt.Sprintf("%d dropped decisions are not in the decision log (not written yet, refused by the log, or rotated away), e.g. %s", len(want), id))
	}
	return why
}
