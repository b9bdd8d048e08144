package server

import (
	"sync/atomic"
)

// Defaults of the admission budgets (Config.MaxInflightBytes and
// MaxInflightValues). A decoded JSON value costs about 190 bytes of heap
// (measured: an input of a million empty objects allocates 180 MB), so four
// million values in flight are about 750 MB, whatever shape the bodies have:
// bytes alone would admit six 16 MiB bodies of empty objects, a gigabyte
// each.
const (
	DefaultMaxInflightBytes  = 128 << 20
	DefaultMaxInflightValues = 4_000_000
	DefaultMaxInputValues    = 2_000_000
)

// budget is a quantity shared by the requests in flight. A request takes
// from it as it reads and gives everything back when it is answered.
type budget struct {
	max  int64
	used atomic.Int64
}

// take adds n to what a request holds (*held) when the budget allows it,
// and reports whether it did. A request may always take when nothing else
// is held, so that a budget smaller than one request slows it down rather
// than refusing it forever.
func (b *budget) take(n int64, held *int64) bool {
	now := b.used.Add(n)
	if now > b.max && now-*held-n > 0 {
		b.used.Add(-n)
		return false
	}
	*held += n
	return true
}

func (b *budget) give(n int64) { b.used.Add(-n) }

// admission holds the budgets of the requests in flight: bytes read and
// JSON values counted.
type admission struct {
	bytes, values budget
}

// ticket is what one request holds.
type ticket struct {
	a             *admission
	bytes, values int64
}

func (t *ticket) takeBytes(n int64) bool  { return t.a.bytes.take(n, &t.bytes) }
func (t *ticket) takeValues(n int64) bool { return t.a.values.take(n, &t.values) }

func (t *ticket) release() {
	t.a.bytes.give(t.bytes)
	t.a.values.give(t.values)
	t.bytes, t.values = 0, 0
}
