package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
)

// The hostile-input suite: the repository's real policies behind the real
// handler, fed what a broken or malicious caller could send. Every request
// gets its contract error (code and status), and afterwards the server still
// decides a fixture correctly.

// endpoints are the two decision paths of fx's decision.
func endpoints(fx engine.Fixture) (plain, data string) {
	return "/v1/decisions/" + fx.Decision, "/v1/data/decisions/" + fx.Decision + "/decision"
}

// repoHarness serves ../policies and ../schemas (the fixtures and Rego tests
// run in the engine's own tests, so the load gate is skipped here), and
// returns the base fixture: the first that records a result for an input
// with a Runner state, which the hostile bodies below are made from. A
// hostile request that leaks into the next one would most likely change
// the answer to it.
func repoHarness(t *testing.T, cfg Config) (*harness, engine.Fixture) {
	t.Helper()
	eng, err := live.New(context.Background(), engine.Config{Policies: "../policies", Schemas: "../schemas"})
	if err != nil {
		t.Fatal(err)
	}
	fixtures, err := engine.LoadFixtures("../policy_test")
	if err != nil {
		t.Fatal(err)
	}
	for _, fx := range fixtures {
		var in struct {
			RunnerState map[string]any `json:"runnerState"`
		}
		if fx.WantResult != nil && json.Unmarshal(fx.Input, &in) == nil && in.RunnerState != nil {
			return serve(t, cfg, eng), fx
		}
	}
	t.Fatal("no fixture records a result for an input with a Runner state")
	return nil, engine.Fixture{}
}

