// Package jsonenc is the codebase's one JSON string escaper and one
// compactor. It appends JSON text without reflection, for the hot paths
// that write it once per decision: the engine's result, the answer's
// envelope and the decision log's line.
package jsonenc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string, escaped as encoding/json escapes
// it with HTML escaping off (invalid UTF-8 becomes U+FFFD).
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			if r == utf8.RuneError {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			}
			start = i + size
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Compact returns b without insignificant whitespace, or b as it is when
// it is not JSON (for messages that show a document to a person).
func Compact(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

// AppendValue appends an OPA value as JSON: objects with their keys in
// sorted order (OPA iterates them sorted, so nothing is sorted here), sets
// as arrays in their sorted order, as OPA's Data API writes them. A value
// that has no JSON form (a non-string object key, a number OPA holds in a
// form JSON lacks) is an error.
func AppendValue(b []byte, v ast.Value) ([]byte, error) {
	switch x := v.(type) {
	case ast.Null:
		return append(b, "null"...), nil
	case ast.Boolean:
		return strconv.AppendBool(b, bool(x)), nil
	case ast.Number:
		if !json.Valid([]byte(x)) {
			return b, fmt.Errorf("number %q has no JSON form", string(x))
		}
		return append(b, x...), nil
	case ast.String:
		return AppendString(b, string(x)), nil
	case *ast.Array:
		b = append(b, '[')
		var err error
		for i := 0; i < x.Len(); i++ {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = AppendValue(b, x.Elem(i).Value); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case ast.Set:
		b = append(b, '[')
		var err error
		for i, t := range x.Slice() { // sorted, as Foreach would give them
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = AppendValue(b, t.Value); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case ast.Object:
		b = append(b, '{')
		var err error
		first := true
		x.Foreach(func(k, val *ast.Term) {
			if err != nil {
				return
			}
			s, ok := k.Value.(ast.String)
			if !ok {
				err = fmt.Errorf("object key %v is not a string", k)
				return
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = AppendString(b, string(s))
			b = append(b, ':')
			b, err = AppendValue(b, val.Value)
		})
		if err != nil {
			return b, err
		}
		return append(b, '}'), nil
	default:
		return b, fmt.Errorf("%T has no JSON form", v)
	}
}
