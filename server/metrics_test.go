package server

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/engine"
)

func TestMetrics(t *testing.T) {
	eng := quotaEngine(t, quotaDir(t))
	h := serve(t, Config{
		ReloadCounts: func() (uint64, uint64) { return 3, 1 },
	}, eng)

	// The outcome label is whatever the engine reports for this decision.
	d, err := eng.Decide(context.Background(), "quota_check", []byte(`{"tenant":"t","used":10}`), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	outcome := d.Outcome
	if outcome == "" {
		outcome = noOutcome
	}

	before := h.do(t, "GET", "/metrics", "")
	if strings.Contains(string(before.body), "arbiter_decisions_total{") {
		t.Fatalf("decisions counted before any request:\n%s", before.body)
	}

	h.do(t, "POST", plainPath, `{"tenant":"t","used":10}`)                           // refused: quota_exhausted
	h.do(t, "POST", dataPath, `{"input":{"tenant":"t","used":10,"suspended":true}}`) // refused: both
	h.do(t, "POST", plainPath, `{"tenant":"t"}`)                                     // input_schema_invalid
	h.do(t, "POST", plainPath, `{`)                                                  // malformed_json
	h.do(t, "POST", "/v1/decisions/nosuch1", `{}`)                                   // unknown_decision
	h.do(t, "POST", "/v1/data/decisions/nosuch2/decision", `{"input":{}}`)           // unknown_decision
	h.do(t, "POST", "/v1/decisions/nosuch3", `{}`, "Content-Type", "text/plain")     // 415 before the engine

	r := h.do(t, "GET", "/metrics", "")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	text := string(r.body)
	want := []string{
		fmt.Sprintf(`arbiter_decisions_total{decision="quota_check",outcome=%q} 2`, outcome),
		`arbiter_decisions_total{decision="quota_check",outcome="error"} 2`,
		`arbiter_decisions_total{decision="unknown",outcome="error"} 3`,
		`arbiter_refusal_reasons_total{decision="quota_check",reason="quota_exhausted"} 2`,
		`arbiter_refusal_reasons_total{decision="quota_check",reason="tenant_suspended"} 1`,
		`arbiter_rejected_inputs_total{code="input_schema_invalid",decision="quota_check"} 1`,
		`arbiter_rejected_inputs_total{code="malformed_json",decision="quota_check"} 1`,
		`arbiter_rejected_inputs_total{code="unknown_decision",decision="unknown"} 2`,
		`arbiter_rejected_inputs_total{code="unsupported_media_type",decision="unknown"} 1`,
		`arbiter_decision_duration_seconds_count{decision="quota_check"} 4`,
		`arbiter_decision_duration_seconds_bucket{decision="quota_check",le="5e-05"} `,
		`arbiter_decision_duration_seconds_bucket{decision="quota_check",le="5"} 4`,
		`arbiter_decision_duration_seconds_count{decision="unknown"} 3`,
		fmt.Sprintf(`arbiter_policy_revision_info{revision=%q} 1`, eng.Snapshot().Revision),
		`arbiter_reloads_total{result="ok"} 3`,
		`arbiter_reloads_total{result="failed"} 1`,
	}
	for _, line := range want {
		if !strings.Contains(text, "\n"+line) {
			t.Errorf("metrics lack %q", line)
		}
	}
	if strings.Contains(text, "nosuch") {
		t.Errorf("an unknown decision name became a label:\n%s", text)
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", grep(text, "arbiter_"))
	}
}

// TestRevisionFollowsReload: the info metric reads the active Snapshot at
// scrape time.
func TestRevisionFollowsReload(t *testing.T) {
	snap := &engine.Snapshot{Revision: "one"}
	fake := &fakeEngine{snap: snap}
	h := serve(t, Config{}, fake)
	if text := string(h.do(t, "GET", "/metrics", "").body); !strings.Contains(text, `arbiter_policy_revision_info{revision="one"} 1`) {
		t.Fatalf("%s", grep(text, "arbiter_"))
	}
	fake.snap = &engine.Snapshot{Revision: "two"}
	text := string(h.do(t, "GET", "/metrics", "").body)
	if !strings.Contains(text, `arbiter_policy_revision_info{revision="two"} 1`) || strings.Contains(text, `revision="one"`) {
		t.Fatalf("%s", grep(text, "arbiter_"))
	}
}

func grep(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestStatusSaysWhichDecisionsRunCompiled: /v1/status lists, per decision,
// whether it runs compiled.
func TestStatusSaysWhichDecisionsRunCompiled(t *testing.T) {
	h := serve(t, Config{}, quotaEngine(t, quotaDir(t)))
	r := h.do(t, "GET", "/v1/status", "")
	if r.status != 200 || !strings.Contains(string(r.body), `"compiled":[{"decision":"quota_check","compiled":true}]`) {
		t.Fatalf("%d %s", r.status, r.body)
	}
}
