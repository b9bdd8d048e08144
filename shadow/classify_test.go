package shadow

import (
	"fmt"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
)

// The rules of Classify on made-up results: an outcome member "o" whose
// value "yes" allows, as a result schema's x-arbiter-allow would say.
func TestClassify(t *testing.T) {
	declared := engine.Verdict{OutcomeKey: "o", Allow: []any{"yes", true}, Declared: true}
	silent := engine.Verdict{OutcomeKey: "o"}
	res := func(s string) Outcome { return Outcome{Result: []byte(s)} }
	fail := func(code string) Outcome {
		return Outcome{Error: &decisionlog.RecordError{Code: code, Message: "m " + code}}
	}
	for _, tc := range []struct {
		name       string
		v          engine.Verdict
		live, cand Outcome
		want       Class
	}{
		{"same result", declared, res(`{"o":"no","r":1}`), res(`{"r":1,"o":"no"}`), Same},
		{"same error code, other message", declared, fail("input_schema_invalid"), Outcome{Error: &decisionlog.RecordError{Code: "input_schema_invalid", Message: "other"}}, Same},
		{"refusal becomes allowance", declared, res(`{"o":"no","reasons":["a"]}`), res(`{"o":"yes","reasons":[]}`), RefuseToAllow},
		{"a boolean outcome allows", declared, res(`{"o":false}`), res(`{"o":true}`), RefuseToAllow},
		{"missing outcome is a refusal", declared, res(`{"reasons":["a"]}`), res(`{"o":"yes"}`), RefuseToAllow},
		{"unlisted outcome is a refusal", declared, res(`{"o":"maybe"}`), res(`{"o":"yes"}`), RefuseToAllow},
		{"an error is a refusal", declared, fail("policy_error"), res(`{"o":"yes"}`), RefuseToAllow},
		{"a schema error is a refusal", declared, fail("input_schema_invalid"), res(`{"o":"yes"}`), RefuseToAllow},
		{"allowance becomes refusal", declared, res(`{"o":"yes"}`), res(`{"o":"no"}`), AllowToRefuse},
		{"candidate fails", declared, res(`{"o":"no"}`), fail("policy_timeout"), CandidateError},
		{"candidate rejects an input the live one took", declared, res(`{"o":"yes"}`), fail("input_schema_invalid"), CandidateError},
		{"other reasons, both refuse", declared, res(`{"o":"no","reasons":["a"]}`), res(`{"o":"no","reasons":["a","b"]}`), ReasonsChanged},
		{"other refusing outcome", declared, res(`{"o":"no","reasons":["a"]}`), res(`{"o":"never","reasons":["a"]}`), ReasonsChanged},
		{"only another member", declared, res(`{"o":"no","reasons":["a"],"e":"x"}`), res(`{"o":"no","reasons":["a"],"e":"y"}`), ErrorChanged},
		{"both fail, other codes", declared, fail("policy_error"), fail("policy_timeout"), ErrorChanged},
		{"live fails, candidate refuses", declared, fail("policy_error"), res(`{"o":"no"}`), ErrorChanged},
		// Without x-arbiter-allow nothing is an allowance: no change is
		// ever refuse_to_allow or allow_to_refuse.
		{"silent: outcome changes", silent, res(`{"o":"no","reasons":["a"]}`), res(`{"o":"yes","reasons":[]}`), ReasonsChanged},
		{"silent: live fails, candidate answers", silent, fail("policy_error"), res(`{"o":"yes"}`), ErrorChanged},
		{"silent: candidate fails", silent, res(`{"o":"yes"}`), fail("policy_error"), CandidateError},
		{"silent: another member", silent, res(`{"o":"yes","e":1}`), res(`{"o":"yes","e":2}`), ErrorChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.v, tc.live, tc.cand); got != tc.want {
				t.Errorf("Classify = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestGateRefusals(t *testing.T) {
	tally := NewTally(2)
	for i, c := range []Class{Same, Same, ReasonsChanged, CandidateError, RefuseToAllow, RefuseToAllow, RefuseToAllow} {
		tally.Add("d", c, string(rune('a'+i)))
	}
	rep := tally.Report()
	if rep.Total != 7 || rep.Count(RefuseToAllow) != 3 || len(rep.Examples(RefuseToAllow)) != 2 || rep.Classes[0].Class != RefuseToAllow {
		t.Fatalf("report %+v", rep)
	}
	for _, tc := range []struct {
		name string
		gate Gate
		want []string
	}{
		{"defaults", Gate{MinDecisions: 1, Forbidden: DefaultForbidden}, []string{"3 decisions are refuse_to_allow (forbidden), e.g. e f", "1 decisions are candidate_error (forbidden), e.g. d"}},
		{"too few", Gate{MinDecisions: 8}, []string{"judged 7 of 8 decisions the gate requires"}},
		{"nothing forbidden", Gate{MinDecisions: 7}, nil},
		{"reasons forbidden", Gate{Forbidden: []Class{ReasonsChanged}}, []string{"1 decisions are reasons_changed (forbidden), e.g. c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.gate.Refusals(rep)
			if len(got) != len(tc.want) {
				t.Fatalf("refusals %q, want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("refusal %d: %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// Dropped requests are owed until judged later, each once; past the ids a
// tally keeps, the ones it lost stay owed for good, and the gate refuses.
func TestDroppedRequestsStayOwed(t *testing.T) {
	tally := NewTally(2)
	for i := range maxOwed + 1 {
		tally.Drop(fmt.Sprint(i))
	}
	owed := tally.Owed()
	if len(owed) != maxOwed {
		t.Fatalf("%d ids kept, want %d", len(owed), maxOwed)
	}
	tally.AddLate("d", Same, "not dropped")
	for _, id := range owed {
		tally.AddLate("d", Same, id)
		tally.AddLate("d", Same, id)
	}
	rep := tally.Report()
	if rep.Total != maxOwed || rep.Dropped != maxOwed+1 || rep.LaterJudged != maxOwed || len(tally.Owed()) != 0 {
		t.Fatalf("report %d judged, %d dropped, %d later judged; %d ids owed", rep.Total, rep.Dropped, rep.LaterJudged, len(tally.Owed()))
	}
	if got := (Gate{}).Refusals(rep); len(got) != 1 || !strings.HasPrefix(got[0], fmt.Sprintf("1 of the %d sampled decisions", maxOwed+1)) {
		t.Errorf("refusals %q", got)
	}
}
