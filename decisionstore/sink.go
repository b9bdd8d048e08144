package decisionstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/internal/defaults"
	"github.com/arbiter-dev/arbiter/internal/queue"
	"github.com/arbiter-dev/arbiter/internal/redact"
)

// Defaults of SinkConfig.
const (
	// DefaultQueueBytes bounds the records waiting for the database: at a
	// few KiB a record, tens of thousands, minutes of a busy replica's
	// traffic during an outage.
	DefaultQueueBytes   = 64 << 20
	DefaultBatchRecords = 1000
	// DefaultFlushInterval gathers a few hundred records per write at a
	// busy replica's rate, and adds a tenth of a second to the lag.
	DefaultFlushInterval = 100 * time.Millisecond
	DefaultRetention     = 30 * 24 * time.Hour
)

// Kinds of rows (the kind column).
const (
	KindDecision  = "decision" // answered, or refused (error_code set)
	KindShadow    = "shadow"   // a candidate's outcome of a decision
	KindPromotion = "promotion"
)

// Reasons a record is not written, beside the queue's own (full, closed).
const (
	// DropRejected: the database refused the record itself (a data
	// exception, such as invalid UTF-8 in a refused body's string, which a
	// text column cannot hold), alone in its batch: retrying it would never
	// succeed.
	DropRejected = "rejected"
	// DropShutdown: still waiting when a stop ran out of time.
	DropShutdown = decisionlog.DropShutdown
)

// DropReasons lists every reason, in the order the metric exports them.
var DropReasons = []string{queue.Full, queue.Closed, DropRejected, DropShutdown}

// SinkConfig configures a Sink; cmd fills it from flags.
type SinkConfig struct {
	// Replica is the replica column of every row: --replica-id.
	Replica string
	// QueueBytes bounds the records waiting to be written, the batch being
	// written included (default DefaultQueueBytes); a record that finds it
	// full is dropped and counted.
	QueueBytes int64
	// BatchRecords bounds one write (default DefaultBatchRecords).
	BatchRecords int
	// FlushInterval is how long a batch smaller than BatchRecords waits
	// for more records after the previous write (default
	// DefaultFlushInterval): a write costs round trips and a commit
	// whatever its size.
	FlushInterval time.Duration
	// Retention drops the partitions of the days older than it, on start
	// and hourly; 0 keeps everything.
	Retention time.Duration
	// MaxRetryDelay caps the backoff between retries of a failed write
	// (default 10s).
	MaxRetryDelay time.Duration
	// OutcomeKey names, per decision, the result member that is its
	// outcome (the outcome column); nil or "" means the default.
	OutcomeKey func(decision string) string
	Logger     *slog.Logger

	now   func() time.Time                     // tests: the clock of partitions and retention
	after func(time.Duration) <-chan time.Time // tests: the backoff's wait
}

// Sink is the decision store's sink of the decision-record pipeline, on
// the pipeline's batching skeleton (decisionlog.Batcher): Write queues
// records and returns at once; the skeleton's goroutine writes batches
// (COPY into a staging table, then INSERT ... ON CONFLICT DO NOTHING, so
// that a batch retried after an outage writes each record once), and
// between them the sink migrates the database, creates partitions and
// applies retention. While the database is away, records wait in the
// bounded queue, and what it cannot hold is counted.
type Sink struct {
	cfg      SinkConfig
	store    *Store
	reader   *Reader // the pages'
	password string  // replaced in the errors it reports
	log      *slog.Logger
	b        *decisionlog.Batcher[[]any]

	duplicates      atomic.Uint64
	tried           chan struct{}      // closed once the first attempt on the database has ended
	migrated        bool               // the loop's
	days            map[time.Time]bool // the loop's: partitions known to exist
	nextMaintenance time.Time          // the loop's
	refused         refusals           // the loop's: records refused, not yet warned about
}

// RejectedWarnInterval is how often at most the sink warns that the
// database refused records (the first at once): a caller may send refused
// records by the thousand, and each is counted in
// arbiter_decision_store_dropped_total{reason="rejected"} anyway.
const RejectedWarnInterval = time.Minute

// refusals are the records refused since the last warning about them.
type refusals struct {
	n        int
	lastID   any
	lastErr  string
	warnedAt time.Time
}

