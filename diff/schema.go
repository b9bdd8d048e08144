package diff

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"regexp"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/diff/smt"
	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// schemaCtx is one side's input schema, as the schema library reads it
// (draft-07 unless the document names another draft).
type schemaCtx struct {
	root  any
	draft int // 7 or 2019 (2019-09 and 2020-12)
}

func newSchemaCtx(doc any) *schemaCtx {
	c := &schemaCtx{root: doc, draft: 7}
	if obj, ok := doc.(map[string]any); ok {
		if s, _ := obj["$schema"].(string); strings.Contains(s, "2019-09") || strings.Contains(s, "2020-12") {
			c.draft = 2019
		}
	}
	return c
}

// conj expands a schema into the schema objects that all apply to one
// value: $ref followed, allOf flattened. never is true for a false schema.
// ok is false for a reference it cannot follow.
func (c *schemaCtx) conj(s any, depth int) (objs []map[string]any, never, ok bool) {
	if depth > 32 {
		return nil, false, false
	}
	switch s := s.(type) {
	case bool:
		return nil, !s, true
	case map[string]any:
		if ref, has := s["$ref"].(string); has {
			target, found := c.resolve(ref)
			if !found {
				return nil, false, false
			}
			o, n, k := c.conj(target, depth+1)
			if !k {
				return nil, false, false
			}
			objs, never = append(objs, o...), n
			if c.draft < 2019 {
				return objs, never, true // draft-07 ignores $ref's siblings
			}
		}
		objs = append(objs, s)
		if all, has := s["allOf"].([]any); has {
			for _, sub := range all {
				o, n, k := c.conj(sub, depth+1)
				if !k {
					return nil, false, false
				}
				objs, never = append(objs, o...), never || n
			}
		}
		return objs, never, true
	}
	return nil, false, false
}

