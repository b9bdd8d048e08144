package server

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/jsonenc"
)

// DecisionIDHeader carries the decision id of every answer of the decision
// endpoints, errors included, so a caller can find the log record.
const DecisionIDHeader = "X-Arbiter-Decision-Id"

// decide serves POST /v1/decisions/{name} (wrapped=false) and OPA's Data API
// path POST /v1/data/decisions/{name}/decision (wrapped=true). Both run the
// same validation and evaluation; only the response shape differs. OPA's
// query parameters (pretty, metrics, provenance, ...) are accepted and
// ignored; explain=true adds the explanation.
//
// One deadline (Config.RequestTimeout) covers the whole request from its
// start: reading the body, decoding, validation and evaluation.
func (s *server) decide(wrapped bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		defer s.pauseShadow()() // a candidate in shadow pauses meanwhile (shadow.go)
		q := &query{w: w, r: r, start: time.Now(), name: chi.URLParam(r, "name"), wrapped: wrapped}
		ctx := s.startSpan(r.Context(), q)
		// Never zero (newServer's default); the body's read deadline is paceBodies'.
		ctx, cancel := context.WithDeadline(ctx, q.start.Add(s.cfg.RequestTimeout))
		defer cancel()
		// What can be answered without the body is answered before it is
		// read: a request for a decision that does not exist costs nothing.
		// The Snapshot looked at here is the one that decides.
		snap, perr := s.precheck(r, q.name)
		if perr != nil {
			s.answerError(q, nil, perr)
			return
		}
		t := &ticket{a: s.adm}
		defer t.release()
		// The body is read into a buffer of its own, which the answer's
		// record, the self-check and shadow then share: nothing writes to
		// it after the read, so none of them copies it.
		body, err := s.readBody(w, r, t)
		var d *engine.Decision
		if err == nil {
			explain, _ := strconv.ParseBool(r.URL.Query().Get("explain"))
			d, err = s.safeDecide(ctx, q.name, body, engine.Options{
				Explain: explain, DataAPIBody: wrapped, Snapshot: snap,
				Admit: func(n int) error { // the body's values, counted by the engine's one pass
					switch {
					case t.values+int64(n) > s.cfg.MaxInputValues:
						return &engine.Error{Code: engine.CodeBodyTooLarge, Message: fmt.Sprintf("the request body holds more than %d JSON values", s.cfg.MaxInputValues)}
					case !t.takeValues(int64(n)):
						return s.overloaded()
					}
					return nil
				},
			})
		}
		if err != nil {
			s.answerError(q, body, engine.AsError(err))
			return
		}

		elapsed := time.Since(q.start)
		rec := decisionlog.Record{
			DecisionID: d.ID, Time: q.start.UTC(), Decision: d.Name, Revision: d.Revision,
			Path: r.URL.Path, Input: d.Input, InputOneLine: d.InputOneLine, Result: d.Result,
			DurationNS: elapsed.Nanoseconds(), Caller: callerOf(r.Context()),
			Summarized: true, Outcome: d.Outcome, Reasons: d.Reasons, // as the pages and the store would read them
		}
		s.endSpan(q, &rec, cmp.Or(d.Outcome, noOutcome), "")
		defer s.sample(&rec).Start() // the candidate, if any, decides after the answer (shadow.go)
		if logged := s.record(rec); !logged && s.cfg.RefuseUnlogged {
			// No decision is answered without its record queued.
			s.answerError(q, nil, &engine.Error{Code: CodeOverloaded, Message: "the decision log cannot keep up; the decision was not answered"})
			return
		}
		s.metrics.observeDecision(d, elapsed)
		out, err := encodeDecision(d, wrapped)
		if err != nil { // only the explanation is encoded by reflection
			s.writeError(q, d.ID, engine.AsError(err))
			return
		}
		w.Header().Set(DecisionIDHeader, d.ID)
		writeBody(w, http.StatusOK, out)
	}
}

// query is one decision request being answered.
type query struct {
	w       http.ResponseWriter
	r       *http.Request
	start   time.Time
	name    string
	wrapped bool
	span    trace.Span        // nil when tracing is off (tracing.go)
	caller  trace.SpanContext // the caller's traceparent when tracing is off; invalid without one
}