// stillDecides checks that the server answers the base fixture correctly on
// both endpoints.
func (h *harness) stillDecides(t *testing.T, fx engine.Fixture) {
	t.Helper()
	brPlain, brData := endpoints(fx)
	for _, path := range []string{brPlain, brData} {
		body := string(fx.Input)
		if path == brData {
			body = `{"input":` + body + `}`
		}
		r := h.do(t, "POST", path, body)
		if r.status != http.StatusOK {
			t.Fatalf("%s after a hostile request: status %d: %.300s", path, r.status, r.body)
		}
		var env struct {
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(r.body, &env); err != nil {
			t.Fatalf("%s: %v: %.300s", path, err, r.body)
		}
		if msg := engine.CheckOutcome(fx, &engine.Decision{Result: env.Result}, nil); msg != "" {
			t.Fatalf("%s after a hostile request: %s", path, msg)
		}
	}
}

// hole marks where withRaw splices raw text into a re-encoded input.
const hole = "\x00hole\x00"

// withRaw returns the input with the member at path (created if absent) set
// to raw, spliced in as text so that it may be anything, JSON or not.
func withRaw(t *testing.T, input []byte, raw string, path ...string) []byte {
	t.Helper()
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	obj := doc
	for _, k := range path[:len(path)-1] {
		obj = obj[k].(map[string]any)
	}
	obj[path[len(path)-1]] = hole
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	quoted, _ := json.Marshal(hole)
	if bytes.Count(b, quoted) != 1 {
		t.Fatalf("hole not found once in %s", b)
	}
	return bytes.Replace(b, quoted, []byte(raw), 1)
}

func TestHostileBodies(t *testing.T) {
	h, fx := repoHarness(t, Config{})
	brPlain, brData := endpoints(fx)
	in := []byte(fx.Input)
	const mib = 1 << 20
	hugeString := `"` + strings.Repeat("x", 10*mib) + `"`
	hugeArray := "[" + strings.TrimSuffix(strings.Repeat("0,", 1_000_000), ",") + "]"
	deepArrays := strings.Repeat("[", 500_000)
	deepObjects := strings.Repeat(`{"a":`, 500_000)
	lifecycleTwice := bytes.Replace(withRaw(t, in, `"connecting"`, "runnerState", "lifecycle"),
		[]byte(`"lifecycle":"connecting"`), []byte(`"lifecycle":"connecting","lifecycle":"suspended"`), 1)
	if !bytes.Contains(lifecycleTwice, []byte(`"lifecycle":"suspended"`)) {
		t.Fatal("could not duplicate lifecycle")
	}

	tests := []struct {
		name        string
		body        []byte
		contentType string // default application/json
		status      int    // 200: decided exactly as the base fixture
		code        engine.Code
		paths       []string // violation pointers, exactly, when set
		// plainOnly: the heavy cases run on one endpoint only (both share
		// the decoder), to keep the race-enabled suite fast.
		plainOnly bool
	}{
		{name: "text/plain", body: in, contentType: "text/plain", status: 415, code: engine.CodeUnsupportedMediaType},
		{name: "json in latin1", body: in, contentType: "application/json; charset=latin1", status: 415, code: engine.CodeUnsupportedMediaType},
		{name: "multipart", body: []byte("--x\r\nContent-Type: application/json\r\n\r\n" + string(in) + "\r\n--x--\r\n"), contentType: "multipart/form-data; boundary=x", status: 415, code: engine.CodeUnsupportedMediaType},
		{name: "empty body", body: nil, status: 400, code: engine.CodeMalformedJSON},
		{name: "500000 nested arrays", body: []byte(deepArrays), status: 400, code: engine.CodeMalformedJSON},
		{name: "500000 nested objects", body: []byte(deepObjects), status: 400, code: engine.CodeMalformedJSON},
		{name: "500000 nested arrays in runnerState", body: withRaw(t, in, deepArrays, "runnerState", "extra"), status: 400, code: engine.CodeMalformedJSON},
		{name: "10 MiB string in an unknown runnerState member", body: withRaw(t, in, hugeString, "runnerState", "extra"), status: 200},
		{name: "1 MiB string as runnerState.runId", body: withRaw(t, in, `"`+strings.Repeat("r", mib)+`"`, "runnerState", "runId"), status: 400, code: engine.CodeInputSchemaInvalid, paths: []string{"/runnerState/runId"}, plainOnly: true},
		{name: "1M-element array in an unknown runnerState member", body: withRaw(t, in, hugeArray, "runnerState", "extra"), status: 200, plainOnly: true},
		{name: "1M-element array in an unknown top-level member", body: withRaw(t, in, hugeArray, "extra"), status: 400, code: engine.CodeInputSchemaInvalid, paths: []string{"/extra"}, plainOnly: true},
		{name: "NaN counter", body: withRaw(t, in, "NaN", "runnerState", "reconnectCount"), status: 400, code: engine.CodeMalformedJSON},
		{name: "Infinity counter", body: withRaw(t, in, "Infinity", "runnerState", "reconnectCount"), status: 400, code: engine.CodeMalformedJSON},
		{name: "-Infinity counter", body: withRaw(t, in, "-Infinity", "runnerState", "reconnectCount"), status: 400, code: engine.CodeMalformedJSON},
		{name: "u64 max counter is a number like any other", body: withRaw(t, in, "18446744073709551615", "runnerState", "peakOutboxBytes"), status: 200},
		{name: "u64 max + 1 counter", body: withRaw(t, in, "18446744073709551616", "runnerState", "reconnectCount"), status: 400, code: engine.CodeInputSchemaInvalid, paths: []string{"/runnerState/reconnectCount"}},
		{name: "u64 max + 1 providerAttempt", body: withRaw(t, in, "18446744073709551616", "claim", "providerAttempt"), status: 400, code: engine.CodeInputSchemaInvalid, paths: []string{"/claim/providerAttempt"}},
		{name: "40-digit sequence number", body: withRaw(t, in, strings.Repeat("9", 40), "runnerState", "nextSourceSeq"), status: 400, code: engine.CodeInputSchemaInvalid, paths: []string{"/runnerState/nextSourceSeq"}},
		{name: "1e400 counter", body: withRaw(t, in, "1e400", "runnerState", "reconnectCount"), status: 400, code: engine.CodeInputSchemaInvalid, paths: []string{"/runnerState/reconnectCount"}},
		// Exact comparison of 1e999999 or of a million digits costs seconds
		// of big-number arithmetic: number literals are bounded, and one
		// beyond the bound is a violation at its place, typed or free-form.
		{name: "1e999999 counter", body: withRaw(t, in, "1e999999", "runnerState", "reconnectCount"), status: 400, code: engine.CodeInputSchemaInvalid, paths: []string{"/runnerState/reconnectCount"}},
		{name: "million-digit counter", body: withRaw(t, in, strings.Repeat("7", 1_000_000), "runnerState", "reconnectCount"), status: 400, code: engine.CodeInputSchemaInvalid, paths: []string{"/runnerState/reconnectCount"}},
		{name: "400 fraction digits in a free-form member", body: withRaw(t, in, "0."+strings.Repeat("5", 400), "runnerState", "extra"), status: 400, code: engine.CodeInputSchemaInvalid, paths: []string{"/runnerState/extra"}},
		{name: "300 fraction digits in a free-form member", body: withRaw(t, in, "0."+strings.Repeat("5", 300), "runnerState", "extra"), status: 200},
		{name: "-1 counter", body: withRaw(t, in, "-1", "runnerState", "ackedSourceSeq"), status: 400, code: engine.CodeInputSchemaInvalid, paths: []string{"/runnerState/ackedSourceSeq"}},
		{name: "duplicated lifecycle, different values", body: lifecycleTwice, status: 400, code: engine.CodeMalformedJSON},
		{name: "duplicated top-level key", body: append([]byte(`{"claim":null,`), in[1:]...), status: 400, code: engine.CodeMalformedJSON},
		{name: "invalid UTF-8 in a value", body: withRaw(t, in, "\"run-\xff\xfe\"", "runnerState", "runId"), status: 400, code: engine.CodeMalformedJSON},
		{name: "invalid UTF-8 in a key", body: bytes.Replace(withRaw(t, in, `"x"`, "runnerState", "KEY"), []byte(`"KEY"`), []byte("\"k\xc3\""), 1), status: 400, code: engine.CodeMalformedJSON},
		{name: "byte-order mark", body: append([]byte("\xEF\xBB\xBF"), in...), status: 400, code: engine.CodeMalformedJSON},
		{name: "trailing data", body: append(append([]byte{}, in...), " {}"...), status: 400, code: engine.CodeMalformedJSON},
		{name: "trailing garbage", body: append(append([]byte{}, in...), "\x00"...), status: 400, code: engine.CodeMalformedJSON},
		{name: "not an object", body: []byte(`[]`), status: 400, code: engine.CodeInputSchemaInvalid, paths: []string{""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			endpoints := []string{brPlain, brData}
			if tc.plainOnly {
				endpoints = endpoints[:1]
			}
			for _, path := range endpoints {
				body := tc.body
				if path == brData {
					if bytes.HasPrefix(body, []byte("\xEF\xBB\xBF")) {
						body = append([]byte("\xEF\xBB\xBF"), wrap(body[3:])...)
					} else {
						body = wrap(body)
					}
				}
				ct := tc.contentType
				if ct == "" {
					ct = "application/json"
				}
				req, err := http.NewRequest("POST", h.srv.URL+path, bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", ct)
				r := h.send(t, req)
				if r.status != tc.status {
					t.Fatalf("%s: status %d, want %d: %.300s", path, r.status, tc.status, r.body)
				}
				if r.status == http.StatusOK {
					var env struct {
						Result json.RawMessage `json:"result"`
					}
					if err := json.Unmarshal(r.body, &env); err != nil {
						t.Fatalf("%s: %v", path, err)
					}
					if msg := engine.CheckOutcome(fx, &engine.Decision{Result: env.Result}, nil); msg != "" {
						t.Fatalf("%s: %s", path, msg)
					}
					continue
				}
				doc := r.errorDoc(t)
				if doc.Code != tc.code {
					t.Fatalf("%s: code %q, want %q: %.300s", path, doc.Code, tc.code, r.body)
				}
				if tc.paths != nil {
					var got []string
					for _, v := range doc.Violations {
						got = append(got, v.Path)
					}
					if strings.Join(got, ",") != strings.Join(tc.paths, ",") {
						t.Fatalf("%s: violations at %q, want %q", path, got, tc.paths)
					}
				}
			}
			h.stillDecides(t, fx)
		})
	}
}

func wrap(body []byte) []byte {
	return append(append([]byte(`{"input":`), body...), '}')
}

// countingReader yields n bytes of filler (n < 0: without end) and counts
// how many were read.
type countingReader struct {
	n    int64
	read atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n >= 0 {
		left := c.n - c.read.Load()
		if left <= 0 {
			return 0, io.EOF
		}
		if int64(len(p)) > left {
			p = p[:left]
		}
	}
	for i := range p {
		p[i] = ' '
	}
	c.read.Add(int64(len(p)))
	return len(p), nil
}

// TestHostileBodyLimit: a body over the limit is refused with 413 without
// being read whole. The client's body reader counts what the transport took
// from it: a server that read the body would have made it hand over all of it.
func TestHostileBodyLimit(t *testing.T) {
	h, fx := repoHarness(t, Config{}) // the default limit, 16 MiB
	brPlain, _ := endpoints(fx)
	const limit = DefaultMaxBodyBytes
	tests := []struct {
		name          string
		contentLength int64 // -1: chunked, no Content-Length
		size          int64 // bytes the reader has; -1: endless
		maxRead       int64 // the transport must have read at most this
	}{
		// The answer comes from the Content-Length alone: what the client
		// sent is only what fits in the socket buffers before it.
		{name: "Content-Length of 1 GiB", contentLength: 1 << 30, size: 1 << 30, maxRead: limit},
		// Without a length the server reads up to the limit, then stops.
		{name: "endless chunked body", contentLength: -1, size: -1, maxRead: limit + 16<<20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cr := &countingReader{n: tc.size}
			req, err := http.NewRequest("POST", h.srv.URL+brPlain, cr)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = tc.contentLength
			req.Header.Set("Content-Type", "application/json")
			resp, err := h.srv.Client().Do(req)
			if err != nil {
				t.Fatalf("no answer (after %d bytes): %v", cr.read.Load(), err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			r := response{status: resp.StatusCode, header: resp.Header, body: b}
			if r.status != http.StatusRequestEntityTooLarge || r.errorDoc(t).Code != engine.CodeBodyTooLarge {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if n := cr.read.Load(); n > tc.maxRead {
				t.Errorf("the client had to hand over %d bytes, more than %d", n, tc.maxRead)
			} else {
				t.Logf("%d bytes left the client", n)
			}
			h.stillDecides(t, fx)
		})
	}
}

// TestHostileConcurrentGarbage: 8 clients each send 200 random bodies (raw
// bytes, mutated and truncated fixtures) at once. Each answer is a decision
// or a 400 error document; none is a server error; every request is logged;
// and the server then still decides correctly.
func TestHostileConcurrentGarbage(t *testing.T) {
	h, fx := repoHarness(t, Config{})
	fixtures, err := engine.LoadFixtures("../policy_test")
	if err != nil {
		t.Fatal(err)
	}
	const clients, perClient = 8, 200
	var wg sync.WaitGroup
	var decided, refused atomic.Int64
	errs := make(chan string, clients)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			for i := 0; i < perClient; i++ {
				body, path := garbage(rng, fixtures)
				resp, err := h.srv.Client().Post(h.srv.URL+path, "application/json", bytes.NewReader(body))
				if err != nil {
					errs <- fmt.Sprintf("request %d/%d: %v", seed, i, err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if msg := checkGarbageAnswer(resp.StatusCode, b); msg != "" {
					errs <- fmt.Sprintf("body %q: %s", body, msg)
					return
				}
				if resp.StatusCode == http.StatusOK {
					decided.Add(1)
				} else {
					refused.Add(1)
				}
			}
		}(uint64(c))
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	t.Logf("%d decided, %d refused as malformed or invalid", decided.Load(), refused.Load())
	if n := len(h.log.records()); n != clients*perClient {
		t.Errorf("%d decision log records for %d requests", n, clients*perClient)
	}
	h.stillDecides(t, fx)
}

// checkGarbageAnswer returns what is wrong with an answer to garbage.
func checkGarbageAnswer(status int, body []byte) string {
	if status == http.StatusOK {
		var env struct {
			Result map[string]any `json:"result"`
		}
		if err := json.Unmarshal(body, &env); err != nil || env.Result == nil {
			return fmt.Sprintf("200 without a result: %.300s", body)
		}
		return ""
	}
	var doc engine.Document
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Sprintf("status %d, not an error document: %.300s", status, body)
	}
	switch doc.Error.Code {
	case engine.CodeMalformedJSON, engine.CodeInputSchemaInvalid:
		if status != http.StatusBadRequest {
			return fmt.Sprintf("%s with status %d", doc.Error.Code, status)
		}
		return ""
	}
	return fmt.Sprintf("status %d, code %s: %.300s", status, doc.Error.Code, body)
}

// garbage returns a random hostile body and the endpoint to send it to.
func garbage(rng *rand.Rand, fixtures []engine.Fixture) ([]byte, string) {
	fx := fixtures[rng.IntN(len(fixtures))]
	path := "/v1/decisions/" + fx.Decision
	base := append([]byte(nil), fx.RequestBody()...)
	if rng.IntN(2) == 0 {
		path = "/v1/data/decisions/" + fx.Decision + "/decision"
		base = wrap(base)
	}
	switch rng.IntN(5) {
	case 0: // random bytes
		b := make([]byte, rng.IntN(512))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b, path
	case 1: // truncated
		return base[:rng.IntN(len(base)+1)], path
	case 2: // random JSON-ish tokens
		toks := []string{"{", "}", "[", "]", ",", ":", `"a"`, `"lifecycle"`, "1e400", "-0", "null", "true", "NaN", `"\ud800"`, "18446744073709551616", " ", "\xff"}
		var b []byte
		for n := rng.IntN(64); n > 0; n-- {
			b = append(b, toks[rng.IntN(len(toks))]...)
		}
		return b, path
	default: // a few byte mutations of a real body
		for n := 1 + rng.IntN(4); n > 0 && len(base) > 0; n-- {
			i := rng.IntN(len(base))
			switch rng.IntN(3) {
			case 0:
				base[i] = byte(rng.UintN(256))
			case 1:
				base = append(base[:i], base[i+1:]...)
			default:
				base = append(base[:i], append([]byte{"{}[]\",:0e-"[rng.IntN(10)]}, base[i:]...)...)
			}
		}
		return base, path
	}
}
