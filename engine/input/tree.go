package input

import (
	"encoding/json"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/internal/passes"
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
	passes.Scan(len(data))
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
	switch c := d.data[d.pos]; {
	case c == '{':
		if depth+1 > MaxDepth {
			return nil, d.errorf(d.pos, "nesting deeper than %d levels", MaxDepth)
		}
		obj := map[string]any{}
		if d.open('}') {
			return obj, nil
		}
		for {
			raw, escaped, at, err := d.key()
			if err != nil {
				return nil, err
			}
			key := d.text(raw, escaped)
			if _, dup := obj[key]; dup {
				return nil, d.quoting(at, "duplicate object key", key)
			}
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			obj[key] = v
			if done, err := d.next('}', "object"); err != nil || done {
				return obj, err
			}
		}
	case c == '[':
		if depth+1 > MaxDepth {
			return nil, d.errorf(d.pos, "nesting deeper than %d levels", MaxDepth)
		}
		arr := make([]any, 0, 4)
		if d.open(']') {
			return arr, nil
		}
		for {
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
			if done, err := d.next(']', "array"); err != nil || done {
				return arr, err
			}
		}
	case c == '"':
		raw, escaped, err := d.str()
		if err != nil {
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
		if err != nil {
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
	var canon func(any) (any, error)
	canon = func(v any) (any, error) {
		switch x := v.(type) {
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, e := range x {
				c, err := canon(e)
				if err != nil {
					return nil, err
				}
				out[k] = c
			}
			return out, nil
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				c, err := canon(e)
				if err != nil {
					return nil, err
				}
				out[i] = c
			}
			return out, nil
		case json.Number:
			c, ok := CanonicalNumber(string(x))
			if !ok {
				return nil, fmt.Errorf("%q is not a JSON number", string(x))
			}
			return json.Number(c), nil
		}
		return v, nil
	}
	c, err := canon(doc)
	if err != nil {
		return nil, err
	}
	return ast.InterfaceToValue(c)
}
