package diff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// The domain: every input field that either revision reads, as a tree of
// nodes, each with the candidate values it may take. A candidate is kept
// only when the input schema accepts a document holding it. The candidates
// are chosen so that every combination of the comparisons the policies
// make has a representative within the bounds (see Bounds):
//   - absent, null, true, false, an empty array and object, and the values
//     the fixtures hold at that place (a non-empty array or object);
//   - every string constant of either revision (rule bodies and data), the
//     empty string, and fresh strings, some prefixes of others;
//   - every integer from -1 to IntBound, and 0.5;
//   - for a field read below (an object), absent, null, and an object
//     whose members are nodes of their own.

type choice struct {
	absent, shell bool
	t             *ast.Term
	v             F
}

type node struct {
	path     []string
	parent   *node
	children map[string]*node
	order    []string
	choices  []choice
	required bool // the schema refuses it absent from a present parent
	seen     []any
}

func (n *node) pointer() string {
	var b strings.Builder
	for _, p := range n.path {
		b.WriteByte('/')
		b.WriteString(jsonptr.Escape(p))
	}
	return b.String()
}

func (n *node) child(k string) *node {
	if c := n.children[k]; c != nil {
		return c
	}
	c := &node{path: append(append([]string(nil), n.path...), k), parent: n, children: map[string]*node{}}
	n.children[k] = c
	n.order = append(n.order, k)
	return c
}

type domain struct {
	root     *node
	nodes    []*node // preorder, without the root
	base     map[string]any
	intBound int
	fresh    []string
}

// freshStrings are the strings no policy names; some are prefixes of
// others, so that a prefix comparison has both outcomes.
var freshStrings = []string{"f", "fx", "g", "h0"}

// Bounds describes what a verdict none covers.
func (d *domain) Bounds() string {
	return fmt.Sprintf("integers in [-1, %d]; strings: every constant either revision names, \"\" and %d others; arrays and objects read whole: empty or a fixture's value (at most 1 item counted); %d input fields",
		d.intBound, len(d.fresh), len(d.nodes))
}

