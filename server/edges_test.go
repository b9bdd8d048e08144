package server

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// rawRequest writes a request head (and any body bytes) on a new connection
// and returns the connection, for requests whose body never comes whole.
func rawRequest(t *testing.T, h *harness, path string, contentLength int, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, contentLength, body)
	return conn
}

func readResponse(t *testing.T, conn net.Conn) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// TestUnknownDecisionAnsweredBeforeBody: a request for a decision that does
// not exist is answered from its head alone, and its record holds no body:
// 16 MiB of junk to a made-up name costs neither memory nor log space.
func TestUnknownDecisionAnsweredBeforeBody(t *testing.T) {
	h := serveQuota(t, Config{})
	conn := rawRequest(t, h, "/v1/decisions/nope", DefaultMaxBodyBytes, "")
	status, _, body := readResponse(t, conn)
	if status != http.StatusNotFound || !bytes.Contains(body, []byte(`"unknown_decision"`)) {
		t.Fatalf("status %d %s, want 404 unknown_decision before any body byte was sent", status, body)
	}
	recs := h.log.records()
	if len(recs) != 1 || recs[0].Error.Code != "unknown_decision" || recs[0].Input != nil || recs[0].BodyBase64 != "" || recs[0].BodySize != 0 {
		t.Errorf("records %+v, want one unknown_decision record without a body", recs)
	}
}

