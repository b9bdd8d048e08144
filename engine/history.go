package engine

// MaxReloadHistory bounds the reload attempts an Engine remembers for
// ReloadHistory.
const MaxReloadHistory = 50

// setLast records the outcome of a reload attempt (or of the first load):
// the last one, and the history. The caller holds e.mu, or has not shared e
// yet.
func (e *Engine) setLast(st ReloadStatus) {
	e.last = st
	e.history = append(e.history, st)
	if n := len(e.history); n > MaxReloadHistory {
		e.history = append(e.history[:0:0], e.history[n-MaxReloadHistory:]...)
	}
}

// ReloadHistory returns the most recent reload attempts, newest first,
// refused candidates with their problems; the first load is the oldest.
func (e *Engine) ReloadHistory() []ReloadStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]ReloadStatus, len(e.history))
	for i, st := range e.history {
		out[len(out)-1-i] = st
	}
	return out
}
