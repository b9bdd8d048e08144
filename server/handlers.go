package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
)

// DecisionIDHeader carries the decision id of every answer of the decision
// endpoints, errors included, so a caller can find the log record.
const DecisionIDHeader = "X-Arbiter-Decision-Id"

// decide serves POST /v1/decisions/{name} (wrapped=false) and OPA's Data API
// path POST /v1/data/decisions/{name}/decision (wrapped=true). Both run the
// same validation and evaluation; only the response shape differs. OPA's
// query parameters (pretty, metrics, provenance, ...) are accepted and
// ignored; explain=true adds the explanation.
func (s *server) decide(wrapped bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		name := chi.URLParam(r, "name")
		buf := getBuffer()
		defer putBuffer(buf)

		body, err := s.readBody(w, r, buf)
		var d *engine.Decision
		if err == nil {
			explain, _ := strconv.ParseBool(r.URL.Query().Get("explain"))
			d, err = s.safeDecide(r.Context(), name, body, engine.Options{Explain: explain, Wrapped: wrapped})
		}
		elapsed := time.Since(start)
		if err != nil {
			s.fail(w, r, start, elapsed, name, body, engine.AsError(err))
			return
		}

		s.metrics.observeDecision(d, elapsed)
		s.record(decisionlog.Record{
			DecisionID: d.ID, Time: start.UTC(), Decision: d.Name, Revision: d.Revision,
			Path: r.URL.Path, Input: bytes.Clone(d.Input), Result: d.Result,
			DurationNS: elapsed.Nanoseconds(), Caller: callerOf(r.Context()),
		})
		out, err := encodeDecision(d, wrapped)
		if err != nil { // only the explanation is encoded by reflection
			writeError(w, engine.AsError(err))
			return
		}
		w.Header().Set(DecisionIDHeader, d.ID)
		writeBody(w, http.StatusOK, out)
	}
}

// fail answers a decision request that has no decision: it is logged,
// counted and answered with the error document.
func (s *server) fail(w http.ResponseWriter, r *http.Request, start time.Time, elapsed time.Duration, name string, body []byte, e *engine.Error) {
	id := uuid.NewString()
	rec := decisionlog.Record{
		DecisionID: id, Time: start.UTC(), Decision: name, Path: r.URL.Path,
		Error:      &decisionlog.RecordError{Code: string(e.Code), Message: e.Message},
		DurationNS: elapsed.Nanoseconds(), Caller: callerOf(r.Context()),
	}
	if snap := s.eng.Snapshot(); snap != nil {
		rec.Revision = snap.Revision
	}
	// What was received is kept for replay, except a body cut off at the
	// size limit: it is not what the caller sent.
	if e.Code != engine.CodeBodyTooLarge && len(body) > 0 {
		if json.Valid(body) {
			rec.Input = bytes.Clone(body)
		} else {
			rec.BodyBase64 = base64.StdEncoding.EncodeToString(body)
		}
	}
	s.record(rec)
	s.metrics.observeError(name, e.Code, elapsed)

	level := slog.LevelDebug
	if statusFor(e.Code) >= http.StatusInternalServerError {
		level = slog.LevelWarn
	}
	if s.log.Enabled(r.Context(), level) {
		attrs := []any{"decision_id", id, "decision", name, "code", e.Code, "message", e.Message}
		if e.Err != nil {
			attrs = append(attrs, "err", e.Err.Error())
		}
		s.log.Log(r.Context(), level, "decision request failed", attrs...)
	}
	w.Header().Set(DecisionIDHeader, id)
	writeError(w, e)
}

func (s *server) record(rec decisionlog.Record) {
	if s.cfg.DecisionLog != nil {
		s.cfg.DecisionLog.Log(rec)
	}
}

// safeDecide calls the engine and fails closed: a panic, a non-engine
// error or an empty decision becomes a policy_error, never an answer.
func (s *server) safeDecide(ctx context.Context, name string, body []byte, opts engine.Options) (d *engine.Decision, err error) {
	if s.eng.Snapshot() == nil {
		return nil, &engine.Error{Code: engine.CodeNotReady, Message: "no policy snapshot is loaded yet"}
	}
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

// readBody checks the media type and size of a request and reads its body
// once into buf.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer) ([]byte, error) {
	if err := checkMediaType(r.Header.Get("Content-Type")); err != nil {
		return nil, err
	}
	limit := s.cfg.MaxBodyBytes
	tooLarge := &engine.Error{Code: engine.CodeBodyTooLarge, Message: fmt.Sprintf("the request body exceeds %d bytes", limit)}
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead) // ReadFrom wants MinRead spare to stop without growing
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return buf.Bytes(), tooLarge
		}
		return buf.Bytes(), &engine.Error{Code: engine.CodeMalformedJSON, Message: "reading the request body failed", Err: err}
	}
	return buf.Bytes(), nil
}

