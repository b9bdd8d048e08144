package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/shadow"
)

// Codes of the shadow routes. Like every code they are API.
const (
	// CodeBadRequest: the body of an administrative request is not what
	// the route takes.
	CodeBadRequest engine.Code = "bad_request"
	// CodeForbidden: the caller may not change what runs (see
	// ShadowConfig.Admins).
	CodeForbidden engine.Code = "forbidden"
	// CodeCandidateRefused: the candidate did not pass the gate (compile,
	// type-check, tests and fixtures); the problems are listed.
	CodeCandidateRefused engine.Code = "candidate_refused"
	// CodeNoCandidate: no candidate is in shadow.
	CodeNoCandidate engine.Code = "no_candidate"
	// CodePromotionRefused: the promotion gate refused (too few judged
	// decisions, or some in a forbidden class), or the candidate in shadow
	// is not the revision named.
	CodePromotionRefused engine.Code = "promotion_refused"
)

// ShadowConfig turns shadow evaluation on: a candidate revision runs
// beside the live one, on decisions sampled after their answer is written,
// and the /v1/shadow routes load, report, clear and promote it.
type ShadowConfig struct {
	Shadow *shadow.Shadow
	// Engine judges candidates through the live revision's gate and
	// promotes them through its one activation path.
	Engine Lifecycle
	// Schemas and Tests stand in for those a ShadowSource leaves empty
	// (cmd gives the live ones).
	Schemas, Tests string
	// Gate is what POST /v1/shadow/promote requires at least: its body may
	// ask for more decisions and forbid more classes, never less; only
	// "force" promotes past a gate that refuses.
	Gate shadow.Gate
	// Bundle, when set, reads a bundle file the server can read (POST
	// /v1/shadow {"bundle": PATH}) as a source of candidates, verified as
	// the server verifies bundles.
	Bundle func(path string) (live.Source, error)
	// Admins are the only callers that may load, clear and promote a
	// candidate. Empty, they fail closed when the API is authenticated
	// (Config.Tokens or Config.ClientCerts): no caller may; only an API
	// without authentication (loopback development) leaves these routes
	// open. GET /v1/shadow stays open to every caller.
	Admins []string
}

// Lifecycle is what the shadow routes need of the engine's lifecycle.
type Lifecycle interface {
	Judge(ctx context.Context, src live.Source) (*engine.Snapshot, error)
	Activate(ctx context.Context, trigger string, src live.Source) (live.ReloadStatus, error)
	Promoted() (live.Promotion, bool)
}

// ShadowSource names the folders of a candidate, or a bundle file.
// Schemas and Tests left empty are ShadowConfig's.
type ShadowSource struct {
	Policies string `json:"policies,omitempty"`
	Schemas  string `json:"schemas,omitempty"`
	Tests    string `json:"tests,omitempty"`
	Bundle   string `json:"bundle,omitempty"`
}

func (s *server) shadowRoutes(r chi.Router) {
	if s.cfg.Shadow == nil {
		return
	}
	r.Get("/v1/shadow", s.shadowStatus)
	r.Post("/v1/shadow", s.shadowLoad)
	r.Delete("/v1/shadow", s.shadowClear)
	r.Post("/v1/shadow/promote", s.shadowPromote)
}

// sample decides, before the answer, whether a candidate decides rec too.
// The ticket's Start, once the answer is written, hands it to the shadow;
// the candidate's outcome, when it has one, is logged as a record of its
// own with the decision's id, after the decision's record (which the log
// never holds back for it).
func (s *server) sample(rec *decisionlog.Record) *shadow.Ticket {
	if s.cfg.Shadow == nil {
		return nil
	}
	id, at, name, path := rec.DecisionID, rec.Time, rec.Decision, rec.Path
	return s.cfg.Shadow.Shadow.Sample(*rec, func(r *shadow.Result) {
		if r != nil { // the candidate's answer, as the decision log keeps it
			s.record(decisionlog.Record{DecisionID: id, Time: at, Decision: name, Path: path, Shadow: &decisionlog.Shadow{
				Revision: r.Candidate.Revision, Class: string(r.Class), Result: r.Candidate.Result, Error: r.Candidate.Error, DurationNS: r.Duration.Nanoseconds(),
			}})
		}
	})
}

// pauseShadow begins a decision request and returns its end: while any
// is in flight, the candidate's evaluations pause.
func (s *server) pauseShadow() (end func()) {
	if s.cfg.Shadow == nil {
		return func() {}
	}
	s.cfg.Shadow.Shadow.LiveStart()
	return s.cfg.Shadow.Shadow.LiveEnd
}