// newDomain builds the domain of the fields the modules of both
// compilers read, with the fixtures' inputs as base documents.
func newDomain(b *builder, pkg ast.Ref, revs []*ast.Compiler, datas []ast.Value, extra [][]string, fixtures [][]byte, valid func([]byte) bool) (*domain, error) {
	d := &domain{root: &node{children: map[string]*node{}}, fresh: freshStrings}
	for _, p := range extra {
		n := d.root
		for _, k := range p {
			n = n.child(k)
		}
	}
	strs := map[string]bool{}
	maxInt := 0
	scalar := func(t *ast.Term) bool {
		switch x := t.Value.(type) {
		case ast.String:
			strs[string(x)] = true
		case ast.Number:
			if i, ok := x.Int(); ok && i >= -10000 && i <= 10000 {
				maxInt = max(maxInt, i, -i)
			}
		}
		return false
	}
	for i, c := range revs {
		for _, m := range c.Modules {
			if p := m.Package.Path; p.HasPrefix(pkg[:2]) && !p.Equal(pkg) {
				continue // another decision's package
			}
			ast.WalkRefs(m, func(r ast.Ref) bool {
				if !r.HasPrefix(ast.InputRootRef) {
					return false
				}
				n := d.root
				for _, op := range r[1:] {
					s, ok := op.Value.(ast.String)
					if !ok {
						break
					}
					n = n.child(string(s))
				}
				return false
			})
			for _, r := range m.Rules {
				for e := r; e != nil; e = e.Else {
					ast.WalkTerms(e.Body, scalar)
				}
			}
		}
		ast.WalkTerms(ast.NewTerm(datas[i]), scalar)
	}
	d.intBound = 3 * (maxInt + 2)
	var walk func(n *node)
	walk = func(n *node) {
		sort.Strings(n.order)
		for _, k := range n.order {
			c := n.children[k]
			d.nodes = append(d.nodes, c)
			walk(c)
		}
	}
	walk(d.root)

	// The base: the fixture input with the most of these fields present.
	var docs []map[string]any
	for _, f := range fixtures {
		var m map[string]any
		if decodeJSON(f, &m) == nil && valid(f) {
			docs = append(docs, m)
		}
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("no fixture input of the decision is valid: the analysis starts from one")
	}
	best := -1
	for _, doc := range docs {
		present := 0
		for _, n := range d.nodes {
			if _, ok := lookup(doc, n.path); ok {
				present++
			}
		}
		if present > best {
			best, d.base = present, doc
		}
	}
	for _, n := range d.nodes {
		for _, doc := range docs {
			if v, ok := lookup(doc, n.path); ok {
				n.seen = append(n.seen, v)
			}
		}
	}

	var cands []*ast.Term
	cands = append(cands, ast.NullTerm(), ast.BooleanTerm(true), ast.BooleanTerm(false), ast.StringTerm(""), ast.ArrayTerm(), ast.ObjectTerm())
	for i := -1; i <= d.intBound; i++ {
		cands = append(cands, ast.IntNumberTerm(i))
	}
	cands = append(cands, ast.NumberTerm("0.5"))
	var sl []string
	for s := range strs {
		sl = append(sl, s)
	}
	sort.Strings(sl)
	for _, s := range append(sl, d.fresh...) {
		if s != "" {
			cands = append(cands, ast.StringTerm(s))
		}
	}
	for _, n := range d.nodes {
		n.choices = append(n.choices, choice{absent: true})
		if doc := d.with(n, choice{absent: true}); !valid(doc) {
			n.required = true
		}
		if len(n.children) > 0 {
			if valid(d.with(n, choice{shell: true})) {
				n.choices = append(n.choices, choice{shell: true})
			}
			for _, t := range []*ast.Term{ast.NullTerm(), ast.BooleanTerm(true), ast.IntNumberTerm(0), ast.StringTerm("f"), ast.ArrayTerm()} {
				if valid(d.with(n, choice{t: t})) {
					n.choices = append(n.choices, choice{t: t})
				}
			}
			continue
		}
		mine := append([]*ast.Term(nil), cands...)
		for _, v := range smallest(n.seen, 3) {
			if t, err := ast.InterfaceToValue(v); err == nil {
				mine = append(mine, ast.NewTerm(t))
			}
		}
		have := map[string]bool{}
		for _, t := range mine {
			if have[t.String()] {
				continue
			}
			have[t.String()] = true
			if valid(d.with(n, choice{t: t})) {
				n.choices = append(n.choices, choice{t: t})
			}
		}
	}
	for _, n := range d.nodes {
		for i := range n.choices {
			n.choices[i].v = b.newVar()
		}
	}
	return d, nil
}

// constraints are the clauses every document of the domain satisfies:
// each field takes one candidate, a present field has an object parent,
// and a required field of a present object is present.
func (d *domain) constraints(b *builder) []F {
	var out []F
	for _, n := range d.nodes {
		var vs []F
		for _, c := range n.choices {
			vs = append(vs, c.v)
		}
		out = append(out, b.ors(vs))
		for i := range vs {
			for j := i + 1; j < len(vs); j++ {
				out = append(out, b.not(b.and(vs[i], vs[j])))
			}
		}
		parentShell := True
		if n.parent != d.root {
			parentShell = False
			for _, c := range n.parent.choices {
				if c.shell {
					parentShell = c.v
				}
			}
		}
		absent := n.choices[0].v
		out = append(out, b.or(absent, parentShell))
		if n.required {
			out = append(out, b.or(b.not(parentShell), b.not(absent)))
		}
	}
	return out
}

// with returns the base document with node n set to c (its parents made
// objects as needed), as JSON text.
func (d *domain) with(n *node, c choice) []byte {
	doc := deepCopy(d.base).(map[string]any)
	d.set(doc, n, c)
	return encodeJSON(doc)
}