// precheck refuses what needs no body to refuse: a media type or encoding
// the server does not read, a Content-Length over the limit, no policies
// loaded, or a decision that does not exist. It returns the active
// Snapshot, loaded once for the request.
func (s *server) precheck(r *http.Request, name string) (*engine.Snapshot, *engine.Error) {
	if err := checkMediaType(r.Header.Get("Content-Type")); err != nil {
		return nil, err
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil, &engine.Error{Code: engine.CodeUnsupportedMediaType, Message: "the request body must not be encoded (Content-Encoding " + ce + ")"}
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return nil, s.tooLarge()
	}
	snap := s.eng.Snapshot()
	if snap == nil {
		return nil, &engine.Error{Code: engine.CodeNotReady, Message: "no policy snapshot is loaded yet"}
	}
	if !s.eng.Has(name) {
		// The name is the caller's, as long as a path may be: quoted bounded.
		return nil, &engine.Error{Code: engine.CodeUnknownDecision, Message: fmt.Sprintf("no decision named %q; %s", decisionlog.BoundName(name), knownDecisions(snap.Names()))}
	}
	return snap, nil
}

// knownDecisions says which decisions there are, the first
// maxListedDecisions of them: an unknown name is most often a typo.
func knownDecisions(names []string) string {
	switch {
	case len(names) == 0:
		return "none is loaded"
	case len(names) > maxListedDecisions:
		return fmt.Sprintf("the decisions are %s and %d more", strings.Join(names[:maxListedDecisions], ", "), len(names)-maxListedDecisions)
	}
	return "the decisions are " + strings.Join(names, ", ")
}

const maxListedDecisions = 20

func (s *server) tooLarge() *engine.Error {
	return &engine.Error{Code: engine.CodeBodyTooLarge, Message: fmt.Sprintf("the request body exceeds %d bytes", s.cfg.MaxBodyBytes)}
}

// Failed requests log their body whole only when it is small; a larger one
// is logged as its size, its sha256 and a prefix, so that a flood of large
// garbage can neither fill the log nor pin memory in its queue.
const (
	maxLoggedBody   = 64 << 10
	loggedPrefixLen = 1 << 10
)

// answerError answers a decision request that has no decision: it is logged,
// counted and answered with the error document. body is what was read of
// the request, nil when nothing was.
func (s *server) answerError(q *query, body []byte, e *engine.Error) {
	elapsed := time.Since(q.start)
	id := uuid.NewString()
	rec := decisionlog.Record{
		DecisionID: id, Time: q.start.UTC(), Decision: q.name, Path: q.r.URL.Path,
		Error:      &decisionlog.RecordError{Code: string(e.Code), Message: e.Message},
		DurationNS: elapsed.Nanoseconds(), Caller: callerOf(q.r.Context()),
	}
	for _, v := range e.Violations {
		rec.Error.Violations = append(rec.Error.Violations, decisionlog.Violation(v))
	}
	if snap := s.eng.Snapshot(); snap != nil {
		rec.Revision = snap.Revision
	}
	describeBody(&rec, body, e.Code)
	s.endSpan(q, &rec, "error", string(e.Code))
	defer s.sample(&rec).Start() // the candidate, if any, decides after the answer (shadow.go)
	s.record(rec)
	s.metrics.observeError(q.name, e.Code, elapsed)

	level := slog.LevelDebug
	if statusFor(e.Code) >= http.StatusInternalServerError {
		level = slog.LevelWarn
	}
	if s.log.Enabled(q.r.Context(), level) {
		attrs := []any{"decision_id", id, "decision", q.name, "code", e.Code, "message", e.Message}
		if e.Err != nil {
			attrs = append(attrs, "err", e.Err.Error())
		}
		s.log.Log(q.r.Context(), level, "decision request failed", attrs...)
	}
	s.writeError(q, id, e)
}

