package ui

import (
	"context"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/shadow"
)

// shadowView is what a decision's page says of the shadow candidates'
// answers to it: each answer, or why there is none to show.
type shadowView struct {
	Answers []shadowAnswer
	// Running: this server runs shadow evaluation (a candidate may be
	// loaded); StoreDown: the store, which holds every replica's answers,
	// could not be read.
	Running, StoreDown bool
}

// shadowAnswer is one candidate's answer to a logged decision, as its
// outcome record says: the candidate's revision, result or error, and the
// class of the difference from the live answer (shadow's classes).
type shadowAnswer struct {
	Decision, Revision, Class string
	Agreed                    bool // the class is shadow.Same
	Outcome, ErrorCode        string
	Reasons                   []string
	Result                    string // indented
	DurationNS                int64
	// Partial: the stored record was not read whole; the rest is its
	// row's columns, and the class is unknown.
	Partial *decisionstore.Partial
}

// shadowAnswers are the candidates' answers to e: those the ring or the
// log kept with it, else, with a store, those of the store (another
// replica's decision is answered by that replica's candidate).
func (h *handler) shadowAnswers(ctx context.Context, e Entry) shadowView {
	v := shadowView{Running: h.cfg.Shadow != nil}
	key := outcomeKey(h.cfg.Decider, e.Record.Decision)
	for _, sh := range e.Shadows {
		v.Answers = append(v.Answers, answerOf(e.Record.Decision, key, sh))
	}
	if len(v.Answers) > 0 || h.cfg.Store == nil {
		return v
	}
	rows, err := fromStore(ctx, h, "ui: reading the decision store's shadow outcomes failed", func(ctx context.Context) ([]Entry, error) {
		return h.cfg.Store.Shadows(ctx, e.Record.DecisionID)
	})
	v.StoreDown = err != nil
	for _, row := range rows {
		if row.Partial == nil && row.Record.Shadow != nil {
			v.Answers = append(v.Answers, answerOf(e.Record.Decision, key, *row.Record.Shadow))
			continue
		}
		v.Answers = append(v.Answers, shadowAnswer{Decision: e.Record.Decision, Revision: row.Record.Revision,
			Outcome: row.Outcome, Reasons: row.Reasons, ErrorCode: row.ErrorCode(), DurationNS: row.Record.DurationNS, Partial: row.Partial})
	}
	return v
}

func answerOf(decision, outcomeKey string, sh decisionlog.Shadow) shadowAnswer {
	a := shadowAnswer{Decision: decision, Revision: sh.Revision, Class: sh.Class, Agreed: sh.Class == string(shadow.Same),
		Result: indent(sh.Result), DurationNS: sh.DurationNS}
	a.Outcome, a.Reasons = decisionlog.Record{Result: sh.Result, Error: sh.Error}.Summary(outcomeKey)
	if sh.Error != nil {
		a.ErrorCode = sh.Error.Code
	}
	return a
}
