package decisionstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

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
// `arbiter replay --store` ask of the store. It only reads, and every row
// it reads is hostile: a list reads the columns it shows, never the
// records, and one record is loaded up to a bound, and decoded or shown
// in part (Partial), never an error of the whole read.
type Reader struct {
	db    Querier
	batch int // rows per step of Stream
	// MaxRecordBytes bounds what Get and ListRecords load of one record
	// (default DefaultRecordBytes): a larger one is shown in part. Stream
	// loads up to the longest line a decision log writes, as replay from
	// the files reads.
	MaxRecordBytes int64
	unreadable     atomic.Uint64
}

// DefaultRecordBytes is what a reader loads of one record by default:
// twice the default --max-body-bytes, so that every record a replica logs
// under the default limits is loaded whole, and a row of hundreds of MB
// (written by hand) costs a page its first HeadBytes.
const DefaultRecordBytes = 32 << 20

// HeadBytes is how much of a record shown in part a reader keeps: its
// first bytes (it reads at most HeadBytes characters, at most 4 bytes
// each, and cuts them to HeadBytes bytes).
const HeadBytes = 64 << 10

// NewReader reads the store through db.
func NewReader(db Querier) *Reader {
	return &Reader{db: db, batch: StreamBatch, MaxRecordBytes: DefaultRecordBytes}
}

// Unreadable counts the rows whose record this reader loaded and could
// not decode (not a decision record): their rows are shown from their
// columns, and replay skips them.
func (r *Reader) Unreadable() uint64 { return r.unreadable.Load() }

// Row is one stored record with the columns the record itself lacks.
type Row struct {
	Replica string
	Kind    string
	// Outcome and Reasons are the record's summary as the store wrote it
	// (decisionlog's derivation: "error" for a refused input).
	Outcome string
	Reasons []string
	// Record is the stored record, decoded. When the reader did not load
	// it (List) or could not decode it (Partial), it is what the row's
	// columns say: the id, time, decision, path, revision, caller,
	// duration and error code.
	Record decisionlog.Record
	// Partial, when set, is the stored record shown in part: it is larger
	// than the reader loads, or it is not a decision record.
	Partial *Partial
	// Cursor is where the row stands in the store's order; a page that
	// ends with this row continues from it.
	Cursor Cursor
	// RunID is the run id its input holds (ListRuns), at most
	// RunIDChars characters of it; "" when it names none, or when its
	// record is larger than RunRecordBytes (RunUnread says so).
	RunID     string
	RunUnread bool
}

// RunRecordBytes bounds the records whose run id a list reads: reading
// it parses the record in the database, and a list of 50 rows of 16 MiB
// would parse 800 MiB per page load. Larger records are listed without
// their run id (RunUnread), and the run's filter still finds them (the
// input's index).
const RunRecordBytes = 256 << 10

// RunIDChars is how much of a run id a list shows: an id is at most 160
// characters in the shipped schemas, and a hostile one costs no more.
const RunIDChars = 200

// RunPointers names, per decision, the object members that lead to the
// run id in its input (its input schema's x-arbiter-run-id property).
type RunPointers map[string][]string

// Partial is a stored record that a reader does not show whole.
type Partial struct {
	Bytes int64  `json:"bytes"` // the record's length
	Head  string `json:"head"`  // its first bytes, at most HeadBytes
	Why   string `json:"why"`   // why it is not shown whole
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
	conds, inputs, args := f.conditions()
	return strings.Join(append(conds, inputs...), " AND "), args
}

// conditions are f's conditions, those on the input apart, and their
// arguments numbered from $1.
func (f Filter) conditions() (conds, inputs []string, args []any) {
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
		inputs = append(inputs, inputExpr+" @> "+arg(string(m.document()))+"::jsonb")
	}
	if len(f.AnyInput) > 0 {
		var alts []string
		for _, m := range f.AnyInput {
			alts = append(alts, "(decision = "+arg(m.Decision)+" AND "+inputExpr+" @> "+arg(string(m.Match.document()))+"::jsonb)")
		}
		inputs = append(inputs, "("+strings.Join(alts, " OR ")+")")
	}
	return conds, inputs, args
}

// rowColumns are what a row shows beside its record; the record's length
// is read from its header, without loading it.
const rowColumns = "replica, kind, outcome, reasons, time, decision_id, decision, path, revision, caller, duration_ns, error_code, octet_length(record)"

// recordColumn is the record when it is at most $n bytes long, its first
// $m characters otherwise (substr reads only them of a stored value), or
// nothing when $n is 0 (a list).
func recordColumn(n, m int) string {
	return fmt.Sprintf(", CASE WHEN $%d = 0 THEN NULL WHEN octet_length(record) <= $%d THEN record ELSE substr(record, 1, $%d) END", n, n, m)
}

