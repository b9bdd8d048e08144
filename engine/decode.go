package engine

import (
	"encoding/json"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of request documents. RFC 8259 lets a parser
// limit nesting; without a bound, a body of a few hundred thousand '[' would
// drive every recursive consumer (validator, OPA's value conversion) into an
// unbounded stack.
const MaxDepth = 1000

// MaxNumberLength and MaxExponentDigits bound number literals, which are
// compared exactly: a u64 counter needs 20 digits, not a million.
const (
	MaxNumberLength   = 400
	MaxExponentDigits = 3
)

// decodeStrict parses one JSON document strictly: UTF-8 only, no byte-order
// mark, no duplicate object keys, no trailing data, nesting bounded by
// MaxDepth. Numbers are kept as json.Number so no precision is lost on the
// way to the policy. Objects are map[string]any, arrays []any.
//
// encoding/json accepts duplicate keys (last one wins) and replaces invalid
// UTF-8, which would let a reader of the body and the policy see different
// documents; hence a parser of our own.
func decodeStrict(data []byte) (any, error) {
	p := parser{data: data}
	if len(data) >= 3 && data[0] == 0xEF && data[1] == 0xBB && data[2] == 0xBF {
		return nil, p.errorf(0, "byte-order mark is not allowed")
	}
	p.skipSpace()
	if p.pos >= len(p.data) {
		return nil, p.errorf(p.pos, "empty body: expected one JSON value")
	}
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, p.errorf(p.pos, "trailing data after the JSON value")
	}
	return v, nil
}

// decodeSpans is decodeStrict for a top-level object that also reports the
// raw bytes of each top-level member, so that a wrapped input ({"input": ...})
// can be logged exactly as it was received.
func decodeSpans(data []byte) (any, map[string][]byte, error) {
	v, err := decodeStrict(data)
	if err != nil {
		return nil, nil, err
	}
	if _, ok := v.(map[string]any); !ok {
		return v, nil, nil
	}
	// The document is known to be valid; a second, shallow scan finds the
	// member boundaries without building values again.
	p := parser{data: data, spansOnly: true}
	p.skipSpace()
	spans := map[string][]byte{}
	p.pos++ // '{'
	for {
		p.skipSpace()
		if p.data[p.pos] == '}' {
			break
		}
		key, _ := p.str()
		p.skipSpace()
		p.pos++ // ':'
		p.skipSpace()
		start := p.pos
		if _, err := p.value(); err != nil {
			return nil, nil, err
		}
		spans[key] = data[start:p.pos]
		p.skipSpace()
		if p.data[p.pos] == ',' {
			p.pos++
		}
	}
	return v, spans, nil
}

type parser struct {
	data      []byte
	pos       int
	depth     int
	spansOnly bool // skip building values (the document was already checked)
}

// SyntaxError is a malformed_json cause, with the byte offset it was found at.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Msg)
}

func (p *parser) errorf(off int, format string, args ...any) error {
	return &SyntaxError{Offset: off, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value() (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.errorf(p.pos, "unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return nil, p.errorf(p.pos, "unexpected character %q", rune(c))
	}
}

func (p *parser) literal(word string) error {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return p.errorf(p.pos, "invalid literal (expected %s)", word)
	}
	p.pos += len(word)
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.errorf(p.pos, "nesting deeper than %d levels", MaxDepth)
	}
	return nil
}

func (p *parser) object() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '{'
	var obj map[string]any
	if !p.spansOnly {
		obj = make(map[string]any)
	}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.depth--
		return obj, nil
	}
	for {
		key, keyAt, err := p.memberKey()
		if err != nil {
			return nil, err
		}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if !p.spansOnly {
			if _, dup := obj[key]; dup {
				return nil, p.errorf(keyAt, "duplicate object key %q", key)
			}
			obj[key] = v
		}
		if done, err := p.next('}', "object"); err != nil || done {
			p.depth--
			return obj, err
		}
	}
}

