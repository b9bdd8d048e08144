package server

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/corpus"
)

// TestRecordCarriesTheResultsSummary: a decision's record carries its
// outcome and reasons as the engine read them from the result, so that the
// pages' ring and the store do not parse the result again. What it carries
// must be what parsing the logged result gives (decisionlog.Record.Summary,
// by the decision's x-arbiter-outcome), on 300 inputs of the corpus.
func TestRecordCarriesTheResultsSummary(t *testing.T) {
	eng, inputs := repoCorpus(t, 300)
	keys := map[string]string{}
	for _, d := range eng.Snapshot().Decisions() {
		keys[d.Name] = decisionlog.DefaultOutcomeKey
		if k, ok := d.ResultSchema.(map[string]any)[engine.OutcomeKeyword].(string); ok {
			keys[d.Name] = k
		}
	}
	h := serve(t, Config{}, eng)
	named := 0 // records with an outcome: the comparison is not of empty values only
	for _, in := range inputs {
		if r := h.do(t, http.MethodPost, "/v1/decisions/"+in.Decision, string(in.Body)); r.status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", in.Name, r.status, r.body)
		}
	}
	recs := h.log.records()
	if len(recs) != len(inputs) {
		t.Fatalf("%d records for %d decisions", len(recs), len(inputs))
	}
	for _, rec := range recs {
		parsed := rec
		parsed.Summarized, parsed.Outcome, parsed.Reasons = false, "", nil
		outcome, reasons := parsed.Summary(keys[rec.Decision])
		if !rec.Summarized || rec.Outcome != outcome || !reflect.DeepEqual(rec.Reasons, reasons) {
			t.Errorf("%s: the record carries %t %q %#v; its result reads %q %#v", rec.DecisionID, rec.Summarized, rec.Outcome, rec.Reasons, outcome, reasons)
		}
		if outcome != "" {
			named++
		}
	}
	if named == 0 {
		t.Error("no record has an outcome: nothing was compared")
	}
}

// repoCorpus is the repository's policies, live, and n inputs of the
// benchmark corpus that they decide.
func repoCorpus(tb testing.TB, n int) (*live.Engine, []corpus.Input) {
	tb.Helper()
	eng, err := live.New(context.Background(), engine.Config{Policies: "../policies", Schemas: "../schemas"})
	if err != nil {
		tb.Fatal(err)
	}
	inputs, err := corpus.Generate("../policy_test", n, 1, func(decision string, body []byte) bool {
		_, err := eng.Decide(context.Background(), decision, body, engine.Options{})
		return err == nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return eng, inputs
}
