package input

import (
	"encoding/binary"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of request documents. RFC 8259 lets a parser
// limit nesting; without a bound, a body of a few hundred thousand '[' would
// drive every recursive consumer (validator, OPA's evaluation) into an
// unbounded stack.
const MaxDepth = 1000

// MaxNumberLength and MaxExponentDigits bound number literals, which are
// compared exactly: a u64 counter needs 20 digits, not a million, and
// 1e999999999 would expand into a billion digits. RFC 8259 lets a parser
// limit the range and precision of numbers. A literal beyond them is valid
// JSON that the engine does not represent: a NumberLimitError, which the
// walk reports as a violation at the number's place.
const (
	MaxNumberLength   = 400
	MaxExponentDigits = 3
)

// numberLimitMessage is the violation of a number beyond the limits.
var numberLimitMessage = fmt.Sprintf("number beyond what the engine represents: at most %d characters, with at most %d exponent digits", MaxNumberLength, MaxExponentDigits)

// NumberLimitError is a number literal, valid JSON, beyond MaxNumberLength
// or MaxExponentDigits. The scanner has read past it, so the rest of the
// body is still checked.
type NumberLimitError struct{ Offset int }

func (e *NumberLimitError) Error() string {
	return fmt.Sprintf("at byte %d: %s", e.Offset, numberLimitMessage)
}

// SyntaxError is a malformed_json cause, with the byte offset it was found at.
// Msg quotes nothing of the input; Quote is what of it the error shows
// (the character, the duplicate key), apart, so that a message about a
// file a caller named can leave it out (engine's file problems).
type SyntaxError struct {
	Offset int
	Msg    string
	Quote  string
}

func (e *SyntaxError) Error() string {
	if e.Quote != "" {
		return fmt.Sprintf("invalid JSON at byte %d: %s %s", e.Offset, e.Msg, e.Quote)
	}
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Msg)
}

// scanner holds the strict JSON grammar: UTF-8 only, no byte-order mark, no
// raw control characters or unpaired surrogates in strings, RFC 8259
// numbers within the limits above. Everything that reads request bytes
// goes through it, so there is one definition of "strict JSON".
type scanner struct {
	data []byte
	pos  int
	// lineBreak is set once the scan has skipped a CR or LF. Only space
	// between tokens may hold one (strings may not), so a body scanned whole
	// without it holds none: its record needs no compacting (Input.OneLine).
	lineBreak bool
	// admit takes the values read from the admission budget (Options.Admit);
	// admitted is how many it took so far.
	admit    func(int) error
	admitted int
}

// admitEvery is how many values are read between handing them to admit.
const admitEvery = 4096

// admitValues hands admit the values read since its last call, read being
// how many have been read in all.
func (s *scanner) admitValues(read int) error {
	if s.admit == nil || read == s.admitted {
		return nil
	}
	n := read - s.admitted
	s.admitted = read
	return s.admit(n)
}

func (s *scanner) errorf(off int, format string, args ...any) error {
	return &SyntaxError{Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// quoting is a SyntaxError that shows v, a part of the input, quoted.
func (s *scanner) quoting(off int, msg string, v any) error {
	return &SyntaxError{Offset: off, Msg: msg, Quote: fmt.Sprintf("%q", v)}
}

// start checks what may only appear at the very beginning and skips the
// leading space.
func (s *scanner) start() error {
	if len(s.data) >= 3 && s.data[0] == 0xEF && s.data[1] == 0xBB && s.data[2] == 0xBF {
		return s.errorf(0, "byte-order mark is not allowed")
	}
	s.skipSpace()
	if s.pos >= len(s.data) {
		return s.errorf(s.pos, "empty body: expected one JSON value")
	}
	return nil
}

// end checks that nothing but space follows the document.
func (s *scanner) end() error {
	s.skipSpace()
	if s.pos != len(s.data) {
		return s.errorf(s.pos, "trailing data after the JSON value")
	}
	return nil
}

func (s *scanner) skipSpace() {
	d, i := s.data, s.pos
	for i < len(d) {
		switch d[i] {
		case ' ', '\t':
			i++
		case '\n', '\r':
			s.lineBreak = true
			i++
		default:
			s.pos = i
			return
		}
	}
	s.pos = i
}

// literal consumes true, false or null.
func (s *scanner) literal(word string) error {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return s.errorf(s.pos, "invalid literal (expected %s)", word)
	}
	s.pos += len(word)
	return nil
}

// next consumes the ',' or the closing byte after a member or element:
// done is true at the close. what names the container for errors.
func (s *scanner) next(close byte, what string) (done bool, err error) {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return false, s.errorf(s.pos, "unexpected end of input in %s", what)
	}
	switch s.data[s.pos] {
	case ',':
		s.pos++
		s.skipSpace()
		return false, nil
	case close:
		s.pos++
		return true, nil
	default:
		return false, s.errorf(s.pos, "expected ',' or '%c' in %s", close, what)
	}
}