// candidateDoc describes the candidate in shadow.
type candidateDoc struct {
	Revision  string    `json:"policy_revision"`
	Origin    string    `json:"origin"`
	LoadedAt  time.Time `json:"loaded_at"`
	LoadedBy  string    `json:"loaded_by,omitempty"`
	Decisions []string  `json:"decisions"`
}

func describeCandidate(c *shadow.Candidate) *candidateDoc {
	if c == nil {
		return nil
	}
	return &candidateDoc{Revision: c.Snapshot.Revision, Origin: c.Origin, LoadedAt: c.LoadedAt.UTC(), LoadedBy: c.LoadedBy, Decisions: c.Snapshot.Names()}
}

// shadowDoc is GET /v1/shadow.
type shadowDoc struct {
	Candidate    *candidateDoc   `json:"candidate"`
	LiveRevision string          `json:"live_revision,omitempty"`
	Promotion    *live.Promotion `json:"promotion"`
	Sampling     samplingDoc     `json:"sampling"`
	Stats        shadow.Stats    `json:"stats"`
	Gate         shadow.Gate     `json:"gate"`
	// Promotable says whether the default gate would promote the
	// candidate now, and if not why.
	Promotable bool     `json:"promotable"`
	Refusals   []string `json:"refusals"`
	// Progress is the judged decisions toward the gate's minimum
	// ("judged 57 of 100"), "" without a candidate.
	Progress string         `json:"progress,omitempty"`
	Report   *shadow.Report `json:"report"`
	// Diff is the semantic diff of the candidate against the live
	// revision, and Evidence the gate's strongest evidence per class.
	Diff     *diff.Status      `json:"diff"`
	Evidence []shadow.Evidence `json:"evidence"`
}

type samplingDoc struct {
	Rate       float64 `json:"rate"`
	Queue      int     `json:"queue"`
	QueueBytes int64   `json:"queue_bytes"`
	Workers    int     `json:"workers"`
	CPU        float64 `json:"cpu"`
}

func (s *server) shadowStatus(w http.ResponseWriter, _ *http.Request) {
	sc := s.cfg.Shadow
	cfg := sc.Shadow.Config()
	doc := shadowDoc{
		Candidate: describeCandidate(sc.Shadow.Candidate()),
		Sampling:  samplingDoc{Rate: cfg.Rate, Queue: cfg.Queue, QueueBytes: cfg.QueueBytes, Workers: cfg.Workers, CPU: cfg.CPU},
		Stats:     sc.Shadow.Stats(),
		Gate:      sc.Gate,
		Refusals:  []string{},
	}
	if snap := s.eng.Snapshot(); snap != nil {
		doc.LiveRevision = snap.Revision
	}
	if p, ok := sc.Engine.Promoted(); ok {
		doc.Promotion = &p
	}
	if rep, ok := sc.Shadow.Report(); ok {
		// The diff's state first, then the proofs: a diff that ends in
		// between is then shown running with proofs done, never done with
		// the proofs of a running one.
		if s.cfg.Diffs != nil {
			if st, ok := s.cfg.Diffs.Shadow(); ok {
				doc.Diff = &st
			}
		}
		proofs := sc.Shadow.Proofs()
		doc.Report = &rep
		doc.Evidence = rep.Evidence(proofs)
		doc.Progress = shadow.Progress(rep, sc.Gate.MinDecisions)
		doc.Refusals = append(doc.Refusals, sc.Gate.Refusals(rep)...)
		doc.Refusals = append(doc.Refusals, sc.Gate.ProofRefusals(proofs)...)
		doc.Promotable = len(doc.Refusals) == 0
	}
	writeJSON(w, doc)
}

