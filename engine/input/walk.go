package input

import (
	"context"
	"encoding/json"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// walker is one pass over a request body: the strict scan, validation
// against the schema's nodes and, when asked, building the ast.Value of the
// projected parts. The first pass stops checking at the first violation
// (but always reads the whole body, so that a syntax error anywhere is
// reported as such); the report pass lists the violations and builds
// nothing.
type walker struct {
	scanner
	ctx       context.Context
	maxValues int
	values    int

	valid  bool // false once the schema is broken: values are no longer built
	report bool
	rep    reporter

	keys  []string // the keys of the objects being read, innermost last
	arena []*node  // child sets of the values being read
	// sets are key sets of the large objects being read (by depth of
	// large object), kept between requests.
	sets  []map[string]struct{}
	large int // large objects being read

	emptyObj, emptyArr *ast.Term

	numBuf   []byte
	canonBuf []byte
	strBuf   []byte

	// Object keys and short strings repeat across the entries of a Runner's
	// outbox and command maps; one shared term each (terms are immutable)
	// saves most of the allocations of a large state. Direct-mapped: a
	// collision only costs a fresh term.
	terms [termCacheSize]*ast.Term

	// A Data API body: the input is the member "input" of the top object.
	wrapped  bool
	inSet    []*node
	inProj   *Projection
	sawInput bool
	input    *ast.Term
	inputRaw []byte
	inputObj bool
}

const (
	maxSharedString = 64
	termCacheSize   = 512
)

// LimitError is an input with more values than the configured cap.
type LimitError struct{ Max int }

func (e *LimitError) Error() string {
	return "the input has more than " + strconv.Itoa(e.Max) + " JSON values"
}

func (w *walker) checking() bool { return w.valid || w.report }

// recordViolation records a violation at the current location plus names.
func (w *walker) recordViolation(msg string, names ...string) {
	w.valid = false
	if w.report {
		w.rep.add(msg, names...)
	}
}

func (w *walker) failKind(k jsonschema.ErrorKind, names ...string) {
	w.valid = false
	if w.report {
		w.rep.add(k.LocalizedString(printer), names...)
	}
}

// value reads one value under the nodes of set and builds it when proj is
// not nil (and the input is still valid).
func (w *walker) value(set []*node, proj *Projection, depth int) (*ast.Term, error) {
	if w.pos >= len(w.data) {
		return nil, w.errorf(w.pos, "unexpected end of input")
	}
	w.values++
	if w.values > w.maxValues {
		return nil, &LimitError{Max: w.maxValues}
	}
	if w.values%admitEvery == 0 {
		if err := w.admitValues(w.values); err != nil {
			return nil, err
		}
		if w.ctx != nil {
			if err := w.ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	if !w.checking() {
		set, proj = nil, nil
	}
	start, c := w.pos, w.data[w.pos]
	if depth >= MaxDepth && (c == '{' || c == '[') {
		return nil, w.errorf(w.pos, "nesting deeper than %d levels", MaxDepth)
	}
	var t *ast.Term
	var err error
	switch {
	case c == '{':
		t, err = w.object(set, proj, depth)
	case c == '[':
		t, err = w.array(set, proj, depth)
	case c == '"':
		t, err = w.stringValue(set, proj)
	case c == 't' || c == 'f' || c == 'n':
		t, err = w.literalValue(set, c)
	case c == '-' || isDigit(c):
		t, err = w.numberValue(set, proj)
	default:
		return nil, w.quoting(w.pos, "unexpected character", rune(c))
	}
	if err != nil {
		return nil, err
	}
	if w.checking() {
		for _, n := range set {
			if n.delegated {
				w.delegate(n, w.data[start:w.pos])
			}
		}
	}
	if !w.valid || proj == nil {
		return nil, nil
	}
	return t, nil
}

// check applies the type, const and enum of every node in set to a value of
// kind got; it returns the nodes whose other keywords still apply, as a bit
// mask over set (a node that fails type, const or enum says nothing more,
// as in the library).
func (w *walker) check(set []*node, got typeMask, v scalar, raw func() any) uint64 {
	var alive uint64
	for i, n := range set {
		if i >= 64 {
			break
		}
		if n.delegated {
			continue
		}
		if n.never {
			w.failKind(&kind.FalseSchema{})
			continue
		}
		if n.types != 0 && n.types&got == 0 && !(got == tInteger && n.types&tNumber != 0) {
			w.failKind(&kind.Type{Got: typeName(got), Want: n.s.Types.ToStrings()})
			continue
		}
		if n.enum != nil && !inEnum(n.enum, got, v) {
			if n.enumConst {
				w.failKind(&kind.Const{Got: raw(), Want: *n.s.Const})
			} else {
				w.failKind(&kind.Enum{Got: raw(), Want: n.s.Enum.Values})
			}
			continue
		}
		alive |= 1 << i
	}
	return alive
}

// typeName is the library's name for a value's type: JSON numbers are all
// "number", even integral ones.
func typeName(t typeMask) string {
	for name, bit := range typeBits {
		if bit == t && t != tInteger {
			return name
		}
	}
	return "number"
}

func inEnum(enum []scalar, got typeMask, v scalar) bool {
	if got == tInteger {
		got = tNumber
	}
	v.kind = got // a null's and a string's b, and a boolean's s, are zero on both sides
	return slices.Contains(enum, v)
}

func (w *walker) literalValue(set []*node, c byte) (*ast.Term, error) {
	word, v, t := "null", scalar{kind: tNull}, ast.InternedNullTerm
	switch c {
	case 't':
		word, v, t = "true", scalar{kind: tBool, b: true}, ast.InternedTerm(true)
	case 'f':
		word, v, t = "false", scalar{kind: tBool}, ast.InternedTerm(false)
	}
	if err := w.literal(word); err != nil {
		return nil, err
	}
	if len(set) > 0 {
		w.check(set, v.kind, v, func() any {
			if v.kind == tNull {
				return nil
			}
			return v.b
		})
	}
	return t, nil
}

func (w *walker) numberValue(set []*node, proj *Projection) (*ast.Term, error) {
	lit, err := w.number()
	if err != nil {
		if _, beyond := err.(*NumberLimitError); !beyond {
			return nil, err
		}
		// Valid JSON, in any place (typed by the schema or free-form),
		// that the engine cannot represent: a violation at the number.
		w.recordViolation(numberLimitMessage)
		return nil, nil
	}
	if len(set) == 0 && (proj == nil || !w.valid) {
		return nil, nil
	}
	var n number
	var canon []byte
	got := tNumber
	if plainInteger(lit) {
		// The common case: digits only, which JSON writes without leading
		// zeros, so the literal is its own canonical text.
		n, canon, got = number{digits: lit}, lit, tInteger
		if len(lit) == 1 && lit[0] == '0' {
			n = number{}
		}
	} else {
		n, w.numBuf = parseNumber(lit, w.numBuf)
		if n.integral() {
			got = tInteger
		}
		w.canonBuf = n.appendCanonical(w.canonBuf[:0])
		canon = w.canonBuf
	}
	if len(set) > 0 {
		v := scalar{kind: tNumber, s: unsafe.String(unsafe.SliceData(canon), len(canon))}
		alive := w.check(set, got, v, func() any { return json.Number(lit) })
		for i, nd := range set {
			if alive&(1<<i) != 0 && len(nd.bounds) > 0 {
				w.checkBounds(nd, n)
			}
		}
	}
	if proj == nil || !w.valid {
		return nil, nil
	}
	if len(canon) <= 3 && canon[0] != '-' {
		i, _ := strconv.Atoi(string(canon))
		return ast.InternedTerm(i), nil
	}
	return ast.NewTerm(ast.Number(string(canon))), nil
}

func (w *walker) checkBounds(nd *node, n number) {
	for _, b := range nd.bounds {
		var bad bool
		switch b.kind {
		case bMin:
			bad = n.cmpRat(b.r, b.u, b.isU64) < 0
		case bMax:
			bad = n.cmpRat(b.r, b.u, b.isU64) > 0
		case bExclMin:
			bad = n.cmpRat(b.r, b.u, b.isU64) <= 0
		case bExclMax:
			bad = n.cmpRat(b.r, b.u, b.isU64) >= 0
		case bMultiple:
			bad = !new(big.Rat).Quo(n.rat(), b.r).IsInt()
		}
		if bad {
			w.recordViolation(boundMessage(b, n))
		}
	}
}

// boundMessage words a bound violation as the library does, with exact
// numbers where the library would print float64s.
func boundMessage(b bound, n number) string {
	got, want := string(n.appendCanonical(nil)), b.r.RatString()
	if b.kind == bMultiple {
		return got + " not multipleOf " + want
	}
	return [...]string{bMin: "minimum", bMax: "maximum", bExclMin: "exclusiveMinimum", bExclMax: "exclusiveMaximum"}[b.kind] + ": got " + got + ", want " + want
}

func (w *walker) stringValue(set []*node, proj *Projection) (*ast.Term, error) {
	raw, escaped, err := w.str()
	if err != nil {
		return nil, err
	}
	build := proj != nil && w.valid
	if len(set) == 0 && !build {
		return nil, nil
	}
	s := w.view(raw, escaped)
	if len(set) > 0 {
		alive := w.check(set, tString, scalar{kind: tString, s: s}, func() any { return strings.Clone(s) })
		for i, n := range set {
			if alive&(1<<i) == 0 {
				continue
			}
			ls := n.s
			if ls.MinLength != nil || ls.MaxLength != nil {
				l := utf8.RuneCountInString(s)
				if ls.MinLength != nil && l < *ls.MinLength {
					w.failKind(&kind.MinLength{Got: l, Want: *ls.MinLength})
				}
				if ls.MaxLength != nil && l > *ls.MaxLength {
					w.failKind(&kind.MaxLength{Got: l, Want: *ls.MaxLength})
				}
			}
			if ls.Pattern != nil && !ls.Pattern.MatchString(s) {
				w.failKind(&kind.Pattern{Got: strings.Clone(s), Want: ls.Pattern.String()})
			}
		}
	}
	if !build || !w.valid {
		return nil, nil
	}
	return w.stringTerm(s), nil
}

// view returns the characters of a scanned string without copying: the
// body's own bytes, or the unescaped text in strBuf (valid until the next
// view). Views never outlive the walk; stringTerm copies.
func (w *walker) view(raw []byte, escaped bool) string {
	if escaped {
		w.strBuf = unescape(w.strBuf[:0], raw)
		raw = w.strBuf
	}
	return unsafe.String(unsafe.SliceData(raw), len(raw))
}

func (w *walker) stringTerm(s string) *ast.Term {
	if len(s) > maxSharedString {
		return ast.StringTerm(strings.Clone(s))
	}
	h := uint32(2166136261) // FNV-1a, folded to the cache size
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	slot := &w.terms[h%termCacheSize]
	if t := *slot; t != nil && string(t.Value.(ast.String)) == s {
		return t
	}
	t := ast.StringTerm(strings.Clone(s))
	*slot = t
	return t
}

func (w *walker) object(set []*node, proj *Projection, depth int) (*ast.Term, error) {
	var alive uint64
	if len(set) > 0 {
		alive = w.check(set, tObject, scalar{}, func() any { return map[string]any{} })
	}
	build := proj != nil && w.valid
	if build && len(proj.Index) > 0 {
		proj = whole // read as an array somewhere: build it whole
	}
	var pairs [][2]*ast.Term
	frame := len(w.keys)
	var seen map[string]struct{}
	defer func() {
		w.keys = w.keys[:frame]
		if seen != nil {
			clear(seen)
			w.large--
		}
	}()
	top := w.wrapped && depth == 0
	if !w.open('}') {
		for {
			raw, escaped, at, err := w.key()
			if err != nil {
				return nil, err
			}
			var key string
			if escaped {
				key = string(unescape(nil, raw))
			} else {
				key = unsafe.String(unsafe.SliceData(raw), len(raw))
			}
			// Duplicate keys would let the policy and another reader of the
			// body see different documents. A linear scan suits the small
			// objects that dominate; large ones switch to a set.
			if seen != nil {
				if _, dup := seen[key]; dup {
					return nil, w.quoting(at, "duplicate object key", key)
				}
				seen[key] = struct{}{}
			} else {
				if slices.Contains(w.keys[frame:], key) {
					return nil, w.quoting(at, "duplicate object key", key)
				}
				if len(w.keys)-frame == 24 {
					seen = w.keySet()
					for _, k := range w.keys[frame:] {
						seen[k] = struct{}{}
					}
					seen[key] = struct{}{}
				}
			}
			w.keys = append(w.keys, key)

			if top {
				if err := w.topMember(key); err != nil {
					return nil, err
				}
			} else {
				v, err := w.child(set, alive, proj, build, key, -1, depth)
				if err != nil {
					return nil, err
				}
				if v != nil {
					pairs = append(pairs, [2]*ast.Term{w.stringTerm(key), v})
				}
			}
			done, err := w.next('}', "object")
			if err != nil {
				return nil, err
			}
			if done {
				break
			}
		}
	}
	w.closeObject(set, alive, frame, seen)
	if top || !build || !w.valid {
		return nil, nil
	}
	if len(pairs) == 0 {
		return shared(&w.emptyObj, func() ast.Value { return ast.NewObject() }), nil
	}
	return ast.NewTerm(ast.NewObject(pairs...)), nil
}

// child reads the value of a member (key) or element (i >= 0) of an object
// or array read under the alive nodes of set and built by proj, and
// returns what the object or array keeps of it when keep: the value, a
// placeholder (null) for a value no rule reads, or nil for nothing.
func (w *walker) child(set []*node, alive uint64, proj *Projection, keep bool, key string, i, depth int) (*ast.Term, error) {
	var placeholder bool
	if keep {
		proj, placeholder = proj.child(key, i)
	} else {
		proj = nil
	}
	mark := len(w.arena) // the child's set, when a union, is built from here
	set = w.childSet(set, alive, key, i)
	if w.report {
		w.rep.push(key, i)
	}
	v, err := w.value(set, proj, depth+1)
	if err != nil {
		return nil, err
	}
	if w.report {
		w.rep.pop()
	}
	w.arena = w.arena[:mark]
	switch {
	case !keep || !w.valid:
		return nil, nil
	case v == nil && placeholder:
		return ast.InternedNullTerm, nil
	}
	return v, nil
}

// keySet returns an empty set for the keys of one more large object.
func (w *walker) keySet() map[string]struct{} {
	if w.large == len(w.sets) {
		w.sets = append(w.sets, make(map[string]struct{}, 64))
	}
	m := w.sets[w.large]
	w.large++
	return m
}

// topMember reads one member of a Data API body: "input" is the input, any
// other member is only scanned.
func (w *walker) topMember(key string) error {
	if key != "input" {
		_, err := w.value(nil, nil, 1)
		return err
	}
	start := w.pos
	w.sawInput = true
	w.inputObj = w.pos < len(w.data) && w.data[w.pos] == '{'
	v, err := w.value(w.inSet, w.inProj, 1)
	if err != nil {
		return err
	}
	w.input, w.inputRaw = v, w.data[start:w.pos]
	return nil
}

// childSet returns the nodes that apply to member key (i < 0) or element i
// of an object or array read under the alive nodes of set.
func (w *walker) childSet(set []*node, alive uint64, key string, i int) []*node {
	if alive == 0 {
		return nil
	}
	var single []*node
	count := 0
	mark := len(w.arena)
	for j, n := range set {
		if alive&(1<<j) == 0 {
			continue
		}
		if i >= 0 {
			var s []*node
			switch {
			case i < len(n.prefix):
				s = n.prefix[i].set
			case n.itemsAll != nil:
				s = n.itemsAll.set
			case n.additional != nil:
				s = n.additional.set
			}
			single, count = w.addSet(single, count, mark, s)
			continue
		}
		matched := false
		if ps, ok := n.props[key]; ok {
			matched = true
			single, count = w.addSet(single, count, mark, ps.set)
		}
		for _, p := range n.patterns {
			if p.re.MatchString(key) {
				matched = true
				single, count = w.addSet(single, count, mark, p.n.set)
			}
		}
		if !matched {
			switch {
			case n.addl != nil:
				single, count = w.addSet(single, count, mark, n.addl.set)
			case n.addlNo:
				w.recordViolation("property is not allowed", key)
			}
		}
	}
	if count <= 1 {
		return single
	}
	return w.arena[mark:]
}

// addSet collects child sets: the first one is used as it is (no copy, the
// common case); from the second on, the union is built in the arena.
func (w *walker) addSet(single []*node, count, mark int, s []*node) ([]*node, int) {
	if len(s) == 0 {
		return single, count
	}
	switch count {
	case 0:
		return s, 1
	case 1:
		w.arena = append(w.arena, single...)
	}
	for _, n := range s {
		if !slices.Contains(w.arena[mark:], n) {
			w.arena = append(w.arena, n)
		}
	}
	return nil, count + 1
}

// closeObject applies required, minProperties and maxProperties.
func (w *walker) closeObject(set []*node, alive uint64, frame int, seen map[string]struct{}) {
	if alive == 0 {
		return
	}
	keys := w.keys[frame:]
	for i, n := range set {
		if alive&(1<<i) == 0 {
			continue
		}
		for _, r := range n.s.Required {
			_, found := seen[r]
			if seen == nil {
				found = slices.Contains(keys, r)
			}
			if !found {
				w.recordViolation("missing required property", r)
			}
		}
		if n.s.MinProperties != nil && len(keys) < *n.s.MinProperties {
			w.failKind(&kind.MinProperties{Got: len(keys), Want: *n.s.MinProperties})
		}
		if n.s.MaxProperties != nil && len(keys) > *n.s.MaxProperties {
			w.failKind(&kind.MaxProperties{Got: len(keys), Want: *n.s.MaxProperties})
		}
	}
}

func (w *walker) array(set []*node, proj *Projection, depth int) (*ast.Term, error) {
	var alive uint64
	if len(set) > 0 {
		alive = w.check(set, tArray, scalar{}, func() any { return []any{} })
	}
	build := proj != nil && w.valid
	if build && len(proj.Keys) > 0 {
		proj = whole // read as an object somewhere: build it whole
	}
	var elems []*ast.Term
	n := 0
	if !w.open(']') {
		for {
			v, err := w.child(set, alive, proj, build, "", n, depth)
			if err != nil {
				return nil, err
			}
			if v != nil {
				elems = append(elems, v)
			}
			n++
			done, err := w.next(']', "array")
			if err != nil {
				return nil, err
			}
			if done {
				break
			}
		}
	}
	for i, nd := range set {
		if alive&(1<<i) == 0 {
			continue
		}
		ls := nd.s
		if ls.MinItems != nil && n < *ls.MinItems {
			w.failKind(&kind.MinItems{Got: n, Want: *ls.MinItems})
		}
		if ls.MaxItems != nil && n > *ls.MaxItems {
			w.failKind(&kind.MaxItems{Got: n, Want: *ls.MaxItems})
		}
		if nd.addItemsNo && n > len(nd.prefix) {
			w.failKind(&kind.AdditionalItems{Count: n - len(nd.prefix)})
		}
	}
	if !build || !w.valid {
		return nil, nil
	}
	if len(elems) == 0 {
		return shared(&w.emptyArr, func() ast.Value { return ast.NewArray() }), nil
	}
	return ast.NewTerm(ast.NewArray(elems...)), nil
}

// shared is *t, made by mk the first time: the empty object and array
// share one term per walk (policies never mutate their input, and a body
// of a million {} then costs a pointer each, not a million objects).
func shared(t **ast.Term, mk func() ast.Value) *ast.Term {
	if *t == nil {
		*t = ast.NewTerm(mk())
	}
	return *t
}

// delegate has the library validate raw, the text of a value that a node
// with keywords beyond the stream (anyOf, if, format, ...) applies to.
func (w *walker) delegate(n *node, raw []byte) {
	doc, err := Decode(raw)
	if _, beyond := err.(*NumberLimitError); beyond {
		w.valid = false // the walk has reported the number itself
		return
	}
	if err != nil {
		// The walk has just accepted raw, so the decoder disagreeing with
		// it is a bug; the library could not be asked, so the value is not
		// valid (fail closed).
		w.valid = false
		if w.report {
			w.rep.addAt(w.rep.pointer(), "the value could not be decoded for validation: "+err.Error())
		}
		return
	}
	verr := n.s.Validate(doc)
	if verr == nil {
		return
	}
	w.valid = false
	if w.report {
		at := w.rep.pointer()
		for _, v := range flatten(verr) {
			w.rep.addAt(at+v.Path, v.Message)
		}
	}
}

// plainInteger reports whether lit is a non-negative integer in plain
// digits of at most MaxPlainDigits (so already canonical).
func plainInteger(lit []byte) bool {
	if len(lit) > MaxPlainDigits {
		return false
	}
	for _, c := range lit {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
