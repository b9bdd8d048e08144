package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/server/ui"
	"github.com/arbiter-dev/arbiter/shadow"
)

// TestPagesBesideTheLog: the ring behind the pages is a sink of the
// decision-record pipeline: it gets every decision the pipeline took,
// masked once for every sink (the first member of a fixture's input here),
// and none it refused.
func TestPagesBesideTheLog(t *testing.T) {
	t.Parallel()
	fixtures, err := engine.LoadFixtures("../../policy_test")
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
	eng, err := engine.New(context.Background(), engine.Config{Policies: "../../policies", Schemas: "../../schemas"})
	if err != nil {
		t.Fatal(err)
	}
	c := parseServe(t, "--decision-log", "")
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
	cfg := engine.Config{Policies: "../../policies", Schemas: "../../schemas"}
	eng, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cand, err := engine.Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sh := shadow.New(shadow.Config{})
	defer func() { _ = sh.Close(context.Background()) }()
	sp := shadowPages{sh: sh}
	if _, ok := sp.Candidate(); ok {
		t.Fatal("a candidate before one is loaded")
	}
	if _, err := sp.DecideCandidate(context.Background(), "x", nil, engine.Options{}); engine.ErrorCode(err) != engine.CodeNotReady {
		t.Fatalf("what-if without a candidate: %v", err)
	}
	sh.Set(&shadow.Candidate{Snapshot: cand, Origin: "test"})
	if rev, ok := sp.Candidate(); !ok || rev != cand.Revision {
		t.Fatalf("candidate %q %v, want %q", rev, ok, cand.Revision)
	}
	fixtures, err := engine.LoadFixtures("../../policy_test")
	if err != nil {
		t.Fatal(err)
	}
	for _, fx := range fixtures {
		if fx.Input == nil || fx.WantResult == nil {
			continue
		}
		d, err := sp.DecideCandidate(context.Background(), fx.Decision, fx.Input, engine.Options{})
		if err != nil || !engine.SameJSON(d.Result, fx.WantResult) {
			t.Fatalf("%s: the candidate answered %v %v", fx.Name, d, err)
		}
		break
	}
	sum, ok := sp.Summary(context.Background())
	if !ok || sum.Report.Total != 0 || len(sum.Report.Classes) == 0 {
		t.Fatalf("summary %+v %v: want the empty report of a loaded candidate", sum, ok)
	}

	c := parseServe(t, "--decision-log", "")
	pg := newPages(c, eng, sp, nil, nil, false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	pg.ring.Write([]decisionlog.Record{
		{DecisionID: "promotion-1", Path: "/v1/shadow/promote", Promotion: json.RawMessage(`{"promoted":true}`)},
		{DecisionID: "outcome-1", Decision: "d", Shadow: &decisionlog.Shadow{Class: "same"}},
	})
	if pg.ring.Len() != 0 {
		t.Error("a promotion or a shadow outcome record is listed among the decisions")
	}
}

// parseServe is serve's config from the command line args.
func parseServe(t *testing.T, args ...string) *serveConfig {
	t.Helper()
	fs := newCommand("serve", "", "", exitError)
	c := registerServe(fs)
	if err := fs.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	if err := c.settle(fs); err != nil {
		t.Fatal(err)
	}
	return c
}
