package decisionstore

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/internal/pgtest"
)

// cluster is the package's PostgreSQL, shared by its tests (each takes a
// database of its own); an outage test starts one of its own.
var cluster *pgtest.Cluster

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, &cluster)) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestMigrateConcurrentAndIdempotent: three replicas opening one empty
// database at once migrate it once; opening it again changes nothing.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	latest := ms[len(ms)-1].version
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() {
			s, err := Open(ctxT(t), url)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("opener %d: %v", i, err)
		}
	}
	s := open(t, url)
	ctx := ctxT(t)
	if v, err := s.Version(ctx); err != nil || v != latest {
		t.Fatalf("schema version %d, %v; want %d", v, err, latest)
	}
	var rows int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM arbiter_store.schema_version`).Scan(&rows); err != nil || rows != len(ms) {
		t.Fatalf("schema_version holds %d rows (%v); want one per migration, %d", rows, err, len(ms))
	}
}

// TestMigrateRefusesNewerSchema: a database migrated by a newer arbiter is
// not written by an older one.
func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	s := open(t, url)
	if _, err := s.Pool().Exec(ctxT(t), `INSERT INTO arbiter_store.schema_version (version) VALUES (9999)`); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctxT(t), url)
	if err == nil || !strings.Contains(err.Error(), "newer than this arbiter knows") {
		t.Fatalf("Open of a newer schema: %v; want a refusal", err)
	}
}

// TestRetentionDropsOldPartitions: partitions are made per UTC day, on
// demand (concurrently too), and retention drops the days wholly before
// the cutoff and keeps the others.
func TestRetentionDropsOldPartitions(t *testing.T) {
	t.Parallel()
	s := open(t, cluster.DB(t))
	ctx := ctxT(t)
	d := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.DateOnly, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			// The last second of a day and the first of the next: two days.
			if err := s.EnsurePartitions(ctx, d("2026-11-01"), d("2026-11-02").Add(-time.Second), d("2026-11-02"), d("2026-11-20").Add(13*time.Hour)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got := func() string {
		t.Helper()
		days, err := s.Partitions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range days {
			out = append(out, d.Format(time.DateOnly))
		}
		return strings.Join(out, " ")
	}
	if g := got(); g != "2026-11-01 2026-11-02 2026-11-20" {
		t.Fatalf("partitions %s", g)
	}
	// A cutoff inside 2026-11-02 drops 11-01 (wholly before it) only.
	dropped, err := s.DropBefore(ctx, d("2026-11-02").Add(time.Hour))
	if err != nil || len(dropped) != 1 || !dropped[0].Equal(d("2026-11-01")) {
		t.Fatalf("dropped %v, %v; want 2026-11-01", dropped, err)
	}
	if g := got(); g != "2026-11-02 2026-11-20" {
		t.Fatalf("after retention: partitions %s", g)
	}
	if dropped, err := s.DropBefore(ctx, d("2026-11-03")); err != nil || len(dropped) != 1 {
		t.Fatalf("dropped %v, %v; want 2026-11-02 (its day ends at the cutoff)", dropped, err)
	}
	if g := got(); g != "2026-11-20" {
		t.Fatalf("after retention: partitions %s", g)
	}
}

// Version is the newest migration the database has applied (0: none).
func (s *Store) Version(ctx context.Context) (int, error) {
	var v int
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+Schema+`.schema_version`).Scan(&v)
	return v, err
}
