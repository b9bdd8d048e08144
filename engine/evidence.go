package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
	"github.com/open-policy-agent/opa/v1/storage"

	"github.com/arbiter-dev/arbiter/engine/input"
	"github.com/arbiter-dev/arbiter/engine/ireval"
	"github.com/arbiter-dev/arbiter/internal/jsonenc"
	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// Evidence is one input value that a reason rule read, whether it fired or
// held: where it is in the input (a JSON pointer) and what it was. The paths come from the rule's
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

// inputRead is one input path that a reason rule reads (or, with data, a
// path of the policy's data), and the helper rule or function that reads
// it ("" for the rule itself).
type inputRead struct {
	path []string // pointer tokens below input (or below data)
	via  string
}

// pointer is the JSON pointer of the read.
func (r inputRead) pointer() string { return jsonptr.Join(r.path) }

// ruleReads finds, for each reason rule of a decision (in the order of
// rules), what its body reads of the input and of the policy's data,
// directly or through the helper rules and functions it calls: the one
// analysis of the plan that also gives the input projection
// (ireval.RuleReads). It is conservative: every path a rule could read is
// listed, whichever body of a helper decided; a path below a variable is
// cut at the variable. The data values are read here, once: they are fixed
// for a Snapshot. Without a plan (the planner refused the decision) an
// explanation has no evidence.
func ruleReads(policy *ir.Policy, store storage.Store, decision string, rules []RuleInfo) []ruleEvidence {
	pkg := ast.MustParseRef("data.decisions." + decision)
	out := make([]ruleEvidence, len(rules))
	for i, info := range rules {
		fn, reads, ok := ireval.RuleReads(policy, info.File, info.Line)
		if !ok {
			continue
		}
		ref, err := funcRef(fn)
		if err != nil {
			continue
		}
		out[i].doc = ref.Append(ast.ArrayTerm(ast.NumberTerm(info.Rank), ast.StringTerm(info.Reason)))
		var data []inputRead
		for _, r := range reads {
			read := inputRead{path: r.Path}
			if r.Via != "" {
				read.via = helperName(pkg, r.Via)
			}
			switch {
			case !r.Data:
				out[i].reads = append(out[i].reads, read)
			case len(r.Path) > 0: // data as a whole is not shown
				data = append(data, read)
			}
		}
		out[i].data = dataEvidence(store, data)
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

// funcRef is the rule a plan function stands for: functions are named
// g<generation>.<rule ref>.
func funcRef(fn string) (ast.Ref, error) {
	_, path, _ := strings.Cut(fn, ".")
	return ast.ParseRef(path)
}

// helperName is how an explanation names the helper rule or function a
// plan function stands for: relative to the decision's package when it is
// in it, its full path otherwise.
func helperName(pkg ast.Ref, fn string) string {
	p, err := funcRef(fn)
	if err != nil {
		return fn
	}
	if p.HasPrefix(pkg) && len(p) > len(pkg) {
		return p[len(pkg):].String()
	}
	return strings.TrimPrefix(p.String(), "data.")
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
		ev := Evidence{Absent: true}
		doc, err := storage.ReadOne(context.Background(), store, storage.Path(r.path))
		if err == nil {
			var v ast.Value
			if v, err = ast.InterfaceToValue(doc); err == nil { // the store holds OPA's values or Go's
				ev = shown("", v)
			}
		}
		ev.Data, ev.Via = strings.TrimPrefix(name.String(), "data."), r.via
		out = append(out, ev)
	}
	return out
}

// explain lists every reason rule of def, whether it fired, and the values
// it read: as Evidence for a rule that fired, as Checked for one that did
// not (a condition that held). Those of the input come from doc, the value
// the decision's walk built (whole when explaining, see
// Snapshot.parseInput), so the body is not read again; each is capped as
// shown caps it, and their number is the policy's, not the input's.
func explain(def *decisionDef, reasons []string, doc ast.Value) []RuleOutcome {
	out := make([]RuleOutcome, len(def.rules))
	for i, r := range def.rules {
		out[i] = RuleOutcome{RuleInfo: r, Fired: slices.Contains(reasons, r.Reason)}
		if i >= len(def.reads) {
			continue
		}
		read := append(evidenceOf(doc, def.reads[i].reads), def.reads[i].data...)
		if out[i].Fired {
			out[i].Evidence = read
		} else {
			out[i].Checked = read
		}
	}
	return out
}