func (d *domain) set(doc map[string]any, n *node, c choice) {
	cur := doc
	for i, k := range n.path[:len(n.path)-1] {
		next, ok := cur[k].(map[string]any)
		if !ok {
			next = d.example(n.path[:i+1])
			cur[k] = next
		}
		cur = next
	}
	last := n.path[len(n.path)-1]
	switch {
	case c.absent:
		delete(cur, last)
	case c.shell:
		if _, ok := cur[last].(map[string]any); !ok {
			cur[last] = d.example(n.path)
		}
	default:
		var v any
		_ = decodeJSON([]byte(c.t.String()), &v)
		cur[last] = v
	}
}

// example is an object for path: the base's, a fixture's, or {}.
func (d *domain) example(path []string) map[string]any {
	if v, ok := lookup(d.base, path); ok {
		if m, ok := deepCopy(v).(map[string]any); ok {
			return m
		}
	}
	n := d.root
	for _, k := range path {
		if n = n.children[k]; n == nil {
			break
		}
	}
	if n != nil {
		for _, v := range n.seen {
			if m, ok := deepCopy(v).(map[string]any); ok {
				return m
			}
		}
	}
	return map[string]any{}
}

// assemble builds the document a model chose.
func (d *domain) assemble(b *builder, model []bool) []byte {
	doc := deepCopy(d.base).(map[string]any)
	for _, n := range d.nodes {
		for _, c := range n.choices {
			if model[b.nodes[c.v].v] {
				if c.absent {
					if _, ok := lookup(doc, n.path[:len(n.path)-1]); !ok {
						break
					}
				}
				d.set(doc, n, c)
				break
			}
		}
	}
	return encodeJSON(doc)
}

// chosen lists the choice variables of a model, for a blocking clause.
func (d *domain) chosen(b *builder, model []bool) F {
	all := True
	for _, n := range d.nodes {
		for _, c := range n.choices {
			if model[b.nodes[c.v].v] {
				all = b.and(all, c.v)
			}
		}
	}
	return all
}

func lookup(doc any, path []string) (any, bool) {
	cur := doc
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func smallest(vs []any, n int) []any {
	seen := map[string]any{}
	for _, v := range vs {
		seen[string(encodeJSON(v))] = v
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) < len(keys[j])
		}
		return keys[i] < keys[j]
	})
	var out []any
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, seen[k])
	}
	return out
}

func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

func encodeJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func deepCopy(v any) any {
	var out any
	_ = decodeJSON(encodeJSON(v), &out)
	return out
}

// validity is the formula "the document is valid under valid", field by
// field: each field holds a candidate that valid accepts in the base
// document (absent is always fine where the parent is absent).
func (d *domain) validity(b *builder, valid func([]byte) bool) F {
	all := True
	for _, n := range d.nodes {
		ok := False
		for _, c := range n.choices {
			if valid(d.with(n, c)) {
				ok = b.or(ok, c.v)
			} else if c.absent {
				ok = b.or(ok, b.and(c.v, b.not(d.parentShell(b, n))))
			}
		}
		all = b.and(all, ok)
	}
	return all
}

func (d *domain) parentShell(b *builder, n *node) F {
	if n.parent == d.root {
		return True
	}
	for _, c := range n.parent.choices {
		if c.shell {
			return c.v
		}
	}
	return False
}

// schemaPaths lists the properties an input schema names, its local
// references followed: the fields whose validity an edit of the schema
// may change although no policy reads them.
func schemaPaths(schema any) [][]string {
	root, _ := schema.(map[string]any)
	var out [][]string
	var walk func(s map[string]any, path []string, depth int)
	walk = func(s map[string]any, path []string, depth int) {
		if depth > 16 {
			return
		}
		if ref, ok := s["$ref"].(string); ok && strings.HasPrefix(ref, "#/") {
			cur := any(root)
			for _, k := range strings.Split(ref[2:], "/") {
				m, _ := cur.(map[string]any)
				cur = m[jsonptr.Unescape(k)]
			}
			if m, ok := cur.(map[string]any); ok {
				walk(m, path, depth+1)
			}
		}
		props, _ := s["properties"].(map[string]any)
		for k, v := range props {
			p := append(append([]string(nil), path...), k)
			out = append(out, p)
			if m, ok := v.(map[string]any); ok {
				walk(m, p, depth+1)
			}
		}
	}
	walk(root, nil, 0)
	return out
}