// checkMediaType accepts application/json, with no charset or UTF-8 (the
// only encoding the contract allows), and a missing Content-Type.
func checkMediaType(ct string) error {
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

// Bodies are read into pooled buffers; one that grew past maxPooled is left
// to the garbage collector so that a few large requests do not pin memory.
const maxPooled = 1 << 20

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuffer() *bytes.Buffer { return bufPool.Get().(*bytes.Buffer) }

func putBuffer(b *bytes.Buffer) {
	if b.Cap() > maxPooled {
		return
	}
	b.Reset()
	bufPool.Put(b)
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
		b = appendString(b, d.ID)
	} else {
		b = append(b, `{"decision_id":`...)
		b = appendString(b, d.ID)
		b = append(b, `,"decision":`...)
		b = appendString(b, d.Name)
		b = append(b, `,"policy_revision":`...)
		b = appendString(b, d.Revision)
		b = append(b, `,"result":`...)
		b = append(b, d.Result...)
	}
	if expl != nil {
		b = append(b, `,"explanation":`...)
		b = append(b, expl...)
	}
	return append(b, '}'), nil
}

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does.
func appendString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// health answers 200 while the process runs. With ?bundles (OPA's
// readiness check) it answers 200 only once a revision is loaded.
func (s *server) health(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("bundles") && s.eng.Snapshot() == nil {
		writeError(w, &engine.Error{Code: engine.CodeNotReady, Message: "no policy revision is loaded yet"})
		return
	}
	writeBody(w, http.StatusOK, []byte(`{"status":"ok"}`))
}

func (s *server) listDecisions(w http.ResponseWriter, _ *http.Request) {
	snap := s.eng.Snapshot()
	if snap == nil {
		writeError(w, &engine.Error{Code: engine.CodeNotReady, Message: "no policy snapshot is loaded yet"})
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Decisions []engine.DecisionInfo `json:"decisions"`
		Revision  string                `json:"policy_revision"`
	}{snap.Decisions(), snap.Revision})
}

// statusDoc is the answer of GET /v1/status.
type statusDoc struct {
	Revision      string              `json:"policy_revision"`
	LoadedAt      *time.Time          `json:"loaded_at,omitempty"`
	Files         []string            `json:"files"`
	Decisions     []string            `json:"decisions"`
	LastReload    engine.ReloadStatus `json:"last_reload"`
	Bundles       any                 `json:"bundles,omitempty"`
	StartedAt     time.Time           `json:"started_at"`
	UptimeSeconds float64             `json:"uptime_seconds"`
	// Compiled says which decisions run compiled, and why the others not.
	Compiled []engine.CompiledInfo `json:"compiled"`
}

func (s *server) status(w http.ResponseWriter, _ *http.Request) {
	doc := statusDoc{
		Files: []string{}, Decisions: []string{},
		LastReload:    s.eng.LastReload(),
		StartedAt:     s.started.UTC(),
		UptimeSeconds: time.Since(s.started).Seconds(),
	}
	if s.cfg.BundleStatus != nil {
		doc.Bundles = s.cfg.BundleStatus()
	}
	if snap := s.eng.Snapshot(); snap != nil {
		loaded := snap.LoadedAt.UTC()
		doc.Revision, doc.LoadedAt = snap.Revision, &loaded
		if snap.Files != nil {
			doc.Files = snap.Files
		}
		if names := snap.Names(); names != nil {
			doc.Decisions = names
		}
		doc.Compiled = snap.Compiled()
	}
	writeJSON(w, http.StatusOK, doc)
}

// reload answers 200 with the engine's ReloadStatus whether or not the
// candidate was activated: the request itself succeeded, and "ok": false
// with "problems" is its answer (the previous Snapshot keeps serving). The
// reload is not tied to the request's lifetime: a client that hangs up must
// not turn a good candidate into a reported failure.
func (s *server) reload(w http.ResponseWriter, r *http.Request) {
	st := s.eng.Reload(context.WithoutCancel(r.Context()), "api")
	if !st.OK {
		s.log.Warn("reload refused", "trigger", st.Trigger, "problems", len(st.Problems), "revision", st.Revision)
	}
	writeJSON(w, http.StatusOK, st)
}
