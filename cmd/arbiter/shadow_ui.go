package main

import (
	"context"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/server/ui"
	"github.com/arbiter-dev/arbiter/shadow"
)

// shadowPages shows the shadow candidate on the pages: its revision, its
// answer to a what-if (decided directly on its Snapshot, so nothing is
// logged or judged), the impact report GET /v1/shadow shows and the
// default promotion gate's verdict on it.
type shadowPages struct {
	sh   *shadow.Shadow
	gate shadow.Gate
}

func (p shadowPages) Candidate() (string, bool) {
	c := p.sh.Candidate()
	if c == nil {
		return "", false
	}
	return c.Snapshot.Revision, true
}

func (p shadowPages) DecideCandidate(ctx context.Context, name string, body []byte, opts engine.Options) (*engine.Decision, error) {
	c := p.sh.Candidate()
	if c == nil {
		return nil, &engine.Error{Code: engine.CodeNotReady, Message: "no shadow candidate is loaded"}
	}
	return c.Snapshot.Decide(ctx, name, body, opts)
}

func (p shadowPages) Summary(context.Context) (ui.ShadowSummary, bool) {
	r, ok := p.sh.Report()
	if !ok {
		return ui.ShadowSummary{}, false
	}
	classes := func(cs []shadow.ClassCount) []ui.ShadowClass {
		out := make([]ui.ShadowClass, len(cs))
		for i, c := range cs {
			out[i] = ui.ShadowClass{Class: string(c.Class), Count: c.Count, Examples: c.Examples}
		}
		return out
	}
	sum := ui.ShadowSummary{Total: r.Total, Classes: classes(r.Classes)}
	proofs := p.sh.Proofs()
	sum.Refusals = append(p.gate.Refusals(r), p.gate.ProofRefusals(proofs)...)
	sum.Promotable = len(sum.Refusals) == 0
	for _, e := range r.Evidence(proofs) {
		sum.Evidence = append(sum.Evidence, ui.ShadowEvidence{Class: string(e.Class), Evidence: e.Evidence, Summary: e.Summary})
	}
	for _, d := range r.Decisions {
		sum.Decisions = append(sum.Decisions, ui.ShadowDecision{Decision: d.Decision, Total: d.Total, Classes: classes(d.Classes)})
	}
	return sum, true
}