// TestFailedLargeBodyLoggedAsDigest: a failed request's body is logged whole
// only when small; a larger one as its size, sha256 and a bounded prefix.
func TestFailedLargeBodyLoggedAsDigest(t *testing.T) {
	h := serveQuota(t, Config{})
	big := `{"tenant":"` + strings.Repeat("x", 200<<10) // malformed: never closed
	r := h.do(t, "POST", plainPath, big)
	if r.status != http.StatusBadRequest || r.errorDoc(t).Code != engine.CodeMalformedJSON {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	recs := h.log.records()
	rec := recs[len(recs)-1]
	sum := sha256.Sum256([]byte(big))
	prefix, _ := base64.StdEncoding.DecodeString(rec.BodyPrefix)
	if rec.Input != nil || rec.BodyBase64 != "" || rec.BodySize != int64(len(big)) || rec.BodySHA256 != hex.EncodeToString(sum[:]) ||
		len(prefix) != loggedPrefixLen || !strings.HasPrefix(big, string(prefix)) {
		t.Errorf("record input %d bytes, base64 %d, size %d, sha256 %s, prefix %d bytes; want size, digest and a %d-byte prefix only",
			len(rec.Input), len(rec.BodyBase64), rec.BodySize, rec.BodySHA256, len(prefix), loggedPrefixLen)
	}
	if ok, why := rec.Complete(); ok || !strings.Contains(why, "not logged whole") {
		t.Errorf("a digest-only record is complete for replay: %v %s", ok, why)
	}
}

// TestCutOffBodyIsRequestTimeout: a body that stops coming (the client
// closes its side, or the request deadline passes) is request_timeout, 408,
// logged with the size received and no body.
func TestCutOffBodyIsRequestTimeout(t *testing.T) {
	h := serveQuota(t, Config{RequestTimeout: 300 * time.Millisecond})
	for name, cut := range map[string]func(net.Conn){
		"client closes its side": func(c net.Conn) { _ = c.(*net.TCPConn).CloseWrite() },
		"deadline passes":        func(net.Conn) {},
	} {
		t.Run(name, func(t *testing.T) {
			conn := rawRequest(t, h, plainPath, 100, `{"tenant":"t",`)
			cut(conn)
			status, _, body := readResponse(t, conn)
			if status != http.StatusRequestTimeout || !bytes.Contains(body, []byte(`"request_timeout"`)) {
				t.Fatalf("status %d %s, want 408 request_timeout", status, body)
			}
			recs := h.log.records()
			rec := recs[len(recs)-1]
			if rec.Error.Code != "request_timeout" || rec.Input != nil || rec.BodyBase64 != "" || rec.BodySize != 14 {
				t.Errorf("record %+v, want request_timeout with body_size 14 and no body", rec)
			}
		})
	}
}

// TestContentEncodingRefused: a body in an encoding the server does not
// decode is 415; identity is no encoding.
func TestContentEncodingRefused(t *testing.T) {
	h := serveQuota(t, Config{})
	body := `{"tenant":"t","used":1}`
	for enc, want := range map[string]int{"gzip": 415, "br": 415, "identity": 200, "": 200} {
		r := h.do(t, "POST", plainPath, body, "Content-Encoding", enc)
		if r.status != want {
			t.Errorf("Content-Encoding %q: status %d, want %d: %s", enc, r.status, want, r.body)
		}
		if want == 415 && r.errorDoc(t).Code != engine.CodeUnsupportedMediaType {
			t.Errorf("Content-Encoding %q: %s", enc, r.body)
		}
	}
}

// inflight reads an admission gauge.
func inflight(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestAdmissionBudgets: past the budget of bytes or of JSON values in flight
// a request is answered overloaded (503, Retry-After) at once; once the
// request holding the budget is answered, the next one is decided.
func TestAdmissionBudgets(t *testing.T) {
	values := `{"tenant":"t","used":1,"x":[` + strings.TrimSuffix(strings.Repeat("1,", 300), ",") + `]}` // 304 values
	tests := []struct {
		name    string
		cfg     Config
		hold    string // the head of the body that holds the budget
		holdLen int
		metric  string
		atLeast float64
	}{
		{"bytes", Config{MaxInflightBytes: 8 << 10}, `{"tenant":"t",`, 8 << 10, "arbiter_inflight_bytes", 8 << 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Registry = prometheus.NewRegistry()
			h := serveQuota(t, tc.cfg)
			conn := rawRequest(t, h, plainPath, tc.holdLen, tc.hold)
			wait.Until(t, 30*time.Second, "the first request holds its budget", func() bool { return inflight(t, tc.cfg.Registry, tc.metric) >= tc.atLeast })

			r := h.do(t, "POST", plainPath, values)
			if r.status != http.StatusServiceUnavailable || r.errorDoc(t).Code != CodeOverloaded || r.header.Get("Retry-After") != "1" {
				t.Fatalf("second request: %d %s Retry-After %q, want 503 overloaded with Retry-After 1", r.status, r.body, r.header.Get("Retry-After"))
			}
			conn.Close() // the first request ends (request_timeout) and gives its budget back
			wait.Until(t, 30*time.Second, "the budget is given back", func() bool { return inflight(t, tc.cfg.Registry, tc.metric) == 0 })
			if r := h.do(t, "POST", plainPath, values); r.status != http.StatusBadRequest || r.errorDoc(t).Code != engine.CodeInputSchemaInvalid {
				t.Errorf("after the first request: %d %s, want the input decided (and refused by its schema)", r.status, r.body)
			}
		})
	}
}

// TestValueBudget: the engine's one pass over a body takes its JSON values
// from the budget of values in flight before it builds them; a body whose
// values do not fit beside another request's is answered overloaded (503,
// Retry-After), gives back what it took, and is decided once the budget is
// free.
func TestValueBudget(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv := newServer(Config{MaxInflightValues: 300, Registry: reg, DecisionLog: &fakeLog{}}, quotaEngine(t, quotaDir(t)))
	h := &harness{srv: httptest.NewServer(srv.routes())}
	t.Cleanup(h.srv.Close)
	other := &ticket{a: srv.adm} // another request in flight holds most of the budget
	other.takeValues(250)
	values := `{"tenant":"t","used":1,"x":[` + strings.TrimSuffix(strings.Repeat("1,", 300), ",") + `]}` // 304 values
	r := h.do(t, "POST", plainPath, values)
	if r.status != http.StatusServiceUnavailable || r.errorDoc(t).Code != CodeOverloaded || r.header.Get("Retry-After") != "1" {
		t.Fatalf("304 values against a budget of 300: %d %s Retry-After %q, want 503 overloaded with Retry-After 1", r.status, r.body, r.header.Get("Retry-After"))
	}
	if got := inflight(t, reg, "arbiter_inflight_values"); got != 250 {
		t.Errorf("%v values taken after the answer, want the other request's 250", got)
	}
	other.release()
	if r := h.do(t, "POST", plainPath, values); r.status != http.StatusBadRequest || r.errorDoc(t).Code != engine.CodeInputSchemaInvalid {
		t.Errorf("with the budget free: %d %s, want the input decided (and refused by its schema)", r.status, r.body)
	}
}

// repeatReader yields head, then unit again and again, counting bytes.
type repeatReader struct {
	head, unit []byte
	pos        int64        // owned by the transport's goroutine
	read       atomic.Int64 // what the test reads
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		var src []byte
		if r.pos < int64(len(r.head)) {
			src = r.head[r.pos:]
		} else {
			src = r.unit[(r.pos-int64(len(r.head)))%int64(len(r.unit)):]
		}
		c := copy(p[n:], src)
		n += c
		r.pos += int64(c)
	}
	r.read.Store(r.pos)
	return n, nil
}

