package shadow_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/golden"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/shadow"
)

// quota copies the quota test decision (engine/testdata/quota), whose
// result schema is told that allow: true allows, and loads it; edit, when
// set, changes its data first.
func quota(t *testing.T, edit func(t *testing.T, root string)) *engine.Snapshot {
	t.Helper()
	root := filepath.Join(t.TempDir(), "quota")
	if err := os.CopyFS(root, os.DirFS("../engine/testdata/quota")); err != nil {
		t.Fatal(err)
	}
	testfiles.Edit(t, filepath.Join(root, "schemas", "quota_check", "result.json"), `"x-arbiter-outcome": "allow",`, `"x-arbiter-outcome": "allow", "x-arbiter-allow": [true],`)
	if edit != nil {
		edit(t, root)
	}
	snap, err := engine.Load(context.Background(), engine.Config{Policies: filepath.Join(root, "policies"), Schemas: filepath.Join(root, "schemas"), Tests: filepath.Join(root, "tests")})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func raisedLimit(t *testing.T, root string) {
	testfiles.Edit(t, filepath.Join(root, "policies", "decisions", "quota_check", "data.json"), `"limit": 10`, `"limit": 11`)
}

// waitProved waits until the runner has answered for the candidate.
func waitProved(t *testing.T, sh *shadow.Shadow) shadow.Proofs {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		p := sh.Proofs()
		if p[shadow.RefuseToAllow].Verdict != shadow.VerdictRunning {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the diff did not answer within a minute: %+v", p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The promotion gate states, per class the diff answers, the strongest
// evidence it has: a raised limit is refused on the diff's example alone,
// with no decision judged at all (the gate asks for none here), and stays
// refused unless forced; a candidate the diff proves changes nothing is
// promoted on the proof. The evidence of both is golden.
func TestPromotionGateStatesItsEvidence(t *testing.T) {
	live := quota(t, nil)
	runner := diff.NewRunner(time.Minute, nil, nil)
	defer runner.Close()
	runner.Activated(live)
	sh := shadow.New(shadow.Config{Prover: runner})
	defer func() { _ = sh.Close(context.Background()) }()
	gate := shadow.Gate{Forbidden: shadow.DefaultForbidden}
	activate := func(context.Context, *shadow.Candidate, bool) (string, error) { return live.Revision, nil }

	sh.Set(&shadow.Candidate{Snapshot: quota(t, raisedLimit), Origin: "raised"})
	if p := waitProved(t, sh); p[shadow.RefuseToAllow].Verdict != shadow.VerdictFound {
		t.Fatalf("the diff of a raised limit: %+v, want refuse_to_allow found", p)
	}
	p, err := sh.Promote(context.Background(), shadow.PromoteOptions{Gate: gate}, activate)
	if !errors.Is(err, shadow.ErrRefused) || p.Promoted || p.Report.Total != 0 {
		t.Fatalf("a found loosening with no decision judged: %v, %+v; want refused", err, p)
	}
	refused, _ := json.MarshalIndent(struct {
		Refusals []string          `json:"refusals"`
		Evidence []shadow.Evidence `json:"evidence"`
	}{p.Refusals, p.Evidence}, "", "  ")
	golden.Check(t, "testdata/evidence/found.json", refused)

	p, err = sh.Promote(context.Background(), shadow.PromoteOptions{Gate: gate, Force: true}, activate)
	if err != nil || !p.Promoted || !p.Forced || len(p.Refusals) == 0 || p.Evidence[0].Evidence != shadow.EvidenceFound {
		t.Fatalf("a forced promotion: %v, %+v; want promoted, forced, with the refusals and the evidence", err, p)
	}

	sh.Set(&shadow.Candidate{Snapshot: quota(t, nil), Origin: "unchanged"})
	waitProved(t, sh)
	p, err = sh.Promote(context.Background(), shadow.PromoteOptions{Gate: gate}, activate)
	if err != nil || !p.Promoted || p.Forced {
		t.Fatalf("a candidate proved to change nothing: %v, %+v; want promoted", err, p)
	}
	proved, _ := json.MarshalIndent(p.Evidence, "", "  ")
	golden.Check(t, "testdata/evidence/proved.json", proved)
}

// What each kind of evidence says, and which refuses: a decision judged in
// a class outranks the diff, an example outranks a count of none, a proof
// any count of decisions; a found or running diff refuses in a forbidden
// class only, and unknown or absent refuses nothing.
func TestEvidenceAndProofRefusals(t *testing.T) {
	tally := shadow.NewTally(1)
	tally.Add("d", shadow.Same, "a")
	tally.Add("d", shadow.AllowToRefuse, "b")
	judged := tally.Report()
	gate := shadow.Gate{Forbidden: shadow.DefaultForbidden}
	for _, tc := range []struct {
		name     string
		rep      shadow.Report
		proofs   shadow.Proofs
		evidence []string // per class of shadow.Proved
		refuses  bool
	}{
		{"no diff, nothing judged", shadow.Report{}, nil, []string{"none", "none", "none", "none"}, false},
		{"no diff, judged", judged, nil, []string{"shadowed", "shadowed", "shadowed", "shadowed"}, false},
		{"proved", judged, all(shadow.VerdictNone), []string{"proved", "proved", "shadowed", "proved"}, false},
		{"found", shadow.Report{}, all(shadow.VerdictFound), []string{"found", "found", "found", "found"}, true},
		{"running", judged, all(shadow.VerdictRunning), []string{"shadowed", "shadowed", "shadowed", "shadowed"}, true},
		{"unknown", judged, all(shadow.VerdictUnknown), []string{"shadowed", "shadowed", "shadowed", "shadowed"}, false},
		{"found where allowed", judged, shadow.Proofs{shadow.RefuseToAllow: {Verdict: shadow.VerdictNone}, shadow.AllowToRefuse: {Verdict: shadow.VerdictFound}}, []string{"proved", "shadowed", "shadowed", "shadowed"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := tc.rep.Evidence(tc.proofs)
			for i, e := range ev {
				if e.Class != shadow.Proved[i] || e.Evidence != tc.evidence[i] {
					t.Errorf("%s: evidence %q (%s), want %q", shadow.Proved[i], e.Evidence, e.Summary, tc.evidence[i])
				}
			}
			if got := gate.ProofRefusals(tc.proofs); (len(got) > 0) != tc.refuses {
				t.Errorf("refusals %q, want refused: %v", got, tc.refuses)
			}
		})
	}
}

func all(verdict string) shadow.Proofs {
	out := shadow.Proofs{}
	for _, c := range shadow.Proved {
		out[c] = shadow.Proof{Verdict: verdict, Decision: "d"}
	}
	return out
}
