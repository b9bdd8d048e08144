package decisionstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/internal/redact"
)

// Querier is what reading needs of a connection or a pool (*pgx.Conn and
// *pgxpool.Pool are both one).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Reader answers the questions the pages, `arbiter decisions` and
// `arbiter replay --store` ask of the store. It only reads.
type Reader struct {
	db    Querier
	batch int // rows per step of Stream
}

// NewReader reads the store through db.
func NewReader(db Querier) *Reader { return &Reader{db: db, batch: StreamBatch} }

// Row is one stored record with the columns the record itself lacks.
type Row struct {
	Replica string
	Kind    string
	// Outcome and Reasons are the record's summary as the store wrote it
	// (decisionlog's derivation: "error" for a refused input).
	Outcome string
	Reasons []string
	Record  decisionlog.Record
	// Cursor is where the row stands in the store's order; a page that
	// ends with this row continues from it.
	Cursor Cursor
}

// Cursor is a row's place in the keyset order (time, then decision id,
// then kind): the columns as stored, not the record's nanoseconds.
type Cursor struct {
	Time time.Time
	ID   string
	Kind string
}

// IsZero reports whether c is no cursor: from the newest (List) or the
// oldest (Stream).
func (c Cursor) IsZero() bool { return c.Time.IsZero() && c.ID == "" }

// String is the cursor as a page's link carries it: microseconds since
// the epoch (the column's precision), the kind and the decision id.
func (c Cursor) String() string {
	if c.IsZero() {
		return ""
	}
	return strconv.FormatInt(c.Time.UnixMicro(), 10) + "." + c.Kind + "." + c.ID
}

// ParseCursor reads Cursor.String; "" is the zero cursor.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	us, rest, ok1 := strings.Cut(s, ".")
	kind, id, ok2 := strings.Cut(rest, ".")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok1 || !ok2 || err != nil || id == "" {
		return Cursor{}, fmt.Errorf("%q is not a page cursor", s)
	}
	return Cursor{Time: time.UnixMicro(n).UTC(), ID: id, Kind: kind}, nil
}

// where builds the WHERE clause of f, its arguments numbered from $1.
func (f Filter) where() (string, []any) {
	var conds []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	kinds := f.Kinds
	if len(kinds) == 0 {
		kinds = []string{KindDecision}
	}
	conds = append(conds, "kind = ANY("+arg(kinds)+"::text[])")
	for _, eq := range []struct{ col, v string }{
		{"decision", f.Decision}, {"outcome", f.Outcome}, {"caller", f.Caller},
		{"replica", f.Replica}, {"path", f.Path},
	} {
		if eq.v != "" {
			conds = append(conds, eq.col+" = "+arg(eq.v))
		}
	}
	if f.Reason != "" {
		a := arg(f.Reason)
		// @> rather than = ANY: the GIN index on reasons answers it.
		conds = append(conds, "(reasons @> ARRAY["+a+"]::text[] OR error_code = "+a+")")
	}
	if f.Revision != "" {
		conds = append(conds, "starts_with(revision, "+arg(f.Revision)+")")
	}
	if !f.Since.IsZero() {
		conds = append(conds, "time >= "+arg(f.Since))
	}
	if !f.Until.IsZero() {
		conds = append(conds, "time < "+arg(f.Until))
	}
	for _, m := range f.Input {
		conds = append(conds, "input @> "+arg(string(m.document()))+"::jsonb")
	}
	return strings.Join(conds, " AND "), args
}

const rowColumns = "replica, kind, coalesce(outcome, ''), coalesce(reasons, '{}'), time, decision_id, record"

func scanRow(rows pgx.CollectableRow) (Row, error) {
	var r Row
	var rec []byte
	if err := rows.Scan(&r.Replica, &r.Kind, &r.Outcome, &r.Reasons, &r.Cursor.Time, &r.Cursor.ID, &rec); err != nil {
		return Row{}, err
	}
	r.Cursor.Kind = r.Kind
	r.Cursor.Time = r.Cursor.Time.UTC()
	if err := json.Unmarshal(rec, &r.Record); err != nil {
		return Row{}, fmt.Errorf("decision store: the record of %s (%s) is not a decision record: %w", r.Cursor.ID, r.Replica, err)
	}
	return r, nil
}

