// Package input is Arbiter's input boundary: it turns a request body, which
// the agent in the sandbox controls byte for byte, into the value a policy
// reads, or says why it cannot.
//
// One pass over the body does it all: the strict scan (scan.go), validation
// against the decision's input schema as the JSON Schema library compiled it
// (schema.go, walk.go; the library itself validates whatever the pass does
// not implement), exact numbers in one canonical text (number.go), and
// building OPA values only for the parts the policy can read (projection.go).
// A rejected input is read a second time to list its violations
// (report.go). Every limit (size of numbers, depth, number of values, the
// caller's deadline) is enforced while reading, so the worst body under the
// size limit costs time and memory in proportion to its size.
package input

import (
	"cmp"
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/internal/defaults"
)

// DefaultMaxValues caps the JSON values of one input when Options leaves it
// zero: a 16 MiB Runner state of realistic shape has well under a million.
const DefaultMaxValues = 2_000_000

// Options say how to read one body.
type Options struct {
	// DataAPIBody means the body is an OPA Data API request, {"input": ...}
	// (POST /v1/data/...), rather than the input document itself;
	// violations stay relative to the input document.
	DataAPIBody bool
	// Projection names the parts of the input to build (see Projection);
	// nil builds all of it. It must have gone through Normalize.
	Projection *Projection
	// MaxValues caps the number of JSON values in the body; zero means
	// DefaultMaxValues.
	MaxValues int
	// Admit, when set, is handed the values of the body as the pass reads
	// them (every few thousand, and the rest at its end), before it builds
	// them; an error from it stops the pass and is returned as it is. The
	// server's admission budget counts a body's values this way, in the one
	// pass over it.
	Admit func(values int) error
}

// Input is an accepted input.
type Input struct {
	// Value is what the policy reads as input.
	Value ast.Value
	// Raw is the input document exactly as received (for a Data API body,
	// the text of its input member).
	Raw []byte
	// OneLine is true when the body holds no line break (CR or LF), so Raw
	// can be written as one line of a log as it is.
	OneLine bool
}

// InvalidError is an input that is valid JSON but not acceptable: it breaks
// the schema, is not an object, or a Data API body lacks its input.
type InvalidError struct {
	Message    string
	Violations []Violation
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("%s (%d violations)", e.Message, len(e.Violations))
}

// DisagreementError means the two passes over one body disagreed on its
// validity: a bug, and never a reason to decide.
type DisagreementError struct{}

func (*DisagreementError) Error() string {
	return "the validating pass rejected an input in which the reporting pass found no violation"
}

func invalid(msg, violation string) error {
	return &InvalidError{Message: msg, Violations: []Violation{{Path: "", Message: violation}}}
}

func notObject() error { return invalid("the input must be a JSON object", "expected an object") }

func noInput() error { return invalid("the request body has no input member", "missing input") }

func notWrapped() error {
	return invalid("the request body must be a JSON object with an input member", "expected an object with an input member")
}

// Parse reads body as the input of a decision with schema s. Errors are
// *SyntaxError (malformed JSON), *InvalidError (also for a number beyond
// MaxNumberLength or MaxExponentDigits, at its place), *LimitError, the context's
// error when its deadline passed while reading, or *DisagreementError.
func Parse(ctx context.Context, body []byte, s *Schema, opts Options) (Input, error) {
	proj := cmp.Or(opts.Projection, whole)
	maxValues := defaults.Positive(opts.MaxValues, DefaultMaxValues)
	if s.root == nil {
		return parseWithLibrary(ctx, body, s, opts, proj, maxValues)
	}
	first, err := walk(ctx, body, s.root.set, proj, opts.DataAPIBody, maxValues, false, opts.Admit)
	if err != nil {
		return Input{}, err
	}
	if first.valid {
		return Input{Value: first.value.Value, Raw: first.raw, OneLine: first.oneLine}, nil
	}
	return Input{}, violations(ctx, body, s.root.set, opts.DataAPIBody, maxValues)
}

// violations walks an invalid body again to list its violations: none is
// a disagreement between the passes.
func violations(ctx context.Context, body []byte, set []*node, wrapped bool, maxValues int) error {
	rep, err := walk(ctx, body, set, nil, wrapped, maxValues, true, nil)
	switch {
	case err != nil:
		return err
	case len(rep.violations) == 0:
		return &DisagreementError{}
	}
	return &InvalidError{Message: "input does not match the schema", Violations: rep.violations}
}

// pass is the outcome of one walk over a body.
type pass struct {
	value      *ast.Term // the built input, when valid and built
	raw        []byte    // the input's text
	valid      bool
	oneLine    bool        // the body holds no line break
	violations []Violation // in the report pass
}

