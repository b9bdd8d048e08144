// Package jsonptr escapes and unescapes JSON pointer reference tokens
// (RFC 6901), the one place that knows that "~" is "~0" and "/" is "~1".
package jsonptr

import (
	"fmt"
	"strings"
)

var (
	escaper   = strings.NewReplacer("~", "~0", "/", "~1")
	unescaper = strings.NewReplacer("~1", "/", "~0", "~")
)

// Escape escapes one reference token.
func Escape(token string) string {
	if !strings.ContainsAny(token, "~/") {
		return token
	}
	return escaper.Replace(token)
}

// Unescape reverses Escape. A "~" followed by anything but "0" or "1" is
// kept as it is.
func Unescape(token string) string {
	if !strings.Contains(token, "~") {
		return token
	}
	return unescaper.Replace(token)
}

// Join is the pointer of tokens ("" for none).
func Join(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(Escape(t))
	}
	return b.String()
}

// Split parses a pointer into its reference tokens, strictly: it must be
// "" (the whole document, no tokens) or start with "/", and a "~" must be
// followed by "0" or "1". A pointer a person typed that breaks either rule
// names nothing, and saying so beats matching something else.
func Split(pointer string) ([]string, error) {
	if pointer == "" {
		return nil, nil
	}
	if pointer[0] != '/' {
		return nil, fmt.Errorf("%q is not a JSON pointer: it must start with /", pointer)
	}
	toks := strings.Split(pointer[1:], "/")
	for i, t := range toks {
		for j := strings.IndexByte(t, '~'); j >= 0; j = strings.IndexByte(t, '~') {
			if j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1') {
				return nil, fmt.Errorf("%q is not a JSON pointer: a ~ must be followed by 0 (for ~) or 1 (for /)", pointer)
			}
			t = t[j+2:]
		}
		toks[i] = Unescape(toks[i])
	}
	return toks, nil
}
