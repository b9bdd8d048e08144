package decisionstore

import (
	"bytes"
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
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/arbiter-dev/arbiter/decisionlog"
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
	DropShutdown = "shutdown"
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

// Sink is the decision store's sink of the decision-record pipeline: Write
// queues records and returns at once; one goroutine migrates the database,
// creates partitions, writes batches (COPY into a staging table, then
// INSERT ... ON CONFLICT DO NOTHING, so that a batch retried after an
// outage writes each record once) and applies retention. While the
// database is away, records wait in the bounded queue, and what it cannot
// hold is counted.
type Sink struct {
	cfg      SinkConfig
	store    *Store
	reader   *Reader // the pages'
	password string  // replaced in the errors it reports
	log      *slog.Logger
	queue    *queue.Queue[pending]
	done     chan struct{}
	ctx      context.Context // cancelled by Close at its deadline
	abort    context.CancelFunc

	written, duplicates    atomic.Uint64
	writesOK, writesFailed atomic.Uint64
	lastOK                 atomic.Int64 // unix nanoseconds
	inFlight               atomic.Int64 // records of the batch being written
	oldest                 atomic.Int64 // unix nanoseconds its oldest record was queued (0: none)
	lastErr                atomic.Pointer[string]
	tried                  chan struct{}      // closed once the first attempt on the database has ended
	migrated               bool               // the loop's
	days                   map[time.Time]bool // the loop's: partitions known to exist
	nextMaintenance        time.Time          // the loop's
	failingSince           time.Time          // the loop's: the outage it is in
	lastWrite              time.Time          // the loop's: when the last write ended
	closing                atomic.Bool        // Close was called: no more gathering
	refused                refusals           // the loop's: records refused, not yet warned about
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

// pending is a queued record and when it was queued (unix nanoseconds).
type pending struct {
	rec decisionlog.Record
	at  int64
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
	if cfg.BatchRecords <= 0 {
		cfg.BatchRecords = DefaultBatchRecords
	}
	if cfg.MaxRetryDelay <= 0 {
		cfg.MaxRetryDelay = 10 * time.Second
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.after == nil {
		cfg.after = time.After
	}
	lim := queue.Limits{Bytes: cfg.QueueBytes}.Or(queue.Limits{Bytes: DefaultQueueBytes})
	lim.HoldBytes = true // the batch being retried is memory too
	s := &Sink{cfg: cfg, store: st, password: st.pool.Config().ConnConfig.Password, log: cfg.Logger,
		queue: queue.New[pending](lim), done: make(chan struct{}), tried: make(chan struct{}), days: map[time.Time]bool{}}
	s.reader = NewReader(st.pool)
	s.ctx, s.abort = context.WithCancel(context.Background())
	go s.loop()
	return s, nil
}

// Write queues recs for the database; it never blocks. A record the queue
// cannot take is dropped and counted (full).
func (s *Sink) Write(recs []decisionlog.Record) {
	now := time.Now().UnixNano()
	for _, rec := range recs {
		if ok, _ := s.queue.Put(pending{rec, now}, rec.QueueSize()); !ok {
			if n := s.queue.Dropped(queue.Full); n&(n-1) == 0 { // warn at powers of two
				s.log.Warn("decision store queue full: records dropped", "dropped", n, "queue_bytes", s.queue.Limits().Bytes)
			}
		}
	}
}

// Close writes what is queued, retrying until ctx ends; what is still
// unwritten then is counted as dropped (shutdown). It closes the pool.
func (s *Sink) Close(ctx context.Context) error {
	s.closing.Store(true)
	s.queue.Close()
	select {
	case <-s.done:
	case <-ctx.Done():
		s.abort()
		<-s.done
	}
	s.abort()
	s.store.Close()
	if n := s.queue.Dropped(DropShutdown); n > 0 {
		return fmt.Errorf("decision store: %d records not written before the shutdown deadline", n)
	}
	return nil
}

// loop takes batches in order and writes each until it is written (or
// dropped); between batches it keeps the partitions ahead and applies
// retention, hourly.
func (s *Sink) loop() {
	defer close(s.done)
	var batch []pending
	for {
		// Due or not, whether records keep coming or not: a busy replica
		// keeps its partitions ahead and its retention too, and says what
		// the database refused.
		wait := min(s.maintain(), s.warnRefused(false))
		s.gather()
		var closed bool
		batch, closed = s.queue.Take(batch[:0], s.cfg.BatchRecords)
		if len(batch) > 0 {
			s.write(batch)
			s.lastWrite = time.Now()
			clear(batch)
			continue
		}
		if closed {
			s.warnRefused(true)
			return
		}
		select {
		case <-s.queue.Ready():
		case <-time.After(wait):
		}
	}
}

// gather lets a partial batch wait for more records, until FlushInterval
// after the last write, unless the sink is closing.
func (s *Sink) gather() {
	deadline := s.lastWrite.Add(s.cfg.FlushInterval)
	for n := s.queue.Len(); n > 0 && n < s.cfg.BatchRecords && !s.closing.Load(); n = s.queue.Len() {
		wait := time.Until(deadline)
		if wait <= 0 {
			return
		}
		select {
		case <-s.queue.Ready():
		case <-time.After(wait):
		}
	}
}

// maintain migrates the database when not yet done, creates the
// partitions of today and tomorrow and drops the expired ones, when due;
// it returns how long until it is due again.
func (s *Sink) maintain() time.Duration {
	now := s.cfg.now()
	if now.Before(s.nextMaintenance) {
		return s.nextMaintenance.Sub(now)
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
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
		s.failed(err)
		s.nextMaintenance = now.Add(time.Minute)
	} else {
		s.lastErr.Store(nil) // the database answers again; a write that fails says so anew
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

// write writes batch, retrying with backoff until it is written or Close's
// deadline passes (then it is counted as dropped). A batch the database
// refuses for its data is split in halves, each written the same way, so
// that one hostile record costs only itself.
func (s *Sink) write(batch []pending) {
	var bytes int64
	for i := range batch {
		bytes += batch[i].rec.QueueSize()
	}
	defer s.queue.Done(bytes)
	s.inFlight.Store(int64(len(batch)))
	s.oldest.Store(batch[0].at)
	defer s.inFlight.Store(0)
	defer s.oldest.Store(0)
	rows := make([][]any, len(batch))
	for i := range batch {
		rows[i] = s.row(batch[i].rec)
	}
	s.writeRows(rows)
}

func (s *Sink) writeRows(rows [][]any) bool {
	for retry := 0; ; retry++ {
		if s.ctx.Err() != nil {
			s.queue.Drop(DropShutdown, uint64(len(rows)))
			return false
		}
		err := s.copy(rows)
		if err == nil {
			s.writesOK.Add(1)
			s.lastOK.Store(time.Now().UnixNano())
			s.lastErr.Store(nil)
			if !s.failingSince.IsZero() {
				s.log.Info("decision store writes recovered", "outage", time.Since(s.failingSince).Round(time.Millisecond))
				s.failingSince = time.Time{}
			}
			return true
		}
		s.writesFailed.Add(1)
		if rejected(err) && s.ctx.Err() == nil {
			// The record's own problem, not its batch's. COPY names its
			// line: it is dropped, and the others written at once. A write
			// that names none (through the staging table) is split in
			// halves until the record is alone.
			if i, ok := copyLine(err); ok && i < len(rows) {
				s.reject(rows[i], err)
				if rows = append(rows[:i:i], rows[i+1:]...); len(rows) == 0 {
					return true
				}
				retry = -1
				continue
			}
			if len(rows) > 1 {
				half := len(rows) / 2
				if !s.writeRows(rows[:half]) {
					s.queue.Drop(DropShutdown, uint64(len(rows)-half))
					return false
				}
				return s.writeRows(rows[half:])
			}
			s.reject(rows[0], err)
			return true
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23514" {
			// No partition for a row: another replica's retention dropped
			// a day this sink knew. Create it again.
			clear(s.days)
		}
		if s.failingSince.IsZero() {
			s.failingSince = time.Now()
		}
		s.failed(err)
		delay := util.DefaultBackoff(float64(100*time.Millisecond), float64(s.cfg.MaxRetryDelay), retry)
		if retry == 0 || retry%10 == 0 {
			s.log.Warn("decision store write failed; retrying", "records", len(rows), "retry", retry, "next_in", delay, "err", s.redact(err))
		}
		select {
		case <-s.cfg.after(delay):
		case <-s.ctx.Done():
		}
	}
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

// copyLine is the index of the row a COPY's error names, if it names one.
func copyLine(err error) (int, bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return 0, false
	}
	all := copyLineRE.FindAllStringSubmatch(pe.Where, -1)
	if all == nil {
		return 0, false
	}
	m := all[len(all)-1] // the outermost: the sink's own COPY
	n, err := strconv.Atoi(m[1])
	return n - 1, err == nil && n > 0
}

// reject drops a record the database refused for its content, counted
// (rejected), and warns about it (warnRefused).
func (s *Sink) reject(row []any, err error) {
	s.queue.Drop(DropRejected, 1)
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
		"rejected_total", s.queue.Dropped(DropRejected), "last_decision_id", r.lastID, "last_err", r.lastErr)
	*r = refusals{warnedAt: at}
	return RejectedWarnInterval
}

func (s *Sink) failed(err error) {
	msg := s.redact(err)
	s.lastErr.Store(&msg)
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

// row is rec's values, in the order of columns.
func (s *Sink) row(rec decisionlog.Record) []any {
	key := ""
	if s.cfg.OutcomeKey != nil {
		key = s.cfg.OutcomeKey(rec.Decision)
	}
	outcome, reasons := rec.Summary(key)
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
		text(rec.Caller), text(outcome), reasons, text(code), duration, bytes.TrimSuffix(rec.AppendLine(nil), []byte{'\n'})}
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
func (s *Sink) copy(rows [][]any) error {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
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
		if err == nil {
			s.written.Add(uint64(len(rows)))
		}
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
	s.written.Add(uint64(len(rows)))
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
	st := SinkStats{URL: s.store.URL(), Replica: s.cfg.Replica, Written: s.written.Load(), Duplicates: s.duplicates.Load(),
		Queued: s.queue.Len() + int(s.inFlight.Load()), QueuedBytes: s.queue.Bytes(), QueueBytes: s.queue.Limits().Bytes,
		Dropped: map[string]uint64{}, WritesOK: s.writesOK.Load(), WritesFailed: s.writesFailed.Load(),
		RetentionDays: s.cfg.Retention.Hours() / 24}
	for _, r := range DropReasons {
		st.Dropped[r] = s.queue.Dropped(r)
	}
	if at := s.oldest.Load(); at != 0 {
		st.LagSeconds = max(0, time.Since(time.Unix(0, at)).Seconds())
	}
	if n := s.lastOK.Load(); n != 0 {
		t := time.Unix(0, n).UTC()
		st.LastWrite = &t
	}
	if e := s.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	return st
}
