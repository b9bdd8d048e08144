package server

import (
	"encoding/binary"
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

// take adds n to what a request holds (held, before the call) and reports
// whether the budget allows it. A request may always take when nothing else
// is held, so that a budget smaller than one request slows it down rather
// than refusing it forever.
func (b *budget) take(n, held int64) bool {
	now := b.used.Add(n)
	if now > b.max && now-held-n > 0 {
		b.used.Add(-n)
		return false
	}
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

func (t *ticket) takeBytes(n int64) bool {
	if !t.a.bytes.take(n, t.bytes) {
		return false
	}
	t.bytes += n
	return true
}

func (t *ticket) takeValues(n int64) bool {
	if !t.a.values.take(n, t.values) {
		return false
	}
	t.values += n
	return true
}

func (t *ticket) release() {
	t.a.bytes.give(t.bytes)
	t.a.values.give(t.values)
	t.bytes, t.values = 0, 0
}

// valueCounter counts the JSON values of a text as it arrives, chunk by
// chunk: containers, strings that are not object keys, numbers and
// literals. For valid JSON the count is exact. At the first byte that no
// JSON text may hold where it stands (a letter outside a string, a control
// character inside one) it stops counting: the parser stops there too, so
// garbage costs no more than what came before it. It is the admission
// measure of a request's memory, taken while the body is read, so that a
// body of millions of empty objects is refused long before it is decoded.
type valueCounter struct {
	n        int64
	invalid  bool
	inString bool
	escape   bool
	inScalar bool
	// stack of open containers, '{' or '['; key is true while an object
	// expects a key (after '{' or ',').
	stack []byte
	key   bool
}

// stringPlain marks the bytes a string may hold that neither end it nor
// start an escape nor make it malformed.
var stringPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// hasZero is non-zero when one of the eight bytes of v is zero.
func hasZero(v uint64) uint64 { return (v - 0x0101010101010101) &^ v & 0x8080808080808080 }

// maxTrackedDepth bounds the container stack; deeper text is malformed
// anyway (the parser's limit is 1000), and its strings then count as values.
const maxTrackedDepth = 1024

func (c *valueCounter) write(p []byte) {
	if c.invalid {
		return
	}
	for i := 0; i < len(p); i++ {
		ch := p[i]
		if c.inString {
			if !c.escape {
				// Skip what cannot end the string or be an error, eight
				// bytes at a time: the text of strings is most of a body.
				for i+8 <= len(p) {
					v := binary.LittleEndian.Uint64(p[i:])
					if (v-0x2020202020202020)&^v&0x8080808080808080|hasZero(v^0x2222222222222222)|hasZero(v^0x5C5C5C5C5C5C5C5C) != 0 {
						break
					}
					i += 8
				}
				for i < len(p) && stringPlain[p[i]] {
					i++
				}
				if i == len(p) {
					return
				}
				ch = p[i]
			}
			switch {
			case c.escape:
				c.escape = false
			case ch == '\\':
				c.escape = true
			case ch == '"':
				c.inString = false
			case ch < 0x20:
				c.invalid = true
				return
			}
			continue
		}
		switch ch {
		case ' ', '\t', '\n', '\r':
			c.inScalar = false
		case '{', '[':
			c.inScalar = false
			c.n++
			if len(c.stack) < maxTrackedDepth {
				c.stack = append(c.stack, ch)
			}
			c.key = ch == '{'
		case '}', ']':
			c.inScalar = false
			if len(c.stack) > 0 {
				c.stack = c.stack[:len(c.stack)-1]
			}
			c.key = false
		case ',':
			c.inScalar = false
			c.key = len(c.stack) > 0 && c.stack[len(c.stack)-1] == '{'
		case ':':
			c.inScalar = false
			c.key = false
		case '"':
			c.inScalar = false
			c.inString = true
			if !c.key {
				c.n++
			}
			c.key = false
		default:
			if !scalarByte[ch] {
				c.invalid = true
				return
			}
			if !c.inScalar {
				c.inScalar = true
				c.n++
			}
		}
	}
}

// scalarByte marks the bytes of numbers and of true, false and null.
var scalarByte = func() (t [256]bool) {
	for _, ch := range []byte("0123456789-+.eEtruefalsn") {
		t[ch] = true
	}
	return t
}()