// resolve follows a reference within the document: "#", "#/definitions/x".
func (c *schemaCtx) resolve(ref string) (any, bool) {
	if !strings.HasPrefix(ref, "#") {
		return nil, false
	}
	cur := c.root
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#"), "/")[1:] {
		part = jsonptr.Unescape(part)
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// maskAt is what kinds of value the schema admits at path (member keys
// and elemKey steps): an over-approximation, mAny where it cannot tell.
func (c *schemaCtx) maskAt(path []string) mask {
	if c == nil {
		return mAny
	}
	schemas, _ := c.follow(path, false)
	m := mAny
	for _, s := range schemas {
		m &= c.maskOf(s, 0)
	}
	return m
}

// follow is the schemas that apply at path (member keys and elemKey
// steps), following properties, patternProperties, additionalProperties
// and items; just the false schema when one is on the way. exact fails
// (ok false) where a step cannot be followed exactly (a reference not
// followed, a tuple's items, a schema under anyOf, oneOf, not or if);
// otherwise what cannot be followed is left out.
func (c *schemaCtx) follow(path []string, exact bool) ([]any, bool) {
	schemas := []any{c.root}
	for _, step := range path {
		var next []any
		for _, s := range schemas {
			objs, never, ok := c.conj(s, 0)
			if never {
				return []any{false}, true
			}
			if !ok && exact {
				return nil, false
			}
			for _, o := range objs {
				if exact && slices.ContainsFunc([]string{"anyOf", "oneOf", "not", "if"}, func(k string) bool { _, has := o[k]; return has }) {
					return nil, false
				}
				if step != elemKey {
					next = append(next, memberSchemas(o, step)...)
				} else if it, ok := o["items"]; ok {
					if _, tuple := it.([]any); !tuple {
						next = append(next, it)
					} else if exact {
						return nil, false
					}
				}
			}
		}
		schemas = next
	}
	return schemas, true
}

// memberSchemas are the schemas of o that apply to member key.
func memberSchemas(o map[string]any, key string) []any {
	var out []any
	matched := false
	if props, ok := o["properties"].(map[string]any); ok {
		if p, ok := props[key]; ok {
			out, matched = append(out, p), true
		}
	}
	if pats, ok := o["patternProperties"].(map[string]any); ok {
		for pat, p := range pats {
			if re, err := regexp.Compile(pat); err == nil && re.MatchString(key) {
				out, matched = append(out, p), true
			}
		}
	}
	if !matched {
		if ap, ok := o["additionalProperties"]; ok {
			out = append(out, ap)
		}
	}
	return out
}

func (c *schemaCtx) maskOf(s any, depth int) mask {
	objs, never, ok := c.conj(s, depth)
	if never {
		return 0
	}
	if !ok {
		return mAny
	}
	m := mAny
	for _, o := range objs {
		if t, ok := o["type"]; ok {
			m &= typeMask(t)
		}
		if e, ok := o["enum"].([]any); ok {
			em := mask(0)
			for _, v := range e {
				em |= jsonMask(v)
			}
			m &= em
		}
		if v, ok := o["const"]; ok {
			m &= jsonMask(v)
		}
		for _, k := range []string{"anyOf", "oneOf"} {
			if bs, ok := o[k].([]any); ok {
				bm := mask(0)
				for _, br := range bs {
					bm |= c.maskOf(br, depth+1)
				}
				m &= bm
			}
		}
	}
	if m&mNum == 0 {
		m &^= mFrac
	}
	return m
}

// typeMasks are the kinds of value each JSON Schema type admits.
var typeMasks = map[string]mask{"null": mNull, "boolean": mBool, "integer": mNum, "number": mNum | mFrac, "string": mStr, "array": mArr, "object": mObj}

func typeMask(t any) mask {
	switch t := t.(type) {
	case string:
		return typeMasks[t]
	case []any:
		m := mask(0)
		for _, x := range t {
			if s, ok := x.(string); ok {
				m |= typeMasks[s]
			}
		}
		return m
	}
	return mAny
}

func jsonMask(v any) mask {
	switch v := v.(type) {
	case nil:
		return mNull
	case bool:
		return mBool
	case json.Number:
		if r, ok := new(big.Rat).SetString(string(v)); ok && r.IsInt() {
			return mNum
		}
		return mNum | mFrac
	case float64:
		return mNum | mFrac
	case string:
		return mStr
	case []any:
		return mArr
	case map[string]any:
		return mObj
	}
	return mAny
}

// validity encodes "a value satisfies a schema" as a formula, for the
// input's nodes and for the results the policy builds alike. exact asks
// for exactly the schema's meaning (the formula may be negated);
// otherwise it may admit more (it is only assumed), which lets it leave
// out what only constrains members nobody reads. Whatever it cannot
// encode is a free Boolean, a gap: sound either way.
type validity struct {
	c     *schemaCtx
	an    *analysis
	side  int
	exact bool
	where string // the schema file, for gaps
}

func (v *validity) b() *smt.Builder { return v.an.vs.b }

func (v *validity) valid(s any, x val, depth int) *smt.Term {
	b := v.b()
	if depth > 24 {
		return v.gapBool("schema nesting deeper than the analysis follows", x)
	}
	objs, never, ok := v.c.conj(s, depth)
	if never {
		return b.False()
	}
	if !ok {
		return v.gapBool("a $ref the analysis does not follow", x)
	}
	return b.And(mapped(objs, func(o map[string]any) *smt.Term { return v.object(o, x, depth) })...)
}

// validSlot is "every value the slot may hold satisfies s".
func (v *validity) validSlot(s any, sl *slot, depth int) *smt.Term {
	return v.b().And(mapped(sl.alts, func(a alt) *smt.Term { return v.b().Implies(a.g, v.valid(s, a.v, depth)) })...)
}

func (v *validity) gapBool(why string, x val) *smt.Term {
	where := ""
	if n, ok := x.(*node); ok {
		where = " at input" + n.t.pointer()
	}
	return v.an.gapBool(&gap{why: why + " (schema" + where + ")", at: v.where})
}

// object encodes one schema object's keywords.
func (v *validity) object(o map[string]any, x val, depth int) *smt.Term {
	an, vs, b := v.an, v.an.vs, v.b()
	var out []*smt.Term
	// Kinds are tested on the value itself, never from what the schema
	// admits (the masks): this is where the schema is encoded.
	kindIs := func(m mask) *smt.Term {
		if n, ok := x.(*node); ok {
			return vs.kindTest(an.m.x(n), m)
		}
		return an.kindIs(x, m, v.side)
	}
	xt, _, scalar := an.vterm(x, v.side)
	isNum, isStr := b.False(), b.False()
	if scalar {
		isNum, isStr = vs.is("vnum", xt), vs.is("vstr", xt)
	}
	isObj, isArr := kindIs(mObj), kindIs(mArr)
	for _, k := range slices.Sorted(maps.Keys(o)) {
		kw := o[k]
		switch k {
		case "$schema", "$id", "$comment", "title", "description", "default", "examples", "definitions", "$defs",
			"readOnly", "writeOnly", "deprecated", "$ref", "allOf", "then", "else", "additionalItems",
			"patternProperties", "additionalProperties":
			// Annotations, or handled with another keyword.
		case "type":
			m := typeMask(kw)
			t := kindIs(m)
			if m.has(mNum) && !m.has(mFrac) && scalar {
				t = b.And(t, b.Implies(isNum, vs.isInt(xt)))
			}
			out = append(out, t)
		case "enum", "const":
			list := []any{kw}
			if k == "enum" {
				list, _ = kw.([]any)
			}
			var alts []*smt.Term
			for _, c := range list {
				cv, err := ast.InterfaceToValue(c)
				if err != nil {
					alts = append(alts, v.gapBool("a constant the analysis cannot read", x))
					continue
				}
				alts = append(alts, an.eqVals(x, conc{ast.NewTerm(cv)}, v.side, v.where))
			}
			out = append(out, b.Or(alts...))
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf":
			if !scalar {
				continue
			}
			r, ok := ratJSON(kw)
			if !ok {
				out = append(out, v.gapBool("keyword "+k+" that is not a number", x))
				continue
			}
			num := vs.num(xt)
			c := b.RealLit(r)
			var t *smt.Term
			switch k {
			case "minimum":
				t = b.Cmp(">=", num, c)
			case "maximum":
				t = b.Cmp("<=", num, c)
			case "exclusiveMinimum":
				t = b.Cmp(">", num, c)
			case "exclusiveMaximum":
				t = b.Cmp("<", num, c)
			default:
				if r.Sign() <= 0 {
					t = v.gapBool("multipleOf that is not positive", x)
				} else {
					t = vs.intReal(b.App("/", smt.Real, num, c))
				}
			}
			out = append(out, b.Implies(isNum, t))
		case "pattern":
			if !scalar {
				continue
			}
			pat, _ := kw.(string)
			re, err := regexTerm(b, pat)
			if err != nil {
				out = append(out, v.gapBool("pattern "+pat+": "+err.Error(), x))
				continue
			}
			out = append(out, b.Implies(isStr, b.App("str.in_re", smt.Bool, vs.str(xt), re)))
		case "format":
			out = append(out, b.Implies(isStr, v.gapBool("format "+fmt.Sprint(kw), x)))
		case "required":
			out = append(out, b.Implies(isObj, v.required(kw, x)))
		case "properties":
			out = append(out, b.Implies(isObj, v.members(o, x, depth)))
		case "minLength", "maxLength", "minProperties", "maxProperties", "minItems", "maxItems":
			length := strings.HasSuffix(k, "Length")
			if length && !scalar {
				continue
			}
			l, ok := intJSON(kw)
			if !ok {
				out = append(out, v.gapBool("keyword "+k, x))
				continue
			}
			op := ">="
			if strings.HasPrefix(k, "max") {
				op = "<="
			}
			if length {
				out = append(out, b.Implies(isStr, b.Cmp(op, b.App("str.len", smt.Int, vs.str(xt)), b.IntLit(l))))
				continue
			}
			guard := isObj
			if strings.HasSuffix(k, "Items") {
				guard = isArr
			}
			if nd, ok := x.(*node); ok && !v.exact && !nd.t.sized {
				continue // nobody reads its length
			}
			n, has := an.length(x, v.side)
			if has == nil {
				continue
			}
			out = append(out, b.Implies(guard, b.Cmp(op, n, b.IntLit(l))))
		case "dependencies", "dependentRequired":
			deps, _ := kw.(map[string]any)
			for _, name := range slices.Sorted(maps.Keys(deps)) {
				has := an.def(v.member(x, name))
				if d, ok := deps[name].([]any); ok {
					out = append(out, b.Implies(b.And(isObj, has), v.required(d, x)))
				} else {
					out = append(out, b.Implies(b.And(isObj, has), v.valid(deps[name], x, depth+1)))
				}
			}
		case "propertyNames":
			if v.exact {
				out = append(out, b.Implies(isObj, v.gapBool("propertyNames", x)))
			}
		case "items":
			out = append(out, b.Implies(isArr, v.items(o, x, depth)))
		case "contains":
			out = append(out, b.Implies(isArr, v.contains(kw, x, depth)))
		case "uniqueItems":
			if u, _ := kw.(bool); u {
				out = append(out, b.Implies(isArr, v.unique(x)))
			}
		case "anyOf", "oneOf":
			list, _ := kw.([]any)
			alts := mapped(list, func(s any) *smt.Term { return v.valid(s, x, depth+1) })
			if k == "anyOf" {
				out = append(out, b.Or(alts...))
				continue
			}
			var exactlyOne []*smt.Term
			for i := range alts {
				others := []*smt.Term{alts[i]}
				for j := range alts {
					if j != i {
						others = append(others, b.Not(alts[j]))
					}
				}
				exactlyOne = append(exactlyOne, b.And(others...))
			}
			out = append(out, b.Or(exactlyOne...))
		case "not":
			out = append(out, b.Not(v.valid(kw, x, depth+1)))
		case "if":
			cond := v.valid(kw, x, depth+1)
			then, els := b.True(), b.True()
			if t, ok := o["then"]; ok {
				then = v.valid(t, x, depth+1)
			}
			if e, ok := o["else"]; ok {
				els = v.valid(e, x, depth+1)
			}
			out = append(out, b.Ite(cond, then, els))
		case "contentMediaType", "contentEncoding", "unevaluatedProperties", "unevaluatedItems", "prefixItems", "dependentSchemas":
			out = append(out, v.gapBool("keyword "+k, x))
		}
		// Other keywords are annotations to the schema library.
	}
	return b.And(out...)
}

// required is "x has each member the list names".
func (v *validity) required(list any, x val) *smt.Term {
	names, _ := list.([]any)
	var req []*smt.Term
	for _, r := range names {
		if name, ok := r.(string); ok {
			req = append(req, v.an.def(v.member(x, name)))
		}
	}
	return v.b().And(req...)
}

// member is the member key of x (where x is an object).
func (v *validity) member(x val, key string) *slot {
	an := v.an
	switch n := x.(type) {
	case *node:
		m := an.m.member(n, key)
		return &slot{alts: []alt{{g: an.m.d(m), v: m}}}
	case *coll:
		if n.kind != kObject {
			return undefined
		}
		var alts []alt
		for _, e := range n.elems {
			alts = append(alts, alt{g: v.b().And(e.g, an.eqVals(e.key, conc{ast.StringTerm(key)}, v.side, v.where)), v: e.v})
		}
		if len(n.q) > 0 {
			alts = append(alts, v.opaqueMember(&gap{why: "a result member added by a loop over the input", at: v.where}, x, key))
		}
		return &slot{alts: alts}
	case conc:
		if obj, ok := n.t.Value.(ast.Object); ok {
			if m := obj.Get(ast.StringTerm(key)); m != nil {
				return an.one(conc{m})
			}
		}
		return undefined
	case *opaque:
		return &slot{alts: []alt{v.opaqueMember(n.gap, x, key)}}
	}
	return undefined
}

// opaqueMember is the member key of a value the analysis does not model.
func (v *validity) opaqueMember(g *gap, x val, key string) alt {
	k := conc{ast.StringTerm(key)}
	return alt{g: v.an.uf("has", smt.Bool, g, x, k), v: v.an.opaqueUF("member", g, x, k)}
}

// members encodes properties, patternProperties and additionalProperties
// for the members the analysis names; an object's other members (there
// when its length says so) are only constrained in exact mode, and then
// not modelled: a gap unless nothing constrains them.
func (v *validity) members(o map[string]any, x val, depth int) *smt.Term {
	an, b := v.an, v.b()
	props, _ := o["properties"].(map[string]any)
	ap, hasAP := o["additionalProperties"]
	_, hasPat := o["patternProperties"]
	closed := hasAP && ap == false && !hasPat
	var out []*smt.Term
	switch n := x.(type) {
	case *node:
		// Every declared property becomes a member the model sets.
		for _, k := range slices.Sorted(maps.Keys(props)) {
			an.m.member(n, k)
		}
		var present []*smt.Term
		for _, k := range append([]string(nil), n.t.order...) {
			c := an.m.member(n, k)
			d := an.m.d(c)
			present = append(present, b.Ite(d, b.IntLit(1), b.IntLit(0)))
			ok := mapped(memberSchemas(o, k), func(s any) *smt.Term { return v.valid(s, c, depth+1) })
			out = append(out, b.Implies(d, b.And(ok...)))
		}
		size := an.vs.field("vo", smt.Int, an.m.x(n))
		switch {
		case !v.exact && !n.t.sized:
			// Nobody reads its length: leaving it free only admits more.
		case closed:
			// The members named are all there is.
			out = append(out, b.Eq(size, b.Add(smt.Int, present...)))
		case v.exact && (hasPat || (hasAP && ap != true)):
			out = append(out, b.Implies(b.Cmp(">", size, b.Add(smt.Int, present...)), v.gapBool("members the analysis does not name, constrained by additionalProperties or patternProperties", x)))
		}
	case *coll:
		if len(n.q) > 0 {
			return v.gapBool("a result with members added by a loop over the input", x)
		}
		for _, e := range n.elems {
			ks, isStr := constString(e.key)
			if !isStr {
				out = append(out, b.Implies(e.g, v.gapBool("a result member with a key that is not a constant string", x)))
				continue
			}
			ok := mapped(memberSchemas(o, ks), func(s any) *smt.Term { return v.valid(s, e.v, depth+1) })
			out = append(out, b.Implies(e.g, b.And(ok...)))
		}
	case conc:
		obj, ok := n.t.Value.(ast.Object)
		if !ok {
			return b.True()
		}
		obj.Foreach(func(k, m *ast.Term) {
			ks, isStr := k.Value.(ast.String)
			if !isStr {
				out = append(out, b.False()) // JSON Schema objects have string keys
				return
			}
			for _, s := range memberSchemas(o, string(ks)) {
				out = append(out, v.valid(s, conc{m}, depth+1))
			}
		})
	case *opaque:
		return v.gapBool("properties of a value the analysis does not model", x)
	}
	return b.And(out...)
}

// items encodes items (and additionalItems) over the elements.
func (v *validity) items(o map[string]any, x val, depth int) *smt.Term {
	an, b := v.an, v.b()
	switch n := x.(type) {
	case *node:
		length := an.vs.field("va", smt.Int, an.m.x(n))
		forall := func(from int, s any) *smt.Term {
			if !v.exact {
				// Reads of elements assume their schema where they read
				// (assumeValid): no quantifier here.
				return b.True()
			}
			i := an.boundFor("e", an.m.element(n.t))
			inRange := b.And(b.Cmp("<=", b.IntLit(int64(from)), i), b.Cmp("<", i, length))
			return b.Forall([]*smt.Term{i}, b.Implies(inRange, v.valid(s, an.m.at(n, i), depth+1)))
		}
		switch it := o["items"].(type) {
		case []any:
			var out []*smt.Term
			for k, s := range it {
				e := an.m.at(n, b.IntLit(int64(k)))
				out = append(out, b.Implies(b.Cmp(">", length, b.IntLit(int64(k))), v.valid(s, e, depth+1)))
			}
			if add, ok := o["additionalItems"]; ok {
				out = append(out, forall(len(it), add))
			}
			return b.And(out...)
		default:
			return forall(0, it)
		}
	case conc:
		c, ok := an.vs.concColl(n.t)
		if !ok {
			return b.True()
		}
		return v.items(o, c, depth)
	case *coll:
		if len(n.q) > 0 {
			return v.gapBool("items of an array built by a loop over the input", x)
		}
		var out []*smt.Term
		tuple, isTuple := o["items"].([]any)
		for i, p := range positions(b, n) {
			e := n.elems[i]
			if !isTuple {
				out = append(out, b.Implies(e.g, v.valid(o["items"], e.v, depth+1)))
				continue
			}
			add, hasAdd := o["additionalItems"]
			for k, s := range tuple {
				out = append(out, b.Implies(b.And(e.g, b.Eq(p, b.IntLit(int64(k)))), v.valid(s, e.v, depth+1)))
			}
			if hasAdd {
				out = append(out, b.Implies(b.And(e.g, b.Cmp(">=", p, b.IntLit(int64(len(tuple))))), v.valid(add, e.v, depth+1)))
			}
		}
		return b.And(out...)
	}
	return v.gapBool("items of a value the analysis does not model", x)
}

func (v *validity) contains(s any, x val, depth int) *smt.Term {
	an, b := v.an, v.b()
	switch n := x.(type) {
	case *node:
		i := an.boundFor("c", an.m.element(n.t))
		e := an.m.at(n, i)
		return b.Exists([]*smt.Term{i}, b.And(an.m.d(e), v.valid(s, e, depth+1)))
	case conc:
		if c, ok := an.vs.concColl(n.t); ok {
			return v.contains(s, c, depth)
		}
	case *coll:
		if len(n.q) == 0 {
			return b.Or(mapped(n.elems, func(e *elem) *smt.Term { return b.And(e.g, v.valid(s, e.v, depth+1)) })...)
		}
	}
	return v.gapBool("contains", x)
}

func (v *validity) unique(x val) *smt.Term {
	an, b := v.an, v.b()
	switch n := x.(type) {
	case *node:
		if v.exact || (n.t.elem != nil && n.t.elem.touched) {
			return v.gapBool("uniqueItems", x)
		}
		return b.True()
	case conc:
		if c, ok := an.vs.concColl(n.t); ok {
			return v.unique(c)
		}
		return b.True()
	case *coll:
		if len(n.q) > 0 {
			return v.gapBool("uniqueItems of an array built by a loop over the input", x)
		}
		var out []*smt.Term
		for i, e := range n.elems {
			for _, f := range n.elems[i+1:] {
				out = append(out, b.Not(b.And(e.g, f.g, an.eqVals(e.v, f.v, v.side, v.where))))
			}
		}
		return b.And(out...)
	}
	return v.gapBool("uniqueItems of a value the analysis does not model", x)
}

func ratJSON(v any) (*big.Rat, bool) {
	switch v := v.(type) {
	case json.Number:
		return new(big.Rat).SetString(string(v))
	case float64:
		r := new(big.Rat)
		if r.SetFloat64(v) == nil {
			return nil, false
		}
		return r, true
	}
	return nil, false
}

func intJSON(v any) (int64, bool) {
	r, ok := ratJSON(v)
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return 0, false
	}
	return r.Num().Int64(), true
}
