// Package diff proves that a policy edit changes no decision in a given
// direction, or finds an input that it changes: the semantic diff of two
// revisions (`arbiter diff OLD NEW`).
//
// For each decision it asks four questions about the inputs the input
// schemas admit: is there one that OLD refuses and NEW allows
// (refuse_to_allow), one that OLD decides and NEW fails on
// (allow_to_error), one that OLD allows and NEW refuses (allow_to_refuse),
// one whose allowance stays and whose reasons or outcome change
// (reasons_changed)? Both revisions' plans (the IR engine/ireval compiles)
// run symbolically over one model of the input (exec.go, input.go), the
// schemas become constraints on it (schema.go), and each question is a
// formula that an SMT solver, cvc5 or z3, answers over unbounded integers
// and the theory of strings (package smt). The solver only proposes: an
// example is decided by both revisions on both evaluators (the compiled
// program and topdown) and classified as shadow evaluation classifies live
// traffic before it is reported. A verdict none is the solver's unsat:
// it holds for every input the schemas admit. What the encoding does not
// model is a free variable (a gap), so none stays sound, and an example
// that relies on a gap is unknown with the gap's file and line.
package diff

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/arbiter-dev/arbiter/diff/smt"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/shadow"
)

// The verdicts.
const (
	None    = "none"
	Found   = "found"
	Unknown = "unknown"
)

// Questions are the four questions, in report order: each is the class of
// shadow evaluation an example of it falls in (shadow.Proved).
var Questions = shadow.Proved

// QuestionName is how a report names question q: the shadow class's name,
// but allow_to_error for candidate_error (the new revision fails where the
// old one decided).
func QuestionName(q shadow.Class) string {
	if q == shadow.CandidateError {
		return "allow_to_error"
	}
	return string(q)
}

// Answer is the verdict on one question.
type Answer struct {
	Verdict string `json:"verdict"`
	// Example (found) is the input, and Fields the JSON pointers at which
	// it differs from the fixture input it was made closest to.
	Example json.RawMessage `json:"example,omitempty"`
	Fields  []string        `json:"fields,omitempty"`
	Old     *Outcome        `json:"old,omitempty"`
	New     *Outcome        `json:"new,omitempty"`
	// Bounds (none) says what the proof covers.
	Bounds string `json:"bounds,omitempty"`
	// Reason (unknown) says why there is no proof.
	Reason string `json:"reason,omitempty"`
}

// Outcome is what one revision decides of an example.
type Outcome struct {
	Result json.RawMessage      `json:"result,omitempty"`
	Error  *engine.Error        `json:"error,omitempty"`
	Fired  []engine.RuleOutcome `json:"fired,omitempty"`
}

// DecisionDiff answers the four questions for one decision.
type DecisionDiff struct {
	RefuseToAllow  *Answer `json:"refuse_to_allow"`
	AllowToError   *Answer `json:"allow_to_error"`
	AllowToRefuse  *Answer `json:"allow_to_refuse"`
	ReasonsChanged *Answer `json:"reasons_changed"`
	// Seconds is how long the analysis of the decision took.
	Seconds float64 `json:"seconds"`
}

// Get returns the answer to question q.
func (d *DecisionDiff) Get(q shadow.Class) *Answer { return *d.answer(q) }

func (d *DecisionDiff) set(q shadow.Class, a *Answer) { *d.answer(q) = a }

// answer is where the answer to question q is kept.
func (d *DecisionDiff) answer(q shadow.Class) **Answer {
	switch q {
	case shadow.RefuseToAllow:
		return &d.RefuseToAllow
	case shadow.CandidateError:
		return &d.AllowToError
	case shadow.AllowToRefuse:
		return &d.AllowToRefuse
	}
	return &d.ReasonsChanged
}

// Report is the diff of two revisions.
type Report struct {
	Old       string                   `json:"old_revision,omitempty"`
	New       string                   `json:"new_revision,omitempty"`
	Solvers   []string                 `json:"solvers,omitempty"`
	Decisions map[string]*DecisionDiff `json:"decisions"`
}

// Names lists the decisions in order.
func (r *Report) Names() []string { return slices.Sorted(maps.Keys(r.Decisions)) }