// admin refuses a caller that may not change what runs, and returns who
// is asking: the authenticated caller, or the remote address; then it
// reads the body into body (readAdminBody), unless body is nil. With
// authentication on and no admin named, nobody may: a caller allowed to
// ask for decisions (host preparation's token) must not be able to load a
// folder the server can read and promote it.
func (s *server) admin(w http.ResponseWriter, r *http.Request, body any) (string, bool) {
	caller := callerOf(r.Context())
	authenticated := s.auth != nil || s.cfg.ClientCerts || caller != "" || (r.TLS != nil && len(r.TLS.VerifiedChains) > 0)
	switch admins := s.cfg.Shadow.Admins; {
	case len(admins) == 0 && authenticated:
		writeError(w, &engine.Error{Code: CodeForbidden, Message: "authentication is on and --shadow-admins names no caller: nobody may load, clear or promote candidates until it names who may"}, false, "")
		return "", false
	case len(admins) > 0 && !slices.Contains(admins, caller):
		writeError(w, &engine.Error{Code: CodeForbidden, Message: "this caller may not load, clear or promote candidates (--shadow-admins)"}, false, "")
		return "", false
	}
	if caller == "" {
		caller = "unauthenticated " + r.RemoteAddr
	}
	return caller, body == nil || readAdminBody(w, r, body)
}

// readAdminBody decodes a small JSON body strictly into v; an empty body
// leaves v as it is.
func readAdminBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		writeError(w, &engine.Error{Code: CodeBadRequest, Message: "reading the body: " + err.Error()}, false, "")
		return false
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil || dec.More() {
		if err == nil {
			err = errors.New("trailing data")
		}
		writeError(w, &engine.Error{Code: CodeBadRequest, Message: "the body must be one JSON object of the route's members: " + err.Error()}, false, "")
		return false
	}
	return true
}

// shadowLoad loads a candidate from folders and puts it in shadow. The
// load is not tied to the request's lifetime, as a reload is not.
func (s *server) shadowLoad(w http.ResponseWriter, r *http.Request) {
	var src ShadowSource
	by, ok := s.admin(w, r, &src)
	if !ok {
		return
	}
	sc := s.cfg.Shadow
	var cand live.Source
	var err error
	switch {
	case (src.Policies == "") == (src.Bundle == "") || src.Bundle != "" && (src.Schemas != "" || src.Tests != ""):
		writeError(w, &engine.Error{Code: CodeBadRequest, Message: `either "policies" (a folder the server can read, with "schemas" and "tests") or "bundle" (a bundle file it can read) is required`}, false, "")
		return
	case src.Bundle != "" && sc.Bundle == nil:
		writeError(w, &engine.Error{Code: CodeBadRequest, Message: "this server does not read bundles into shadow"}, false, "")
		return
	case src.Bundle != "":
		cand, err = sc.Bundle(src.Bundle)
	default:
		cand = live.Folders(src.Policies, cmp.Or(src.Schemas, sc.Schemas), cmp.Or(src.Tests, sc.Tests))
	}
	var snap *engine.Snapshot
	if err == nil {
		snap, err = sc.Engine.Judge(context.WithoutCancel(r.Context()), cand)
	}
	if err != nil {
		probs := []engine.Problem{{Message: err.Error()}}
		if le, ok := errors.AsType[*engine.LoadError](err); ok {
			// Told the caller without what the files hold: file and line.
			probs = make([]engine.Problem, len(le.Problems))
			for i, p := range le.Problems {
				probs[i] = p.Unquoted()
			}
			probs = slices.Compact(probs) // a parse error OPA reports twice at a line, now said alike
		}
		s.log.Warn("shadow candidate refused", "by", by, "policies", src.Policies, "bundle", src.Bundle, "problems", len(probs))
		writeErrorWith(w, &engine.Error{Code: CodeCandidateRefused, Message: fmt.Sprintf("the candidate did not pass the gate: %d problem(s)", len(probs))}, "problems", probs)
		return
	}
	c := &shadow.Candidate{Snapshot: snap, Origin: cand.Origin(), LoadedAt: time.Now(), LoadedBy: by}
	sc.Shadow.Set(c)
	s.log.Info("candidate in shadow", "revision", snap.Revision, "origin", c.Origin, "by", by)
	writeJSON(w, struct {
		OK        bool          `json:"ok"`
		Candidate *candidateDoc `json:"candidate"`
	}{true, describeCandidate(c)})
}

func (s *server) shadowClear(w http.ResponseWriter, r *http.Request) {
	by, ok := s.admin(w, r, nil)
	if !ok {
		return
	}
	c := s.cfg.Shadow.Shadow.Clear()
	if c != nil {
		s.log.Info("candidate removed from shadow", "revision", c.Snapshot.Revision, "by", by)
	}
	writeJSON(w, struct {
		Cleared *candidateDoc `json:"cleared"`
	}{describeCandidate(c)})
}

