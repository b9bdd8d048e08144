package diff

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/arbiter-dev/arbiter/diff/smt"
	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// The input document is a tree of templates, made as the revisions read it
// and as the schemas name it. A template is a path below the input whose
// array steps are wildcards: /runnerState/outbox/*/priority. A node is a
// template at given indices, one per wildcard (none for most paths): the
// priority of the third outbox event. Each template has an uninterpreted
// function of those indices to V (its value) and, for an object member, to
// Bool (whether the member is there); an array element is there when its
// index is below the array's length. So a node is defined only where its
// parent is an object (or array) that holds it, by construction, and the
// solver decides everything else, within the schemas' constraints.
type tmpl struct {
	id       int
	parent   *tmpl
	key      string // member key; "" for the root; elemKey for an array element
	arity    int    // wildcards in the path
	children map[string]*tmpl
	order    []string // children in the order they were made
	elem     *tmpl
	// mask is what the input schema of each side admits here (sides
	// index it: 0 old, 1 new); computed when the template is made.
	mask [2]mask
	// touched is true when a revision reads below this template: its
	// members matter to the decision.
	touched bool
	// sized is true when a revision (or the schema, exactly encoded)
	// reads the template's length: only then is it tied to its members.
	sized bool
}

const elemKey = "\x00*"

// model is the input tree both revisions read.
type model struct {
	vs     *vals
	root   *tmpl
	all    []*tmpl
	schema [2]*schemaCtx
}

func newModel(vs *vals, old, new *schemaCtx) *model {
	m := &model{vs: vs, schema: [2]*schemaCtx{old, new}}
	m.root = m.make(nil, "")
	return m
}

func (m *model) make(parent *tmpl, key string) *tmpl {
	t := &tmpl{id: len(m.all), parent: parent, key: key, children: map[string]*tmpl{}}
	if parent != nil {
		t.arity = parent.arity
		if key == elemKey {
			t.arity++
		}
	}
	for s := range t.mask {
		t.mask[s] = m.schema[s].maskAt(t.path())
	}
	m.all = append(m.all, t)
	return t
}

// child is the template of member key below t, made once.
func (m *model) child(t *tmpl, key string) *tmpl {
	if c, ok := t.children[key]; ok {
		return c
	}
	c := m.make(t, key)
	t.children[key] = c
	t.order = append(t.order, key)
	return c
}

// element is the template of t's array elements.
func (m *model) element(t *tmpl) *tmpl {
	if t.elem == nil {
		t.elem = m.make(t, elemKey)
	}
	return t.elem
}

// path is t's steps below the input.
func (t *tmpl) path() []string {
	if t.parent == nil {
		return nil
	}
	return append(t.parent.path(), t.key)
}

// pointer is t's path as a JSON pointer with * for wildcards.
func (t *tmpl) pointer() string {
	return jsonptr.Join(mapped(t.path(), func(k string) string { return strings.ReplaceAll(k, elemKey, "*") }))
}

// node is a template at indices (one Int term per wildcard).
type node struct {
	t   *tmpl
	idx []*smt.Term
}

func (n *node) key() string {
	var sb strings.Builder
	sb.WriteString(strconv.Itoa(n.t.id))
	for _, i := range n.idx {
		sb.WriteByte(',')
		sb.WriteString(strconv.Itoa(i.ID()))
	}
	return sb.String()
}

func (m *model) rootNode() *node { return &node{t: m.root} }

// x is the node's value.
func (m *model) x(n *node) *smt.Term {
	if n.t.parent == nil {
		return m.vs.b.App("vobj", sV, m.vs.b.Var("root!size", smt.Int))
	}
	return m.fn(fmt.Sprintf("x%d", n.t.id), sV, n)
}

// fn is the template's function name of n's indices (a variable without
// indices).
func (m *model) fn(name string, s smt.Sort, n *node) *smt.Term {
	if n.t.arity == 0 {
		return m.vs.b.Var(name, s)
	}
	return m.vs.b.Fun(name, s, n.idx...)
}

// d is whether the node is there: its parent is, holds it, and (for an
// object member) has it.
func (m *model) d(n *node) *smt.Term {
	b := m.vs.b
	if n.t.parent == nil {
		return b.True()
	}
	p := m.parent(n)
	px := m.x(p)
	if n.t.key == elemKey {
		i := n.idx[len(n.idx)-1]
		return b.And(m.d(p), m.vs.is("varr", px), b.Cmp("<=", b.IntLit(0), i), b.Cmp("<", i, m.vs.field("va", smt.Int, px)))
	}
	has := m.fn(fmt.Sprintf("d%d", n.t.id), smt.Bool, n)
	return b.And(m.d(p), m.vs.is("vobj", px), has)
}

func (m *model) parent(n *node) *node {
	p := &node{t: n.t.parent, idx: n.idx}
	if n.t.key == elemKey {
		p.idx = n.idx[:len(n.idx)-1]
	}
	return p
}

// member is the node of member key below n.
func (m *model) member(n *node, key string) *node {
	return &node{t: m.child(n.t, key), idx: n.idx}
}

// at is the node of n's element at index i.
func (m *model) at(n *node, i *smt.Term) *node {
	n.t.sized = true
	idx := append(append([]*smt.Term(nil), n.idx...), i)
	return &node{t: m.element(n.t), idx: idx}
}

// length is the number of members of n (an array's elements, an object's
// members), meaningful where n is an array or an object.
func (m *model) length(n *node) *smt.Term {
	n.t.sized = true
	x := m.x(n)
	return m.vs.b.Ite(m.vs.is("varr", x), m.vs.field("va", smt.Int, x), m.vs.field("vo", smt.Int, x))
}

// touch marks n and its ancestors as read.
func (n *node) touch() {
	for t := n.t; t != nil && !t.touched; t = t.parent {
		t.touched = true
	}
}

// structure is what holds of every JSON document at the templates made:
// lengths are not negative, and an object has at least the members the
// analysis names (for templates without wildcards; with them, leaving it
// out only admits more).
func (m *model) structure() []*smt.Term {
	b := m.vs.b
	var out []*smt.Term
	for _, t := range m.all {
		if t.arity > 0 || !t.sized {
			continue
		}
		n := &node{t: t}
		x := m.x(n)
		out = append(out, b.Implies(m.vs.is("varr", x), b.Cmp(">=", m.vs.field("va", smt.Int, x), b.IntLit(0))))
		present := m.present(n)
		out = append(out, b.Implies(m.vs.is("vobj", x), b.Cmp(">=", m.vs.field("vo", smt.Int, x), b.Add(smt.Int, present...))))
	}
	return out
}

// present is, per member the analysis names of object n, 1 where it is
// there and 0 where not: their sum counts them.
func (m *model) present(n *node) []*smt.Term {
	b := m.vs.b
	return mapped(n.t.order, func(k string) *smt.Term { return b.Ite(m.d(m.member(n, k)), b.IntLit(1), b.IntLit(0)) })
}
