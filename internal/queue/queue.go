// Package queue is the one bounded queue of Arbiter's background work: the
// decision-record pipeline, its upload and the decision store, and the
// shadow's workers (a candidate's decisions and the compiled self-check)
// each hand work to their goroutines through a Queue. A Queue is bounded by count and by bytes, never blocks the one who
// puts, and counts every item it did not keep by reason.
package queue

import (
	"sync"

	"github.com/arbiter-dev/arbiter/internal/defaults"
)

// Reasons an item is dropped. A component adds its own (Drop) for what it
// loses after taking an item: a failed write, a shutdown deadline.
const (
	Full   = "full"   // the queue held its bound of items or bytes
	Closed = "closed" // put after Close
)

// Limits bound a Queue. Zero means no bound of that kind.
type Limits struct {
	Items int
	Bytes int64
	// HoldBytes keeps the bytes of the items taken counted against Bytes
	// until the consumer calls Done with them: what is being processed
	// (a batch a stalled disk holds) is memory too.
	HoldBytes bool
}

// Or returns l with each bound that is not positive replaced by def's: the
// defaults of a component's configuration.
func (l Limits) Or(def Limits) Limits {
	l.Items, l.Bytes = defaults.Positive(l.Items, def.Items), defaults.Positive(l.Bytes, def.Bytes)
	return l
}

// Queue is a bounded first-in first-out queue safe for concurrent use.
type Queue[T any] struct {
	lim   Limits
	ready chan struct{}

	mu     sync.Mutex
	items  []T
	sizes  []int64
	bytes  int64
	closed bool
	drops  map[string]uint64 // by reason; they only grow
}

// New returns an empty Queue bounded by lim.
func New[T any](lim Limits) *Queue[T] {
	return &Queue[T]{lim: lim, ready: make(chan struct{}, 1), drops: map[string]uint64{}}
}

// Limits returns the queue's bounds.
func (q *Queue[T]) Limits() Limits { return q.lim }

// Put adds v, which costs size bytes, and reports whether it was kept. An
// item that would take the queue past a bound is dropped as Full (an item
// larger than the byte bound alone is kept when the queue holds no bytes,
// held ones included: it must not be refused forever); after Close it is
// dropped as Closed.
func (q *Queue[T]) Put(v T, size int64) (bool, string) {
	q.mu.Lock()
	why := q.refuse(size)
	if why != "" {
		q.drops[why]++
		q.mu.Unlock()
		return false, why
	}
	q.bytes += size
	q.items = append(q.items, v)
	q.sizes = append(q.sizes, size)
	q.mu.Unlock()
	q.signal()
	return true, ""
}

// refuse is why an item of size bytes cannot be put now, or "".
func (q *Queue[T]) refuse(size int64) string {
	switch {
	case q.closed:
		return Closed
	case q.lim.Items > 0 && len(q.items) >= q.lim.Items,
		q.lim.Bytes > 0 && q.bytes > 0 && q.bytes+size > q.lim.Bytes:
		return Full
	}
	return ""
}

// Reserve takes room for an item of size bytes that is not ready yet, on
// the terms of Put, and reports whether it fit and why not. A caller that
// must know now whether an item will be kept (before it answers) reserves,
// then puts the item with PutReserved, or releases the room with Done.
// Reserve counts no drop: the caller counts what it loses (Drop).
func (q *Queue[T]) Reserve(size int64) (bool, string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if why := q.refuse(size); why != "" {
		return false, why
	}
	q.bytes += size
	return true, ""
}

// PutReserved adds v, for which size bytes were reserved: it is always
// kept.
func (q *Queue[T]) PutReserved(v T, size int64) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.sizes = append(q.sizes, size)
	q.mu.Unlock()
	q.signal()
}

func (q *Queue[T]) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Ready receives a value after a Put or a Close: a consumer takes what is
// there, then waits on Ready again.
func (q *Queue[T]) Ready() <-chan struct{} { return q.ready }

// Take appends to dst up to max items (max <= 0: all) in order, removes
// them and their bytes from the queue, and reports whether the queue is
// closed (and was empty before this take).
func (q *Queue[T]) Take(dst []T, max int) ([]T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.items)
	if max > 0 && n > max {
		n = max
	}
	if n == 0 {
		if q.closed {
			q.signal() // every consumer learns it
		}
		return dst, q.closed
	}
	dst = append(dst, q.items[:n]...)
	if !q.lim.HoldBytes {
		for _, s := range q.sizes[:n] {
			q.bytes -= s
		}
	}
	clear(q.items[:n])
	q.items, q.sizes = q.items[n:], q.sizes[n:]
	if len(q.items) == 0 {
		q.items, q.sizes = nil, nil // do not keep a flood's backing array
	} else {
		q.signal() // another consumer may take the rest
	}
	return dst, false
}

// Done releases bytes of items taken from a queue that holds them
// (Limits.HoldBytes), or reserved and not put (Reserve).
func (q *Queue[T]) Done(bytes int64) {
	q.mu.Lock()
	q.bytes -= bytes
	q.mu.Unlock()
}

// Close refuses every later Put; what is queued can still be taken.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

// Len and Bytes are what the queue holds now.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

func (q *Queue[T]) Bytes() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes
}

// Drop counts n items lost for reason.
func (q *Queue[T]) Drop(reason string, n uint64) {
	q.mu.Lock()
	q.drops[reason] += n
	q.mu.Unlock()
}

// Dropped returns the items lost for reason so far.
func (q *Queue[T]) Dropped(reason string) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.drops[reason]
}