// open consumes '{' or '[' and the space after it; empty is true when the
// container closes at once (the closing byte is consumed too).
func (s *scanner) open(close byte) (empty bool) {
	s.pos++
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == close {
		s.pos++
		return true
	}
	return false
}

// key reads an object member's key and the ':' after it, leaving the
// scanner at the member's value. raw is the text between the quotes;
// escaped says it must go through unescape to mean its characters.
func (s *scanner) key() (raw []byte, escaped bool, at int, err error) {
	at = s.pos
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return nil, false, at, s.errorf(s.pos, "expected a string object key")
	}
	if raw, escaped, err = s.str(); err != nil {
		return nil, false, at, err
	}
	s.skipSpace()
	if s.pos >= len(s.data) || s.data[s.pos] != ':' {
		return nil, false, at, s.errorf(s.pos, "expected ':' after object key")
	}
	s.pos++
	s.skipSpace()
	return raw, escaped, at, nil
}

// plain marks the bytes a string may hold without further checks: printable
// ASCII other than '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str scans the string starting at the opening quote and returns the bytes
// between the quotes, unchanged. Invalid UTF-8, raw control characters,
// invalid escapes and unpaired surrogate escapes are malformed: a string
// must mean exactly one sequence of Unicode scalar values. Nothing is
// allocated.
func (s *scanner) str() (raw []byte, escaped bool, err error) {
	d := s.data
	start := s.pos + 1
	i := start
	for {
		// Eight bytes at a time while none needs a look of its own: no
		// control character, quote, backslash or non-ASCII byte.
		for i+8 <= len(d) {
			v := binary.LittleEndian.Uint64(d[i:])
			if (v-0x2020202020202020)&^v&0x8080808080808080|v&0x8080808080808080|
				hasZero(v^0x2222222222222222)|hasZero(v^0x5C5C5C5C5C5C5C5C) != 0 {
				break
			}
			i += 8
		}
		for i < len(d) && plain[d[i]] {
			i++
		}
		if i >= len(d) {
			return nil, false, s.errorf(i, "unterminated string")
		}
		c := d[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return d[start:i], escaped, nil
		case c == '\\':
			escaped = true
			if i+1 >= len(d) {
				return nil, false, s.errorf(i, "unterminated escape")
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, ok := hex4(d, i+2)
				if !ok {
					return nil, false, s.errorf(i+2, "invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					r2, ok := rune(0), false
					if r < 0xDC00 && i+12 <= len(d) && d[i+6] == '\\' && d[i+7] == 'u' {
						r2, ok = hex4(d, i+8)
					}
					if !ok || r2 < 0xDC00 || r2 > 0xDFFF {
						return nil, false, s.errorf(i, "unpaired surrogate in \\u escape")
					}
					i += 6
				}
				i += 6
			default:
				return nil, false, s.quoting(i, "invalid escape character", rune(d[i+1]))
			}
		case c < 0x20:
			return nil, false, s.errorf(i, "control character in string")
		default: // c >= 0x80
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size <= 1 {
				return nil, false, s.errorf(i, "invalid UTF-8 in string")
			}
			i += size
		}
	}
}

// hasZero is non-zero when one of the eight bytes of v is zero.
func hasZero(v uint64) uint64 { return (v - 0x0101010101010101) &^ v & 0x8080808080808080 }

// unescape appends the characters of a string that str accepted with
// escapes to dst.
func unescape(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		e := raw[i+1]
		i += 2
		switch e {
		case 'b', 'f', 'n', 'r', 't':
			dst = append(dst, escapes[e])
		case 'u':
			r, _ := hex4(raw, i)
			i += 4
			if utf16.IsSurrogate(r) {
				r2, _ := hex4(raw, i+2)
				r = utf16.DecodeRune(r, r2)
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, e)
		}
	}
	return dst
}

// escapes is the byte of each one-letter escape but the ones that stand
// for themselves ("\"", "\\", "/").
var escapes = [256]byte{'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

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

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number checks the RFC 8259 grammar of the number at the scanner and
// returns its literal text; beyond the limits above, it is read and a
// *NumberLimitError returned.
func (s *scanner) number() ([]byte, error) {
	d, start := s.data, s.pos
	i, expDigits := start, 0
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
		return nil, s.errorf(i, "invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return nil, s.errorf(i, "invalid number: digit expected after '.'")
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
			return nil, s.errorf(i, "invalid number: digit expected in exponent")
		}
		expStart := i
		for i < len(d) && isDigit(d[i]) {
			i++
		}
		expDigits = i - expStart
	}
	s.pos = i
	if i-start > MaxNumberLength || expDigits > MaxExponentDigits {
		return d[start:i], &NumberLimitError{Offset: start}
	}
	return d[start:i], nil
}
