package engine

import (
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/arbiter-dev/arbiter/internal/jsonenc"
)

// keepTerm makes the prepared query hand back the result as OPA built it,
// instead of converting it to Go maps that would then be walked twice more
// (validation, encoding).
var keepTerm = rego.EvalGenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil })

// validValue reports whether v satisfies fs. It is the result-side twin of
// the single-pass input validator: results are small, already built values,
// and their schemas may use if/then/else and uniqueItems.
func validValue(fs *fastSchema, v ast.Value) bool {
	if fs == nil {
		return true
	}
	if fs.never {
		return false
	}
	if fs.cond != nil {
		if validValue(fs.cond, v) {
			if !validValue(fs.then, v) {
				return false
			}
		} else if !validValue(fs.els, v) {
			return false
		}
	}
	switch x := v.(type) {
	case ast.Null:
		if fs.types != 0 && fs.types&tNull == 0 {
			return false
		}
		return enumOK(fs, jsonScalar{kind: tNull})
	case ast.Boolean:
		if fs.types != 0 && fs.types&tBool == 0 {
			return false
		}
		return enumOK(fs, jsonScalar{kind: tBool, b: bool(x)})
	case ast.String:
		s := string(x)
		if fs.types != 0 && fs.types&tString == 0 {
			return false
		}
		if fs.minLen >= 0 || fs.maxLen >= 0 {
			n := utf8.RuneCountInString(s)
			if (fs.minLen >= 0 && n < fs.minLen) || (fs.maxLen >= 0 && n > fs.maxLen) {
				return false
			}
		}
		if fs.pattern != nil && !fs.pattern.MatchString(s) {
			return false
		}
		return enumOK(fs, jsonScalar{kind: tString, s: s})
	case ast.Number:
		p := vparser{valid: true}
		p.checkNumber(fs, string(x))
		return p.valid
	case *ast.Array:
		if (fs.types != 0 && fs.types&tArray == 0) || fs.enum != nil {
			return false
		}
		n := x.Len()
		if (fs.minItems >= 0 && n < fs.minItems) || (fs.maxItems >= 0 && n > fs.maxItems) {
			return false
		}
		for i := 0; i < n; i++ {
			if !validValue(fs.items, x.Elem(i).Value) {
				return false
			}
			if fs.unique {
				for j := 0; j < i; j++ {
					if x.Elem(j).Value.Compare(x.Elem(i).Value) == 0 {
						return false
					}
				}
			}
		}
		return true
	case ast.Object:
		if (fs.types != 0 && fs.types&tObject == 0) || fs.enum != nil {
			return false
		}
		for _, r := range fs.required {
			if x.Get(ast.InternedTerm(r)) == nil {
				return false
			}
		}
		ok := true
		x.Foreach(func(k, val *ast.Term) {
			key, isStr := k.Value.(ast.String)
			if !ok || !isStr {
				ok = false
				return
			}
			if ps, found := fs.props[string(key)]; found {
				ok = validValue(ps, val.Value)
			} else if fs.addl != nil {
				ok = validValue(fs.addl, val.Value)
			} else if !fs.addlAllowed {
				ok = false
			}
		})
		return ok
	default:
		return false // sets and anything else are not JSON
	}
}

func enumOK(fs *fastSchema, v jsonScalar) bool {
	return fs.enum == nil || inEnum(fs.enum, v)
}

// appendJSON encodes a result value as JSON. Object keys come out sorted,
// as encoding/json sorts map keys, so the bytes do not change with the
// engine's path.
func appendJSON(b []byte, v ast.Value) ([]byte, bool) {
	switch x := v.(type) {
	case ast.Null:
		return append(b, "null"...), true
	case ast.Boolean:
		return strconv.AppendBool(b, bool(x)), true
	case ast.Number:
		// OPA keeps number literals as text; re-check that the text is JSON.
		if !isJSONNumber(string(x)) {
			return b, false
		}
		return append(b, x...), true
	case ast.String:
		return jsonenc.AppendString(b, string(x)), true
	case *ast.Array:
		b = append(b, '[')
		for i := 0; i < x.Len(); i++ {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendJSON(b, x.Elem(i).Value); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case ast.Object:
		keys := make([]string, 0, x.Len())
		vals := make(map[string]ast.Value, x.Len())
		ok := true
		x.Foreach(func(k, val *ast.Term) {
			s, isStr := k.Value.(ast.String)
			if !isStr {
				ok = false
				return
			}
			keys = append(keys, string(s))
			vals[string(s)] = val.Value
		})
		if !ok {
			return b, false
		}
		sort.Strings(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.AppendString(b, k)
			b = append(b, ':')
			if b, ok = appendJSON(b, vals[k]); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	default:
		return b, false
	}
}

func isJSONNumber(s string) bool {
	p := parser{data: []byte(s)}
	if len(s) == 0 {
		return false
	}
	_, err := p.number()
	return err == nil && p.pos == len(s)
}