// Options bound an analysis.
type Options struct {
	// Solvers are the SMT solvers to run side by side (z3, cvc5: names on
	// PATH or paths); none: every one of them found on PATH.
	Solvers []string
	// CheckTimeout bounds each question the solvers are asked (default 20s).
	CheckTimeout time.Duration
	// Budget bounds the time the solvers spend on one decision's
	// questions together (default DefaultBudget): a question not asked
	// before it ends, or not answered when it ends, is unknown and says so.
	Budget time.Duration
	// MaxTerms bounds the size of the encoding of one decision (default
	// 2,000,000 terms): past it, the decision's answers are unknown.
	MaxTerms int
	// SolverMemory bounds each solver process's address space (default
	// 2 GiB): a solver past it ends, and its question is unknown.
	SolverMemory uint64
}

// DefaultBudget is Options.Budget's default: a one-rule edit is diffed in
// under 10 s (docs/DIFF.md), and a question no solver decides in it is
// unknown, as one past CheckTimeout would be.
const DefaultBudget = 8 * time.Second

// Bounds is what a none covers.
const Bounds = "every input the input schemas admit, its strings over the code points up to U+2FFFF"

// FindSolvers returns the solvers a diff runs: those named, or z3 and
// cvc5, those found on PATH.
func FindSolvers(names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if len(names) > 0 {
		return out, nil
	}
	for _, name := range []string{"z3", "cvc5"} {
		if p, err := exec.LookPath(name); err == nil {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no SMT solver: install z3 or cvc5 (Debian packages z3, cvc5), or name one with --solver")
	}
	return out, nil
}

// Run diffs every decision of old and new. fixtures are the inputs each
// example is made close to (the fixtures of a test folder); without them
// the examples are the solver's own.
func Run(ctx context.Context, old, new *engine.Snapshot, fixtures []engine.Fixture, opts Options) (*Report, error) {
	rep := &Report{Old: old.Revision, New: new.Revision, Decisions: map[string]*DecisionDiff{}}
	solvers, serr := FindSolvers(opts.Solvers)
	rep.Solvers = mapped(solvers, filepath.Base)
	for _, name := range decisionNames(old, new) {
		start := time.Now()
		var dd *DecisionDiff
		if serr != nil {
			dd = unknownAll(serr.Error())
		} else {
			dd = decision(ctx, old, new, name, fixtures, solvers, opts)
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("decision %s: %w", name, err)
		}
		dd.Seconds = time.Since(start).Seconds()
		rep.Decisions[name] = dd
	}
	return rep, nil
}

// decisionNames are the decisions of either revision, each once.
func decisionNames(old, new *engine.Snapshot) []string {
	return slices.Compact(slices.Sorted(slices.Values(append(old.Names(), new.Names()...))))
}

func unknownAll(reason string) *DecisionDiff {
	dd := &DecisionDiff{}
	for _, q := range Questions {
		dd.set(q, &Answer{Verdict: Unknown, Reason: reason})
	}
	return dd
}

func decision(ctx context.Context, old, new *engine.Snapshot, name string, fixtures []engine.Fixture, solvers []string, opts Options) (dd *DecisionDiff) {
	ao, ok1 := old.Analysis(name)
	an, ok2 := new.Analysis(name)
	if !ok1 || !ok2 {
		return unknownAll("the decision exists in one revision only")
	}
	vNew, _ := new.Verdict(name)
	limit := cmp.Or(opts.MaxTerms, 2_000_000)
	defer func() {
		if r := recover(); r != nil {
			if r == smt.ErrTooLarge {
				dd = unknownAll(fmt.Sprintf("the encoding exceeds %d terms (the analysis bounds its own size)", limit))
				return
			}
			if e, ok := r.(error); ok && ctx.Err() != nil && errors.Is(e, ctx.Err()) {
				dd = unknownAll(e.Error())
				return
			}
			// A fault of the analysis is an answer it could not give.
			dd = unknownAll(fmt.Sprintf("the analysis failed (please report it): %v", r))
		}
	}()
	a, enc, err := encode(ctx, ao, an, vNew, limit)
	if err != nil {
		return unknownAll(err.Error())
	}
	a.enc = enc
	qs := enc.questions(a.vs.b)
	if !slices.ContainsFunc(qs, func(q question) bool { return !q.f.IsFalse() }) {
		// Nothing to ask (the revisions decide alike by construction): no
		// solver, no lemma.
		dd = &DecisionDiff{}
		for _, q := range qs {
			dd.set(q.class, &Answer{Verdict: None, Bounds: Bounds})
		}
		return dd
	}
	sol, err := smt.Start(ctx, solvers, cmp.Or(opts.CheckTimeout, 20*time.Second), cmp.Or(opts.SolverMemory, 2<<30), a.vs.b)
	if err != nil {
		return unknownAll(err.Error())
	}
	defer sol.Close()
	a.budget = cmp.Or(opts.Budget, DefaultBudget)
	sol.SetDeadline(time.Now().Add(a.budget))
	for _, t := range enc.background {
		sol.Script().Assert(t)
	}
	// The lemmas shorten the questions.
	a.resultLemmas(sol, enc, name)
	qs = enc.questions(a.vs.b)
	background := enc.background
	var inputs [][]byte
	for _, f := range fixtures {
		if f.Decision == name && f.Input != nil && f.WantError == nil {
			inputs = append(inputs, f.Input)
		}
	}
	// Each question first briefly, so that a hard one does not spend the
	// budget of the easy ones after it; then those no solver decided in
	// that time, in order, with what is left.
	answers := make([]*Answer, len(qs))
	for _, limit := range []time.Duration{a.budget / 8, 0} {
		for i, q := range qs {
			if answers[i] == nil {
				answers[i] = a.answer(ctx, sol, old, new, name, q, background, inputs, limit)
			}
		}
	}
	dd = &DecisionDiff{}
	for i, q := range qs {
		dd.set(q.class, answers[i])
	}
	return dd
}

// resultLemmas proves, per side, that wherever its plan does not fail, its
// result is there and satisfies its result schema (a property of one
// revision, true of any revision that passed its gate's fixtures, mostly):
// the questions then need not say it again, which keeps them small.
func (a *analysis) resultLemmas(sol *smt.Solver, e *encoding, name string) {
	b := a.vs.b
	for s := range 2 {
		if s == 1 && e.resultOK[1] == e.resultOK[0] && e.err[1] == e.err[0] && e.valid[1] == e.valid[0] {
			e.resultOK[1] = e.resultOK[0]
			break
		}
		sol.Push()
		sol.Script().Assert(b.And(e.valid[s], b.Not(e.err[s]), b.Not(e.resultOK[s])))
		t0 := time.Now()
		res, err := sol.Check()
		trace("%s: result lemma of side %d: %s by %s in %v", name, s, res, sol.Name(), time.Since(t0))
		sol.Pop()
		if err == nil && res == smt.Unsat {
			e.resultOK[s] = b.True()
		}
	}
}

// tidyTimeout bounds the search for a small example where the solver
// already has one.
const tidyTimeout = 4 * time.Second

// answer asks the solver one question and confirms its example. With a
// limit (0: none but the solver's and the budget's), a question no solver
// decides within it is not answered yet: nil.
func (a *analysis) answer(ctx context.Context, sol *smt.Solver, old, new *engine.Snapshot, name string, q question, background []*smt.Term, inputs [][]byte, limit time.Duration) *Answer {
	if q.f.IsFalse() {
		return &Answer{Verdict: None, Bounds: Bounds}
	}
	sc := sol.Script()
	sol.Push()
	sc.Assert(q.f)
	t0 := time.Now()
	var res smt.Result
	var err error
	if limit > 0 {
		res, err = sol.CheckWithin(limit)
		if err == nil && res == smt.Unknown {
			trace("%s %s: not decided in its first %v", name, q.class, limit)
			sol.Pop()
			return nil
		}
	} else {
		res, err = sol.Check()
	}
	trace("%s %s: %s by %s in %v (%v)", name, q.class, res, sol.Name(), time.Since(t0), err)
	if errors.Is(err, smt.ErrBudget) {
		sol.Pop()
		return &Answer{Verdict: Unknown, Reason: fmt.Sprintf("not asked: the decision's time budget (%v, --budget) was spent on the questions before it", a.budget)}
	}
	if err != nil {
		return &Answer{Verdict: Unknown, Reason: err.Error()}
	}
	defer sol.Pop()
	switch {
	case res == smt.Unsat:
		return &Answer{Verdict: None, Bounds: Bounds}
	case res == smt.Unknown && sol.OutOfTime():
		return &Answer{Verdict: Unknown, Reason: fmt.Sprintf("%s did not decide it within the decision's time budget (%v, --budget)", sol.Name(), a.budget)}
	case res == smt.Unknown:
		return &Answer{Verdict: Unknown, Reason: fmt.Sprintf("%s could not decide it within its limits", sol.Name())}
	}
	// The solver's example; when it cannot be written or does not
	// confirm, a small and complete one (the tidy constraints) if the
	// solver has one. found then brings it close to a fixture.
	doc, derr := a.document(sol)
	var c confirmed
	if derr == nil {
		c = confirm(ctx, old, new, name, doc)
	}
	if derr != nil || c.class != q.class || !c.agree {
		sol.Push()
		for _, t := range a.tidy() {
			sc.Assert(t)
		}
		t0 = time.Now()
		tidy, err := sol.CheckWithin(tidyTimeout)
		trace("%s %s: tidy %s by %s in %v (%v)", name, q.class, tidy, sol.Name(), time.Since(t0), err)
		if err == nil && tidy == smt.Sat {
			if traceOn {
				a.traceModel(sol)
			}
			if d, e := a.document(sol); e == nil {
				doc, derr = d, nil
				c = confirm(ctx, old, new, name, doc)
			}
		}
		sol.Pop()
	}
	blame := func(what string) *Answer {
		gaps := a.gapsIn(append([]*smt.Term{q.f}, background...)...)
		if len(gaps) > 0 {
			return &Answer{Verdict: Unknown, Reason: "not modelled: " + joinShort(gaps)}
		}
		return &Answer{Verdict: Unknown, Reason: what}
	}
	if derr != nil {
		return blame("the solver's example cannot be written as JSON: " + derr.Error())
	}
	if c.class != q.class || !c.agree {
		return blame(fmt.Sprintf("the solver's example %s did not confirm (decided: %s); the encoding is wrong there, please report it", truncate(doc, 400), c.class))
	}
	t0 = time.Now()
	defer func() { trace("%s %s: confirmed and minimized in %v", name, q.class, time.Since(t0)) }()
	return found(ctx, old, new, name, q.class, doc, inputs)
}

var traceOn = os.Getenv("ARBITER_DIFF_TRACE") != ""

func init() {
	if f := os.Getenv("ARBITER_DIFF_SCRIPT"); f != "" {
		if w, err := os.Create(f); err == nil {
			smt.Tee = w
		}
	}
	if os.Getenv("ARBITER_DIFF_TRACE") == "values" {
		smt.Debug = func(solver string, asked []string, answer *smt.SExpr) {
			trace("get-value %s %v -> %s", solver, asked, answer)
		}
	}
}

func trace(format string, args ...any) {
	if traceOn {
		fmt.Fprintf(os.Stderr, "diff: "+format+"\n", args...)
	}
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}

func joinShort(gs []string) string {
	if len(gs) > 5 {
		return strings.Join(gs[:5], "; ") + fmt.Sprintf("; and %d more", len(gs)-5)
	}
	return strings.Join(gs, "; ")
}

// traceModel prints the model's values of the input's templates.
func (a *analysis) traceModel(sol *smt.Solver) {
	if e := a.enc; e != nil {
		vals, err := sol.Values([]*smt.Term{e.allowed[0], e.allowed[1], e.resultOK[0], e.resultOK[1], e.err[0], e.err[1], e.differ, e.valid[0], e.valid[1]})
		for i := range vals {
			if vals[i] == nil {
				vals[i] = &smt.SExpr{Atom: "?"}
			}
		}
		if err != nil {
			trace("model: %v", err)
			return
		}
		trace("model: allowed %v %v resultOK %v %v err %v %v differ %v valid %v %v (%v)", vals[0], vals[1], vals[2], vals[3], vals[4], vals[5], vals[6], vals[7], vals[8], err)
	}
	for _, t := range a.m.all {
		if t.arity > 0 {
			continue
		}
		n := &node{t: t}
		vals, err := sol.Values([]*smt.Term{a.m.d(n), a.m.x(n)})
		if err != nil {
			trace("model: %v", err)
			return
		}
		trace("model: %s d=%v x=%v", t.pointer(), vals[0], vals[1])
	}
}
