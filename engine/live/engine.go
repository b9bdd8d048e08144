package live

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
)

// Engine serves decisions from the current Snapshot and swaps in a new one
// only when a candidate passes the gate. Reads take one atomic load; a
// reload never tears a request in flight, and nothing that reports on
// reloads waits for one.
type Engine struct {
	cfg      engine.Config
	source   Source // what Reload reads; nil: revisions come through Activate only
	fallback Source // served at the start when source fails (Fallback)
	checks   []GateCheck
	hooks    []func(*engine.Snapshot) // OnActivate
	current  atomic.Pointer[engine.Snapshot]
	last     atomic.Pointer[ReloadStatus]
	running  atomic.Pointer[ReloadProgress] // non-nil while a candidate is judged

	swap    sync.Mutex     // one activation at a time
	mu      sync.Mutex     // guards worker, next and closed
	worker  bool           // a goroutine is running reloads
	workers sync.WaitGroup // that goroutine, for Close
	next    *reloadToken   // the reload that triggers arriving now will get
	closed  bool           // Close ran: no reload starts

	reloadsOK, reloadsFailed atomic.Uint64
	history                  reloadHistory // below

	promoted atomic.Pointer[Promotion] // set by a promotion, cleared by the next activation (promote.go)
}

// ReloadStatus is the outcome of the most recent reload attempt.
type ReloadStatus struct {
	At        time.Time `json:"at"`
	Trigger   string    `json:"trigger"`
	Origin    string    `json:"origin,omitempty"` // where the candidate came from
	OK        bool      `json:"ok"`
	Revision  string    `json:"revision,omitempty"` // active after the attempt
	Candidate string    `json:"candidate,omitempty"`
	Changed   bool      `json:"changed"`
	// From is the revision an activation replaced (a diff's old side).
	From     string           `json:"from_revision,omitempty"`
	Duration time.Duration    `json:"duration_ns"`
	Problems []engine.Problem `json:"problems,omitempty"`
	// Skipped lists the files the candidate did not read (not regular files).
	Skipped []engine.SkippedFile `json:"skipped,omitempty"`
	// Coalesced is how many triggers this one reload answered.
	Coalesced int `json:"coalesced,omitempty"`
	// Promotion is the record of the promotion this attempt made live.
	Promotion *Promotion `json:"promotion,omitempty"`
}

// ReloadProgress describes a reload that is running.
type ReloadProgress struct {
	Since   time.Time `json:"since"`
	Trigger string    `json:"trigger"`
}

// reloadToken is one reload, shared by every trigger it answers.
type reloadToken struct {
	triggers []string
	done     chan struct{}
	st       ReloadStatus
}

// Option sets up an Engine at construction, before it is shared.
type Option func(*Engine)

// Pushed: revisions come through Activate only (a bundle pushes them). The
// Engine starts with no Snapshot, answers not_ready until the first one
// goes live, and Reload answers the last activation.
func Pushed() Option { return func(e *Engine) { e.source = nil } }

// OnActivate calls fn with each Snapshot made live, the first included, in
// order and before the next activation (saving the last good copy).
func OnActivate(fn func(*engine.Snapshot)) Option {
	return func(e *Engine) { e.hooks = append(e.hooks, fn) }
}

// WithChecks adds checks to the gate (gate.go).
func WithChecks(cs ...GateCheck) Option {
	return func(e *Engine) { e.checks = append(e.checks, cs...) }
}

// Fallback serves fallback's revision (the last good copy, LastGood) when
// the configured folders do not load at the start: the start is reported
// as a failed reload naming their problems, and every later reload reads
// them, so fixing them activates them.
func Fallback(fallback Source) Option { return func(e *Engine) { e.fallback = fallback } }

// New builds an Engine whose revisions come from cfg's folders and makes
// the first one live through the gate; a failure is returned, never served
// (unless a Fallback serves).
func New(ctx context.Context, cfg engine.Config, opts ...Option) (*Engine, error) {
	e := &Engine{cfg: cfg, source: Folders(cfg.Policies, cfg.Schemas, cfg.Tests)}
	for _, o := range opts {
		o(e)
	}
	st := ReloadStatus{At: time.Now().UTC(), Trigger: "start"}
	if e.source == nil {
		e.setLast(&st)
		return e, nil
	}
	err := e.try(ctx, &st, e.source)
	if err != nil && e.fallback != nil {
		fst := ReloadStatus{Trigger: "start"}
		if e.try(ctx, &fst, e.fallback) == nil {
			// The start stays a failure, counted as one: the configured
			// folders are not what serves.
			st.Revision, st.Skipped, err = fst.Revision, fst.Skipped, nil
			st.Problems = append(st.Problems, engine.Problem{Message: fmt.Sprintf(
				"serving the last good revision %s (%s) until the configured folders load", fst.Revision, fst.Origin)})
			e.reloadsFailed.Add(1)
		}
	}
	if err != nil {
		return nil, err
	}
	e.setLast(&st)
	return e, nil
}

// Snapshot returns the active Snapshot.
func (e *Engine) Snapshot() *engine.Snapshot { return e.current.Load() }

