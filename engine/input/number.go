package input

import (
	"cmp"
	"math/big"
	"strconv"
)

// MaxPlainDigits is the longest integer written out in plain digits. An
// integral value with more digits (1e300) keeps an exponent, so that a
// five-byte literal cannot grow into hundreds of bytes of value.
const MaxPlainDigits = 40

// number is a JSON number literal taken apart into its exact value:
// (-1)^neg * digits * 10^exp, digits without leading or trailing zeros
// (empty for zero).
type number struct {
	neg    bool
	digits []byte // significant digits (a plain integer literal keeps its trailing zeros, exp 0)
	exp    int
}

// parseNumber takes apart a literal that scanner.number accepted. The
// digits are appended to buf, which is returned for reuse.
func parseNumber(lit, buf []byte) (number, []byte) {
	var n number
	i := 0
	if lit[0] == '-' {
		n.neg = true
		i++
	}
	buf = buf[:0]
	frac := 0
	for ; i < len(lit) && isDigit(lit[i]); i++ {
		if len(buf) > 0 || lit[i] != '0' {
			buf = append(buf, lit[i])
		}
	}
	if i < len(lit) && lit[i] == '.' {
		for i++; i < len(lit) && isDigit(lit[i]); i++ {
			if len(buf) > 0 || lit[i] != '0' {
				buf = append(buf, lit[i])
			}
			frac++
		}
	}
	exp := 0
	if i < len(lit) { // 'e' or 'E'
		i++
		expNeg := false
		if lit[i] == '+' || lit[i] == '-' {
			expNeg = lit[i] == '-'
			i++
		}
		for ; i < len(lit); i++ {
			exp = exp*10 + int(lit[i]-'0') // at most MaxExponentDigits digits
		}
		if expNeg {
			exp = -exp
		}
	}
	// The digits kept so far stop at the last digit of the literal; frac
	// of them (or of the leading zeros dropped) were after the point.
	exp -= frac
	for len(buf) > 0 && buf[len(buf)-1] == '0' {
		buf = buf[:len(buf)-1]
		exp++
	}
	if len(buf) == 0 {
		return number{}, buf
	}
	n.digits, n.exp = buf, exp
	return n, buf
}

func (n number) zero() bool { return len(n.digits) == 0 }

// integral reports whether the value is an integer (1000.0 and 1e3 are).
func (n number) integral() bool { return n.exp >= 0 }

// appendCanonical appends the one text every literal of this value becomes:
// an integer as plain digits (1e3, 1000.0 and 1.000E+3 are all "1000"),
// anything else as integer digits and an exponent without a decimal point
// ("1.50" is "15e-1", "1e300" stays "1e300"). OPA compares both forms
// exactly: its comparison falls back to float64 only for two texts that
// both contain a decimal point.
func (n number) appendCanonical(b []byte) []byte {
	if n.zero() {
		return append(b, '0')
	}
	if n.neg {
		b = append(b, '-')
	}
	b = append(b, n.digits...)
	if n.integral() && len(n.digits)+n.exp <= MaxPlainDigits {
		for i := 0; i < n.exp; i++ {
			b = append(b, '0')
		}
		return b
	}
	b = append(b, 'e')
	return strconv.AppendInt(b, int64(n.exp), 10)
}

// uint64 returns the value when it is a non-negative integer that fits.
func (n number) uint64() (uint64, bool) {
	if n.zero() {
		return 0, true
	}
	if n.neg || n.exp < 0 || len(n.digits)+n.exp > 20 {
		return 0, false
	}
	var u uint64
	for _, c := range n.digits {
		d := uint64(c - '0')
		if u > (1<<64-1-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	for i := 0; i < n.exp; i++ {
		if u > (1<<64-1)/10 {
			return 0, false
		}
		u *= 10
	}
	return u, true
}

// rat returns the exact value.
func (n number) rat() *big.Rat {
	r, _ := new(big.Rat).SetString(string(n.appendCanonical(nil)))
	return r
}

// cmpRat compares the value with r exactly, without big numbers when both
// are non-negative integers within 64 bits.
func (n number) cmpRat(r *big.Rat, ru uint64, rIsU64 bool) int {
	if rIsU64 {
		if u, ok := n.uint64(); ok {
			return cmp.Compare(u, ru)
		}
	}
	return n.rat().Cmp(r)
}

// ratUint64 returns r as a uint64 when it is a non-negative integer that
// fits, for cmpRat's fast path.
func ratUint64(r *big.Rat) (uint64, bool) {
	if r == nil || !r.IsInt() || r.Sign() < 0 || !r.Num().IsUint64() {
		return 0, false
	}
	return r.Num().Uint64(), true
}

// CanonicalNumber returns the canonical text of a JSON number literal (see
// number.appendCanonical), or false when lit is not one.
func CanonicalNumber(lit string) (string, bool) {
	if lit == "" {
		return "", false
	}
	s := scanner{data: []byte(lit)}
	if _, err := s.number(); err != nil || s.pos != len(lit) {
		return "", false
	}
	n, _ := parseNumber([]byte(lit), nil)
	return string(n.appendCanonical(nil)), true
}