// TestMaxInputValuesStopsReading: a body with more JSON values than the cap
// is body_too_large, counted by the engine's one pass before it builds
// them: 16 MiB of empty objects is read (its bytes are admitted as they
// arrive) but never decoded past the cap.
func TestMaxInputValuesStopsReading(t *testing.T) {
	// The bytes the server itself reads of the body, whatever the client
	// and the kernel buffer meanwhile.
	var read atomic.Int64
	h := &harness{log: &fakeLog{}}
	inner := New(Config{MaxInputValues: 10_000, DecisionLog: h.log, Registry: prometheus.NewRegistry()}, quotaEngine(t, quotaDir(t)))
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = countingBody{r.Body, &read}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(h.srv.Close)
	rr := &repeatReader{head: []byte(`{"tenant":"t","used":1,"pad":[`), unit: []byte(`{},`)}
	req, err := http.NewRequest("POST", h.srv.URL+plainPath, io.LimitReader(rr, DefaultMaxBodyBytes))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	r := h.send(t, req)
	if r.status != http.StatusRequestEntityTooLarge || r.errorDoc(t).Code != engine.CodeBodyTooLarge || !strings.Contains(r.errorDoc(t).Message, "10000 JSON values") {
		t.Fatalf("status %d %s, want 413 naming the value cap", r.status, r.body)
	}

}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// refusingLog is a decision log whose queue is always full.
type refusingLog struct{ refused int }

func (l *refusingLog) Log(decisionlog.Record) bool { l.refused++; return false }

// TestDecisionLogFull: by default a decision whose record the log refuses
// is still answered (the record is counted as dropped); with RefuseUnlogged
// no decision is answered without its record queued.
func TestDecisionLogFull(t *testing.T) {
	body := `{"tenant":"t","used":1}`
	for _, refuse := range []bool{false, true} {
		l := &refusingLog{}
		h := serveQuota(t, Config{DecisionLog: l, RefuseUnlogged: refuse})
		r := h.do(t, "POST", plainPath, body)
		switch {
		case !refuse && r.status != http.StatusOK:
			t.Errorf("drop mode: %d %s, want the decision", r.status, r.body)
		case refuse && (r.status != http.StatusServiceUnavailable || r.errorDoc(t).Code != CodeOverloaded || r.header.Get("Retry-After") == ""):
			t.Errorf("refuse mode: %d %s, want 503 overloaded", r.status, r.body)
		}
		if l.refused == 0 {
			t.Error("the decision log was not asked")
		}
	}
}

// inProgressEngine is an engine with a reload always running.
type inProgressEngine struct{ fakeEngine }

func (inProgressEngine) ReloadInProgress() (live.ReloadProgress, bool) {
	return live.ReloadProgress{Since: time.Now(), Trigger: "watch"}, true
}

// TestStatusSaysReloadInProgress: /v1/status answers while a reload runs,
// and says so.
func TestStatusSaysReloadInProgress(t *testing.T) {
	for _, eng := range []Engine{&fakeEngine{}, &inProgressEngine{}} {
		h := serve(t, Config{}, eng)
		r := h.do(t, "GET", "/v1/status", "")
		var doc struct {
			Reload  string               `json:"reload"`
			Running *live.ReloadProgress `json:"reload_in_progress"`
		}
		if err := json.Unmarshal(r.body, &doc); err != nil {
			t.Fatal(err)
		}
		_, running := eng.ReloadInProgress()
		if want := map[bool]string{true: "in progress", false: "idle"}[running]; doc.Reload != want || (doc.Running != nil) != running {
			t.Errorf("status %s, want reload %q", r.body, want)
		}
	}
}

// TestConnLimiterEvictsIdle: at the connection cap the longest idle
// keep-alive connection is closed to make room; a new caller is served.
func TestConnLimiterEvictsIdle(t *testing.T) {
	lim := NewConnLimiter(2, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), ConnState: lim.ConnState}
	go func() { _ = srv.Serve(lim.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "http://" + ln.Addr().String()
	// Two clients, each keeping its connection idle after one request.
	var idle []*http.Client
	for range 2 {
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		idle = append(idle, c)
	}
	wait.Until(t, 30*time.Second, "both connections idle", func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return len(lim.idle) == 2
	})
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	for range 3 { // more than the cap, one after another
		wg.Go(func() {
			resp, err := fresh.Get(url)
			if err != nil {
				t.Errorf("a new caller at the cap: %v", err)
				return
			}
			resp.Body.Close()
		})
		wg.Wait()
	}
	for _, c := range idle {
		c.CloseIdleConnections()
	}
}