// scanner reads the rows of a query of rowColumns and recordColumn, whose
// records were loaded up to maxRecord bytes (0: none).
func (r *Reader) scanner(maxRecord int64, runs bool) pgx.RowToFunc[Row] {
	return func(rows pgx.CollectableRow) (Row, error) {
		var row Row
		rec := &row.Record
		var code string
		var size int64
		var line []byte
		dst := []any{&row.Replica, &row.Kind, &row.Outcome, &row.Reasons, &row.Cursor.Time, &row.Cursor.ID,
			&rec.Decision, &rec.Path, &rec.Revision, &rec.Caller, &rec.DurationNS, &code, &size, &line}
		var run *string
		if runs {
			dst = append(dst, &run)
		}
		if err := rows.Scan(dst...); err != nil {
			return Row{}, err
		}
		if run != nil {
			row.RunID = *run
		}
		row.RunUnread = runs && size > RunRecordBytes
		row.Cursor.Kind, row.Cursor.Time = row.Kind, row.Cursor.Time.UTC()
		rec.DecisionID, rec.Time = row.Cursor.ID, row.Cursor.Time
		if code != "" {
			rec.Error = &decisionlog.RecordError{Code: code}
		}
		switch {
		case maxRecord == 0:
		case size > maxRecord:
			row.Partial = &Partial{Bytes: size, Head: head(line), Why: fmt.Sprintf("larger than the %d bytes a reader loads of one record", maxRecord)}
		default:
			var whole decisionlog.Record
			if err := json.Unmarshal(line, &whole); err != nil {
				r.unreadable.Add(1)
				row.Partial = &Partial{Bytes: size, Head: head(line), Why: "not a decision record: " + err.Error()}
			} else {
				row.Record = whole
			}
		}
		return row, nil
	}
}

// head is line's first HeadBytes at most, whole UTF-8 sequences.
func head(line []byte) string {
	if len(line) <= HeadBytes {
		return string(line)
	}
	cut := HeadBytes
	for cut > 0 && !utf8.RuneStart(line[cut]) {
		cut--
	}
	return string(line[:cut])
}

// query runs the rows query q (rowColumns, recordColumn and the rest),
// its records loaded up to maxRecord bytes, its rows with the run id
// column (runColumn) when runs.
func (r *Reader) query(ctx context.Context, q string, maxRecord int64, runs bool, args ...any) ([]Row, error) {
	rows, err := r.db.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, r.scanner(maxRecord, runs))
}

// runColumn is the run id of a row's input at its decision's pointer in
// $n (a JSON object of RunPointers), its first RunIDChars characters,
// for records of at most RunRecordBytes; NULL for a decision that names
// no run (an empty path would be the whole input) and for larger
// records, which the database then does not parse.
func runColumn(n int) string {
	return fmt.Sprintf(", CASE WHEN octet_length(record) <= %d AND $%d::jsonb ? decision THEN left(%s #>> ARRAY(SELECT jsonb_array_elements_text($%d::jsonb -> decision)), %d) END",
		RunRecordBytes, n, inputExpr, n, RunIDChars)
}

// List returns up to limit rows that match f and come before the cursor
// (the zero cursor: from the newest), newest first, and the cursor of the
// next page (zero when there is none), without their records: each Row's
// Record is what its columns say. Pages are keyset pages: a page costs the
// same however deep it is, and rows arriving meanwhile do not shift the
// pages already shown.
func (r *Reader) List(ctx context.Context, f Filter, before Cursor, limit int) ([]Row, Cursor, error) {
	return r.list(ctx, f, before, limit, 0, nil)
}

// ListRuns is List with each row's RunID: its input's value at its
// decision's pointer in runs, read in the database from records of at
// most RunRecordBytes (a list still loads no record).
func (r *Reader) ListRuns(ctx context.Context, f Filter, before Cursor, limit int, runs RunPointers) ([]Row, Cursor, error) {
	if runs == nil {
		runs = RunPointers{}
	}
	return r.list(ctx, f, before, limit, 0, runs)
}

// ListRecordsUpTo is ListRecords with a bound of its own on each record
// (a page that reads many records at once: a run's).
func (r *Reader) ListRecordsUpTo(ctx context.Context, f Filter, before Cursor, limit int, maxRecord int64) ([]Row, Cursor, error) {
	return r.list(ctx, f, before, limit, maxRecord, nil)
}

// ListRecords is List with each row's record, loaded up to MaxRecordBytes
// (Row.Partial past it, or when it is not a decision record).
func (r *Reader) ListRecords(ctx context.Context, f Filter, before Cursor, limit int) ([]Row, Cursor, error) {
	return r.list(ctx, f, before, limit, r.MaxRecordBytes, nil)
}

