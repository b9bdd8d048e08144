package server

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/race"
	"github.com/arbiter-dev/arbiter/internal/wait"
	"github.com/arbiter-dev/arbiter/logship"
	"github.com/arbiter-dev/arbiter/server/ui"
	"github.com/arbiter-dev/arbiter/shadow"
)

// TestOnePassPerRequest holds what happens to an accepted body's bytes
// after they arrive, in bytes the process allocates per request (the
// test's client and every background part of the request included): at
// default settings, the body's own buffer and the projected input the walk
// builds; with line breaks, the log's compacting copy; with every feature
// on, the copies and values stated in docs/PERFORMANCE.md. Each bound is
// under one more body than those, so a change that copies the body once
// more, or decodes it again, fails here until it is written down.
func TestOnePassPerRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 60 bodies of 512 KiB")
	}
	race.Skip(t, "the race detector drops sync.Pool's items at random (3.18 bodies a request with line breaks), so allocations are measured without it")
	// A body large enough that the fixed cost of a request and of its
	// record is a small part of one body.
	compact := fmt.Sprintf(`{"tenant":"%s","used":3}`, strings.Repeat("t", 512<<10))
	pretty := strings.Replace(compact, `,"used"`, ",\n  \"used\"", 1)
	refused := strings.Replace(compact, `"used":3`, `"used":50`, 1) // a reason fires: the explanation has evidence
	const n = 20
	for _, tc := range []struct {
		name    string
		body    string
		all     bool
		explain bool
		bodies  float64 // bytes allocated per request, in bodies, at most
	}{
		{name: "default settings", body: compact, bodies: 1.5},
		// A body with line breaks is compacted for the log into a copy.
		{name: "line breaks", body: pretty, bodies: 2.5},
		// Masking decodes the input's tokens; the self-check copies it and
		// decodes the copy with the general decoder; the shadow candidate
		// decides the body with its own pass; the upload encodes and
		// compresses the input in batches. The explanation's evidence
		// reads the walk's value. About 16 bodies, by the batches' sizes.
		{name: "every feature on", body: refused, all: true, explain: true, bodies: 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alloc := countPasses(t, tc.body, n, tc.all, tc.explain)
			bodies := float64(alloc) / float64(n*len(tc.body))
			t.Logf("per request: %.2f bodies allocated", bodies)
			if bodies > tc.bodies {
				t.Errorf("per request %.2f bodies allocated, want at most %v", bodies, tc.bodies)
			}
		})
	}
}

// countPasses serves the access_check folder with a decision log (and,
// with all, every feature that reads the record: masking, the /ui ring,
// the EventV1 upload, a self-check of every decision and a shadow
// candidate), sends n accepted requests, waits until every part has done
// its work on them, and returns the bytes the process allocated meanwhile.
func countPasses(t *testing.T, body string, n int, all, explain bool) uint64 {
	liveDir, cand, logPath, _ := loosenedWithLog(t)
	opts := decisionlog.Options{Path: logPath}
	var uploaded atomic.Int64
	var up *logship.Uploader
	if all {
		opts.Mask = []string{"/suspended"} // a pointer the body does not hold: the input is scanned, not rewritten
		collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var events []json.RawMessage
			var rd io.Reader = r.Body
			if r.Header.Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(r.Body)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				rd = zr
			}
			b, _ := io.ReadAll(rd)
			if err := json.Unmarshal(b, &events); err == nil {
				uploaded.Add(int64(len(events)))
			}
		}))
		t.Cleanup(collector.Close)
		var err error
		if up, err = logship.New(logship.Config{URL: collector.URL, Interval: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		opts.Sinks = []decisionlog.Sink{up, ui.NewRing(ui.RingConfig{})}
	}
	dlog, err := decisionlog.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	ecfg := folderConfig(liveDir)
	ecfg.Tests = "" // no test decisions for the self-check: it checks the requests' only
	var sh *shadow.Shadow
	if all { // a self-check of every decision, with room for every request's input: none is dropped
		sh = shadow.New(shadow.Config{Rate: 1, CPU: 8, Queue: 2 * n, SelfCheck: 1, SelfCheckBytes: int64(2 * n * len(body))})
		t.Cleanup(func() { _ = sh.Close(context.Background()) })
		ecfg.SelfCheck = sh.SelfCheck
	}
	eng, err := live.New(context.Background(), ecfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DecisionLog: dlog}
	if all {
		cfg.Shadow = &ShadowConfig{Shadow: sh, Engine: eng, Gate: shadow.Gate{MinDecisions: 1}, Admins: []string{""}}
	}
	h := serve(t, cfg, eng)
	if all {
		src, _ := json.Marshal(ShadowSource{Policies: filepath.Join(cand, "policies"), Schemas: filepath.Join(cand, "schemas")})
		if r := h.do(t, "POST", "/v1/shadow", string(src)); r.status != http.StatusOK {
			t.Fatalf("loading the candidate: %d %s", r.status, r.body)
		}
	}
	path := "/v1/decisions/access_check"
	if explain {
		path += "?explain=true"
	}

	// One request first: buffers and pools the process keeps are not the
	// requests'.
	if r := h.do(t, "POST", path, body, "Content-Type", "application/json"); r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if all {
		waitJudged(t, h, 1)
		if _, ok := wait.For(10*time.Second, func() bool { return sh.SelfChecked() == 1 }); !ok {
			t.Fatalf("waited 10 s for the self-check of the first decision: %d checked", sh.SelfChecked())
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		if r := h.do(t, "POST", path, body, "Content-Type", "application/json"); r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	// Everything after the answer runs in the background: wait for each.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if all {
		waitJudged(t, h, uint64(n+1))
		if _, ok := wait.For(10*time.Second, func() bool { return sh.SelfChecked() == uint64(n+1) }); !ok {
			t.Fatalf("waited 10 s for the self-check of every decision: %d checked", sh.SelfChecked())
		}
	}
	if err := dlog.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if up != nil {
		if err := up.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if got := uploaded.Load(); got < int64(n+1) {
			t.Fatalf("uploaded %d events, want at least %d", got, n+1)
		}
	}
	runtime.ReadMemStats(&after)
	if w := dlog.Written(); all && w < uint64(n+1) || !all && w != uint64(n+1) {
		t.Fatalf("the log wrote %d records, want %d", w, n+1)
	}
	var recs []decisionlog.Record
	if err := decisionlog.ReadLog(logPath, func(rec decisionlog.Record) error {
		if rec.IsDecision() {
			recs = append(recs, rec)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !all && (len(recs) != n+1 || string(recs[0].Input) != strings.ReplaceAll(body, "\n  ", "")) {
		t.Fatalf("the log holds %d records, the first with input %.60q", len(recs), recs[0].Input)
	}
	return after.TotalAlloc - before.TotalAlloc
}