// List returns up to limit rows that match f and come before the cursor
// (the zero cursor: from the newest), newest first, and the cursor of the
// next page (zero when there is none). Pages are keyset pages: a page
// costs the same however deep it is, and rows arriving meanwhile do not
// shift the pages already shown.
func (r *Reader) List(ctx context.Context, f Filter, before Cursor, limit int) ([]Row, Cursor, error) {
	if limit <= 0 {
		return nil, Cursor{}, nil
	}
	where, args := f.where()
	if !before.IsZero() {
		n := len(args)
		args = append(args, before.Time, before.ID, before.Kind)
		// time <= is what the (time DESC) index can seek on; the row
		// comparison breaks ties within one microsecond.
		where += fmt.Sprintf(" AND time <= $%d AND (time, decision_id, kind) < ($%d, $%d, $%d)", n+1, n+1, n+2, n+3)
	}
	args = append(args, limit+1)
	q := "SELECT " + rowColumns + " FROM arbiter_store.records WHERE " + where +
		" ORDER BY time DESC, decision_id DESC, kind DESC LIMIT $" + strconv.Itoa(len(args))
	rows, err := r.db.Query(ctx, q, args...)
	if err != nil {
		return nil, Cursor{}, fmt.Errorf("decision store: listing: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanRow)
	if err != nil {
		return nil, Cursor{}, fmt.Errorf("decision store: listing: %w", err)
	}
	var next Cursor
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].Cursor
	}
	return out, next, nil
}

// Count counts the rows that match f, exactly up to max: at a million
// rows an exact count of a broad filter reads them all, so past max it
// stops and says so (more). A page says "max+ matching".
func (r *Reader) Count(ctx context.Context, f Filter, max int) (n int, more bool, err error) {
	where, args := f.where()
	args = append(args, max+1)
	q := "SELECT count(*) FROM (SELECT 1 FROM arbiter_store.records WHERE " + where +
		" LIMIT $" + strconv.Itoa(len(args)) + ") AS m"
	if err := r.db.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		return 0, false, fmt.Errorf("decision store: counting: %w", err)
	}
	if n > max {
		return max, true, nil
	}
	return n, false, nil
}

// Get returns the decision of an id, whichever replica made it (the
// newest, should two replicas have logged one id).
func (r *Reader) Get(ctx context.Context, id string) (Row, bool, error) {
	rows, err := r.db.Query(ctx, "SELECT "+rowColumns+" FROM arbiter_store.records WHERE decision_id = $1 AND kind = $2 ORDER BY time DESC LIMIT 1", id, KindDecision)
	if err != nil {
		return Row{}, false, fmt.Errorf("decision store: reading decision %s: %w", id, err)
	}
	got, err := pgx.CollectRows(rows, scanRow)
	if err != nil {
		return Row{}, false, fmt.Errorf("decision store: reading decision %s: %w", id, err)
	}
	if len(got) == 0 {
		return Row{}, false, nil
	}
	return got[0], true, nil
}

// ValuesSample is how many of the newest decisions Values reads outcomes,
// reasons, revisions and callers from.
const ValuesSample = 1_000

