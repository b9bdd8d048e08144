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
	proofs := p.sh.Proofs()
	refusals := append(p.gate.Refusals(r), p.gate.ProofRefusals(proofs)...)
	return ui.ShadowSummary{Report: r, Refusals: refusals, Promotable: len(refusals) == 0, Evidence: r.Evidence(proofs)}, true
}
