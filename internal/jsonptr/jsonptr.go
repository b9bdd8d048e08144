// Package jsonptr escapes and unescapes JSON pointer reference tokens
// (RFC 6901), the one place that knows that "~" is "~0" and "/" is "~1".
package jsonptr

import "strings"

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
