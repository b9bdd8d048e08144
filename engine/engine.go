package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Engine serves decisions from the current Snapshot and swaps in a new one
// only when a candidate passes every check. Reads take one atomic load; a
// reload never tears a request in flight, and nothing that reports on
// reloads waits for one.
type Engine struct {
	cfg     Config
	current atomic.Pointer[Snapshot]
	last    atomic.Pointer[ReloadStatus]
	running atomic.Pointer[ReloadProgress] // non-nil while a reload runs

	swap   sync.Mutex   // one activation at a time (reloads and ReloadWith)
	mu     sync.Mutex   // guards worker and next
	worker bool         // a goroutine is running reloads
	next   *reloadToken // the reload that triggers arriving now will get

	reloadsOK, reloadsFailed atomic.Uint64
	history                  reloadHistory // engine/history.go

	promoted atomic.Pointer[Promotion] // set by Promote, cleared by the next activation (promote.go)

	// OnActivate, when set before the Engine is shared, is called with each
	// Snapshot a reload activates (off the request path, one at a time).
	OnActivate func(*Snapshot)

	// load builds a candidate; Load, except in tests.
	load func(context.Context, Config) (*Snapshot, error)
}

// ReloadStatus is the outcome of the most recent reload attempt.
type ReloadStatus struct {
	At        time.Time     `json:"at"`
	Trigger   string        `json:"trigger"`
	OK        bool          `json:"ok"`
	Revision  string        `json:"revision,omitempty"` // active after the attempt
	Candidate string        `json:"candidate,omitempty"`
	Changed   bool          `json:"changed"`
	Duration  time.Duration `json:"duration_ns"`
	Problems  []Problem     `json:"problems,omitempty"`
	// Skipped lists the files the candidate did not read (not regular files).
	Skipped []SkippedFile `json:"skipped,omitempty"`
	// Coalesced is how many triggers this one reload answered.
	Coalesced int `json:"coalesced,omitempty"`
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

// New builds the first Snapshot; a failure is returned, never served.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	snap, err := Load(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e := newEngine(cfg, snap)
	e.setLast(&ReloadStatus{At: snap.LoadedAt, Trigger: "start", OK: true, Revision: snap.Revision, Candidate: snap.Revision, Changed: true, Skipped: snap.Skipped})
	return e, nil
}

func newEngine(cfg Config, snap *Snapshot) *Engine {
	e := &Engine{cfg: cfg, load: Load}
	e.current.Store(snap)
	return e
}

// Snapshot returns the active Snapshot.
func (e *Engine) Snapshot() *Snapshot { return e.current.Load() }

// Decide decides with the active Snapshot.
func (e *Engine) Decide(ctx context.Context, name string, body []byte, opts Options) (*Decision, error) {
	return e.current.Load().Decide(ctx, name, body, opts)
}

// Reload builds a candidate from the configured folders and activates it if
// it compiles, type-checks and passes the policy tests. On failure the active
// Snapshot keeps serving and the status names every problem.
//
// Reloads run one at a time on their own goroutine. Triggers that arrive
// while one runs share the next one, which starts when it ends: however
// many arrive, one more reload reads the files after the last of them. A
// reload is bounded by Config.ReloadTimeout; ctx only bounds how long this
// caller waits for its outcome.
func (e *Engine) Reload(ctx context.Context, trigger string) ReloadStatus {
	e.mu.Lock()
	if e.next == nil {
		e.next = &reloadToken{done: make(chan struct{})}
	}
	tok := e.next
	tok.triggers = append(tok.triggers, trigger)
	if !e.worker {
		e.worker = true
		go e.reloadLoop()
	}
	e.mu.Unlock()
	select {
	case <-tok.done:
		return tok.st
	case <-ctx.Done():
		return ReloadStatus{At: time.Now().UTC(), Trigger: trigger, Revision: e.Snapshot().Revision,
			Problems: []Problem{{Message: "stopped waiting for the reload: " + ctx.Err().Error() + "; it goes on, see /v1/status"}}}
	}
}

func (e *Engine) reloadLoop() {
	for {
		e.mu.Lock()
		tok := e.next
		e.next = nil
		if tok == nil {
			e.worker = false
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		tok.st = e.reloadOnce(tok.triggers)
		close(tok.done)
	}
}

func (e *Engine) reloadOnce(triggers []string) ReloadStatus {
	start := time.Now()
	names := slices.Compact(slices.Sorted(slices.Values(triggers)))
	st := ReloadStatus{At: start.UTC(), Trigger: strings.Join(names, ","), Coalesced: len(triggers)}
	e.running.Store(&ReloadProgress{Since: st.At, Trigger: st.Trigger})
	defer e.running.Store(nil)

	timeout := orDefault(e.cfg.ReloadTimeout, DefaultReloadTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// loadOutcome is what one load of the candidate returned.
	type loadOutcome struct {
		snap *Snapshot
		err  error
	}
	// The build runs apart so that the deadline holds even where it cannot
	// be checked (compiling): a build still running at the deadline is
	// abandoned, its result dropped, and the next reload is not held up.
	ch := make(chan loadOutcome, 1)
	load, cfg := e.load, e.cfg
	go func() {
		snap, err := load(ctx, cfg)
		ch <- loadOutcome{snap, err}
	}()
	var out loadOutcome
	select {
	case out = <-ch:
	case <-ctx.Done():
		out.err = &LoadError{Problems: []Problem{{Message: fmt.Sprintf("the reload did not finish within %s (--reload-timeout); the candidate was abandoned", timeout)}}}
	}
	e.activate(&st, out.snap, out.err)
	st.Duration = time.Since(start)
	e.setLast(&st)
	return st
}

// activate swaps in snap when it is a good candidate that differs from the
// active Snapshot, and records the outcome in st. Folder reloads and
// ReloadWith take turns here.
func (e *Engine) activate(st *ReloadStatus, snap *Snapshot, err error) {
	e.swap.Lock()
	defer e.swap.Unlock()
	cur := e.current.Load()
	if cur != nil {
		st.Revision = cur.Revision
	}
	switch {
	case err != nil:
		st.Problems = problemsOf(err)
		if le, ok := err.(*LoadError); ok {
			st.Skipped = le.Skipped
		}
	case cur != nil && snap.Revision == cur.Revision && snap.Hash == cur.Hash && snap.Gated == cur.Gated:
		st.OK, st.Candidate, st.Skipped = true, snap.Revision, snap.Skipped
	case e.keepsPromotion(snap): // the source has not changed since a promotion
		st.OK, st.Candidate, st.Skipped = true, snap.Revision, snap.Skipped
	default:
		e.current.Store(snap)
		e.promoted.Store(nil)
		st.OK, st.Changed, st.Revision, st.Candidate, st.Skipped = true, true, snap.Revision, snap.Revision, snap.Skipped
		if e.OnActivate != nil {
			e.OnActivate(snap)
		}
	}
	if st.OK {
		e.reloadsOK.Add(1)
	} else {
		e.reloadsFailed.Add(1)
	}
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

// Config returns the folders the engine loads from.
func (e *Engine) Config() Config { return e.cfg }

func problemsOf(err error) []Problem {
	if le, ok := err.(*LoadError); ok {
		return le.Problems
	}
	return []Problem{{Message: err.Error()}}
}

// Has reports whether the active Snapshot serves a decision of that name.
func (e *Engine) Has(name string) bool {
	s := e.current.Load()
	return s != nil && s.Has(name)
}
