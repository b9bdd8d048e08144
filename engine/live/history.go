package live

import "sync"

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
