package engine

import (
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// parseValidate parses body strictly (the rules of decodeStrict) straight
// into an ast.Value, checking it against fs in the same pass. It returns
// valid=false as soon as the document breaks the schema; the caller then
// re-validates with the general validator to report the violations. A
// syntax error is reported whatever the schema says, so the whole body is
// always read. One pass and no intermediate []any/map tree: this is the
// decision path's hot loop on large Runner states.
//
// When wrapped, body must be an object whose "input" member is checked
// against fs; the input's value and raw bytes are returned.
func parseValidate(body []byte, fs *fastSchema, wrapped bool) (v ast.Value, raw []byte, valid bool, err error) {
	p := vparser{parser: parser{data: body}, valid: true}
	if len(body) >= 3 && body[0] == 0xEF && body[1] == 0xBB && body[2] == 0xBF {
		return nil, nil, false, p.errorf(0, "byte-order mark is not allowed")
	}
	p.skipSpace()
	if p.pos >= len(p.data) {
		return nil, nil, false, p.errorf(p.pos, "empty body: expected one JSON value")
	}
	if wrapped {
		p.wantInput = true
		p.inputSchema = fs
		fs = nil
	}
	t, err := p.value(fs, 0)
	if err != nil {
		return nil, nil, false, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, nil, false, p.errorf(p.pos, "trailing data after the JSON value")
	}
	if wrapped {
		if !p.sawInput {
			return nil, nil, false, nil
		}
		t, raw = p.input, p.inputRaw
	} else {
		raw = body
	}
	if !p.valid || t == nil {
		return nil, raw, false, nil
	}
	if _, ok := t.Value.(ast.Object); !ok {
		return nil, raw, false, nil
	}
	return t.Value, raw, true, nil
}

type vparser struct {
	parser
	valid bool // false once the schema is broken: values are no longer built

	// report is the second pass over an input the first pass rejected: it
	// records violations (at most MaxViolations) instead of stopping at the
	// first, and builds no values.
	report     bool
	violations []Violation
	extra      int         // violations beyond MaxViolations
	path       []pathToken // where the parser is, relative to the input

	// Object keys and short strings repeat across the entries of a Runner's
	// outbox and command maps; one shared term each (terms are immutable)
	// saves most of the allocations of a large state. A direct-mapped cache:
	// no map to allocate per request, a collision only costs a fresh term.
	terms [termCacheSize]*ast.Term

	wantInput   bool // the top-level object is a Data API wrapper
	inputSchema *fastSchema
	sawInput    bool
	input       *ast.Term
	inputRaw    []byte
}

// pathToken is one step of a JSON pointer: an object key or an array index.
type pathToken struct {
	key   string
	index int // -1 for a key
}

// MaxViolations bounds the violations reported for one input. A 600 KB body
// of 200,000 empty outbox entries has a million failing leaves; listing them
// all took seconds and hundreds of megabytes.
const MaxViolations = 100

// fail marks the input invalid; in the report pass it records why, at the
// current location (plus name, for a missing or unexpected property).
func (p *vparser) fail(msg string, name ...string) {
	p.valid = false
	if !p.report {
		return
	}
	if len(p.violations) >= MaxViolations {
		p.extra++
		return
	}
	ptr := p.pointer()
	for _, n := range name {
		ptr += "/" + escapePointer(n)
	}
	p.violations = append(p.violations, Violation{Path: ptr, Message: msg})
}

func (p *vparser) pointer() string {
	var b []byte
	for _, t := range p.path {
		b = append(b, '/')
		if t.index >= 0 {
			b = strconv.AppendInt(b, int64(t.index), 10)
		} else {
			b = append(b, escapePointer(t.key)...)
		}
	}
	return string(b)
}

// checking reports whether values below still need validating.
func (p *vparser) checking() bool { return p.valid || p.report }

// building reports whether values are still being built.
func (p *vparser) building() bool { return p.valid && !p.report }

// value parses one value at depth with schema fs (nil: anything goes).
func (p *vparser) value(fs *fastSchema, depth int) (*ast.Term, error) {
	if p.pos >= len(p.data) {
		return nil, p.errorf(p.pos, "unexpected end of input")
	}
	if fs != nil && fs.never {
		p.fail("no value is allowed here")
		fs = nil
	}
	if !p.checking() {
		fs = nil
	}
	c := p.data[p.pos]
	switch {
	case c == '{':
		return p.object(fs, depth)
	case c == '[':
		return p.array(fs, depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		if fs != nil {
			p.checkString(fs, s)
		}
		if !p.building() {
			return nil, nil
		}
		return p.stringTerm(s), nil
	case c == 't' || c == 'f':
		b := c == 't'
		word := "false"
		if b {
			word = "true"
		}
		if err := p.literal(word); err != nil {
			return nil, err
		}
		if fs != nil {
			p.checkScalar(fs, tBool, jsonScalar{kind: tBool, b: b})
		}
		if !p.building() {
			return nil, nil
		}
		return ast.InternedTerm(b), nil
	case c == 'n':
		if err := p.literal("null"); err != nil {
			return nil, err
		}
		if fs != nil {
			p.checkScalar(fs, tNull, jsonScalar{kind: tNull})
		}
		if !p.building() {
			return nil, nil
		}
		return ast.NullTerm(), nil
	case c == '-' || (c >= '0' && c <= '9'):
		start := p.pos
		if _, err := p.number(); err != nil {
			return nil, err
		}
		litBytes := p.data[start:p.pos]
		if len(litBytes) <= 3 && litBytes[0] != '-' {
			// Small non-negative integers (JSON has no leading zeros, so
			// the literal is canonical) are interned by OPA.
			if n, err := strconv.Atoi(string(litBytes)); err == nil {
				if fs != nil {
					p.checkNumber(fs, string(litBytes))
				}
				if !p.building() {
					return nil, nil
				}
				return ast.InternedTerm(n), nil
			}
		}
		lit := string(litBytes)
		if fs != nil {
			p.checkNumber(fs, lit)
		}
		if !p.building() {
			return nil, nil
		}
		return ast.NewTerm(ast.Number(lit)), nil
	default:
		return nil, p.errorf(p.pos, "unexpected character %q", rune(c))
	}
}

func (p *vparser) object(fs *fastSchema, depth int) (*ast.Term, error) {
	if depth+1 > MaxDepth {
		return nil, p.errorf(p.pos, "nesting deeper than %d levels", MaxDepth)
	}
	if fs != nil && fs.types != 0 && fs.types&tObject == 0 {
		p.fail(typeMessage("object", fs.types))
		fs = nil
	}
	if fs != nil && fs.enum != nil {
		p.fail(enumMessage(fs.enum)) // enums hold scalars only
		fs = nil
	}
	p.pos++ // '{'
	var pairs [][2]*ast.Term
	var keys []string
	var seen map[string]struct{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.checkRequired(fs, nil, nil)
		if !p.building() {
			return nil, nil
		}
		return ast.NewTerm(ast.NewObject()), nil
	}
	for {
		key, keyAt, err := p.memberKey()
		if err != nil {
			return nil, err
		}
		// Duplicate keys: a linear scan is cheapest for the small objects
		// that dominate; large ones switch to a set.
		if seen != nil {
			if _, dup := seen[key]; dup {
				return nil, p.errorf(keyAt, "duplicate object key %q", key)
			}
			seen[key] = struct{}{}
		} else {
			for _, k := range keys {
				if k == key {
					return nil, p.errorf(keyAt, "duplicate object key %q", key)
				}
			}
			if len(keys) == 16 {
				seen = make(map[string]struct{}, 32)
				for _, k := range keys {
					seen[k] = struct{}{}
				}
				seen[key] = struct{}{}
			}
		}
		keys = append(keys, key)

		var child *fastSchema
		if fs != nil {
			if ps, ok := fs.props[key]; ok {
				child = ps
			} else if fs.addl != nil {
				child = fs.addl
			} else if !fs.addlAllowed {
				p.fail("property is not allowed", key)
			}
		}
		isInput := p.wantInput && depth == 0 && key == "input"
		if isInput {
			child = p.inputSchema
		} else if p.report {
			p.path = append(p.path, pathToken{key: key, index: -1})
		}
		valStart := p.pos
		v, err := p.value(child, depth+1)
		if err != nil {
			return nil, err
		}
		if isInput {
			p.sawInput = true
			p.input = v
			p.inputRaw = p.data[valStart:p.pos]
			if p.valid {
				if _, ok := v.Value.(ast.Object); !ok {
					p.fail("expected an object")
				}
			}
		} else if p.report {
			p.path = p.path[:len(p.path)-1]
		}
		if p.building() {
			pairs = append(pairs, [2]*ast.Term{p.stringTerm(key), v})
		}
		done, err := p.next('}', "object")
		if err != nil {
			return nil, err
		}
		if done {
			p.checkRequired(fs, keys, seen)
			if !p.building() {
				return nil, nil
			}
			return ast.NewTerm(ast.NewObject(pairs...)), nil
		}
	}
}

func (p *vparser) checkRequired(fs *fastSchema, keys []string, seen map[string]struct{}) {
	if fs == nil || !p.checking() {
		return
	}
	for _, r := range fs.required {
		found := false
		if seen != nil {
			_, found = seen[r]
		} else {
			for _, k := range keys {
				if k == r {
					found = true
					break
				}
			}
		}
		if !found {
			p.fail("missing required property", r)
			if !p.report {
				return
			}
		}
	}
}

func (p *vparser) array(fs *fastSchema, depth int) (*ast.Term, error) {
	if depth+1 > MaxDepth {
		return nil, p.errorf(p.pos, "nesting deeper than %d levels", MaxDepth)
	}
	if fs != nil && fs.types != 0 && fs.types&tArray == 0 {
		p.fail(typeMessage("array", fs.types))
		fs = nil
	} else if fs != nil && fs.enum != nil {
		p.fail(enumMessage(fs.enum))
		fs = nil
	}
	var item *fastSchema
	if fs != nil {
		item = fs.items
	}
	p.pos++ // '['
	var elems []*ast.Term
	n := 0
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
	} else {
		for {
			p.skipSpace()
			if p.report {
				p.path = append(p.path, pathToken{index: n})
			}
			v, err := p.value(item, depth+1)
			if err != nil {
				return nil, err
			}
			if p.report {
				p.path = p.path[:len(p.path)-1]
			}
			n++
			if p.building() {
				elems = append(elems, v)
			}
			done, err := p.next(']', "array")
			if err != nil {
				return nil, err
			}
			if done {
				break
			}
		}
	}
	if fs != nil && fs.minItems >= 0 && n < fs.minItems {
		p.fail(fmt.Sprintf("expected at least %d items, got %d", fs.minItems, n))
	}
	if fs != nil && fs.maxItems >= 0 && n > fs.maxItems {
		p.fail(fmt.Sprintf("expected at most %d items, got %d", fs.maxItems, n))
	}
	if !p.building() {
		return nil, nil
	}
	return ast.NewTerm(ast.NewArray(elems...)), nil
}

func (p *vparser) checkString(fs *fastSchema, s string) {
	if fs.types != 0 && fs.types&tString == 0 {
		p.fail(typeMessage("string", fs.types))
		return
	}
	if fs.minLen >= 0 || fs.maxLen >= 0 {
		n := utf8.RuneCountInString(s)
		if fs.minLen >= 0 && n < fs.minLen {
			p.fail(fmt.Sprintf("length must be >= %d, but got %d", fs.minLen, n))
		}
		if fs.maxLen >= 0 && n > fs.maxLen {
			p.fail(fmt.Sprintf("length must be <= %d, but got %d", fs.maxLen, n))
		}
	}
	if fs.pattern != nil && !fs.pattern.MatchString(s) {
		p.fail(fmt.Sprintf("does not match pattern %q", fs.pattern.String()))
	}
	if fs.enum != nil && !inEnum(fs.enum, jsonScalar{kind: tString, s: s}) {
		p.fail(enumMessage(fs.enum))
	}
}

func (p *vparser) checkScalar(fs *fastSchema, kind typeSet, v jsonScalar) {
	if fs.types != 0 && fs.types&kind == 0 {
		p.fail(typeMessage(kindName(kind), fs.types))
		return
	}
	if fs.enum != nil && !inEnum(fs.enum, v) {
		p.fail(enumMessage(fs.enum))
	}
}

// checkNumber applies type, bounds and enum to a number literal, exactly:
// plain integer literals within 64 bits take a fast path, anything else is
// compared as a big.Rat.
func (p *vparser) checkNumber(fs *fastSchema, lit string) {
	plain := true
	for i := 0; i < len(lit); i++ {
		if c := lit[i]; c == '.' || c == 'e' || c == 'E' {
			plain = false
			break
		}
	}
	var r *big.Rat
	getRat := func() *big.Rat {
		if r == nil {
			r, _ = new(big.Rat).SetString(lit)
		}
		return r
	}
	if fs.types != 0 && fs.types&tNumber == 0 {
		if fs.types&tInteger == 0 || (!plain && !getRat().IsInt()) {
			p.fail(typeMessage("number", fs.types))
			return
		}
	}
	if fs.min != nil || fs.max != nil || fs.exclMin != nil || fs.exclMx != nil {
		if plain && fastBounds(fs, lit) {
			// within bounds, decided without big numbers
		} else {
			n := getRat()
			switch {
			case fs.min != nil && n.Cmp(fs.min) < 0:
				p.fail(fmt.Sprintf("must be >= %s, but got %s", fs.min.RatString(), lit))
			case fs.max != nil && n.Cmp(fs.max) > 0:
				p.fail(fmt.Sprintf("must be <= %s, but got %s", fs.max.RatString(), lit))
			case fs.exclMin != nil && n.Cmp(fs.exclMin) <= 0:
				p.fail(fmt.Sprintf("must be > %s, but got %s", fs.exclMin.RatString(), lit))
			case fs.exclMx != nil && n.Cmp(fs.exclMx) >= 0:
				p.fail(fmt.Sprintf("must be < %s, but got %s", fs.exclMx.RatString(), lit))
			}
		}
	}
	if fs.enum != nil && !inEnum(fs.enum, jsonScalar{kind: tNumber, n: getRat()}) {
		p.fail(enumMessage(fs.enum))
	}
}

// fastBounds reports whether a plain non-negative integer literal that fits
// in a uint64 lies within the inclusive bounds when those are small integers
// too; false means "decide with big numbers".
func fastBounds(fs *fastSchema, lit string) bool {
	if fs.exclMin != nil || fs.exclMx != nil || lit[0] == '-' {
		return false
	}
	u, err := strconv.ParseUint(lit, 10, 64)
	if err != nil {
		return false
	}
	if fs.min != nil {
		if !fs.min.IsInt() || fs.min.Sign() < 0 {
			return false
		}
		if !fs.min.Num().IsUint64() || u < fs.min.Num().Uint64() {
			return false
		}
	}
	if fs.max != nil {
		if !fs.max.IsInt() || fs.max.Sign() < 0 || !fs.max.Num().IsUint64() || u > fs.max.Num().Uint64() {
			return false
		}
	}
	return true
}

func inEnum(enum []jsonScalar, v jsonScalar) bool {
	for _, e := range enum {
		if e.kind != v.kind {
			continue
		}
		switch e.kind {
		case tNull:
			return true
		case tBool:
			if e.b == v.b {
				return true
			}
		case tString:
			if e.s == v.s {
				return true
			}
		case tNumber:
			if e.n.Cmp(v.n) == 0 {
				return true
			}
		}
	}
	return false
}

// Strings longer than maxSharedString rarely repeat and are not cached.
const (
	maxSharedString = 64
	termCacheSize   = 512
)

func (p *vparser) stringTerm(s string) *ast.Term {
	if len(s) > maxSharedString {
		return ast.StringTerm(s)
	}
	// FNV-1a, folded to the cache size.
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	slot := &p.terms[h%termCacheSize]
	if t := *slot; t != nil && string(t.Value.(ast.String)) == s {
		return t
	}
	t := ast.StringTerm(s)
	*slot = t
	return t
}

// reportViolations parses an input the fast validator rejected once more,
// listing where and why it breaks the schema (at most MaxViolations, the
// rest counted in a last entry).
func reportViolations(body []byte, fs *fastSchema, wrapped bool) []Violation {
	p := vparser{parser: parser{data: body}, report: true, valid: true}
	if wrapped {
		p.wantInput, p.inputSchema, fs = true, fs, nil
	}
	p.skipSpace()
	if _, err := p.value(fs, 0); err != nil {
		return nil
	}
	if wrapped && !p.sawInput {
		return []Violation{{Path: "", Message: "missing input"}}
	}
	out := p.violations
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	if p.extra > 0 {
		out = append(out, Violation{Path: "", Message: fmt.Sprintf("%d more violations not listed", p.extra)})
	}
	return out
}

func kindName(k typeSet) string {
	switch k {
	case tNull:
		return "null"
	case tBool:
		return "boolean"
	case tString:
		return "string"
	case tArray:
		return "array"
	case tObject:
		return "object"
	default:
		return "number"
	}
}

func typeMessage(got string, want typeSet) string {
	var names []string
	for _, k := range []typeSet{tNull, tBool, tInteger, tNumber, tString, tArray, tObject} {
		if want&k != 0 {
			if k == tInteger {
				names = append(names, "integer")
			} else {
				names = append(names, kindName(k))
			}
		}
	}
	return fmt.Sprintf("got %s, want %s", got, strings.Join(names, " or "))
}

func enumMessage(enum []jsonScalar) string {
	var vals []string
	for i, e := range enum {
		if i == 8 {
			vals = append(vals, "...")
			break
		}
		switch e.kind {
		case tNull:
			vals = append(vals, "null")
		case tBool:
			vals = append(vals, strconv.FormatBool(e.b))
		case tString:
			vals = append(vals, strconv.Quote(e.s))
		default:
			vals = append(vals, e.n.RatString())
		}
	}
	return "value must be one of " + strings.Join(vals, ", ")
}
