// Package decisionstore keeps every replica's decision records in one
// PostgreSQL database: the schema (embedded, versioned migrations), its
// daily partitions and their retention, and the sink of the
// decision-record pipeline that writes to it (sink.go), off the answer
// path.
package decisionstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arbiter-dev/arbiter/internal/redact"
)

// Schema is the PostgreSQL schema the store owns.
const Schema = "arbiter_store"

// lockKey is the advisory lock under which migrations and partition changes
// run, so that replicas starting at once do not race: "arbiter" in ASCII.
const lockKey = 0x617262697465

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a migrated decision store: a pool of connections to it.
type Store struct {
	pool *pgxpool.Pool
	url  string // redacted (redact.URL)
}

// Open connects to the database at dbURL and migrates its schema, under an
// advisory lock (several replicas may open it at once).
func Open(ctx context.Context, dbURL string) (*Store, error) {
	s, err := connect(dbURL)
	if err != nil {
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// connect makes the pool without touching the database: connections are
// made when used.
func connect(dbURL string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		// pgx's parse errors may quote the URL, password and all.
		return nil, fmt.Errorf("decision store: the URL %s does not parse as a PostgreSQL connection string", redact.URL(dbURL))
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("decision store %s: %w", redact.URL(dbURL), err)
	}
	return &Store{pool: pool, url: redact.URL(dbURL)}, nil
}

// Pool is the store's connection pool, for readers.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// URL is the store's URL with its password and query values replaced
// (redact.URL), for logs and status.
func (s *Store) URL() string { return s.url }

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads the embedded NNN_name.sql files in version order.
func loadMigrations() ([]migration, error) {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, f := range files {
		base := strings.TrimPrefix(f, "migrations/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("decision store: migration %s is not named NNN_name.sql", base)
		}
		b, err := migrations.ReadFile(f)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: base, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("decision store: two migrations of version %d", ms[i].version)
		}
	}
	return ms, nil
}

// Migrate applies the migrations the database has not recorded, in order,
// each in one transaction under the advisory lock, and records each in
// arbiter_store.schema_version. A database of a newer version than this
// binary knows is refused: its schema may not be what this code writes.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	for _, m := range ms {
		if err := s.locked(ctx, func(tx pgx.Tx) error { return apply(ctx, tx, m, ms[len(ms)-1].version) }); err != nil {
			return fmt.Errorf("decision store %s: migration %s: %w", s.url, m.name, err)
		}
	}
	return nil
}

func apply(ctx context.Context, tx pgx.Tx, m migration, latest int) error {
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+Schema+`;
CREATE TABLE IF NOT EXISTS `+Schema+`.schema_version (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	var newest int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+Schema+`.schema_version`).Scan(&newest); err != nil {
		return err
	}
	if newest > latest {
		return fmt.Errorf("the database is at schema version %d, newer than this arbiter knows (%d): upgrade arbiter", newest, latest)
	}
	var done bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+Schema+`.schema_version WHERE version = $1)`, m.version).Scan(&done); err != nil || done {
		return err
	}
	if _, err := tx.Exec(ctx, m.sql); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+Schema+`.schema_version (version) VALUES ($1)`, m.version)
	return err
}

// locked runs f in one transaction holding the store's advisory lock.
func (s *Store) locked(ctx context.Context, f func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(lockKey)); err != nil {
			return err
		}
		return f(tx)
	})
}

// day is the UTC day of t, at midnight.
func day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

const partitionPrefix = "records_"

func partitionName(d time.Time) string { return partitionPrefix + d.Format("20060102") }

// EnsurePartitions creates the partitions of the days of ts that do not
// exist yet, under the advisory lock. The writer calls it for today and
// tomorrow ahead of time, and for the days of a batch before writing it.
func (s *Store) EnsurePartitions(ctx context.Context, ts ...time.Time) error {
	days := map[time.Time]bool{}
	for _, t := range ts {
		days[day(t)] = true
	}
	return s.locked(ctx, func(tx pgx.Tx) error {
		for d := range days {
			_, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s PARTITION OF %s.records FOR VALUES FROM ('%s') TO ('%s')`,
				Schema, partitionName(d), Schema, d.Format(time.RFC3339), d.AddDate(0, 0, 1).Format(time.RFC3339)))
			if err != nil {
				return fmt.Errorf("partition %s: %w", partitionName(d), err)
			}
		}
		return nil
	})
}

// Partitions lists the days that have a partition, oldest first.
func (s *Store) Partitions(ctx context.Context) ([]time.Time, error) {
	rows, err := s.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_class p ON p.oid = i.inhparent
JOIN pg_namespace n ON n.oid = p.relnamespace
WHERE n.nspname = $1 AND p.relname = 'records'`, Schema)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var days []time.Time
	for _, n := range names {
		if d, err := time.Parse("20060102", strings.TrimPrefix(n, partitionPrefix)); err == nil && strings.HasPrefix(n, partitionPrefix) {
			days = append(days, d)
		}
	}
	sort.Slice(days, func(i, j int) bool { return days[i].Before(days[j]) })
	return days, nil
}

// DropBefore drops the partitions whose whole day ended before cutoff
// (retention: cutoff is now minus --decision-store-retention), and returns
// the days dropped.
func (s *Store) DropBefore(ctx context.Context, cutoff time.Time) ([]time.Time, error) {
	days, err := s.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	var dropped []time.Time
	err = s.locked(ctx, func(tx pgx.Tx) error {
		for _, d := range days {
			if d.AddDate(0, 0, 1).After(cutoff) {
				break
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s.%s`, Schema, partitionName(d))); err != nil {
				return err
			}
			dropped = append(dropped, d)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decision store %s: retention: %w", s.url, err)
	}
	return dropped, nil
}
