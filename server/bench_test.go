package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/arbiter-dev/arbiter/decisionlog"
)

// BenchmarkServeDecision is the server's share of one decision on the
// corpus: handler, metrics and the decision log (to a file), without TCP.
// Compare with engine's BenchmarkCorpus/decide in the same run.
func BenchmarkServeDecision(b *testing.B) {
	eng, inputs := repoCorpus(b, 1000)
	for _, withLog := range []bool{false, true} {
		name := "log_off"
		if withLog {
			name = "log_on"
		}
		b.Run(name, func(b *testing.B) {
			cfg := Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if withLog {
				dl, err := decisionlog.Open(decisionlog.Options{Path: filepath.Join(b.TempDir(), "d.log")})
				if err != nil {
					b.Fatal(err)
				}
				defer dl.Close(context.Background())
				cfg.DecisionLog = dl
			}
			h := New(cfg, eng)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				in := inputs[i%len(inputs)]
				i++
				req := httptest.NewRequest(http.MethodPost, "/v1/decisions/"+in.Decision, bytes.NewReader(in.Body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