func (r *Reader) list(ctx context.Context, f Filter, before Cursor, limit int, maxRecord int64, runs RunPointers) ([]Row, Cursor, error) {
	if limit <= 0 {
		return nil, Cursor{}, nil
	}
	var runsJSON []byte
	if runs != nil {
		runsJSON, _ = json.Marshal(runs)
	}
	q, args := listQuery(f, before, limit, maxRecord, runsJSON)
	out, err := r.query(ctx, q, maxRecord, runs != nil, args...)
	if err == nil && (len(f.Input) > 0 || len(f.AnyInput) > 0) && len(out) <= limit {
		// Not a page among the newest listProbeRows: a rarer value,
		// found through the input's index.
		q, args = listByInputQuery(f, before, limit, maxRecord, runsJSON)
		out, err = r.query(ctx, q, maxRecord, runs != nil, args...)
	}
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

// listProbeRows is how many of the rows its other filters select a list
// with an input filter reads first, newest first, testing their input: a
// value most rows hold (/env = prod) fills a page among them, where the
// input's index would read every row that holds it (seconds at a million
// rows). A value that does not fill a page among them is looked up in the
// index (listByInputQuery).
const listProbeRows = 1000

// inputExpr is a row's input document, as the input's GIN index holds it
// (migration 003): the same expression, so that the planner finds it.
const inputExpr = "arbiter_store.record_input(record, path)"

const newestFirst = " ORDER BY time DESC, decision_id DESC, kind DESC"

// listParts are what both of list's queries build on: the conditions of
// f and the cursor (the input's apart), the columns a row is read with
// (its record up to maxRecord bytes; its run id when runs is set), and
// the arguments, of which $n+1 is limit+1.
func listParts(f Filter, before Cursor, limit int, maxRecord int64, runs []byte) (conds, inputs []string, cols string, args []any, n int) {
	conds, inputs, args = f.conditions()
	if n = len(args); !before.IsZero() {
		args = append(args, before.Time, before.ID, before.Kind)
		// time <= is what the (time DESC) index can seek on; the row
		// comparison breaks ties within one microsecond.
		conds = append(conds, fmt.Sprintf("time <= $%d AND (time, decision_id, kind) < ($%d, $%d, $%d)", n+1, n+1, n+2, n+3))
	}
	n = len(args)
	args = append(args, limit+1, maxRecord, HeadBytes)
	cols = rowColumns + recordColumn(n+2, n+3)
	if runs != nil {
		args = append(args, string(runs))
		cols += runColumn(n + 4)
	}
	return conds, inputs, cols, args, n
}

// listQuery is list's first query and its arguments: up to limit+1 rows
// of f before the cursor, newest first, their records loaded up to
// maxRecord bytes (0: none). It walks the newest rows the filters other
// than the input's select (the time index, or a column's with time); with
// an input filter, it tests the input of the newest listProbeRows of them
// only.
func listQuery(f Filter, before Cursor, limit int, maxRecord int64, runs []byte) (string, []any) {
	conds, inputs, cols, args, n := listParts(f, before, limit, maxRecord, runs)
	from := "arbiter_store.records WHERE " + strings.Join(conds, " AND ")
	if len(inputs) > 0 {
		from = "(SELECT * FROM " + from + newestFirst + " LIMIT " + strconv.Itoa(listProbeRows) + ") AS newest WHERE " +
			strings.Join(inputs, " AND ")
	}
	return "SELECT " + cols + " FROM " + from + newestFirst + " LIMIT $" + strconv.Itoa(n+1), args
}

// listByInputQuery is listQuery through the input's GIN index: every row
// that holds the input's values, found by that index alone, collected
// first with the columns the other filters test; then those in the time
// range and the other filters, the newest limit+1 of them; then their
// columns. The collection is MATERIALIZED and has no other condition, so
// that the planner has no time index to walk instead: it did, with the
// generic plan of a prepared statement (pgx prepares and caches each
// query, and PostgreSQL plans the sixth run of one without its
// arguments), testing every row's input in the range: a run's list read
// the whole range (seconds at a million rows).
func listByInputQuery(f Filter, before Cursor, limit int, maxRecord int64, runs []byte) (string, []any) {
	conds, inputs, cols, args, n := listParts(f, before, limit, maxRecord, runs)
	const key = "time, decision_id, kind, revision"
	q := "WITH matching AS MATERIALIZED (SELECT " + key + ", replica, decision, path, caller, outcome, reasons, error_code FROM arbiter_store.records WHERE " +
		strings.Join(inputs, " AND ") + "),\n" +
		"  page AS (SELECT " + key + " FROM matching WHERE " + strings.Join(conds, " AND ") + newestFirst + " LIMIT $" + strconv.Itoa(n+1) + ")\n" +
		"SELECT " + cols + " FROM arbiter_store.records JOIN page USING (" + key + ")" + newestFirst
	return q, args
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
	return min(n, max), n > max, nil
}

// Get returns the decision of an id, whichever replica made it (the
// newest, should two replicas have logged one id).
func (r *Reader) Get(ctx context.Context, id string) (Row, bool, error) {
	got, err := r.byID(ctx, id, KindDecision, 1)
	if err != nil {
		return Row{}, false, fmt.Errorf("decision store: reading decision %s: %w", id, err)
	}
	if len(got) == 0 {
		return Row{}, false, nil
	}
	return got[0], true, nil
}

// Shadows returns the shadow candidates' outcomes of the decision of an
// id (records of their own, kind shadow, which carry the decision's id),
// newest first, at most limit, their records loaded up to MaxRecordBytes:
// Row.Record.Shadow is the candidate's answer, unless the row is Partial
// (then its columns: the candidate's revision, outcome, reasons and error
// code).
func (r *Reader) Shadows(ctx context.Context, id string, limit int) ([]Row, error) {
	got, err := r.byID(ctx, id, KindShadow, limit)
	if err != nil {
		return nil, fmt.Errorf("decision store: reading the shadow outcomes of %s: %w", id, err)
	}
	return got, nil
}

// byID reads the rows of kind of the decision id, newest first, at most
// limit, their records loaded up to MaxRecordBytes.
func (r *Reader) byID(ctx context.Context, id, kind string, limit int) ([]Row, error) {
	return r.query(ctx, "SELECT "+rowColumns+recordColumn(3, 4)+" FROM arbiter_store.records WHERE decision_id = $1 AND kind = $2 ORDER BY time DESC LIMIT $5",
		r.MaxRecordBytes, false, id, kind, r.MaxRecordBytes, HeadBytes, limit)
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
		rows, err := r.db.Query(ctx, q, KindDecision, max)
		if err == nil {
			out[col], err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return nil, fmt.Errorf("decision store: reading the filter values: %w", err)
		}
	}
	// One pass over the newest rows for the other four.
	rows, err := r.db.Query(ctx, `SELECT outcome, revision, caller, error_code, reasons FROM arbiter_store.records
WHERE kind = $1 ORDER BY time DESC LIMIT $2`, KindDecision, ValuesSample)
	if err != nil {
		return nil, fmt.Errorf("decision store: reading the filter values: %w", err)
	}
	seen := map[[2]string]bool{}
	add := func(key, v string) {
		if v != "" && len(out[key]) < max && !seen[[2]string{key, v}] {
			seen[[2]string{key, v}] = true
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

// StreamBatch is how many rows one step of Stream reads.
const StreamBatch = 500

// Stream calls fn for every row that matches f, oldest first (the order a
// log file is read in), reading StreamBatch rows at a time by keyset:
// never everything at once, no transaction held open between batches, and
// rows written meanwhile after the last one read are read too. A record
// longer than the longest line a decision log writes
// (decisionlog.MaxLineBytes), or not a decision record, is a Row with
// Partial, as replay from the files skips such a line. An error from fn
// stops it and is returned as is.
func (r *Reader) Stream(ctx context.Context, f Filter, fn func(Row) error) error {
	maxRecord := decisionlog.MaxLineBytes(0)
	where, args := f.where()
	n := len(args)
	args = append(args, maxRecord, HeadBytes)
	q := "SELECT " + rowColumns + recordColumn(n+1, n+2) + " FROM arbiter_store.records WHERE " + where +
		fmt.Sprintf(" AND time >= $%d AND (time, decision_id, kind) > ($%d, $%d, $%d)", n+3, n+3, n+4, n+5) +
		" ORDER BY time, decision_id, kind LIMIT " + strconv.Itoa(r.batch)
	var after Cursor // year 1, before any row: every row's key is greater
	for {
		batch, err := r.query(ctx, q, maxRecord, false, append(args, after.Time, after.ID, after.Kind)...)
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
	cfg.RuntimeParams["application_name"] = cmp.Or(cfg.RuntimeParams["application_name"], "arbiter (reading)")
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("decision store %s: %w", redact.URL(dsn), err)
	}
	return NewReader(conn), func() { _ = conn.Close(context.Background()) }, nil
}

// Reader reads the store the sink writes, through the sink's pool: the
// pages of a serve process with --decision-store. The sink's metrics count
// the records it could not decode. It must not be used after Close.
func (s *Sink) Reader() *Reader { return s.reader }
