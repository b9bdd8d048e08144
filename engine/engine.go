package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Engine serves decisions from the current Snapshot and swaps in a new one
// only when a candidate passes every check. Reads take one atomic load; a
// reload never tears a request in flight.
type Engine struct {
	cfg     Config
	current atomic.Pointer[Snapshot]

	mu      sync.Mutex // serialises reloads and guards last and history
	last    ReloadStatus
	history []ReloadStatus // engine/history.go

	reloadsOK, reloadsFailed atomic.Uint64

	// OnActivate, when set before the Engine is shared, is called with each
	// Snapshot a reload activates (under the reload lock, off the request
	// path).
	OnActivate func(*Snapshot)
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
}

// New builds the first Snapshot; a failure is returned, never served.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	snap, err := Load(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg}
	e.current.Store(snap)
	e.setLast(ReloadStatus{At: snap.LoadedAt, Trigger: "start", OK: true, Revision: snap.Revision, Candidate: snap.Revision, Changed: true})
	return e, nil
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
func (e *Engine) Reload(ctx context.Context, trigger string) ReloadStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	start := time.Now()
	st := ReloadStatus{At: start.UTC(), Trigger: trigger}
	snap, err := Load(ctx, e.cfg)
	cur := e.current.Load()
	switch {
	case err != nil:
		st.Problems = problemsOf(err)
		st.Revision = cur.Revision
	case snap.Revision == cur.Revision:
		st.OK, st.Revision, st.Candidate = true, cur.Revision, snap.Revision
	default:
		e.current.Store(snap)
		st.OK, st.Changed, st.Revision, st.Candidate = true, true, snap.Revision, snap.Revision
		if e.OnActivate != nil {
			e.OnActivate(snap)
		}
	}
	st.Duration = time.Since(start)
	e.setLast(st)
	if st.OK {
		e.reloadsOK.Add(1)
	} else {
		e.reloadsFailed.Add(1)
	}
	return st
}

// ReloadCounts returns how many reload attempts succeeded and failed.
func (e *Engine) ReloadCounts() (ok, failed uint64) {
	return e.reloadsOK.Load(), e.reloadsFailed.Load()
}

// LastReload returns the outcome of the most recent reload attempt.
func (e *Engine) LastReload() ReloadStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

// Config returns the folders the engine loads from.
func (e *Engine) Config() Config { return e.cfg }

func problemsOf(err error) []Problem {
	if le, ok := err.(*LoadError); ok {
		return le.Problems
	}
	return []Problem{{Message: err.Error()}}
}