// describeBody puts what the log keeps of a failed request's body in rec.
// A body that was not read whole (cut off, over a limit, refused by
// admission) is not what the caller sent: only its size is kept.
func describeBody(rec *decisionlog.Record, body []byte, code engine.Code) {
	switch {
	case len(body) == 0:
	case code == engine.CodeBodyTooLarge || code == CodeRequestTimeout || code == CodeOverloaded:
		rec.BodySize = int64(len(body))
	case len(body) <= maxLoggedBody:
		if json.Valid(body) {
			rec.Input = bytes.Clone(body)
		} else {
			rec.BodyBase64 = base64.StdEncoding.EncodeToString(body)
		}
	default:
		sum := sha256.Sum256(body)
		rec.BodySize = int64(len(body))
		rec.BodySHA256 = hex.EncodeToString(sum[:])
		rec.BodyPrefix = base64.StdEncoding.EncodeToString(body[:loggedPrefixLen])
	}
}

// record hands rec to the decision log and reports whether it was queued.
func (s *server) record(rec decisionlog.Record) bool {
	if s.cfg.DecisionLog == nil {
		return true
	}
	return s.cfg.DecisionLog.Log(rec)
}

// safeDecide calls the engine and fails closed: a panic, a non-engine
// error or an empty decision becomes a policy_error, never an answer.
func (s *server) safeDecide(ctx context.Context, name string, body []byte, opts engine.Options) (d *engine.Decision, err error) {
	defer func() {
		if rec := recover(); rec != nil {
			d, err = nil, &engine.Error{Code: engine.CodePolicyError, Message: "internal error while deciding", Err: fmt.Errorf("panic: %v", rec)}
		}
	}()
	d, err = s.eng.Decide(ctx, name, body, opts)
	if err != nil {
		return nil, engine.AsError(err)
	}
	if d == nil || len(d.Result) == 0 {
		return nil, &engine.Error{Code: engine.CodePolicyError, Message: "the engine returned no result"}
	}
	return d, nil
}

// readChunk is how much of a body is read, counted and admitted at a time.
const readChunk = 64 << 10

// readBody reads a request body once, taking its bytes from the admission
// budget as they arrive (its JSON values are taken by the engine's one
// pass over it: Options.Admit). It stops early at the size limit
// (body_too_large), when the budget is spent (overloaded), and when the
// client is gone or the read deadline passes (request_timeout). It returns
// what was read in every case.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, t *ticket) ([]byte, error) {
	var buf []byte
	if r.ContentLength > 0 {
		if !t.takeBytes(r.ContentLength) {
			return nil, s.overloaded()
		}
		// Sized once and not cleared first (the read fills it): net/http
		// ends the body at its Content-Length, so it never grows. The
		// spare byte is where a reader that says EOF only after the last
		// byte (a handler called directly) says it.
		buf = make([]byte, 0, r.ContentLength+1)
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	for {
		if len(buf) == cap(buf) { // a body of unknown length: the buffer doubles
			buf = append(make([]byte, 0, max(readChunk, 2*len(buf))), buf...)
		}
		n, err := body.Read(buf[len(buf):min(cap(buf), len(buf)+readChunk)])
		buf = buf[:len(buf)+n]
		if n > 0 && int64(len(buf)) > t.bytes && !t.takeBytes(int64(len(buf))-t.bytes) {
			return buf, s.overloaded()
		}
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				return buf, s.tooLarge()
			}
			return buf, &engine.Error{Code: CodeRequestTimeout, Message: "the request body was not fully received (read deadline passed or client gone)", Err: err}
		}
	}
}

func (s *server) overloaded() *engine.Error {
	return &engine.Error{Code: CodeOverloaded, Message: "too many bytes or JSON values in flight; retry later"}
}

// checkMediaType accepts application/json, with no charset or UTF-8 (the
// only encoding the contract allows), and a missing Content-Type.
func checkMediaType(ct string) *engine.Error {
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return &engine.Error{Code: engine.CodeUnsupportedMediaType, Message: "the request body must be application/json (UTF-8)"}
}