// NewSink starts the sink of the store at dbURL. It does not touch the
// database: a database that is away at start is retried as in an outage,
// and the replica answers meanwhile. Only a URL that does not parse is an
// error.
func NewSink(dbURL string, cfg SinkConfig) (*Sink, error) {
	st, err := connect(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.BatchRecords = defaults.Positive(cfg.BatchRecords, DefaultBatchRecords)
	cfg.MaxRetryDelay = defaults.Positive(cfg.MaxRetryDelay, 10*time.Second)
	cfg.FlushInterval = defaults.Positive(cfg.FlushInterval, DefaultFlushInterval)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.now == nil {
		cfg.now = time.Now
	}
	s := &Sink{cfg: cfg, store: st, password: st.pool.Config().ConnConfig.Password, log: cfg.Logger,
		tried: make(chan struct{}), days: map[time.Time]bool{}, reader: NewReader(st.pool)}
	s.b = decisionlog.NewBatcher[[]any](decisionlog.BatchConfig{
		Name: "decision store writes", Full: "decision store queue full: records dropped", Failed: "decision store write failed; retrying",
		Queue:        queue.Limits{Bytes: cfg.QueueBytes}.Or(queue.Limits{Bytes: DefaultQueueBytes}),
		BatchRecords: cfg.BatchRecords, Linger: cfg.FlushInterval, MaxRetryDelay: cfg.MaxRetryDelay,
		Logger: cfg.Logger, Redact: s.redact, After: cfg.after,
	})
	s.b.Start(s)
	return s, nil
}

// Write queues recs for the database; it never blocks. A record the queue
// cannot take is dropped and counted (full).
func (s *Sink) Write(recs []decisionlog.Record) {
	for _, rec := range recs {
		s.b.Put(rec)
	}
}

// Close writes what is queued, retrying until ctx ends; what is still
// unwritten then is counted as dropped (shutdown). It closes the pool.
func (s *Sink) Close(ctx context.Context) error {
	n := s.b.Close(ctx)
	s.warnRefused(true)
	s.store.Close()
	if n > 0 {
		return fmt.Errorf("decision store: %d records not written before the shutdown deadline", n)
	}
	return nil
}

// Idle keeps the partitions ahead and applies retention, hourly, and says
// what the database refused: due or not, whether records keep coming or
// not.
func (s *Sink) Idle() time.Duration { return min(s.maintain(), s.warnRefused(false)) }

// maintain migrates the database when not yet done, creates the
// partitions of today and tomorrow and drops the expired ones, when due;
// it returns how long until it is due again.
func (s *Sink) maintain() time.Duration {
	now := s.cfg.now()
	if now.Before(s.nextMaintenance) {
		return s.nextMaintenance.Sub(now)
	}
	ctx, cancel := context.WithTimeout(s.b.Ctx(), 30*time.Second)
	defer cancel()
	err := s.prepare(ctx, now, now.Add(24*time.Hour))
	if err == nil && s.cfg.Retention > 0 {
		var dropped []time.Time
		dropped, err = s.store.DropBefore(ctx, now.Add(-s.cfg.Retention))
		for _, d := range dropped {
			delete(s.days, d)
			s.log.Info("decision store: retention dropped a day", "day", d.Format(time.DateOnly), "retention", s.cfg.Retention)
		}
	}
	if err != nil {
		s.b.Failed(err)
		s.nextMaintenance = now.Add(time.Minute)
	} else {
		s.b.OK() // the database answers again; a write that fails says so anew
		s.nextMaintenance = now.Add(time.Hour)
	}
	select {
	case <-s.tried:
	default:
		close(s.tried)
	}
	return s.nextMaintenance.Sub(now)
}

// prepare migrates the database once, and creates the partitions of the
// days of ts that this sink does not know to exist.
func (s *Sink) prepare(ctx context.Context, ts ...time.Time) error {
	if !s.migrated {
		if err := s.store.Migrate(ctx); err != nil {
			return err
		}
		s.migrated = true
		s.log.Info("decision store ready", "url", s.store.URL())
	}
	var missing []time.Time
	for _, t := range ts {
		if !s.days[day(t)] {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := s.store.EnsurePartitions(ctx, missing...); err != nil {
		return err
	}
	for _, t := range missing {
		s.days[day(t)] = true
	}
	return nil
}

// Send writes rows. A batch the database refuses for its data is the
// record's own problem, not its batch's: COPY names its line, and the
// batcher drops that one and writes the others at once; a write that names
// none (through the staging table) is split in halves until the record is
// alone, so that one hostile record costs only itself.
func (s *Sink) Send(ctx context.Context, rows [][]any) error {
	err := s.copy(ctx, rows)
	if rejected(err) {
		return &decisionlog.Refusal{Index: copyLine(err), Drop: true, Reason: DropRejected, Err: err}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23514" {
		// No partition for a row: another replica's retention dropped
		// a day this sink knew. Create it again.
		clear(s.days)
	}
	return err
}

// rejected reports whether the database refused a write for its data (a
// data exception, class 22, or a value past a limit, class 54: an index
// entry past btree's 2704 bytes is 54000): the same rows would be refused
// again. Anything else (no connection, a restart) is worth a retry.
func rejected(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "54"))
}

// copyLineRE finds the row of a COPY that an error is about, in the
// error's context ("COPY records, line 7, column caller"): 1-based. The
// context is one line per level, innermost first: an error a trigger
// raises names the trigger's function before the COPY's line.
var copyLineRE = regexp.MustCompile(`(?m)^COPY [^,]+, line ([0-9]+)\b`)

// copyLine is the index of the row a COPY's error names, -1 when it names
// none.
func copyLine(err error) int {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return -1
	}
	all := copyLineRE.FindAllStringSubmatch(pe.Where, -1)
	if all == nil {
		return -1
	}
	m := all[len(all)-1] // the outermost: the sink's own COPY
	if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
		return n - 1
	}
	return -1
}

