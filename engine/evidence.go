package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"

	"github.com/arbiter-dev/arbiter/engine/input"
	"github.com/arbiter-dev/arbiter/internal/jsonenc"
	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// Evidence is one input value that a fired reason rule read: where it is in
// the input (a JSON pointer) and what it was. The paths come from the rule's
// body and the helper rules and functions it depends on, found at load time;
// the values from the input, when a decision is explained.
type Evidence struct {
	// Path is a JSON pointer into the input document.
	Path string `json:"path,omitempty"`
	// Data, instead of Path, names a value of the policy's data (a data.json
	// that the rule compares the input with), as a reference below data.
	Data string `json:"data,omitempty"`
	// Value is the value at Path, numbers in canonical form; it is left out
	// when Absent or when the value is too large to show (see Summary).
	Value json.RawMessage `json:"value,omitempty"`
	// Absent means the input has nothing at Path: a member is missing (the
	// rule read an absent value, which Rego treats as undefined).
	Absent bool `json:"absent,omitempty"`
	// Summary stands in for a value longer than MaxEvidenceBytes: its kind
	// and size.
	Summary string `json:"summary,omitempty"`
	// Via names the helper rule or function that reads the value, when the
	// reason rule does not read it itself.
	Via string `json:"via,omitempty"`
}

// MaxEvidenceBytes bounds the JSON text of one evidence value; a longer
// value is summarised. The input is the caller's: an explanation must not
// repeat a 16 MiB Runner state once per rule.
const MaxEvidenceBytes = 256

// maxReadRules bounds the rules one reason rule's analysis visits: a
// reference with variables (data.decisions[x]) may stand for many rules,
// and load time must stay bounded whatever the policy.
const maxReadRules = 1000

// inputRead is one input path that a reason rule reads: the constant
// prefix of an input reference (input.a.b[x] reads input.a.b whole).
type inputRead struct {
	path []string // pointer tokens below input (or below data)
	via  string
	data bool // a read of the policy's data, not of the input
}

// pointer is the JSON pointer of the read.
func (r inputRead) pointer() string {
	var b strings.Builder
	for _, t := range r.path {
		b.WriteByte('/')
		b.WriteString(jsonptr.Escape(t))
	}
	return b.String()
}

// ruleReads finds, for each reason rule of a decision (in the order of rules), the input paths its
// body reads, directly or through the helper rules and functions of the
// policy that it depends on, transitively. Rules are found as describe
// finds them (an annotated rule whose head key is [rank, "code"]) and
// matched to rules by file and line. The analysis is static and
// conservative: every constant input path a rule could read is listed,
// whichever body of a helper decided; a path below a variable is cut at
// the variable.
func ruleReads(c *ast.Compiler, store storage.Store, pkg ast.Ref, rules []RuleInfo) []ruleEvidence {
	reasonRules := map[string]*ast.Rule{}
	excluded := map[string]bool{} // the paths of the reason rules' documents
	for _, a := range c.GetAnnotationSet().Flatten() {
		r := a.GetRule()
		if r == nil || r.Module == nil || !a.Path.HasPrefix(pkg) {
			continue
		}
		for _, info := range rules {
			if r.Location != nil && r.Location.File == info.File && r.Location.Row == info.Line {
				reasonRules[info.File+":"+strconv.Itoa(info.Line)] = r
				excluded[r.Ref().GroundPrefix().String()] = true
			}
		}
	}
	out := make([]ruleEvidence, len(rules))
	for i, info := range rules {
		r := reasonRules[info.File+":"+strconv.Itoa(info.Line)]
		if r == nil {
			continue
		}
		w := &readWalker{c: c, pkg: pkg, excluded: excluded, visited: map[*ast.Rule]bool{}, seen: map[string]bool{}}
		w.rule(r, "")
		out[i] = ruleEvidence{doc: r.Ref().Append(r.Head.Key), reads: prune(w.reads)}
		out[i].data = dataEvidence(store, prune(w.dataReads))
	}
	return out
}

// ruleEvidence is what a reason rule reads of the input, and the values
// of the policy's data it reads (fixed for a Snapshot, so read at load).
type ruleEvidence struct {
	doc   ast.Ref // the rule's own entry: defined when it fires (tests use it)
	reads []inputRead
	data  []Evidence
}

type readWalker struct {
	c         *ast.Compiler
	pkg       ast.Ref
	excluded  map[string]bool
	visited   map[*ast.Rule]bool
	seen      map[string]bool // pointers already listed
	reads     []inputRead
	dataReads []inputRead
}

