package decisionstore

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

// randomLetters are n letters that no compression shortens: PostgreSQL
// compresses a long index entry before it checks btree's 2704-byte limit.
func randomLetters(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(rng.IntN(26))
	}
	return string(b)
}

// lines are the lines of what l holds that contain substr.
func lines(l *testfiles.Buffer, substr string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// recorded is a sink of the pipeline that keeps what it is given: any
// sink beside the file and the store (the upload, the pages' ring).
type recorded struct {
	mu   sync.Mutex
	recs []decisionlog.Record
}

func (r *recorded) Write(recs []decisionlog.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, recs...)
}

// TestHostileNamesCostTheStoreNothing: a caller chooses a request's
// decision name and path (POST /v1/decisions/<3000 letters> is answered
// 404, and logged), and a client certificate its caller name. Bounded
// where the pipeline takes the record, they reach every sink (the file,
// the store, any other) at most decisionlog.MaxNameBytes long, cut with a
// visible marker, and the store writes the hostile records with the others
// without a failed write. Before, each was past btree's 2704-byte entry:
// it split its batch down to itself and was dropped.
func TestHostileNamesCostTheStoreNothing(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	s := newSink(t, url, SinkConfig{})
	var other recorded
	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := decisionlog.Open(decisionlog.Options{Path: path, Sinks: []decisionlog.Sink{s, &other}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(29, 1))
	const n = 400
	for i := range n {
		rec := decision(i)
		if i%2 == 1 {
			name := randomLetters(rng, 3000)
			rec.Decision, rec.Path, rec.Caller = name, "/v1/decisions/"+name, randomLetters(rng, 3000)
			rec.Result, rec.Error = nil, &decisionlog.RecordError{Code: "unknown_decision", Message: "no such decision"}
		}
		l.Log(rec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, s, "every record written or dropped", func(st SinkStats) bool { return st.Written+st.DroppedTotal() == n })
	if st.Written != n || st.WritesFailed != 0 {
		t.Fatalf("written %d of %d, %d rejected, %d failed writes; want every record written and no write failed", st.Written, n, st.Dropped[DropRejected], st.WritesFailed)
	}

	// Every sink has each name bounded, a hostile one with its marker.
	check := func(where string, i int, names ...string) {
		t.Helper()
		for _, name := range names {
			if len(name) > decisionlog.MaxNameBytes || (i%2 == 1) != strings.Contains(name, "...[truncated from ") {
				t.Fatalf("%s, record %d: a name of %d bytes (%.40q...), want at most %d and a marker when cut", where, i, len(name), name, decisionlog.MaxNameBytes)
			}
		}
	}
	var file []decisionlog.Record
	if _, err := decisionlog.ReadFile(path, func(_ int, rec decisionlog.Record) error { file = append(file, rec); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(file) != n || len(other.recs) != n {
		t.Fatalf("%d records in the file, %d in the other sink; want %d", len(file), len(other.recs), n)
	}
	for i := range n {
		check("the file", i, file[i].Decision, file[i].Path, file[i].Caller)
		check("the other sink", i, other.recs[i].Decision, other.recs[i].Path, other.recs[i].Caller)
	}
	if n := count(t, url, fmt.Sprintf(`WHERE greatest(octet_length(decision), octet_length(path), octet_length(caller)) > %d`, decisionlog.MaxNameBytes)); n != 0 {
		t.Errorf("%d rows of the store with a name past the bound", n)
	}
}

// fakeClock is the sink's clock in a test: it moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestSinkRefusedRowCostsOneWrite: a value the database refuses for its
// size (here under an index of the operator's own on an input member, past
// btree's 2704 bytes: SQLSTATE 54000) is that record's problem: COPY names
// its line, so the record is dropped and counted (rejected) at the cost of
// the one write it failed, and the rest of its batch is written at once.
// The refusals are warned about once, then at most once a minute, each
// line saying how many since the last.
func TestSinkRefusedRowCostsOneWrite(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	if _, err := open(t, url).Pool().Exec(ctxT(t), `CREATE INDEX records_note ON arbiter_store.records ((arbiter_store.record_input(record, path)->>'note'))`); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: t0}
	var logged testfiles.Buffer
	s := newSink(t, url, SinkConfig{Logger: slog.New(slog.NewTextHandler(&logged, nil)), now: clock.now})
	rng := rand.New(rand.NewPCG(29, 2))
	const n, bad = 1000, 10
	var recs []decisionlog.Record
	for i := range n {
		rec := decision(i)
		if i%(n/bad) == n/bad/2 {
			rec.Input = []byte(`{"note":"` + randomLetters(rng, 4000) + `"}`)
		}
		recs = append(recs, rec)
	}
	s.Write(recs)
	st := waitFor(t, s, "every record written or rejected", func(st SinkStats) bool { return st.Written+st.Dropped[DropRejected] == n })
	if st.Written != n-bad || st.Dropped[DropRejected] != bad || st.WritesFailed != bad {
		t.Fatalf("written %d, rejected %d, %d failed writes; want %d, %d and one failed write per refused record", st.Written, st.Dropped[DropRejected], st.WritesFailed, n-bad, bad)
	}
	if n := count(t, url, `WHERE arbiter_store.record_input(record, path) ? 'note'`); n != 0 {
		t.Errorf("%d refused records in the store", n)
	}
	const warning = "decision store refused records"
	if got := lines(&logged, warning); len(got) != 1 || !strings.Contains(got[0], " records=1 ") {
		t.Fatalf("warnings within a minute:\n%s\nwant one, of the first record", strings.Join(got, "\n"))
	}
	// A minute later, the next line says how many were refused meanwhile.
	clock.advance(time.Minute)
	s.Write([]decisionlog.Record{decision(n)})
	waitFor(t, s, "one more written", func(st SinkStats) bool { return st.Written == n-bad+1 })
	if got := lines(&logged, warning); len(got) != 2 || !strings.Contains(got[1], " records=9 ") || !strings.Contains(got[1], " rejected_total=10 ") {
		t.Fatalf("warnings a minute later:\n%s\nwant a second one, of the 9 others", strings.Join(got, "\n"))
	}
}

// countingConn counts the bytes a reader receives from the database.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// countedReader is a Reader on a connection of its own that counts the
// bytes it receives.
func countedReader(t *testing.T, url string) (*Reader, *atomic.Int64) {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return countingConn{c, &n}, err
	}
	conn, err := pgx.ConnectConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return NewReader(conn), &n
}

// hostileRows stores 5 decisions, one whose record is 4 MiB (its input)
// and one whose record is not JSON (written by hand: no replica writes
// one), and returns the ids of the last two.
func hostileRows(t *testing.T, url string) (big, bad string) {
	t.Helper()
	s := newSink(t, url, SinkConfig{})
	var recs []decisionlog.Record
	for i := range 5 {
		recs = append(recs, decision(i))
	}
	recs[2].Input = []byte(`{"blob":"` + strings.Repeat("x", 4<<20) + `"}`)
	s.Write(recs)
	waitFor(t, s, "5 written", func(st SinkStats) bool { return st.Written == 5 })
	// A second after t0 is the next day: its partition, which the sink
	// made only while that day was today or tomorrow.
	st := open(t, url)
	if err := st.EnsurePartitions(ctxT(t), t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctxT(t), `INSERT INTO arbiter_store.records (time, decision_id, kind, replica, decision, path, record)
		VALUES ($1, 'not-json', 'decision', 'replica-z', 'd1', '/v1/decisions/d1', 'this is not {JSON')`, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	return recs[2].DecisionID, "not-json"
}

// TestReadersSurviveHostileRows: a row whose record is not JSON, or is
// megabytes long, costs a reader neither its answer nor its memory. The
// list reads the columns it shows, not the records (a few KiB for a page
// beside a 4 MiB record, and the row that is not JSON is listed from its
// columns); a decision's record is loaded up to MaxRecordBytes, a larger
// one as its first bytes and its size; one that is not a decision record
// is shown the same way, and counted (the sink's metric, for its pages).
func TestReadersSurviveHostileRows(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	big, bad := hostileRows(t, url)
	r, read := countedReader(t, url)
	r.MaxRecordBytes = 1 << 20

	read.Store(0)
	rows, _, err := r.List(ctxT(t), Filter{}, Cursor{}, 50)
	if err != nil {
		t.Fatalf("listing beside a row that is not JSON: %v", err)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows listed, want 6", len(rows))
	}
	if n := read.Load(); n > 64<<10 {
		t.Errorf("listing 6 rows read %d bytes from the database; want the columns, not the 4 MiB record", n)
	}
	// A listed row is what its columns say.
	for _, row := range rows[1:] {
		want := decision(int(row.Record.DurationNS - 1000))
		if got := row.Record; got.DecisionID != want.DecisionID || got.Decision != want.Decision || got.Path != want.Path ||
			got.Revision != want.Revision || got.Caller != want.Caller || !got.Time.Equal(want.Time) || row.Outcome != "o1" || row.Partial != nil {
			t.Errorf("listed %+v (%+v), want the columns of %+v", got, row, want)
		}
	}
	if rows[0].Record.DecisionID != bad || rows[0].Replica != "replica-z" {
		t.Errorf("the newest row listed is %s of %s, want %s", rows[0].Record.DecisionID, rows[0].Replica, bad)
	}

	for _, tc := range []struct {
		id, why string
		bytes   int64
	}{
		{big, "larger than the 1048576 bytes a reader loads of one record", int64(len(decision(2).AppendLine(nil))) + 4<<20 + 11},
		{bad, "not a decision record: ", int64(len("this is not {JSON"))},
	} {
		read.Store(0)
		row, ok, err := r.Get(ctxT(t), tc.id)
		if err != nil || !ok {
			t.Fatalf("Get(%s): %v, %v", tc.id, ok, err)
		}
		p := row.Partial
		if p == nil || !strings.HasPrefix(p.Why, tc.why) || p.Bytes < tc.bytes-100 || p.Bytes > tc.bytes+100 || len(p.Head) > HeadBytes || row.Record.DecisionID != tc.id {
			t.Errorf("Get(%s) = %+v, partial %.200v; want its columns and its %d bytes in part: %s", tc.id, row.Record, p, tc.bytes, tc.why)
		}
		if n := read.Load(); n > 2*HeadBytes {
			t.Errorf("Get(%s) read %d bytes from the database; want at most its first %d", tc.id, n, HeadBytes)
		}
	}
	if n := r.Unreadable(); n != 1 {
		t.Errorf("%d unreadable records counted, want 1", n)
	}
	// Stream gives every row, those shown in part marked so (replay skips them).
	var partial []string
	err = r.Stream(ctxT(t), Filter{}, func(row Row) error {
		if row.Partial != nil {
			partial = append(partial, row.Record.DecisionID)
		}
		return nil
	})
	if err != nil || !slices.Equal(partial, []string{bad}) {
		t.Errorf("Stream: %v, in part %q; want only %s (the 4 MiB record is within a log's line)", err, partial, bad)
	}

	// The pages' reader is the sink's, whose metrics count what it could not decode.
	s := newSink(t, url, SinkConfig{})
	if _, _, err := s.Reader().Get(ctxT(t), bad); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(unreadableOnly{s.Collector()}); n != 1 {
		t.Errorf("arbiter_decision_store_unreadable_records_total %v, want 1", n)
	}
}

// unreadableOnly is the one metric of a sink's collector that counts the
// records its reader could not decode.
type unreadableOnly struct{ prometheus.Collector }

func (u unreadableOnly) Describe(ch chan<- *prometheus.Desc) { ch <- unreadableDesc }

func (u unreadableOnly) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric, 64)
	u.Collector.Collect(all)
	close(all)
	for m := range all {
		if m.Desc() == unreadableDesc {
			ch <- m
		}
	}
}
