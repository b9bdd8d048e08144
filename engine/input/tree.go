package input

import (
	"encoding/json"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Decode parses one strict JSON document (the scanner's rules: UTF-8 only,
// no byte-order mark, no duplicate object keys, no trailing data, nesting
// bounded by MaxDepth) into Go values: map[string]any, []any, string,
// bool, nil, and json.Number holding the literal text, so no precision is
// lost. It is what the schema library reads.
//
// encoding/json accepts duplicate keys (last one wins) and replaces invalid
// UTF-8, which would let a reader of the body and the policy see different
// documents; hence this decoder.
func Decode(data []byte) (any, error) {
	return decode(data, 0, nil)
}

// decode is Decode with a cap on the number of values (0: none), handing
// the values it reads to admit (when not nil) as the walk does.
func decode(data []byte, maxValues int, admit func(int) error) (any, error) {
	d := treeDecoder{scanner: scanner{data: data, admit: admit}, max: maxValues}
	if err := d.start(); err != nil {
		return nil, err
	}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	if err := d.admitValues(d.values); err != nil {
		return nil, err
	}
	return v, nil
}

type treeDecoder struct {
	scanner
	max, values int
	buf         []byte
	// skipping scans values with the same rules but builds nothing (nil):
	// Lookup's way past the members before the one it looks for.
	skipping bool
}

func (d *treeDecoder) value(depth int) (any, error) {
	if d.pos >= len(d.data) {
		return nil, d.errorf(d.pos, "unexpected end of input")
	}
	d.values++
	if d.max > 0 && d.values > d.max {
		return nil, &LimitError{Max: d.max}
	}
	if d.values%admitEvery == 0 {
		if err := d.admitValues(d.values); err != nil {
			return nil, err
		}
	}
	c := d.data[d.pos]
	if depth >= MaxDepth && (c == '{' || c == '[') {
		return nil, d.errorf(d.pos, "nesting deeper than %d levels", MaxDepth)
	}
	switch {
	case c == '{':
		var obj map[string]any
		if !d.skipping {
			obj = map[string]any{}
		}
		if d.open('}') {
			return obj, nil
		}
		for {
			raw, escaped, at, err := d.key()
			if err != nil {
				return nil, err
			}
			var key string
			if !d.skipping {
				key = d.text(raw, escaped)
				if _, dup := obj[key]; dup {
					return nil, d.quoting(at, "duplicate object key", key)
				}
			}
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			if !d.skipping {
				obj[key] = v
			}
			if done, err := d.next('}', "object"); err != nil || done {
				return obj, err
			}
		}
	case c == '[':
		var arr []any
		if !d.skipping {
			arr = make([]any, 0, 4)
		}
		if d.open(']') {
			return arr, nil
		}
		for {
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			if !d.skipping {
				arr = append(arr, v)
			}
			if done, err := d.next(']', "array"); err != nil || done {
				return arr, err
			}
		}
	case c == '"':
		raw, escaped, err := d.str()
		if err != nil || d.skipping {
			return nil, err
		}
		return d.text(raw, escaped), nil
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || isDigit(c):
		lit, err := d.number()
		if err != nil || d.skipping {
			return nil, err
		}
		return json.Number(lit), nil
	default:
		return nil, d.quoting(d.pos, "unexpected character", rune(c))
	}
}

func (d *treeDecoder) text(raw []byte, escaped bool) string {
	if !escaped {
		return string(raw)
	}
	d.buf = unescape(d.buf[:0], raw)
	return string(d.buf)
}

// Value converts a document as Decode returns it into the value a policy
// reads: OPA's own conversion, with every number in its canonical text. It
// shares nothing with the walk but the number rules, so it serves as the
// walk's second opinion (the runtime self-check, the differential tests).
func Value(doc any) (ast.Value, error) {
	var bad error // the first number that does not canonicalize
	var canon func(any) any
	canon = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, e := range x {
				out[k] = canon(e)
			}
			return out
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = canon(e)
			}
			return out
		case json.Number:
			c, ok := CanonicalNumber(string(x))
			if !ok && bad == nil {
				bad = fmt.Errorf("%q is not a JSON number", string(x))
			}
			return json.Number(c)
		}
		return v
	}
	c := canon(doc)
	if bad != nil {
		return nil, bad
	}
	return ast.InterfaceToValue(c)
}

// Lookup returns the value at the object members tokens in data, decoded
// as Decode decodes it, and whether there is one; what comes before it is
// scanned, not built, and nothing after it is read. It is for documents
// the one pass accepted: it does not look for duplicate keys, which that
// pass refused, and takes the first.
func Lookup(data []byte, tokens []string) (any, bool, error) {
	d := treeDecoder{scanner: scanner{data: data}}
	if err := d.start(); err != nil {
		return nil, false, err
	}
	for depth, tok := range tokens {
		if d.pos >= len(d.data) || d.data[d.pos] != '{' || d.open('}') {
			return nil, false, nil
		}
		for {
			raw, escaped, _, err := d.key()
			if err != nil {
				return nil, false, err
			}
			if !escaped && string(raw) == tok || escaped && d.text(raw, true) == tok {
				break
			}
			d.skipping = true
			_, err = d.value(depth + 1)
			if d.skipping = false; err != nil {
				return nil, false, err
			}
			if done, err := d.next('}', "object"); err != nil || done {
				return nil, false, err
			}
		}
	}
	v, err := d.value(len(tokens))
	return v, err == nil, err
}