// rule lists the input reads of r (every body of an else chain too), then
// those of the rules it depends on, in the order they are referenced.
func (w *readWalker) rule(r *ast.Rule, via string) {
	if w.visited[r] || len(w.visited) >= maxReadRules {
		return
	}
	w.visited[r] = true
	var deps []*ast.Rule
	for cur := r; cur != nil; cur = cur.Else {
		aliases := map[ast.Var][]string{}
		visit := func(x any) {
			ast.WalkRefs(x, func(ref ast.Ref) bool {
				if p, ok := w.inputPath(ref, aliases); ok {
					w.add(p, via)
					return false
				}
				if ref.HasPrefix(ast.DefaultRootRef) {
					rules := w.dependencies(ref)
					if len(rules) == 0 && len(w.c.GetRulesDynamicWithOpts(ref, ast.RulesOptions{})) == 0 {
						w.addData(ref, via)
					}
					deps = append(deps, rules...)
				}
				return false
			})
		}
		for _, expr := range cur.Body {
			w.alias(expr, aliases)
			visit(expr)
		}
		if cur.Head.Key != nil {
			visit(cur.Head.Key)
		}
		if cur.Head.Value != nil {
			visit(cur.Head.Value)
		}
	}
	for _, d := range deps {
		if w.visited[d] {
			continue
		}

		w.rule(d, w.name(d))
	}
}

// alias remembers a local variable bound to an input path (x := input.a,
// or the compiler's rewrite of it, __local0__ = input.a), so that x.b reads
// input.a.b.
func (w *readWalker) alias(expr *ast.Expr, aliases map[ast.Var][]string) {
	if !expr.IsEquality() && !expr.IsAssignment() {
		return
	}
	ops := expr.Operands()
	if len(ops) != 2 {
		return
	}
	for i := range 2 {
		v, ok := ops[i].Value.(ast.Var)
		if !ok || v.Equal(ast.InputRootDocument.Value) {
			continue
		}
		if ref, ok := ops[1-i].Value.(ast.Ref); ok {
			if p, ok := w.inputPath(ref, aliases); ok {
				aliases[v] = p
			}
		}
	}
}

// inputPath is the constant prefix of ref below input, when ref reads the
// input (directly or through an alias).
func (w *readWalker) inputPath(ref ast.Ref, aliases map[ast.Var][]string) ([]string, bool) {
	if len(ref) == 0 {
		return nil, false
	}
	head, ok := ref[0].Value.(ast.Var)
	if !ok {
		return nil, false
	}
	var base []string
	switch {
	case head.Equal(ast.InputRootDocument.Value):
	case aliases[head] != nil:
		base = aliases[head]
	default:
		return nil, false
	}
	p := append([]string(nil), base...)
	for _, t := range ref[1:] {
		switch v := t.Value.(type) {
		case ast.String:
			p = append(p, string(v))
		case ast.Number:
			if _, err := strconv.Atoi(string(v)); err != nil {
				return p, true
			}
			p = append(p, string(v))
		default:
			return p, true
		}
	}
	return p, true
}

// addData lists a reference to the policy's data (a base document: no
// rule defines it), up to its first variable.
func (w *readWalker) addData(ref ast.Ref, via string) {
	var p []string
	for _, t := range ref[1:] {
		s, ok := t.Value.(ast.String)
		if !ok {
			break
		}
		p = append(p, string(s))
	}
	if len(p) == 0 {
		return
	}
	key := "data:" + strings.Join(p, "\x00")
	if w.seen[key] {
		return
	}
	w.seen[key] = true
	w.dataReads = append(w.dataReads, inputRead{path: p, via: via, data: true})
}

func (w *readWalker) add(p []string, via string) {
	r := inputRead{path: p, via: via}
	key := r.pointer()
	if w.seen[key] {
		return
	}
	w.seen[key] = true
	w.reads = append(w.reads, r)
}

// dependencies are the rules (and functions) that ref may refer to, in
// source order, without the reason rules' own document: a helper that
// reads the set of reasons does not make every reason evidence of another.
func (w *readWalker) dependencies(ref ast.Ref) []*ast.Rule {
	var out []*ast.Rule
	for _, r := range w.c.GetRulesDynamicWithOpts(ref, ast.RulesOptions{}) {
		if r.Module == nil || r.Location == nil || w.excluded[r.Ref().GroundPrefix().String()] {
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Location.Compare(out[j].Location) < 0 })
	return out
}

// name is how an explanation names a helper: relative to the decision's
// package when it is in it, its full path otherwise.
func (w *readWalker) name(r *ast.Rule) string {
	p := r.Ref().GroundPrefix()
	if p.HasPrefix(w.pkg) && len(p) > len(w.pkg) {
		return p[len(w.pkg):].String()
	}
	return strings.TrimPrefix(p.String(), "data.")
}

// prune drops a path when a longer one below it is listed: the rule reads
// input.runnerState to test that it is there and input.runnerState.runId
// to compare it, and the evidence is the runId, not the whole state.
func prune(reads []inputRead) []inputRead {
	out := reads[:0:0]
	for i, r := range reads {
		covered := false
		for j, o := range reads {
			if i != j && len(o.path) > len(r.path) && hasPathPrefix(o.path, r.path) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, r)
		}
	}
	return out
}

func hasPathPrefix(p, prefix []string) bool {
	if len(p) < len(prefix) {
		return false
	}
	for i := range prefix {
		if p[i] != prefix[i] {
			return false
		}
	}
	return true
}