// next consumes the ',' or the closing byte after a member or element:
// done is true at the close. what names the container for errors.
func (p *parser) next(close byte, what string) (done bool, err error) {
	p.skipSpace()
	if p.pos >= len(p.data) {
		return false, p.errorf(p.pos, "unexpected end of input in %s", what)
	}
	switch p.data[p.pos] {
	case ',':
		p.pos++
		return false, nil
	case close:
		p.pos++
		return true, nil
	default:
		return false, p.errorf(p.pos, "expected ',' or '%c' in %s", close, what)
	}
}

// memberKey reads an object member's key and the ':' after it, leaving the
// parser at the member's value; keyAt is where the key starts.
func (p *parser) memberKey() (key string, keyAt int, err error) {
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != '"' {
		return "", p.pos, p.errorf(p.pos, "expected a string object key")
	}
	keyAt = p.pos
	if key, err = p.str(); err != nil {
		return "", keyAt, err
	}
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != ':' {
		return "", keyAt, p.errorf(p.pos, "expected ':' after object key")
	}
	p.pos++
	p.skipSpace()
	return key, keyAt, nil
}

func (p *parser) array() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '['
	var arr []any
	if !p.spansOnly {
		arr = make([]any, 0, 4)
	}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		return arr, nil
	}
	for {
		p.skipSpace()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if !p.spansOnly {
			arr = append(arr, v)
		}
		if done, err := p.next(']', "array"); err != nil || done {
			p.depth--
			return arr, err
		}
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number checks the RFC 8259 grammar and keeps the literal text.
func (p *parser) number() (any, error) {
	start := p.pos
	d := p.data
	i := p.pos
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		return nil, p.errorf(i, "invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return nil, p.errorf(i, "invalid number: digit expected after '.'")
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return nil, p.errorf(i, "invalid number: digit expected in exponent")
		}
		expStart := i
		for i < len(d) && isDigit(d[i]) {
			i++
		}
		// Exact comparison expands 1e999999999 into a billion digits: RFC
		// 8259 lets a parser limit the range of numbers, and this one does.
		if i-expStart > MaxExponentDigits {
			return nil, p.errorf(start, "number exponent has more than %d digits", MaxExponentDigits)
		}
	}
	if i-start > MaxNumberLength {
		return nil, p.errorf(start, "number literal longer than %d characters", MaxNumberLength)
	}
	p.pos = i
	if p.spansOnly {
		return nil, nil
	}
	return json.Number(d[start:i]), nil
}

// str parses a string starting at the opening quote. Invalid UTF-8, raw
// control characters and unpaired surrogate escapes are malformed: a string
// must mean exactly one sequence of Unicode scalar values.
func (p *parser) str() (string, error) {
	d := p.data
	start := p.pos + 1
	i := start
	// Fast path: printable ASCII without escapes.
	for i < len(d) {
		c := d[i]
		if c == '"' {
			p.pos = i + 1
			return string(d[start:i]), nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		i++
	}
	buf := make([]byte, 0, i-start+16)
	buf = append(buf, d[start:i]...)
	for {
		if i >= len(d) {
			return "", p.errorf(i, "unterminated string")
		}
		c := d[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return string(buf), nil
		case c < 0x20:
			return "", p.errorf(i, "control character in string")
		case c == '\\':
			if i+1 >= len(d) {
				return "", p.errorf(i, "unterminated escape")
			}
			e := d[i+1]
			i += 2
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := hex4(d, i)
				if !ok {
					return "", p.errorf(i, "invalid \\u escape")
				}
				i += 4
				if utf16.IsSurrogate(r) {
					if r >= 0xDC00 || i+6 > len(d) || d[i] != '\\' || d[i+1] != 'u' {
						return "", p.errorf(i-6, "unpaired surrogate in \\u escape")
					}
					r2, ok := hex4(d, i+2)
					if !ok || r2 < 0xDC00 || r2 > 0xDFFF {
						return "", p.errorf(i-6, "unpaired surrogate in \\u escape")
					}
					r = utf16.DecodeRune(r, r2)
					i += 6
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", p.errorf(i-2, "invalid escape character %q", rune(e))
			}
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			i++
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size <= 1 {
				return "", p.errorf(i, "invalid UTF-8 in string")
			}
			buf = append(buf, d[i:i+size]...)
			i += size
		}
	}
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}