// encodeDecision writes the answer of a decision by hand: the result is
// already JSON, so only the few strings around it need encoding.
//
//	plain:   {"decision_id":..,"decision":..,"policy_revision":..,"result":..[,"explanation":..]}
//	wrapped: {"result":..,"decision_id":..[,"explanation":..]} (OPA's Data API)
func encodeDecision(d *engine.Decision, wrapped bool) ([]byte, error) {
	var expl []byte
	if len(d.Explanation) > 0 {
		var err error
		if expl, err = json.Marshal(d.Explanation); err != nil {
			return nil, &engine.Error{Code: engine.CodePolicyError, Message: "encoding the explanation failed", Err: err}
		}
	}
	b := make([]byte, 0, 128+len(d.Name)+len(d.Revision)+len(d.Result)+len(expl))
	if wrapped {
		b = append(b, `{"result":`...)
		b = append(b, d.Result...)
		b = append(b, `,"decision_id":`...)
		b = jsonenc.AppendString(b, d.ID)
	} else {
		b = append(b, `{"decision_id":`...)
		b = jsonenc.AppendString(b, d.ID)
		b = append(b, `,"decision":`...)
		b = jsonenc.AppendString(b, d.Name)
		b = append(b, `,"policy_revision":`...)
		b = jsonenc.AppendString(b, d.Revision)
		b = append(b, `,"result":`...)
		b = append(b, d.Result...)
	}
	if expl != nil {
		b = append(b, `,"explanation":`...)
		b = append(b, expl...)
	}
	return append(b, '}'), nil
}

// health answers 200 while the process runs (HEAD too). With ?bundles
// (OPA's readiness check) it answers 200 only once a revision is loaded,
// and while the bundle's polls are not stuck.
func (s *server) health(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("bundles") {
		if err := s.bundlesReady(); err != nil {
			writeError(w, err, false, "")
			return
		}
	}
	writeBody(w, http.StatusOK, []byte(`{"status":"ok"}`)) // net/http sends no body for HEAD
}

// live is GET /health/live, OPA's liveness path: 200 while the process
// serves, stopping included (a restart would not help a replica that is
// draining).
func (s *server) live(w http.ResponseWriter, _ *http.Request) {
	writeBody(w, http.StatusOK, []byte(`{"status":"ok"}`))
}

// ready is GET /health/ready, OPA's readiness path: 200 only while a
// gated revision is live, the bundle's polls are not stuck, the decision
// sinks are not dropping records and the server is not stopping; else 503
// not_ready naming the first reason.
func (s *server) ready(w http.ResponseWriter, _ *http.Request) {
	err := s.bundlesReady()
	if err == nil && s.cfg.Stopping != nil {
		select {
		case <-s.cfg.Stopping:
			err = &engine.Error{Code: engine.CodeNotReady, Message: "stopping: finishing requests in flight"}
		default:
		}
	}
	if err == nil && s.cfg.Dropping != nil {
		if why := s.cfg.Dropping(); why != nil {
			err = &engine.Error{Code: engine.CodeNotReady, Message: why.Error()}
		}
	}
	if err != nil {
		writeError(w, err, false, "")
		return
	}
	writeBody(w, http.StatusOK, []byte(`{"status":"ok"}`))
}

// bundlesReady is nil once a revision is live and while the bundle's polls
// are not stuck.
func (s *server) bundlesReady() *engine.Error {
	if s.eng.Snapshot() == nil {
		msg := "no policy revision is loaded yet"
		if s.cfg.Unloaded != nil {
			if why := s.cfg.Unloaded(); why != nil {
				msg += ": " + why.Error()
			}
		}
		return &engine.Error{Code: engine.CodeNotReady, Message: msg}
	}
	if s.cfg.BundleStuck != nil {
		if err := s.cfg.BundleStuck(); err != nil {
			return &engine.Error{Code: engine.CodeNotReady, Message: err.Error()}
		}
	}
	return nil
}

func (s *server) listDecisions(w http.ResponseWriter, _ *http.Request) {
	snap := s.eng.Snapshot()
	if snap == nil {
		writeError(w, &engine.Error{Code: engine.CodeNotReady, Message: "no policy snapshot is loaded yet"}, false, "")
		return
	}
	writeJSON(w, struct {
		Decisions []engine.DecisionInfo `json:"decisions"`
		Revision  string                `json:"policy_revision"`
	}{snap.Decisions(), snap.Revision})
}

