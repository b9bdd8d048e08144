// Package passes counts what the code does with a request body's bytes
// after they arrive: each place that scans them or copies them says so
// here, so that a test can hold the promise of one pass per request
// (server's TestOnePassPerRequest). Counting is off unless a test turns it
// on; off, each call is one atomic load.
package passes

import "sync/atomic"

var (
	on              atomic.Bool
	scanned, copied atomic.Int64
)

// Scan says that n bytes of a body were scanned.
func Scan(n int) {
	if on.Load() {
		scanned.Add(int64(n))
	}
}

// Copy says that n bytes of a body were copied.
func Copy(n int) {
	if on.Load() {
		copied.Add(int64(n))
	}
}

// Count turns counting on, from zero, until the returned function is
// called, which turns it off and returns the bytes scanned and copied
// meanwhile. Counts are process-wide: the caller must not run in parallel
// with other tests that read bodies.
func Count() (stop func() (scanned, copied int64)) {
	scanned.Store(0)
	copied.Store(0)
	on.Store(true)
	return func() (int64, int64) {
		on.Store(false)
		return scanned.Load(), copied.Load()
	}
}
