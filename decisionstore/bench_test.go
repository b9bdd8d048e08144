package decisionstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// benchRows is how many rows BenchmarkListByRun loads:
// ARBITER_BENCH_ROWS, or a small default so that `go test -bench` in CI
// stays quick.
func benchRows(b *testing.B) int {
	n := 20_000
	if s := os.Getenv("ARBITER_BENCH_ROWS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1000 {
			b.Fatalf("ARBITER_BENCH_ROWS=%q: want a number of rows, at least 1000", s)
		}
		n = v
	}
	return n
}

// Runs of the loaded rows: each run has runLen decisions, and runsAtOnce
// runs interleave (their decisions alternate in time), as concurrent
// pipelines' decisions do.
const (
	runLen     = 40
	runsAtOnce = 10
	benchDays  = 7
)

// loadRuns fills the store at url with n decisions spread evenly over the
// benchDays days before end, one partition a day, written by the database
// itself (INSERT ... SELECT from generate_series: the sink would take
// hours at 10 million), with the indexes the sink's
// rows have. Row i is at end - (n-i)*step; its run is
// run-(i/(runLen*runsAtOnce)*runsAtOnce + i%runsAtOnce): runLen decisions
// of a run within runLen*runsAtOnce consecutive rows. Its records look
// like a CI pipeline's: a run, a step, an actor, an environment.
func loadRuns(b testing.TB, s *Store, n int, end time.Time) {
	ctx := context.Background()
	step := benchDays * 24 * time.Hour / time.Duration(n)
	var days []time.Time
	for d := 0; d <= benchDays; d++ {
		days = append(days, end.Add(-time.Duration(d)*24*time.Hour))
	}
	if err := s.EnsurePartitions(ctx, days...); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	const chunk = 200_000 // one statement each, so that a load's progress shows
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		_, err := s.Pool().Exec(ctx, `
INSERT INTO arbiter_store.records (time, decision_id, kind, replica, decision, path, revision, caller, outcome, reasons, error_code, duration_ns, record)
SELECT t, id, 'decision', 'replica-' || (i % 3), 'deploy', '/v1/decisions/deploy', 'rev-' || (i / 100000), 'ci-' || (i % 17),
  CASE WHEN i % 5 = 0 THEN 'deny' ELSE 'allow' END,
  CASE WHEN i % 5 = 0 THEN ARRAY['quota_exhausted'] ELSE ARRAY[]::text[] END, '', 1000 + i % 5000,
  json_build_object('decision_id', id, 'time', t, 'decision', 'deploy', 'path', '/v1/decisions/deploy',
    'revision', 'rev-' || (i / 100000),
    'input', json_build_object('run', json_build_object('runId', run, 'attempt', i % 3, 'step', 'step-' || (i % $6::int)),
      'actor', json_build_object('name', 'user-' || (i % 997), 'team', 'team-' || (i % 31)),
      'env', CASE WHEN i % 4 = 0 THEN 'staging' ELSE 'prod' END,
      'labels', json_build_object('repo', 'repo-' || (i % 211), 'branch', 'main')),
    'result', json_build_object('outcome', CASE WHEN i % 5 = 0 THEN 'deny' ELSE 'allow' END,
      'reasons', CASE WHEN i % 5 = 0 THEN json_build_array('quota_exhausted') ELSE json_build_array() END),
    'duration_ns', 1000 + i % 5000)::text
FROM (SELECT i, $3::timestamptz - ($4::bigint - i) * $5::interval AS t, 'bench-' || lpad(i::text, 10, '0') AS id,
        'run-' || (i / ($6::int * $7::int) * $7::int + i % $7::int) AS run
      FROM generate_series($1::bigint, $2::bigint - 1) AS i) AS g`,
			lo, hi, end, n, step.String(), runLen, runsAtOnce)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("loaded %d of %d rows (%.0f rows/s)", hi, n, float64(hi)/time.Since(start).Seconds())
	}
	if _, err := s.Pool().Exec(ctx, `ANALYZE arbiter_store.records`); err != nil {
		b.Fatal(err)
	}
}

// runOf is the run of loaded row i.
func runOf(i int) string {
	return fmt.Sprintf("run-%d", i/(runLen*runsAtOnce)*runsAtOnce+i%runsAtOnce)
}

// BenchmarkListByRun: the page's list filtered by one run
// (/run/runId = X, 40 of the rows) over the whole 7 days, the run picked
// anywhere in them (the oldest ones are what walking the time index
// reads everything for), and, for comparison, a filter most rows match
// (/env = prod) and no input filter. ARBITER_BENCH_ROWS rows (default
// 20,000); ARBITER_BENCH_URL reuses a database loaded by an earlier run
// (it is loaded when it has no records).
func BenchmarkListByRun(b *testing.B) {
	n := benchRows(b)
	url := os.Getenv("ARBITER_BENCH_URL")
	if url == "" {
		url = cluster.DB(b)
	}
	s, err := Open(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	end := time.Date(2026, 12, 4, 23, 59, 0, 0, time.UTC)
	var have int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM arbiter_store.records LIMIT 1) AS x`).Scan(&have); err != nil {
		b.Fatal(err)
	}
	if have == 0 {
		loadRuns(b, s, n, end)
	}
	r := NewReader(s.Pool())
	since := end.Add(-benchDays * 24 * time.Hour)
	list := func(b *testing.B, f Filter, want int) {
		rows, _, err := r.List(ctx, f, Cursor{}, 50)
		if err != nil {
			b.Fatal(err)
		}
		if want >= 0 && len(rows) != want {
			b.Fatalf("listed %d rows, want %d", len(rows), want)
		}
	}
	match := func(s string) InputMatch {
		m, err := ParseInputMatch(s)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	b.Run("run", func(b *testing.B) {
		i := 0
		for b.Loop() {
			// Runs spread over the whole range, oldest to newest.
			row := (i * 7919 * runLen * runsAtOnce) % n
			i++
			// The last runs may be cut short by n.
			list(b, Filter{Since: since, Input: []InputMatch{match("/run/runId = " + runOf(row))}}, -1)
		}
	})
	b.Run("oldest-run", func(b *testing.B) {
		for b.Loop() {
			list(b, Filter{Since: since, Input: []InputMatch{match("/run/runId = " + runOf(0))}}, runLen)
		}
	})
	b.Run("common", func(b *testing.B) {
		for b.Loop() {
			list(b, Filter{Since: since, Input: []InputMatch{match("/env = prod")}}, 50)
		}
	})
	b.Run("unfiltered", func(b *testing.B) {
		for b.Loop() {
			list(b, Filter{Since: since}, 50)
		}
	})
}