// promoteRequest is the body of POST /v1/shadow/promote; every member is
// optional. MinDecisions and Forbid only tighten the operator's gate.
type promoteRequest struct {
	// Revision is the candidate revision whose impact was read: another
	// candidate in shadow is not promoted.
	Revision     string   `json:"revision"`
	MinDecisions uint64   `json:"min_decisions"` // 0 or absent: the operator's
	Forbid       []string `json:"forbid"`
	Force        bool     `json:"force"`
}

// shadowPromote makes the candidate live when the gate passes (or when
// forced). Every attempt that reached the gate is a record of the
// decision log: who, what, on which evidence, and the outcome.
func (s *server) shadowPromote(w http.ResponseWriter, r *http.Request) {
	var req promoteRequest
	by, ok := s.admin(w, r, &req)
	if !ok {
		return
	}
	// The body may only make the operator's gate stricter; "force" is the
	// one way past a gate that refuses, and it is recorded as forced.
	var forbid []shadow.Class
	for _, f := range req.Forbid {
		c, ok := shadow.ParseClass(f)
		if !ok {
			writeError(w, &engine.Error{Code: CodeBadRequest, Message: fmt.Sprintf("forbid: %q is not a class (%v)", f, shadow.Classes)}, false, "")
			return
		}
		forbid = append(forbid, c)
	}
	gate := s.cfg.Shadow.Gate.Stricter(req.MinDecisions, forbid)
	opts := shadow.PromoteOptions{Revision: req.Revision, Gate: gate, Force: req.Force, By: by}
	p, err := s.cfg.Shadow.Shadow.Promote(context.WithoutCancel(r.Context()), opts, func(ctx context.Context, c *shadow.Candidate, forced bool) (string, error) {
		st, err := s.cfg.Shadow.Engine.Activate(ctx, "promote", live.Promote(c.Snapshot, by, c.Origin, forced))
		if err != nil {
			return "", err
		}
		return st.Promotion.From, nil
	})
	var re *shadow.RevisionError
	switch {
	case errors.Is(err, shadow.ErrNoCandidate):
		writeError(w, &engine.Error{Code: CodeNoCandidate, Message: "no candidate is in shadow (POST /v1/shadow loads one)"}, false, "")
		return
	case errors.As(err, &re):
		writeError(w, &engine.Error{Code: CodePromotionRefused, Message: re.Error()}, false, "")
		return
	}
	s.logPromotion(r, p)
	switch {
	case errors.Is(err, shadow.ErrRefused):
		s.log.Warn("promotion refused by the gate", "revision", p.Revision, "by", by, "refusals", len(p.Refusals))
		writeErrorWith(w, &engine.Error{Code: CodePromotionRefused, Message: "the promotion gate refused the candidate: " + p.Refusals[0]}, "promotion", p)
	case err != nil:
		s.log.Error("promotion failed", "revision", p.Revision, "by", by, "err", err)
		writeError(w, &engine.Error{Code: engine.CodePolicyError, Message: "the candidate could not be made live", Err: err}, false, "")
	default:
		s.log.Info("candidate promoted", "revision", p.Revision, "from", p.From, "by", by, "forced", p.Forced, "judged", p.Report.Total)
		writeJSON(w, struct {
			Promotion shadow.Promotion `json:"promotion"`
		}{p})
	}
}

// logPromotion writes the record of a promotion attempt to the decision
// log: a record of its own, with no decision.
func (s *server) logPromotion(r *http.Request, p shadow.Promotion) {
	if s.cfg.DecisionLog == nil {
		return
	}
	doc, err := json.Marshal(p)
	if err != nil {
		return
	}
	rev := p.Revision
	if !p.Promoted {
		rev = p.From
		if snap := s.eng.Snapshot(); snap != nil {
			rev = snap.Revision
		}
	}
	if !s.cfg.DecisionLog.Log(decisionlog.Record{DecisionID: uuid.NewString(), Time: p.At, Revision: rev, Path: r.URL.Path, Caller: p.By, Promotion: doc}) {
		s.log.Error("the decision log refused the promotion record", "revision", p.Revision, "by", p.By, "promoted", p.Promoted)
	}
}

// writeErrorWith is writeError with one more member beside the error
// document: the problems of a refused candidate, the record of a refused
// promotion.
func writeErrorWith(w http.ResponseWriter, e *engine.Error, name string, v any) {
	body, err := json.Marshal(map[string]any{"error": e.Document().Error, name: v})
	if err != nil {
		writeError(w, e, false, "")
		return
	}
	writeBody(w, statusFor(e.Code), body)
}
