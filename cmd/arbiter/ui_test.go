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

type takingLog struct {
	took bool
	n    int
}

func (l *takingLog) Log(decisionlog.Record) bool { l.n++; return l.took }

// TestPagesBesideTheLog: the ring behind the pages gets every answered
// decision, masked as the decision log masks it (the first member of a
// fixture's input here), and the log's answer is the answer; with
// --decision-log-full refuse, a decision the log refused was not answered
// and the ring leaves it out.
func TestPagesBesideTheLog(t *testing.T) {
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
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, full := range []string{"drop", "refuse"} {
		c, done, code := parseServe([]string{"--decision-log", "", "--decision-log-mask", "/" + member, "--decision-log-full", full}, io.Discard, io.Discard)
		if done {
			t.Fatalf("parseServe: exit %d", code)
		}
		pg, err := newPages(c, eng, nil, false, log)
		if err != nil {
			t.Fatal(err)
		}
		local := &takingLog{took: true}
		sink := pg.beside(local)
		rec := decisionlog.Record{DecisionID: "taken-" + full, Decision: fx.Decision, Input: fx.Input}
		if !sink.Log(rec) || local.n != 1 {
			t.Fatalf("%s: the log's answer is lost", full)
		}
		e, ok := pg.ring.Get(rec.DecisionID)
		if !ok {
			t.Fatalf("%s: the ring does not hold an answered decision", full)
		}
		var got map[string]json.RawMessage
		_ = json.Unmarshal(e.Record.Input, &got)
		if string(got[member]) != `"`+decisionlog.MaskedValue+`"` || len(e.Record.Masked) == 0 {
			t.Errorf("%s: /%s in the ring is %s, masked %v", full, member, got[member], e.Record.Masked)
		}
		local.took = false
		rec.DecisionID = "refused-" + full
		if sink.Log(rec) {
			t.Errorf("%s: a refused record reported taken", full)
		}
		if _, ok := pg.ring.Get(rec.DecisionID); ok != (full == "drop") {
			t.Errorf("--decision-log-full %s: a record the log refused is in the ring: %v", full, ok)
		}
	}
	var _ ui.Decider = eng
}

// TestPagesShowTheShadowCandidate: the pages see the shadow's candidate, a
// what-if decided by it is its answer (and is not judged), and the summary
// is the shadow's report; a promotion record never reaches the ring.
func TestPagesShowTheShadowCandidate(t *testing.T) {
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
	sp := shadowPages{sh}
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
	if !ok || sum.Total != 0 || len(sum.Classes) == 0 {
		t.Fatalf("summary %+v %v: want the empty report of a loaded candidate", sum, ok)
	}

	c, done, code := parseServe([]string{"--decision-log", ""}, io.Discard, io.Discard)
	if done {
		t.Fatalf("parseServe: exit %d", code)
	}
	pg, err := newPages(c, eng, sp, false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	sink := pg.beside(&takingLog{took: true})
	sink.Log(decisionlog.Record{DecisionID: "promotion-1", Path: "/v1/shadow/promote", Promotion: json.RawMessage(`{"promoted":true}`)})
	if _, ok := pg.ring.Get("promotion-1"); ok {
		t.Error("a promotion record is listed among the decisions")
	}
}