// Values lists distinct values of the filterable columns, for a filter
// form's choices, at most max of each: every decision name and replica
// (skipping along their indexes, so a quiet replica is listed too), and
// the outcomes, reasons, revisions and callers of the newest ValuesSample
// decisions (reading every row of a big store for them would cost a page
// load seconds).
func (r *Reader) Values(ctx context.Context, max int) (map[string][]string, error) {
	out := map[string][]string{}
	for _, col := range []string{"decision", "replica"} {
		// A loose index scan: each step finds the next value after the
		// last one on the (col, time) index.
		q := `WITH RECURSIVE v(x) AS (
  (SELECT ` + col + ` FROM arbiter_store.records WHERE kind = $1 AND ` + col + ` IS NOT NULL ORDER BY ` + col + ` LIMIT 1)
  UNION ALL
  SELECT (SELECT ` + col + ` FROM arbiter_store.records WHERE kind = $1 AND ` + col + ` > v.x ORDER BY ` + col + ` LIMIT 1) FROM v WHERE v.x IS NOT NULL
) SELECT x FROM v WHERE x IS NOT NULL LIMIT $2`
		vals, err := r.strings(ctx, q, KindDecision, max)
		if err != nil {
			return nil, err
		}
		out[col] = vals
	}
	// One pass over the newest rows for the other four.
	rows, err := r.db.Query(ctx, `SELECT outcome, revision, caller, error_code, reasons FROM arbiter_store.records
WHERE kind = $1 ORDER BY time DESC LIMIT $2`, KindDecision, ValuesSample)
	if err != nil {
		return nil, fmt.Errorf("decision store: reading the filter values: %w", err)
	}
	seen := map[string]map[string]bool{}
	add := func(key, v string) {
		if v == "" || len(out[key]) >= max {
			return
		}
		if seen[key] == nil {
			seen[key] = map[string]bool{}
		}
		if !seen[key][v] {
			seen[key][v] = true
			out[key] = append(out[key], v)
		}
	}
	var outcome, revision, caller, code string
	var reasons []string
	_, err = pgx.ForEachRow(rows, []any{&outcome, &revision, &caller, &code, &reasons}, func() error {
		add("outcome", outcome)
		add("revision", revision)
		add("caller", caller)
		add("reason", code)
		for _, rs := range reasons {
			add("reason", rs)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decision store: reading the filter values: %w", err)
	}
	for _, k := range []string{"outcome", "revision", "caller", "reason"} {
		slices.Sort(out[k])
	}
	return out, nil
}

func (r *Reader) strings(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := r.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("decision store: reading the filter values: %w", err)
	}
	vals, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("decision store: reading the filter values: %w", err)
	}
	return vals, nil
}

// StreamBatch is how many rows one step of Stream reads.
const StreamBatch = 500

// Stream calls fn for every row that matches f, oldest first (the order a
// log file is read in), reading StreamBatch rows at a time by keyset:
// never everything at once, no transaction held open between batches, and
// rows written meanwhile after the last one read are read too. An error
// from fn stops it and is returned as is.
func (r *Reader) Stream(ctx context.Context, f Filter, fn func(Row) error) error {
	where, args := f.where()
	n := len(args)
	q := "SELECT " + rowColumns + " FROM arbiter_store.records WHERE " + where +
		fmt.Sprintf(" AND time >= $%d AND (time, decision_id, kind) > ($%d, $%d, $%d)", n+1, n+1, n+2, n+3) +
		" ORDER BY time, decision_id, kind LIMIT " + strconv.Itoa(r.batch)
	var after Cursor // year 1, before any row: every row's key is greater
	for {
		rows, err := r.db.Query(ctx, q, append(args, after.Time, after.ID, after.Kind)...)
		if err != nil {
			return fmt.Errorf("decision store: reading: %w", err)
		}
		batch, err := pgx.CollectRows(rows, scanRow)
		if err != nil {
			return fmt.Errorf("decision store: reading: %w", err)
		}
		for _, row := range batch {
			if err := fn(row); err != nil {
				return err
			}
		}
		if len(batch) < r.batch {
			return nil
		}
		after = batch[len(batch)-1].Cursor
	}
}

// Connect opens one read-only connection to the store at dsn, for a
// command that reads it (arbiter decisions, arbiter replay --store), and
// the function that closes it. It migrates nothing: a store no server has
// written yet is an error of the first query.
func Connect(ctx context.Context, dsn string) (*Reader, func(), error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors may quote the URL, password and all.
		return nil, nil, fmt.Errorf("decision store: the URL %s does not parse as a PostgreSQL connection string", redact.URL(dsn))
	}
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "arbiter (reading)"
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("decision store %s: %w", redact.URL(dsn), err)
	}
	return NewReader(conn), func() { _ = conn.Close(context.Background()) }, nil
}

// Reader reads the store the sink writes, through the sink's pool: the
// pages of a serve process with --decision-store. It must not be used
// after Close.
func (s *Sink) Reader() *Reader { return NewReader(s.store.pool) }