// evidenceOf reads the values at reads from doc, the input as the
// decision's walk built it (whole: an explained decision is not projected).
// A path through a missing member is reported as absent at that member, a
// path through null or a scalar at the value that stops it: what the rule
// saw.
func evidenceOf(doc ast.Value, reads []inputRead) []Evidence {
	out := make([]Evidence, 0, len(reads))
	seen := map[string]bool{}
	for _, r := range reads {
		ev := resolve(doc, r.path)
		ev.Via = r.via
		if seen[ev.Path] {
			continue
		}
		seen[ev.Path] = true
		out = append(out, ev)
	}
	return out
}

func resolve(doc ast.Value, path []string) Evidence {
	cur := doc
	var ptr strings.Builder
	for _, tok := range path {
		var next *ast.Term
		switch v := cur.(type) {
		case ast.Object:
			next = v.Get(ast.StringTerm(tok))
		case *ast.Array:
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < v.Len() {
				next = v.Elem(i)
			}
		default:
			// null or a scalar: the reference stops here, undefined below.
			return shown(ptr.String(), cur)
		}
		ptr.WriteByte('/')
		ptr.WriteString(jsonptr.Escape(tok))
		if next == nil {
			return Evidence{Path: ptr.String(), Absent: true}
		}
		cur = next.Value
	}
	return shown(ptr.String(), cur)
}

// shown is the evidence for value v at ptr: its canonical JSON text, or a
// summary when that text is longer than MaxEvidenceBytes.
func shown(ptr string, v ast.Value) Evidence {
	if b, ok := appendCanonical(nil, v, MaxEvidenceBytes); ok {
		return Evidence{Path: ptr, Value: json.RawMessage(b)}
	}
	return Evidence{Path: ptr, Summary: summary(v)}
}

func summary(v ast.Value) string {
	switch x := v.(type) {
	case ast.Object:
		return fmt.Sprintf("object with %d members", x.Len())
	case *ast.Array:
		return fmt.Sprintf("array of %d elements", x.Len())
	case ast.String:
		return fmt.Sprintf("string of %d bytes", len(x))
	case ast.Number:
		return fmt.Sprintf("number of %d digits", len(x))
	}
	return fmt.Sprintf("%T", v)
}

// appendCanonical appends v as JSON (sorted keys, canonical numbers) and
// reports false as soon as it would pass limit bytes: a 16 MiB value is not
// written to be thrown away.
func appendCanonical(b []byte, v ast.Value, limit int) ([]byte, bool) {
	ok := true
	switch x := v.(type) {
	case ast.Number:
		c, canon := input.CanonicalNumber(string(x))
		if !canon {
			c = string(x)
		}
		b = append(b, c...)
	case *ast.Array:
		b = append(b, '[')
		for i := 0; i < x.Len() && ok; i++ {
			if i > 0 {
				b = append(b, ',')
			}
			b, ok = appendCanonical(b, x.Elem(i).Value, limit)
		}
		b = append(b, ']')
	case ast.Object:
		b = append(b, '{')
		for i, k := range x.Keys() { // sorted
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendCanonical(b, k.Value, limit); !ok {
				break
			}
			b = append(b, ':')
			if b, ok = appendCanonical(b, x.Get(k).Value, limit); !ok {
				break
			}
		}
		b = append(b, '}')
	case ast.String:
		if len(x) > limit {
			return b, false
		}
		b = jsonenc.AppendString(b, string(x))
	default: // null, a boolean; a set or anything else has no JSON form
		var err error
		b, err = jsonenc.AppendValue(b, v)
		ok = err == nil
	}
	return b, ok && len(b) <= limit
}

// dataEvidence reads the data values a rule reads from the Snapshot's store.
func dataEvidence(store storage.Store, reads []inputRead) []Evidence {
	var out []Evidence
	for _, r := range reads {
		name := ast.Ref{ast.DefaultRootDocument}
		for _, t := range r.path {
			name = append(name, ast.StringTerm(t))
		}
		ev := Evidence{Data: strings.TrimPrefix(name.String(), "data."), Via: r.via}
		doc, err := storage.ReadOne(context.Background(), store, storage.Path(r.path))
		var v ast.Value
		if err == nil {
			v, err = ast.InterfaceToValue(doc) // the store holds OPA's values or Go's
		}
		if err != nil {
			ev.Absent = true
		} else {
			shownEv := shown("", v)
			ev.Value, ev.Summary = shownEv.Value, shownEv.Summary
		}
		out = append(out, ev)
	}
	return out
}

// explain lists every reason rule of def, whether it fired, and for each
// that fired the values it read: of the input from doc, the value the
// decision's walk built (whole when explaining, see Snapshot.parseInput),
// so the body is not read again.
func explain(def *decisionDef, reasons []string, doc ast.Value) []RuleOutcome {
	fired := map[string]bool{}
	for _, r := range reasons {
		fired[r] = true
	}
	out := make([]RuleOutcome, len(def.rules))
	for i, r := range def.rules {
		out[i] = RuleOutcome{RuleInfo: r, Fired: fired[r.Reason]}
		if !out[i].Fired || i >= len(def.reads) {
			continue
		}
		out[i].Evidence = append(evidenceOf(doc, def.reads[i].reads), def.reads[i].data...)
	}
	return out
}
