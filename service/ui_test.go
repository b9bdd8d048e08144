package service

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/server"
	"github.com/arbiter-dev/arbiter/server/ui"
	"github.com/arbiter-dev/arbiter/shadow"
)

// TestPagesBesideTheLog: the ring behind the pages is a sink of the
// decision-record pipeline: it gets every decision the pipeline took,
// masked once for every sink (the first member of a fixture's input here),
// and none it refused.
func TestPagesBesideTheLog(t *testing.T) {
	t.Parallel()
	fixtures, err := engine.LoadFixtures("../policy_test")
	if err != nil {
		t.Fatal(err)
	}
	var fx engine.Fixture
	for _, f := range fixtures {
		if f.Input != nil && f.WantError == nil {
			fx = f
			break
		}
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(fx.Input, &in); err != nil {
		t.Fatal(err)
	}
	var member string
	for k := range in {
		member = k
		break
	}
	eng, err := live.New(context.Background(), engine.Config{Policies: "../policies", Schemas: "../schemas"})
	if err != nil {
		t.Fatal(err)
	}
	c := &Config{UIRecent: 100}
	pg := newPages(c, eng, nil, nil, nil, false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	pipe, err := decisionlog.Open(decisionlog.Options{Mask: []string{"/" + member}, Sinks: []decisionlog.Sink{pg.ring}})
	if err != nil {
		t.Fatal(err)
	}
	rec := decisionlog.Record{DecisionID: "taken", Decision: fx.Decision, Input: fx.Input, Result: json.RawMessage(`{}`)}
	if !pipe.Log(rec) {
		t.Fatal("an empty pipeline refused a record")
	}
	if err := pipe.Close(context.Background()); err != nil { // hands every queued record to the sinks
		t.Fatal(err)
	}
	e, ok := pg.ring.Get(rec.DecisionID)
	if !ok {
		t.Fatal("the ring does not hold a decision the pipeline took")
	}
	var got map[string]json.RawMessage
	_ = json.Unmarshal(e.Record.Input, &got)
	if string(got[member]) != `"`+decisionlog.MaskedValue+`"` || len(e.Record.Masked) == 0 {
		t.Errorf("/%s in the ring is %s, masked %v", member, got[member], e.Record.Masked)
	}
	rec.DecisionID = "refused"
	if pipe.Log(rec) {
		t.Error("a closed pipeline took a record")
	}
	if _, ok := pg.ring.Get(rec.DecisionID); ok {
		t.Error("a record the pipeline refused is in the ring")
	}
	var _ ui.Decider = eng
}

// TestPagesShowTheShadowCandidate: the pages see the shadow's candidate, a
// what-if decided by it is its answer (and is not judged), and the summary
// is the shadow's report; a promotion or shadow outcome record never
// reaches the ring.
func TestPagesShowTheShadowCandidate(t *testing.T) {
	t.Parallel()
	cfg := engine.Config{Policies: "../policies", Schemas: "../schemas"}
	eng, err := live.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cand, err := engine.Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sh := shadow.New(shadow.Config{})
	defer func() { _ = sh.Close(context.Background()) }()
	var _ ui.Shadow = sh // the pages read the shadow itself, no adapter
	c := &Config{UIRecent: 100}
	pg := newPages(c, eng, &shadowing{sh: sh, srv: &server.ShadowConfig{}}, nil, nil, false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	policyPage := func() string {
		rec := httptest.NewRecorder()
		pg.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/policy", nil))
		return rec.Body.String()
	}
	if page := policyPage(); !strings.Contains(page, "No shadow candidate is loaded.") {
		t.Fatalf("the policy page before a candidate is loaded:\n%s", page)
	}
	sh.Set(&shadow.Candidate{Snapshot: cand, Origin: "test"})
	if page := policyPage(); !strings.Contains(page, cand.Revision) || !strings.Contains(page, "0 live decisions decided again by the candidate.") {
		t.Fatalf("the policy page does not show the candidate %s and its empty report:\n%s", cand.Revision, page)
	}

	pg.ring.Write([]decisionlog.Record{
		{DecisionID: "promotion-1", Path: "/v1/shadow/promote", Promotion: json.RawMessage(`{"promoted":true}`)},
		{DecisionID: "outcome-1", Decision: "d", Shadow: &decisionlog.Shadow{Class: "same"}},
	})
	if pg.ring.Len() != 0 {
		t.Error("a promotion or a shadow outcome record is listed among the decisions")
	}
}