// Decide decides with opts.Snapshot, or else the active Snapshot.
func (e *Engine) Decide(ctx context.Context, name string, body []byte, opts engine.Options) (*engine.Decision, error) {
	if opts.Snapshot != nil {
		return opts.Snapshot.Decide(ctx, name, body, opts)
	}
	return e.current.Load().Decide(ctx, name, body, opts)
}

// Reload reads the configured source again and activates its revision if
// it passes the gate. On failure the active Snapshot keeps serving and the
// status names every problem. Without a source to read (Pushed), it
// answers the last activation.
//
// Reloads run one at a time on their own goroutine. Triggers that arrive
// while one runs share the next one, which starts when it ends: however
// many arrive, one more reload reads the files after the last of them. A
// reload is bounded by engine.Config.ReloadTimeout; ctx only bounds how long
// this caller waits for its outcome.
func (e *Engine) Reload(ctx context.Context, trigger string) ReloadStatus {
	if e.source == nil {
		return e.LastReload()
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return e.stopping(trigger)
	}
	if e.next == nil {
		e.next = &reloadToken{done: make(chan struct{})}
	}
	tok := e.next
	tok.triggers = append(tok.triggers, trigger)
	if !e.worker {
		e.worker = true
		e.workers.Add(1)
		go e.reloadLoop()
	}
	e.mu.Unlock()
	select {
	case <-tok.done:
		return tok.st
	case <-ctx.Done():
		return ReloadStatus{At: time.Now().UTC(), Trigger: trigger, Revision: e.Snapshot().Revision,
			Problems: []engine.Problem{{Message: "stopped waiting for the reload: " + ctx.Err().Error() + "; it goes on, see /v1/status"}}}
	}
}

func (e *Engine) reloadLoop() {
	defer e.workers.Done()
	for {
		e.mu.Lock()
		tok := e.next
		e.next = nil
		if tok == nil || e.closed { // Close came: what is queued does not start
			e.worker = false
			e.mu.Unlock()
			if tok != nil {
				tok.st = e.stopping(strings.Join(tok.triggers, ","))
				close(tok.done)
			}
			return
		}
		e.mu.Unlock()
		names := slices.Compact(slices.Sorted(slices.Values(tok.triggers)))
		tok.st = ReloadStatus{Trigger: strings.Join(names, ","), Coalesced: len(tok.triggers)}
		_ = e.try(context.Background(), &tok.st, e.source)
		e.record(&tok.st)
		close(tok.done)
	}
}

// Close stops taking reloads, answers those queued without starting them,
// and waits for the one running to end (within the reload deadline), so
// that once it returns nothing activates a revision or saves the last
// good copy: the stop of a server calls it before it lets go of its state
// folder.
func (e *Engine) Close() {
	e.swap.Lock() // an activation under way ends first; every later one is refused (activate)
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.swap.Unlock()
	e.workers.Wait()
}

// errStopping refuses an activation after Close, from any source.
var errStopping = errors.New("the server is stopping: no revision goes live")

// stopping is the answer to a reload asked for after Close.
func (e *Engine) stopping(trigger string) ReloadStatus {
	return ReloadStatus{At: time.Now().UTC(), Trigger: trigger, Revision: e.Snapshot().Revision,
		Problems: []engine.Problem{{Message: "the server is stopping: no reload starts"}}}
}

// ReloadCounts returns how many reload attempts succeeded and failed.
func (e *Engine) ReloadCounts() (ok, failed uint64) {
	return e.reloadsOK.Load(), e.reloadsFailed.Load()
}

// LastReload returns the outcome of the most recent reload attempt. It
// never waits for a reload in progress.
func (e *Engine) LastReload() ReloadStatus {
	if st := e.last.Load(); st != nil {
		return *st
	}
	return ReloadStatus{}
}

// ReloadInProgress reports the reload running now, if any.
func (e *Engine) ReloadInProgress() (ReloadProgress, bool) {
	if p := e.running.Load(); p != nil {
		return *p, true
	}
	return ReloadProgress{}, false
}

// Has reports whether the active Snapshot serves a decision of that name.
func (e *Engine) Has(name string) bool {
	s := e.current.Load()
	return s != nil && s.Has(name)
}

// MaxReloadHistory bounds the reload attempts an Engine remembers for
// ReloadHistory.
const MaxReloadHistory = 50

// reloadHistory is the most recent reload attempts, oldest first.
type reloadHistory struct {
	mu   sync.Mutex
	list []ReloadStatus
}

// setLast records the outcome of a reload attempt (or of the first load):
// the last one, and the history.
func (e *Engine) setLast(st *ReloadStatus) {
	e.last.Store(st)
	h := &e.history
	h.mu.Lock()
	h.list = append(h.list, *st)
	if n := len(h.list); n > MaxReloadHistory {
		h.list = append(h.list[:0:0], h.list[n-MaxReloadHistory:]...)
	}
	h.mu.Unlock()
}

// ReloadHistory returns the most recent reload attempts (at most
// MaxReloadHistory), newest first, refused candidates with their problems;
// the first load is the oldest.
func (e *Engine) ReloadHistory() []ReloadStatus {
	h := &e.history
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]ReloadStatus, len(h.list))
	for i, st := range h.list {
		out[len(out)-1-i] = st
	}
	return out
}