// walk runs one pass: the first (report false) builds the projected input,
// says whether it is valid and hands the values it reads to admit (when not
// nil); the report pass lists the violations.
func walk(ctx context.Context, body []byte, set []*node, proj *Projection, wrapped bool, maxValues int, report bool, admit func(int) error) (pass, error) {
	w := getWalker()
	defer putWalker(w)
	w.scanner, w.ctx, w.maxValues, w.valid, w.report = scanner{data: body, admit: admit}, ctx, maxValues, true, report
	if err := w.start(); err != nil {
		return pass{}, err
	}
	raw := body
	isObj := body[w.pos] == '{'
	if wrapped && isObj {
		w.wrapped, w.inSet, w.inProj = true, set, proj
		set, proj = nil, nil
	}
	t, err := w.value(set, proj, 0)
	if err != nil {
		return pass{}, err
	}
	if err := w.end(); err != nil {
		return pass{}, err
	}
	if err := w.admitValues(w.values); err != nil {
		return pass{}, err
	}
	if wrapped {
		if !isObj {
			return pass{}, notWrapped()
		}
		if !w.sawInput {
			return pass{}, noInput()
		}
		t, raw, isObj = w.input, w.inputRaw, w.inputObj
	}
	if !isObj {
		return pass{}, notObject()
	}
	if report {
		return pass{raw: raw, violations: finish(w.rep.violations, w.rep.extra)}, nil
	}
	return pass{value: t, raw: raw, valid: w.valid && t != nil, oneLine: !w.lineBreak}, nil
}

// parseWithLibrary is the path of a schema the walk does not implement:
// the library validates the decoded document, then the walk (with no
// schema) builds the value.
func parseWithLibrary(ctx context.Context, body []byte, s *Schema, opts Options, proj *Projection, maxValues int) (Input, error) {
	doc, err := decode(body, maxValues, opts.Admit)
	if _, beyond := err.(*NumberLimitError); beyond {
		// The walk says where, as on the streamed path (or finds a
		// syntax error after the number).
		return Input{}, violations(ctx, body, nil, opts.DataAPIBody, maxValues)
	}
	if err != nil {
		return Input{}, err
	}
	if err := ctx.Err(); err != nil {
		return Input{}, err
	}
	if opts.DataAPIBody {
		obj, ok := doc.(map[string]any)
		if !ok {
			return Input{}, notWrapped()
		}
		if doc, ok = obj["input"]; !ok {
			return Input{}, noInput()
		}
	}
	if _, ok := doc.(map[string]any); !ok {
		return Input{}, notObject()
	}
	// Neither the decoder nor the library's Validate can be interrupted
	// (each is linear in the body, which the value cap bounds); the
	// deadline is looked at between the steps, and the walk as it goes.
	if err := s.lib.Validate(doc); err != nil {
		return Input{}, &InvalidError{Message: "input does not match the schema", Violations: Violations(err)}
	}
	if err := ctx.Err(); err != nil {
		return Input{}, err
	}
	p, err := walk(ctx, body, nil, proj, opts.DataAPIBody, maxValues, false, nil)
	if err != nil {
		return Input{}, err
	}
	return Input{Value: p.value.Value, Raw: p.raw, OneLine: p.oneLine}, nil
}

// Walkers are reused: each carries a term cache and scratch buffers that
// would otherwise be allocated and cleared per request. A bounded free list
// rather than a sync.Pool, which the collector empties every cycle.
var walkers = make(chan *walker, 64)

func getWalker() *walker {
	select {
	case w := <-walkers:
		return w
	default:
		return new(walker)
	}
}

// putWalker clears everything that refers to a request (its body, its
// values) and keeps the scratch space. The term cache holds immutable terms
// of earlier requests: sharing them is safe, and they are at most
// termCacheSize short strings.
func putWalker(w *walker) {
	*w = walker{
		keys: w.keys[:0], arena: w.arena[:0], numBuf: w.numBuf[:0], canonBuf: w.canonBuf[:0], strBuf: w.strBuf[:0],
		terms: w.terms, rep: reporter{path: w.rep.path[:0]}, sets: w.sets,
	}
	if cap(w.strBuf) > 1<<16 {
		w.strBuf = nil // one huge escaped string must not stay pinned
	}
	clear(w.keys[:cap(w.keys)])
	clear(w.arena[:cap(w.arena)])
	for _, m := range w.sets {
		clear(m)
	}
	select {
	case walkers <- w:
	default:
	}
}
