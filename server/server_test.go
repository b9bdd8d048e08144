package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
)

// quotaDir copies the engine's quota testdata (a decision that exists only
// in tests) into a fresh folder that a test may edit.
func quotaDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "quota")
	if err := os.CopyFS(dir, os.DirFS("../engine/testdata/quota")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func quotaEngine(t *testing.T, dir string) *live.Engine {
	t.Helper()
	eng, err := live.New(context.Background(), engine.Config{
		Policies: filepath.Join(dir, "policies"),
		Schemas:  filepath.Join(dir, "schemas"),
		Tests:    filepath.Join(dir, "tests"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// fakeLog collects decision log records.
type fakeLog struct {
	mu   sync.Mutex
	recs []decisionlog.Record
}

func (l *fakeLog) Log(rec decisionlog.Record) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, rec)
	return true
}

func (l *fakeLog) records() []decisionlog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]decisionlog.Record(nil), l.recs...)
}

type harness struct {
	srv *httptest.Server
	log *fakeLog
	eng Engine
}

// serve starts the API over eng; cfg.DecisionLog and cfg.Registry are
// filled in when left nil.
func serve(t *testing.T, cfg Config, eng Engine) *harness {
	t.Helper()
	h := &harness{log: &fakeLog{}, eng: eng}
	if cfg.DecisionLog == nil {
		cfg.DecisionLog = h.log
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	h.srv = httptest.NewServer(New(cfg, eng))
	t.Cleanup(h.srv.Close)
	return h
}

func serveQuota(t *testing.T, cfg Config) *harness {
	t.Helper()
	return serve(t, cfg, quotaEngine(t, quotaDir(t)))
}

type response struct {
	status int
	header http.Header
	body   []byte
	path   string
}

// errorDoc decodes the contract's error document, failing when the body is
// anything else. On OPA's Data API path the body is OPA's error with the
// contract's document beside it, and the two must agree.
func (r response) errorDoc(t *testing.T) engine.DocumentBody {
	t.Helper()
	if strings.HasPrefix(r.path, "/v1/data/") {
		return r.opaErrorDoc(t)
	}
	var doc engine.Document
	dec := json.NewDecoder(strings.NewReader(string(r.body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil || doc.Error.Code == "" {
		t.Fatalf("not an error document (%v): %s", err, r.body)
	}
	return doc.Error
}

// opaErrorDoc decodes OPA's error body of the Data API path and checks it
// against the contract's document it carries.
func (r response) opaErrorDoc(t *testing.T) engine.DocumentBody {
	t.Helper()
	var doc opaError
	dec := json.NewDecoder(strings.NewReader(string(r.body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil || doc.Code == "" || len(doc.Errors) == 0 {
		t.Fatalf("not OPA's error body (%v): %s", err, r.body)
	}
	e := doc.Error
	if doc.Code != e.Code || doc.Message != e.Message || doc.DecisionID != r.header.Get(DecisionIDHeader) && r.header.Get(DecisionIDHeader) != "" {
		t.Errorf("OPA's fields disagree with the error document: %s", r.body)
	}
	if len(e.Violations) > 0 && len(doc.Errors) != len(e.Violations) {
		t.Errorf("%d OPA errors for %d violations: %s", len(doc.Errors), len(e.Violations), r.body)
	}
	for i, item := range doc.Errors {
		if item.Code != e.Code || len(e.Violations) > 0 && !strings.HasSuffix(item.Message, ": "+e.Violations[i].Message) {
			t.Errorf("OPA error %d %+v does not match the violation: %s", i, item, r.body)
		}
	}
	return e
}

func (h *harness) do(t *testing.T, method, path, body string, header ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	return h.send(t, req)
}

func (h *harness) send(t *testing.T, req *http.Request) response {
	t.Helper()
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b, path: req.URL.Path}
}

func TestRoutes(t *testing.T) {
	h := serveQuota(t, Config{})
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     engine.Code // "" for a success
		allow                    string
	}{
		{name: "health", method: "GET", path: "/health", status: 200},
		{name: "decide", method: "POST", path: "/v1/decisions/quota_check", body: `{"tenant":"t","used":1}`, status: 200},
		{name: "data api", method: "POST", path: "/v1/data/decisions/quota_check/decision", body: `{"input":{"tenant":"t","used":1}}`, status: 200},
		{name: "list decisions", method: "GET", path: "/v1/decisions", status: 200},
		{name: "status", method: "GET", path: "/v1/status", status: 200},
		{name: "metrics", method: "GET", path: "/metrics", status: 200},
		{name: "reload", method: "POST", path: "/v1/reload", status: 200},
		{name: "unknown route", method: "GET", path: "/v1/nope", status: 404, code: CodeNotFound},
		{name: "root", method: "GET", path: "/", status: 404, code: CodeNotFound},
		{name: "decision without name", method: "POST", path: "/v1/decisions/", body: `{}`, status: 404, code: CodeNotFound},
		{name: "unknown decision", method: "POST", path: "/v1/decisions/nope", body: `{}`, status: 404, code: engine.CodeUnknownDecision},
		{name: "unknown decision on data api", method: "POST", path: "/v1/data/decisions/nope/decision", body: `{"input":{}}`, status: 404, code: engine.CodeUnknownDecision},
		{name: "GET a decision", method: "GET", path: "/v1/decisions/quota_check", status: 405, code: CodeMethodNotAllowed, allow: "POST"},
		{name: "PUT on data api", method: "PUT", path: "/v1/data/decisions/quota_check/decision", body: `{}`, status: 405, code: CodeMethodNotAllowed, allow: "POST"},
		{name: "POST health", method: "POST", path: "/health", body: `{}`, status: 405, code: CodeMethodNotAllowed, allow: "GET, HEAD"},
		{name: "HEAD health", method: "HEAD", path: "/health", status: 200},
		{name: "live", method: "GET", path: "/health/live", status: 200},
		{name: "ready", method: "GET", path: "/health/ready", status: 200},
		{name: "HEAD ready", method: "HEAD", path: "/health/ready", status: 200},
		{name: "POST ready", method: "POST", path: "/health/ready", body: `{}`, status: 405, code: CodeMethodNotAllowed, allow: "GET, HEAD"},
		{name: "GET reload", method: "GET", path: "/v1/reload", status: 405, code: CodeMethodNotAllowed, allow: "POST"},
		{name: "DELETE decisions", method: "DELETE", path: "/v1/decisions", status: 405, code: CodeMethodNotAllowed, allow: "GET"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(t, tc.method, tc.path, tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); tc.path != "/metrics" && ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if tc.code == "" {
				if !json.Valid(r.body) && tc.path != "/metrics" && tc.method != "HEAD" {
					t.Errorf("invalid JSON: %s", r.body)
				}
				return
			}
			if got := r.errorDoc(t).Code; got != tc.code {
				t.Errorf("code %q, want %q", got, tc.code)
			}
			if got := r.header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
		})
	}
}

func TestHealth(t *testing.T) {
	h := serveQuota(t, Config{Tokens: []Token{{Caller: "c", Secret: []byte("s3cret")}}})
	r := h.do(t, "GET", "/health", "")
	if r.status != 200 || string(r.body) != `{"status":"ok"}` {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

// TestHealthReady: /health/ready answers 503 not_ready naming why while a
// bundle's polls are stuck, the decision sinks drop records or the server
// stops, and 200 otherwise; /health/live answers 200 throughout, and
// /health?bundles looks at the bundle alone, as OPA's does.
func TestHealthReady(t *testing.T) {
	stopped := make(chan struct{})
	close(stopped)
	for _, tc := range []struct {
		name    string
		cfg     Config
		want    string // "" for ready, else a word of the not_ready message
		bundles int
	}{
		{name: "ready", cfg: Config{Stopping: make(chan struct{}), Dropping: func() error { return nil }, BundleStuck: func() error { return nil }}, bundles: 200},
		{name: "bundle stuck", cfg: Config{BundleStuck: func() error { return errors.New("bundle b: no poll has completed for 1m") }}, want: "no poll has completed", bundles: 503},
		{name: "sinks dropping", cfg: Config{Dropping: func() error { return errors.New("decision records dropped") }}, want: "decision records dropped", bundles: 200},
		{name: "stopping", cfg: Config{Stopping: stopped}, want: "stopping", bundles: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := serveQuota(t, tc.cfg)
			if r := h.do(t, "GET", "/health/live", ""); r.status != 200 || string(r.body) != `{"status":"ok"}` {
				t.Errorf("live: %d %s", r.status, r.body)
			}
			if r := h.do(t, "GET", "/health?bundles", ""); r.status != tc.bundles {
				t.Errorf("/health?bundles: %d, want %d", r.status, tc.bundles)
			}
			r := h.do(t, "GET", "/health/ready", "")
			if tc.want == "" {
				if r.status != 200 || string(r.body) != `{"status":"ok"}` {
					t.Fatalf("ready: %d %s", r.status, r.body)
				}
				return
			}
			if doc := r.errorDoc(t); r.status != 503 || doc.Code != engine.CodeNotReady || !strings.Contains(doc.Message, tc.want) {
				t.Fatalf("ready: %d %s, want 503 not_ready naming %q", r.status, r.body, tc.want)
			}
		})
	}
}

func TestListDecisions(t *testing.T) {
	h := serveQuota(t, Config{})
	r := h.do(t, "GET", "/v1/decisions", "")
	var doc struct {
		Decisions []engine.DecisionInfo `json:"decisions"`
		Revision  string                `json:"policy_revision"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Revision != h.eng.Snapshot().Revision || doc.Revision == "" {
		t.Errorf("revision %q, want %q", doc.Revision, h.eng.Snapshot().Revision)
	}
	if len(doc.Decisions) != 1 || doc.Decisions[0].Name != "quota_check" ||
		doc.Decisions[0].Path != "/v1/data/decisions/quota_check/decision" || len(doc.Decisions[0].Rules) != 2 {
		t.Errorf("decisions %+v", doc.Decisions)
	}
}

func TestStatus(t *testing.T) {
	h := serveQuota(t, Config{})
	r := h.do(t, "GET", "/v1/status", "")
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"policy_revision", "policy_origin", "loaded_at", "files", "decisions", "last_reload", "started_at", "uptime_seconds"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("status lacks %q: %s", k, r.body)
		}
	}
	var st statusDoc
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatal(err)
	}
	snap := h.eng.Snapshot()
	if st.Revision != snap.Revision || len(st.Files) != len(snap.Files) || len(st.Files) == 0 {
		t.Errorf("revision %q files %v", st.Revision, st.Files)
	}
	if strings.Join(st.Decisions, ",") != "quota_check" {
		t.Errorf("decisions %v", st.Decisions)
	}
	if !st.LastReload.OK || st.LastReload.Trigger != "start" || st.LastReload.Revision != snap.Revision {
		t.Errorf("last_reload %+v", st.LastReload)
	}
	// The engine knows its source: the live revision and the attempt say where they came from.
	if st.Origin == "" || st.Origin != snap.Origin || st.LastReload.Origin != snap.Origin {
		t.Errorf("policy_origin %q, last_reload.origin %q, want the folders %q", st.Origin, st.LastReload.Origin, snap.Origin)
	}
}

func TestReload(t *testing.T) {
	dir := quotaDir(t)
	h := serve(t, Config{}, quotaEngine(t, dir))
	decide := func(t *testing.T) string {
		t.Helper()
		r := h.do(t, "POST", "/v1/decisions/quota_check", `{"tenant":"t","used":1}`)
		if r.status != 200 {
			t.Fatalf("decision: %d %s", r.status, r.body)
		}
		var env struct {
			Revision string `json:"policy_revision"`
		}
		if err := json.Unmarshal(r.body, &env); err != nil {
			t.Fatal(err)
		}
		return env.Revision
	}
	reload := func(t *testing.T) live.ReloadStatus {
		t.Helper()
		r := h.do(t, "POST", "/v1/reload", "")
		if r.status != 200 {
			t.Fatalf("reload: %d %s", r.status, r.body)
		}
		var st live.ReloadStatus
		if err := json.Unmarshal(r.body, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	first := decide(t)

	data := filepath.Join(dir, "policies", "decisions", "quota_check", "data.json")
	if err := os.WriteFile(data, []byte(`{"limit": 10, "owner": "reliability"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	st := reload(t)
	if !st.OK || !st.Changed || st.Trigger != "api" || st.Revision == first {
		t.Fatalf("good edit: %+v", st)
	}
	second := st.Revision
	if got := decide(t); got != second {
		t.Fatalf("decided with %q after reload, want %q", got, second)
	}

	policy := filepath.Join(dir, "policies", "decisions", "quota_check", "policy.rego")
	f, err := os.OpenFile(policy, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("broken := {\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	st = reload(t)
	if st.OK || st.Revision != second || len(st.Problems) == 0 {
		t.Fatalf("broken edit: %+v", st)
	}
	p := st.Problems[0]
	if !strings.HasSuffix(p.File, "policy.rego") || p.Line == 0 {
		t.Errorf("problem does not name file:line: %+v", p)
	}
	if got := decide(t); got != second {
		t.Errorf("after a refused reload decided with %q, want the previous %q", got, second)
	}
	var status statusDoc
	if err := json.Unmarshal(h.do(t, "GET", "/v1/status", "").body, &status); err != nil {
		t.Fatal(err)
	}
	if status.LastReload.OK || len(status.LastReload.Problems) == 0 || status.Revision != second {
		t.Errorf("status after refused reload: %+v", status)
	}
	// GET /v1/reloads: the history, newest first: the refusal with its
	// problems, the activation, the first load.
	var history struct {
		Reloads []live.ReloadStatus `json:"reloads"`
	}
	if r := h.do(t, "GET", "/v1/reloads", ""); r.status != 200 || json.Unmarshal(r.body, &history) != nil {
		t.Fatalf("GET /v1/reloads: %d %s", r.status, r.body)
	}
	if got := history.Reloads; len(got) != 3 || got[0].OK || len(got[0].Problems) == 0 ||
		!got[1].OK || got[1].Revision != second || got[1].Trigger != "api" || !got[2].OK || got[2].Revision != first {
		t.Errorf("reload history: %+v", got)
	}
}

// fakeEngine serves whatever a test needs, including what the real engine
// never does.
type fakeEngine struct {
	snap   *engine.Snapshot
	decide func() (*engine.Decision, error)
	last   func() live.ReloadStatus
}

func (f *fakeEngine) Decide(context.Context, string, []byte, engine.Options) (*engine.Decision, error) {
	return f.decide()
}
func (f *fakeEngine) Snapshot() *engine.Snapshot { return f.snap }
func (f *fakeEngine) Has(string) bool            { return f.snap != nil }
func (f *fakeEngine) ReloadInProgress() (live.ReloadProgress, bool) {
	return live.ReloadProgress{}, false
}
func (f *fakeEngine) Reload(context.Context, string) live.ReloadStatus {
	return live.ReloadStatus{}
}
func (f *fakeEngine) ReloadHistory() []live.ReloadStatus {
	if f.last != nil {
		return []live.ReloadStatus{f.last()}
	}
	return nil
}
func (f *fakeEngine) LastReload() live.ReloadStatus {
	if f.last != nil {
		return f.last()
	}
	return live.ReloadStatus{}
}

func TestFailClosed(t *testing.T) {
	snap := &engine.Snapshot{Revision: "fake-rev"}
	tests := []struct {
		name   string
		eng    *fakeEngine
		status int
		code   engine.Code
	}{
		{"plain error", &fakeEngine{snap: snap, decide: func() (*engine.Decision, error) {
			return nil, io.ErrUnexpectedEOF
		}}, 500, engine.CodePolicyError},
		{"panic", &fakeEngine{snap: snap, decide: func() (*engine.Decision, error) {
			panic("boom")
		}}, 500, engine.CodePolicyError},
		{"no result", &fakeEngine{snap: snap, decide: func() (*engine.Decision, error) {
			return &engine.Decision{ID: "x", Name: "d"}, nil
		}}, 500, engine.CodePolicyError},
		{"nil decision", &fakeEngine{snap: snap, decide: func() (*engine.Decision, error) {
			return nil, nil
		}}, 500, engine.CodePolicyError},
		{"timeout", &fakeEngine{snap: snap, decide: func() (*engine.Decision, error) {
			return nil, &engine.Error{Code: engine.CodePolicyTimeout, Message: "too slow"}
		}}, 500, engine.CodePolicyTimeout},
		{"not ready", &fakeEngine{decide: func() (*engine.Decision, error) {
			t.Error("decided without a snapshot")
			return nil, nil
		}}, 503, engine.CodeNotReady},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := serve(t, Config{}, tc.eng)
			for _, path := range []string{"/v1/decisions/d", "/v1/data/decisions/d/decision"} {
				r := h.do(t, "POST", path, `{"input":{}}`)
				if r.status != tc.status {
					t.Fatalf("%s: status %d, want %d: %s", path, r.status, tc.status, r.body)
				}
				doc := r.errorDoc(t)
				if doc.Code != tc.code {
					t.Errorf("%s: code %q, want %q", path, doc.Code, tc.code)
				}
				if strings.Contains(doc.Message, "unexpected EOF") || strings.Contains(doc.Message, "boom") {
					t.Errorf("message leaks the internal error: %q", doc.Message)
				}
			}
			recs := h.log.records()
			if len(recs) != 2 || recs[0].Error == nil || recs[0].Error.Code != string(tc.code) || recs[0].Result != nil {
				t.Errorf("log records %+v", recs)
			}
		})
	}
}

func TestNotReadyListing(t *testing.T) {
	h := serve(t, Config{}, &fakeEngine{})
	r := h.do(t, "GET", "/v1/decisions", "")
	if r.status != 503 || r.errorDoc(t).Code != engine.CodeNotReady {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if r := h.do(t, "GET", "/v1/status", ""); r.status != 200 {
		t.Fatalf("status without a snapshot: %d %s", r.status, r.body)
	}
}

func TestPanicOutsideTheEngine(t *testing.T) {
	eng := &fakeEngine{snap: &engine.Snapshot{Revision: "r"}, last: func() live.ReloadStatus { panic("status broke") }}
	h := serve(t, Config{}, eng)
	r := h.do(t, "GET", "/v1/status", "")
	if r.status != 500 || r.errorDoc(t).Code != engine.CodePolicyError {
		t.Fatalf("%d %s", r.status, r.body)
	}
}
