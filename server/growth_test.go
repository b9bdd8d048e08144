package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/corpus"
	"github.com/arbiter-dev/arbiter/internal/wait"
	"github.com/arbiter-dev/arbiter/server/ui"
)

// TestLargeBodiesCostTheirSize holds the growth of a request's cost with
// its body over HTTP, where the in-process benchmarks do not look: the
// read, its buffers and limits, the decision log (to a file) and the /ui
// ring, through a real listener. Measured in bytes the process allocates
// per request (the test's client included), never in time: an 8 MiB
// Runner state allocates at most 2.3 times what a 4 MiB one does, and
// each at most a bound in bodies. A body with a Content-Length is read
// into one buffer of its size and its record is written from that buffer,
// so about one body is allocated; one of unknown length (chunked) is read
// into a buffer that doubles. Every fresh large buffer is memory faulted
// in and cleared by the kernel: before, a Content-Length body was cleared
// and then filled, and the log copied it, which made an 8 MiB state cost
// 3.4 times a 4 MiB one over HTTP (issue 31).
func TestLargeBodiesCostTheirSize(t *testing.T) {
	if testing.Short() {
		t.Skip("generates 12 MiB of Runner states")
	}
	eng, err := live.New(context.Background(), engine.Config{Policies: "../policies", Schemas: "../schemas"})
	if err != nil {
		t.Fatal(err)
	}
	dlog, err := decisionlog.Open(decisionlog.Options{Path: filepath.Join(t.TempDir(), "decisions.log"), Sinks: []decisionlog.Sink{ui.NewRing(ui.RingConfig{})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dlog.Close(context.Background()) })
	h := serve(t, Config{DecisionLog: dlog}, eng)

	type state struct {
		decision string
		body     []byte
	}
	states := map[int]state{}
	for _, mib := range []int{4, 8} {
		decision, body, err := corpus.Sized("../policy_test", mib<<20, func(decision string, body []byte) bool {
			_, err := eng.Decide(context.Background(), decision, body, engine.Options{})
			return err == nil
		})
		if err != nil {
			t.Fatal(err)
		}
		states[mib] = state{decision, body}
	}
	for _, tc := range []struct {
		name    string
		chunked bool
		perBody float64 // bytes allocated per request, in bodies, at most
	}{
		{name: "content-length", perBody: 1.5},
		{name: "chunked", chunked: true, perBody: 4.5}, // doubling: under twice the last buffer, itself under twice the body
	} {
		t.Run(tc.name, func(t *testing.T) {
			alloc := map[int]float64{}
			for _, mib := range []int{4, 8} {
				st := states[mib]
				post := func() {
					var body io.Reader = bytes.NewReader(st.body)
					if tc.chunked {
						body = io.MultiReader(body) // no length known: sent chunked
					}
					req, err := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/decisions/"+st.decision, body)
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set("Content-Type", "application/json")
					if r := h.send(t, req); r.status != http.StatusOK {
						t.Fatalf("status %d: %.300s", r.status, r.body)
					}
				}
				post() // buffers and pools the process keeps are not the request's
				const n = 4
				written := dlog.Written()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for range n {
					post()
				}
				wait.Until(t, time.Minute, "the log writes the records", func() bool { return dlog.Written() >= written+n })
				runtime.ReadMemStats(&after)
				alloc[mib] = float64(after.TotalAlloc-before.TotalAlloc) / n
				perBody := alloc[mib] / float64(len(st.body))
				t.Logf("%d MiB state (%d bytes): %.1f MiB allocated per request, %.2f bodies", mib, len(st.body), alloc[mib]/(1<<20), perBody)
				if perBody > tc.perBody {
					t.Errorf("%d MiB state: %.2f bodies allocated per request, want at most %v", mib, perBody, tc.perBody)
				}
			}
			if growth := alloc[8] / alloc[4]; growth > 2.3 {
				t.Errorf("an 8 MiB state allocates %.2fx a 4 MiB one, want at most 2.3x", growth)
			} else {
				t.Logf("8 MiB / 4 MiB: %.2fx", growth)
			}
		})
	}
}