// Refused warns about a record the database refused for its content
// (warnRefused); the batcher counted it (rejected).
func (s *Sink) Refused(row []any, err error) {
	s.refused.n++
	s.refused.lastID, s.refused.lastErr = row[colDecisionID], s.redact(err)
	s.warnRefused(false)
}

// warnRefused warns about the records refused since the last warning,
// when there are any and one is due (or now): the first at once, then at
// most one a RejectedWarnInterval, saying how many. It returns how long
// until the next one is due.
func (s *Sink) warnRefused(now bool) time.Duration {
	r := &s.refused
	if r.n == 0 {
		return RejectedWarnInterval
	}
	at := s.cfg.now()
	if wait := r.warnedAt.Add(RejectedWarnInterval).Sub(at); wait > 0 && !r.warnedAt.IsZero() && !now {
		return wait
	}
	s.log.Warn("decision store refused records for their content: dropped", "records", r.n,
		"rejected_total", s.b.Dropped(DropRejected), "last_decision_id", r.lastID, "last_err", r.lastErr)
	*r = refusals{warnedAt: at}
	return RejectedWarnInterval
}

// redact is err's message without the database password, which a driver
// error might quote.
func (s *Sink) redact(err error) string {
	msg := err.Error()
	if s.password != "" {
		msg = strings.ReplaceAll(msg, s.password, redact.Mask)
	}
	return msg
}

// columns of a row, in the order row gives them. The input column is
// computed by the database from record.
var columns = []string{"time", "decision_id", "kind", "replica", "decision", "path", "revision", "caller",
	"outcome", "reasons", "error_code", "duration_ns", "record"}

// Indexes of row's values that the writer reads back.
const (
	colTime       = 0
	colDecisionID = 1
)

// Encode is rec's row: its values, in the order of columns. Its size is
// not bounded (BatchRecords is).
func (s *Sink) Encode(rec decisionlog.Record) ([]any, int, error) {
	outcome, reasons := rec.SummaryBy(s.cfg.OutcomeKey)
	kind, revision, duration, code := KindDecision, rec.Revision, rec.DurationNS, ""
	if rec.Error != nil {
		code = rec.Error.Code
	}
	switch {
	case rec.Promotion != nil:
		kind = KindPromotion
	case rec.IsShadowOutcome():
		kind, revision, duration = KindShadow, rec.Shadow.Revision, rec.Shadow.DurationNS
		if rec.Shadow.Error != nil {
			code = rec.Shadow.Error.Code
		}
	}
	if reasons == nil {
		reasons = []string{}
	}
	for i := range reasons {
		reasons[i] = text(reasons[i])
	}
	return []any{rec.Time, text(rec.DecisionID), kind, text(s.cfg.Replica), text(rec.Decision), text(rec.Path), text(revision),
		text(rec.Caller), text(outcome), reasons, text(code), duration, bytes.TrimSuffix(rec.AppendLine(nil), []byte{'\n'})}, 0, nil
}

