package ui

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/internal/pgtest"
)

// BenchmarkStorePages times the pages over HTTP on a decision store of
// ARBITER_STORE_BENCH_ROWS decisions (default 20,000: the smoke size of
// make bench-quick; docs/BENCHMARKS.md has 1,000,000):
//
//	ARBITER_STORE_BENCH_ROWS=1000000 go test -run '^$' -bench BenchmarkStorePages -benchtime 20x ./server/ui/
//
// The store is filled fast, by SQL in this benchmark only: the fixtures'
// decisions are written through a sink, then copied by generate_series
// into rows of three replicas, 50 ms apart, each input given a run id
// (/run/runId = run-N) for the input filter to find (the input column is
// computed from the record).
func BenchmarkStorePages(b *testing.B) {
	rows := 20_000
	if v := os.Getenv("ARBITER_STORE_BENCH_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("ARBITER_STORE_BENCH_ROWS=%q: want a number of at least 1000", v)
		}
		rows = n
	}
	ctx := context.Background()
	cluster := pgtest.Start(b)
	dbURL := cluster.DB(b)
	st, err := decisionstore.Open(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	eng, all := repoDecided(b)
	var templates []decisionlog.Record
	for _, d := range all {
		if bytes.Contains(d.rec.Input, []byte(`\u0000`)) {
			continue // the fill below edits records as jsonb, which holds no \u0000
		}
		templates = append(templates, d.rec)
	}
	sink, err := decisionstore.NewSink(dbURL, decisionstore.SinkConfig{Replica: "template", OutcomeKey: OutcomeKeys(eng)})
	if err != nil {
		b.Fatal(err)
	}
	sink.Write(templates)
	if err := sink.Close(ctx); err != nil {
		b.Fatal(err)
	}
	newest := time.Now().UTC()
	step := 50 * time.Millisecond
	var days []time.Time
	for d := newest.Add(-time.Duration(rows) * step); d.Before(newest.Add(24 * time.Hour)); d = d.Add(24 * time.Hour) {
		days = append(days, d)
	}
	if err := st.EnsurePartitions(ctx, append(days, newest)...); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	_, err = st.Pool().Exec(ctx, `
INSERT INTO arbiter_store.records (time, decision_id, kind, replica, decision, path, revision, caller, outcome, reasons, error_code, duration_ns, record)
SELECT tm, 'd-' || g, 'decision', 'replica-' || (g % 3), t.decision, t.path, t.revision, 'caller-' || (g % 7),
  t.outcome, t.reasons, t.error_code, t.duration_ns,
  (t.record::jsonb || jsonb_build_object('decision_id', 'd-' || g, 'time', to_jsonb(tm)) || CASE WHEN inp IS NULL THEN '{}' ELSE jsonb_build_object('input', inp) END)::text
FROM generate_series(1, $3::int) AS g
CROSS JOIN LATERAL (SELECT $1::timestamptz - g * $2::interval AS tm) AS at
JOIN (SELECT (row_number() OVER (ORDER BY decision_id)) - 1 AS i, * FROM arbiter_store.records_json WHERE replica = 'template') AS t ON t.i = g % $4
CROSS JOIN LATERAL (SELECT CASE WHEN jsonb_typeof(t.input) = 'object' THEN t.input || jsonb_build_object('run', jsonb_build_object('runId', 'run-' || g)) ELSE t.input END AS inp) AS x`,
		newest, step, rows, len(templates))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `ANALYZE arbiter_store.records`); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d rows stored in %s", rows, time.Since(start).Round(time.Millisecond))

	// The page's parts: one page of rows, the bounded count, the form's
	// values.
	r := decisionstore.NewReader(st.Pool())
	for _, part := range []struct {
		name string
		run  func() error
	}{
		{"part-rows", func() error {
			_, _, err := r.List(ctx, decisionstore.Filter{}, decisionstore.Cursor{}, DefaultPageSize)
			return err
		}},
		{"part-count", func() error { _, _, err := r.Count(ctx, decisionstore.Filter{}, DefaultCountBound); return err }},
		{"part-values", func() error { _, err := r.Values(ctx, 200); return err }},
	} {
		b.Run(part.name, func(b *testing.B) {
			for b.Loop() {
				if err := part.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	srv := httptest.NewServer(New(Config{Recent: NewRing(RingConfig{}), Decider: eng, Store: FromStore(decisionstore.NewReader(st.Pool()))}))
	defer srv.Close()
	mid := rows / 2
	for _, p := range []struct{ name, path string }{
		{"list", "/ui/decisions"},
		{"list-replica", "/ui/decisions?replica=replica-1"},
		{"list-refused", "/ui/decisions?outcome=" + OutcomeError},
		{"list-input", "/ui/decisions?input=" + url.QueryEscape("/run/runId = run-"+strconv.Itoa(mid))},
		{"list-window", "/ui/decisions?replica=replica-2&since=" + url.QueryEscape(newest.Add(-time.Duration(mid)*step).Format(time.RFC3339)) +
			"&until=" + url.QueryEscape(newest.Add(-time.Duration(mid-2000)*step).Format(time.RFC3339))},
		{"decision-by-id", "/ui/decisions/d-" + strconv.Itoa(mid)},
	} {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Get(srv.URL + p.path)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("%s: status %d", p.path, resp.StatusCode)
				}
			}
		})
	}
}
