package server

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/passes"
	"github.com/arbiter-dev/arbiter/internal/wait"
	"github.com/arbiter-dev/arbiter/logship"
	"github.com/arbiter-dev/arbiter/server/ui"
	"github.com/arbiter-dev/arbiter/shadow"
)

// TestOnePassPerRequest counts what happens to an accepted body's bytes
// after they arrive (each place that scans or copies them reports to
// internal/passes): at default settings the body is scanned once, by the
// engine's one pass, and copied once, into the decision log's write batch.
// With every feature on, the counts are those stated in docs/PERFORMANCE.md;
// a change that adds a pass fails here until it is written down.
func TestOnePassPerRequest(t *testing.T) {
	// A body of a realistic size, so that the fixed cost of a record does
	// not hide a pass over it.
	compact := fmt.Sprintf(`{"tenant":"%s","used":3}`, strings.Repeat("t", 4000))
	pretty := strings.Replace(compact, `,"used"`, ",\n  \"used\"", 1)
	refused := strings.Replace(compact, `"used":3`, `"used":50`, 1) // a reason fires: the explanation has evidence
	const n = 20
	for _, tc := range []struct {
		name                 string
		body                 string
		all                  bool
		explain              bool
		wantScans, wantCopie float64 // per request, in bodies
	}{
		{name: "default settings", body: compact, wantScans: 1, wantCopie: 1},
		// A body with line breaks is compacted for the log: scanned for
		// them, then compacted into a copy, which the batch copies.
		{name: "line breaks", body: pretty, wantScans: 3, wantCopie: 2},
		// Masking scans and rewrites the input; the self-check decodes a
		// copy with the general decoder; the shadow candidate decides the
		// body with its own pass; the upload checks the input and encodes
		// it. The explanation's evidence reads the walk's value.
		{name: "every feature on", body: refused, all: true, explain: true, wantScans: 5, wantCopie: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := countPasses(t, tc.body, n, tc.all, tc.explain)
			scans := float64(got.scanned) / float64(n*len(tc.body))
			copies := float64(got.copied) / float64(n*len(tc.body))
			t.Logf("per request: %.2f scans, %.2f copies of the body", scans, copies)
			if math.Round(scans*100) != tc.wantScans*100 || math.Round(copies*100) != tc.wantCopie*100 {
				t.Errorf("per request %.2f scans and %.2f copies of the body, want %v and %v", scans, copies, tc.wantScans, tc.wantCopie)
			}
		})
	}
}

type passCount struct{ scanned, copied int64 }

// countPasses serves the access_check folder with a decision log (and,
// with all, every feature that reads the record: masking, the /ui ring,
// the EventV1 upload, a self-check of every decision and a shadow
// candidate), sends n accepted requests, waits until every part has done
// its work on them, and returns what was scanned and copied meanwhile.
func countPasses(t *testing.T, body string, n int, all, explain bool) passCount {
	live, cand, logPath, _ := loosenedWithLog(t)
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
	ecfg := folderConfig(live)
	ecfg.Tests = "" // no test decisions for the self-check: it checks the requests' only
	sc := &engine.SelfCheck{Rate: 1}
	if all {
		ecfg.SelfCheck = sc
	}
	eng, err := engine.New(context.Background(), ecfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DecisionLog: dlog}
	var sh *shadow.Shadow
	if all {
		sh = shadow.New(shadow.Config{Rate: 1, CPU: 8, Queue: 2 * n})
		t.Cleanup(func() { _ = sh.Close(context.Background()) })
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

	stop := passes.Count()
	for range n {
		if r := h.do(t, "POST", path, body, "Content-Type", "application/json"); r.status != http.StatusOK {
			stop()
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	// Everything after the answer runs in the background: wait for each.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if all {
		waitJudged(t, h, uint64(n))
		if _, ok := wait.For(10*time.Second, func() bool { return sc.Counts().Checked == uint64(n) }); !ok {
			t.Fatalf("waited 10 s for the self-check of every decision: %+v", sc.Counts())
		}
	}
	if err := dlog.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if up != nil {
		if err := up.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if got := uploaded.Load(); got < int64(n) {
			t.Fatalf("uploaded %d events, want at least %d", got, n)
		}
	}
	scanned, copied := stop()
	if w := dlog.Written(); all && w < uint64(n) || !all && w != uint64(n) {
		t.Fatalf("the log wrote %d records, want %d", w, n)
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
	if !all && (len(recs) != n || string(recs[0].Input) != strings.ReplaceAll(body, "\n  ", "")) {
		t.Fatalf("the log holds %d records, the first with input %.60q", len(recs), recs[0].Input)
	}
	return passCount{scanned, copied}
}