// statusDoc is the answer of GET /v1/status.
type statusDoc struct {
	Version    string               `json:"version,omitempty"` // of the binary
	Revision   string               `json:"policy_revision"`
	Origin     string               `json:"policy_origin,omitempty"` // where the live revision came from
	LoadedAt   *time.Time           `json:"loaded_at,omitempty"`
	Files      []string             `json:"files"`
	Skipped    []engine.SkippedFile `json:"skipped_files,omitempty"`
	Decisions  []string             `json:"decisions"`
	LastReload live.ReloadStatus    `json:"last_reload"`
	// Reload is "in progress" while a reload runs, "idle" otherwise; the
	// status never waits for a reload.
	Reload        string               `json:"reload"`
	ReloadRunning *live.ReloadProgress `json:"reload_in_progress,omitempty"`
	Bundles       any                  `json:"bundles,omitempty"`
	Store         any                  `json:"store,omitempty"` // the decision store's account
	Memory        any                  `json:"memory,omitempty"`
	StartedAt     time.Time            `json:"started_at"`
	UptimeSeconds float64              `json:"uptime_seconds"`
	// Compiled says which decisions run compiled, and why the others not.
	Compiled []engine.CompiledInfo `json:"compiled"`
	// Diff is the semantic diff of the live revision against the one it
	// replaced (running, or done with its verdicts), when there is one.
	Diff *diff.Status `json:"diff,omitempty"`
}

func (s *server) status(w http.ResponseWriter, _ *http.Request) {
	doc := statusDoc{
		Version: s.cfg.Version, Files: []string{}, Decisions: []string{},
		LastReload:    s.eng.LastReload(),
		Reload:        "idle",
		StartedAt:     s.started.UTC(),
		UptimeSeconds: time.Since(s.started).Seconds(),
	}
	if p, ok := s.eng.ReloadInProgress(); ok {
		doc.Reload, doc.ReloadRunning = "in progress", &p
	}
	if s.cfg.BundleStatus != nil {
		doc.Bundles = s.cfg.BundleStatus()
	}
	if s.cfg.StoreStatus != nil {
		doc.Store = s.cfg.StoreStatus()
	}
	doc.Memory = s.cfg.Memory
	if s.cfg.Diffs != nil {
		if st, ok := s.cfg.Diffs.Live(); ok {
			doc.Diff = &st
		}
	}
	if snap := s.eng.Snapshot(); snap != nil {
		loaded := snap.LoadedAt.UTC()
		doc.Revision, doc.Origin, doc.LoadedAt = snap.Revision, snap.Origin, &loaded
		if snap.Files != nil {
			doc.Files = snap.Files
		}
		doc.Skipped = snap.Skipped
		if names := snap.Names(); names != nil {
			doc.Decisions = names
		}
		doc.Compiled = snap.Compiled()
	}
	writeJSON(w, doc)
}

// reloads answers the reload attempts the engine remembers, newest first:
// activations, refusals with their problems, promotions; the first load is
// the oldest.
func (s *server) reloads(w http.ResponseWriter, _ *http.Request) {
	h := s.eng.ReloadHistory()
	if h == nil {
		h = []live.ReloadStatus{}
	}
	writeJSON(w, struct {
		Reloads []live.ReloadStatus `json:"reloads"`
	}{h})
}

// reload answers 200 with the engine's ReloadStatus whether or not the
// candidate was activated: the request itself succeeded, and "ok": false
// with "problems" is its answer (the previous Snapshot keeps serving). The
// reload is not tied to the request's lifetime: a client that hangs up must
// not turn a good candidate into a reported failure. A request that arrives
// while a reload runs shares the next one (the engine coalesces them).
func (s *server) reload(w http.ResponseWriter, r *http.Request) {
	st := s.eng.Reload(context.WithoutCancel(r.Context()), "api")
	if !st.OK {
		s.log.Warn("reload refused", "trigger", st.Trigger, "problems", len(st.Problems), "revision", st.Revision)
	}
	writeJSON(w, st)
}
