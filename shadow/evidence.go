package shadow

import (
	"fmt"
	"slices"

	"github.com/arbiter-dev/arbiter/engine"
)

// Proved are the classes the semantic diff (package diff) answers, in
// report order: for each, whether any input the schemas admit falls in it
// (candidate_error: the live revision decides and the candidate fails).
var Proved = []Class{RefuseToAllow, CandidateError, AllowToRefuse, ReasonsChanged}

// The verdicts of a Proof: the diff's own three, and two for a diff that
// has not answered.
const (
	VerdictNone    = "none"    // proved: no input falls in the class, within the diff's bounds
	VerdictFound   = "found"   // an input falls in it, confirmed by deciding it
	VerdictUnknown = "unknown" // no proof, and no example
	VerdictRunning = "running" // the diff against the live revision has not finished
	VerdictAbsent  = "absent"  // no diff: none runs here, it failed, or it ran against another live revision
)

// Proof is what the diff of a candidate against the live revision says of
// one class, all decisions together.
type Proof struct {
	Verdict string `json:"verdict"`
	// Decision (found, unknown) is the first decision with that verdict.
	Decision string `json:"decision,omitempty"`
	// Reason says why it is unknown or absent, or what was found.
	Reason string `json:"reason,omitempty"`
}

// Proofs are a Proof per class of Proved.
type Proofs map[Class]Proof

// Prover proves candidates against the live revision, off the request
// path (package diff's Runner).
type Prover interface {
	// Candidate is told of each candidate put in shadow (nil: none any
	// more); it must not block.
	Candidate(*engine.Snapshot)
	// Proofs is what is known now of cand against the live revision.
	Proofs(cand *engine.Snapshot) Proofs
}

// The evidence a gate states for a class, strongest first.
const (
	EvidenceFound    = "found"    // the diff found an input in the class
	EvidenceProved   = "proved"   // the diff proved there is none
	EvidenceReplayed = "replayed" // logged decisions judged from the decision log
	EvidenceShadowed = "shadowed" // live decisions judged as they happened
	EvidenceNone     = "none"     // nothing judged, nothing proved
)

// Evidence is the strongest evidence the promotion gate has about one
// class of Proved: a decision judged in the class outranks every proof (the
// diff's bounds did not cover it), an example the diff found outranks a
// count of none, a proof outranks any count of decisions without one.
// Replayed and Shadowed say how many decisions were judged, Count how many
// of them fell in the class.
type Evidence struct {
	Class    Class  `json:"class"`
	Evidence string `json:"evidence"`
	Summary  string `json:"summary"`
	Count    uint64 `json:"count"`
	Replayed uint64 `json:"replayed"`
	Shadowed uint64 `json:"shadowed"`
	Diff     Proof  `json:"diff"`
}

// Evidence states, per class of Proved, the strongest evidence r and p
// give.
func (r Report) Evidence(p Proofs) []Evidence {
	out := make([]Evidence, 0, len(Proved))
	for _, c := range Proved {
		e := Evidence{Class: c, Count: r.Count(c), Replayed: r.LaterJudged, Shadowed: r.Total - r.LaterJudged, Diff: p.of(c)}
		judged := EvidenceShadowed // live decisions judged as they happened, unless all came from the log
		if e.Shadowed == 0 && e.Replayed > 0 {
			judged = EvidenceReplayed
		}
		switch {
		case e.Count > 0:
			e.Evidence, e.Summary = judged, fmt.Sprintf("%d of %d judged decisions are %s", e.Count, r.Total, c)
		case e.Diff.Verdict == VerdictFound:
			e.Evidence, e.Summary = EvidenceFound, fmt.Sprintf("the diff found an input of decision %s that is %s", e.Diff.Decision, c)
		case e.Diff.Verdict == VerdictNone:
			e.Evidence, e.Summary = EvidenceProved, "the diff proved that no schema-valid input is "+string(c)+", "+e.Diff.Reason
		case r.Total > 0:
			e.Evidence, e.Summary = judged, fmt.Sprintf("none of %d judged decisions (%d live, %d replayed from the decision log) is %s; the diff: %s", r.Total, e.Shadowed, e.Replayed, c, e.Diff.Verdict)
		default:
			e.Evidence, e.Summary = EvidenceNone, "no decision judged and no proof; the diff: "+e.Diff.Verdict
		}
		out = append(out, e)
	}
	return out
}

func (p Proofs) of(c Class) Proof {
	if pr, ok := p[c]; ok {
		return pr
	}
	return Proof{Verdict: VerdictAbsent, Reason: "no diff runs in this server"}
}

// ProofRefusals returns why p does not pass g: an input the diff found in
// a forbidden class refuses, as a decision judged in it does; a diff still
// running refuses while it may still find one (promote again when it has
// answered: GET /v1/shadow shows it). An unknown or absent answer refuses
// nothing: the judged decisions are then the evidence, as before the diff.
func (g Gate) ProofRefusals(p Proofs) []string {
	var out []string
	running := false
	for _, c := range Proved {
		if !slices.Contains(g.Forbidden, c) {
			continue
		}
		switch pr := p.of(c); pr.Verdict {
		case VerdictFound:
			out = append(out, fmt.Sprintf("the diff against the live revision found an input of decision %s that is %s (forbidden): %s", pr.Decision, c, pr.Reason))
		case VerdictRunning:
			running = true
		}
	}
	if running {
		out = append(out, "the diff of the candidate against the live revision is still running: promote again when GET /v1/shadow shows its verdicts")
	}
	return out
}