// text makes s storable in a text column, which holds neither NUL nor
// invalid UTF-8 (a request's path may have both): each becomes U+FFFD.
func text(s string) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// copy writes rows with one COPY into the records; when one of them is
// there already (a batch retried after its commit's answer was lost), in
// one transaction through a staging table and INSERT ... ON CONFLICT DO
// NOTHING, so that no record is written twice. It first makes sure the
// schema and the rows' partitions exist.
func (s *Sink) copy(ctx context.Context, rows [][]any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ts := make([]time.Time, len(rows))
	for i := range rows {
		ts[i] = rows[i][colTime].(time.Time)
	}
	if err := s.prepare(ctx, ts...); err != nil {
		return err
	}
	// COPY straight into the records, the common case: half the writes
	// of going through the staging table.
	_, err := s.store.pool.CopyFrom(ctx, pgx.Identifier{Schema, "records"}, columns, pgx.CopyFromRows(rows))
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != "23505" {
		return err
	}
	// A record of the batch is there already (unique_violation: the batch
	// was written before its commit's answer was lost): through the
	// staging table, each record once.
	var inserted int64
	err = pgx.BeginFunc(ctx, s.store.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS records_staging (LIKE `+Schema+`.records INCLUDING DEFAULTS) ON COMMIT DELETE ROWS`); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"records_staging"}, columns, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		cols := strings.Join(columns, ", ")
		tag, err := tx.Exec(ctx, `INSERT INTO `+Schema+`.records (`+cols+`) SELECT `+cols+` FROM records_staging ON CONFLICT DO NOTHING`)
		inserted = tag.RowsAffected()
		return err
	})
	if err != nil {
		return err
	}
	s.duplicates.Add(uint64(int64(len(rows)) - inserted))
	return nil
}

// SinkStats are a Sink's totals: /v1/status's store member.
type SinkStats struct {
	URL     string `json:"url"` // password and query values redacted (redact.URL)
	Replica string `json:"replica"`
	// Written counts the records in the store (Duplicates of them were
	// there already: a batch retried after its commit's answer was lost).
	Written    uint64 `json:"written"`
	Duplicates uint64 `json:"duplicates"`
	// Queued is every record not written yet: in the queue, and in the
	// batch being written or retried.
	Queued      int               `json:"queued"`
	QueuedBytes int64             `json:"queued_bytes"`
	QueueBytes  int64             `json:"queue_bytes"` // its bound
	Dropped     map[string]uint64 `json:"dropped"`
	// LagSeconds is how long the oldest record not written yet has
	// waited (0: none waits).
	LagSeconds    float64    `json:"lag_seconds"`
	WritesOK      uint64     `json:"writes_ok"`
	WritesFailed  uint64     `json:"writes_failed"`
	LastWrite     *time.Time `json:"last_write,omitempty"`
	LastError     string     `json:"last_error,omitempty"` // of the writes (or the migration) failing now
	RetentionDays float64    `json:"retention_days"`       // 0: kept for ever
}

// DroppedTotal is every record dropped, whatever the reason.
func (st SinkStats) DroppedTotal() uint64 {
	var n uint64
	for _, v := range st.Dropped {
		n += v
	}
	return n
}

// Tried is closed once the sink's first attempt on the database (its
// migration, at start) has ended, whether it succeeded or not: then
// Stats' LastError says whether the database can be used.
func (s *Sink) Tried() <-chan struct{} { return s.tried }

// Stats returns the totals so far; after Close they are final.
func (s *Sink) Stats() SinkStats {
	b := s.b.Stats()
	st := SinkStats{URL: s.store.URL(), Replica: s.cfg.Replica, Written: b.Sent, Duplicates: s.duplicates.Load(),
		Queued: b.Queued, QueuedBytes: b.QueuedBytes, QueueBytes: b.Limits.Bytes, Dropped: map[string]uint64{},
		WritesOK: b.SendsOK, WritesFailed: b.SendsFailed, LagSeconds: b.Lag.Seconds(), LastError: b.LastError,
		RetentionDays: s.cfg.Retention.Hours() / 24}
	for _, r := range DropReasons {
		st.Dropped[r] = s.b.Dropped(r)
	}
	if !b.LastOK.IsZero() {
		st.LastWrite = &b.LastOK
	}
	return st
}
