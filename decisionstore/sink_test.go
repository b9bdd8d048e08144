package decisionstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/internal/pgtest"
	"github.com/arbiter-dev/arbiter/internal/queue"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// waitFor polls cond until it holds, or fails t after a deadline saying
// what did not happen and the sink's account.
func waitFor(t *testing.T, s *Sink, what string, cond func(SinkStats) bool) SinkStats {
	t.Helper()
	var st SinkStats
	if _, ok := wait.For(30*time.Second, func() bool { st = s.Stats(); return cond(st) }); !ok {
		t.Fatalf("after 30s, %s has not happened: %+v", what, st)
	}
	return st
}

func newSink(t *testing.T, url string, cfg SinkConfig) *Sink {
	t.Helper()
	if cfg.Replica == "" {
		cfg.Replica = "replica-a"
	}
	if cfg.MaxRetryDelay == 0 {
		cfg.MaxRetryDelay = 50 * time.Millisecond
	}
	s, err := NewSink(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

var t0 = time.Date(2026, 12, 4, 23, 59, 59, 0, time.UTC)

// decision is the record of a synthetic decision i (no policy's name).
func decision(i int) decisionlog.Record {
	return decisionlog.Record{DecisionID: fmt.Sprintf("id-%05d", i), Time: t0.Add(time.Duration(i) * time.Millisecond),
		Decision: "d1", Revision: "rev1", Path: "/v1/decisions/d1", Caller: "c1", DurationNS: int64(1000 + i),
		Input: json.RawMessage(fmt.Sprintf(`{"run":{"id":"run-%d"}}`, i)), Result: json.RawMessage(`{"outcome":"o1","reasons":["r1","r2"]}`)}
}

func count(t *testing.T, url, where string) int {
	t.Helper()
	s := open(t, url)
	var n int
	if err := s.Pool().QueryRow(ctxT(t), `SELECT count(*) FROM arbiter_store.records `+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSinkWritesEveryKind: decisions, refused inputs, shadow outcomes and
// promotions land with their columns, the record as the file writes it,
// and the input document (unwrapped from a Data API body).
func TestSinkWritesEveryKind(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	answered := decision(1)
	refused := decisionlog.Record{DecisionID: "id-r", Time: t0.Add(time.Hour), Decision: "d1", Path: "/v1/data/decisions/d1/decision",
		Input: json.RawMessage(`{"input":{"run":{"id":"run-r"}}}`), Error: &decisionlog.RecordError{Code: "e1", Message: "m"}, DurationNS: 5}
	shadowed := decisionlog.Record{DecisionID: answered.DecisionID, Time: answered.Time.Add(time.Millisecond), Decision: "d1", Path: answered.Path,
		Shadow: &decisionlog.Shadow{Revision: "rev2", Class: "k1", Result: json.RawMessage(`{"v":"o2","reasons":["r3"]}`), DurationNS: 9}}
	promoted := decisionlog.Record{DecisionID: "id-p", Time: t0, Promotion: json.RawMessage(`{"by":"someone"}`)}
	s := newSink(t, url, SinkConfig{Replica: "replica-7", OutcomeKey: func(string) string { return "v" }})
	recs := []decisionlog.Record{answered, refused, shadowed, promoted}
	s.Write(recs)
	waitFor(t, s, "4 records written", func(st SinkStats) bool { return st.Written == 4 })

	rows, err := open(t, url).Pool().Query(ctxT(t), `SELECT decision_id, kind, replica, decision, path, revision, caller, outcome,
		array_to_string(reasons, '|'), error_code, duration_ns, coalesce(input::text, 'NULL'), coalesce(result::text, 'NULL'), record::text
		FROM arbiter_store.records_json ORDER BY decision_id, kind`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var records []string
	for rows.Next() {
		var id, kind, replica, dec, path, rev, caller, outcome, reasons, code, input, result, record string
		var dur int64
		if err := rows.Scan(&id, &kind, &replica, &dec, &path, &rev, &caller, &outcome, &reasons, &code, &dur, &input, &result, &record); err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join([]string{id, kind, replica, dec, path, rev, caller, outcome, reasons, code, fmt.Sprint(dur), input, result}, " "))
		records = append(records, record)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	// answered's outcome is "" with the key "v": its result has only "outcome".
	want := []string{
		`id-00001 decision replica-7 d1 /v1/decisions/d1 rev1 c1  r1|r2  1001 {"run": {"id": "run-1"}} {"outcome": "o1", "reasons": ["r1", "r2"]}`,
		`id-00001 shadow replica-7 d1 /v1/decisions/d1 rev2  o2 r3  9 NULL {"v": "o2", "reasons": ["r3"]}`,
		`id-p promotion replica-7        0 NULL NULL`,
		`id-r decision replica-7 d1 /v1/data/decisions/d1/decision   error  e1 5 {"run": {"id": "run-r"}} NULL`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The record column is the file's line, byte for byte.
	for i, rec := range []decisionlog.Record{answered, shadowed, promoted, refused} {
		if want := strings.TrimSuffix(string(rec.AppendLine(nil)), "\n"); records[i] != want {
			t.Errorf("record %d:\n%s\nwant the file's line:\n%s", i, records[i], want)
		}
	}
}

// TestSinkKeepsTheLineExactly: what jsonb would rewrite (duplicate keys,
// numbers past float64 or written long, spaces, key order, escapes) is kept
// as the file's line has it, and read back so by the reader; a line jsonb
// cannot hold at all (a string holding \u0000, a number past numeric's
// range) is kept too, with no input column: only the input filter misses
// it.
func TestSinkKeepsTheLineExactly(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	inputs := []struct {
		input    string
		hasInput bool // the input column is set: jsonb holds the input
	}{
		{`{"used": 1, "used": 99}`, true},
		{`{"n":1e400,"m":123456789012345678901234567890,"f":1.50000000000000000001,"z":-0.0}`, true},
		{`{ "b" :[ 1 , 2 ],"a":"\u00e9\/"}`, true},
		{`{"run":{"id":"\u0000"}}`, false},
		{`{"n":1e1000000}`, false},
		// On the Data API's path: a decision's record holds the input the
		// engine unwrapped, a refused request's the body as received.
		{`{"run":{"runId":"r-data"}}`, true},
		{`{"input": {"run":{"runId":"r-refused"}}}`, true},
	}
	var recs []decisionlog.Record
	for i, in := range inputs {
		rec := decision(i)
		rec.Input = json.RawMessage(in.input)
		if i >= len(inputs)-2 {
			rec.Path = "/v1/data/decisions/d1/decision"
		}
		if i == len(inputs)-1 {
			rec.Result, rec.Error = nil, &decisionlog.RecordError{Code: "invalid_input", Message: "x"}
		}
		recs = append(recs, rec)
	}
	s := newSink(t, url, SinkConfig{})
	s.Write(recs)
	st := waitFor(t, s, "every record written", func(st SinkStats) bool { return st.Written == uint64(len(recs)) })
	if st.DroppedTotal() != 0 {
		t.Errorf("dropped: %+v", st.Dropped)
	}
	r := NewReader(open(t, url).Pool())
	for i, rec := range recs {
		row, ok, err := r.Get(ctxT(t), rec.DecisionID)
		if err != nil || !ok {
			t.Fatalf("Get(%s) = %v, %v", rec.DecisionID, ok, err)
		}
		if got, want := row.Record.AppendLine(nil), rec.AppendLine(nil); !bytes.Equal(got, want) {
			t.Errorf("%s read back as\n%s\nwant the file's line\n%s", inputs[i].input, got, want)
		}
		var has bool
		if err := open(t, url).Pool().QueryRow(ctxT(t), `SELECT input IS NOT NULL FROM arbiter_store.records_json WHERE decision_id = $1`, rec.DecisionID).Scan(&has); err != nil {
			t.Fatal(err)
		}
		if has != inputs[i].hasInput {
			t.Errorf("%s: an input column %v, want %v", inputs[i].input, has, inputs[i].hasInput)
		}
		if !has {
			continue
		}
		// The column is the record's input document, as Go reads it (the
		// ring's filters, the upload's events).
		var same bool
		if err := open(t, url).Pool().QueryRow(ctxT(t), `SELECT input = $2::jsonb FROM arbiter_store.records_json WHERE decision_id = $1`, rec.DecisionID, string(rec.InputDocument())).Scan(&same); err != nil {
			t.Fatal(err)
		}
		if !same {
			t.Errorf("%s on %s: the input column is not the record's input document %s", inputs[i].input, rec.Path, rec.InputDocument())
		}
	}
}

// TestStoreHoldsEachRecordOnce: a row holds its record once. The input
// and result were stored columns generated from the record (migration 1),
// so a row held them twice, and each write parsed the line for each:
// 100,000 Runner states took 12.7 s to COPY in, 7.3 s with the input's
// index on the expression instead (migration 3; docs/DECISION-STORE.md).
// Measured by the bytes the rows take (heap and TOAST, indexes apart),
// which no clock moves: 1,000 records of about 1 KB of random letters
// (which TOAST cannot compress: it would hide the second copy) must take
// at most 1.5 times their lines (the columns beside the record, the
// rows' headers and a page's free end are the rest).
func TestStoreHoldsEachRecordOnce(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	s := newSink(t, url, SinkConfig{})
	const n = 1000
	var recs []decisionlog.Record
	var lines int64
	rng := rand.New(rand.NewPCG(29, 7))
	for i := range n {
		rec := decision(i)
		state := map[string]any{"run": map[string]any{"id": fmt.Sprintf("run-%d", i)}}
		for f := range 20 {
			state[fmt.Sprintf("field%02d", f)] = randomLetters(rng, 30)
		}
		in, err := json.Marshal(state)
		if err != nil {
			t.Fatal(err)
		}
		rec.Input = in
		lines += int64(len(rec.AppendLine(nil)))
		recs = append(recs, rec)
	}
	s.Write(recs)
	waitFor(t, s, "every record written", func(st SinkStats) bool { return st.Written == n })
	var size int64
	if err := open(t, url).Pool().QueryRow(ctxT(t), `SELECT sum(pg_table_size(inhrelid))::bigint FROM pg_inherits
		WHERE inhparent = 'arbiter_store.records'::regclass`).Scan(&size); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records of %d bytes a line take %d bytes a row", n, lines/n, size/n)
	if size > lines*3/2 {
		t.Errorf("%d records of %d bytes a line take %d bytes a row (heap and TOAST); want at most 1.5 times the line: the record once", n, lines/n, size/n)
	}
	// The input filter finds them all the same.
	m, err := ParseInputMatch("/run/id = run-7")
	if err != nil {
		t.Fatal(err)
	}
	rows, _, err := NewReader(open(t, url).Pool()).List(ctxT(t), Filter{Input: []InputMatch{m}}, Cursor{}, 10)
	if err != nil || len(rows) != 1 || rows[0].Cursor.ID != "id-00007" {
		t.Errorf("the input filter /run/id = run-7 listed %v (%v); want id-00007", rows, err)
	}
}

// TestSinkWritesEachRecordOnce: records written again (a batch retried
// after the answer to its commit was lost) are not duplicated.
func TestSinkWritesEachRecordOnce(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	s := newSink(t, url, SinkConfig{})
	var recs []decisionlog.Record
	for i := range 50 {
		recs = append(recs, decision(i))
	}
	s.Write(recs[:30])
	waitFor(t, s, "30 written", func(st SinkStats) bool { return st.Written == 30 })
	s.Write(recs) // 30 again, and 20 new
	st := waitFor(t, s, "80 written", func(st SinkStats) bool { return st.Written == 80 })
	if st.Duplicates != 30 {
		t.Errorf("duplicates %d; want 30", st.Duplicates)
	}
	if n := count(t, url, ""); n != 50 {
		t.Fatalf("%d rows; want 50, each record once", n)
	}
}

// TestSinkRejectedRecordCostsOnlyItself: a record the database refuses for
// its content (invalid UTF-8 in a refused body's string, which json.Valid
// lets through and a text column cannot hold) is dropped and counted; the
// rest of its batch is written.
func TestSinkRejectedRecordCostsOnlyItself(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	s := newSink(t, url, SinkConfig{})
	var recs []decisionlog.Record
	for i := range 10 {
		recs = append(recs, decision(i))
	}
	recs[6].Input = json.RawMessage("{\"run\":{\"id\":\"\xff\"}}")
	recs[6].Error, recs[6].Result = &decisionlog.RecordError{Code: "e1", Message: "m"}, nil
	recs[3].Caller = "c\xff" // invalid UTF-8 in a text column: replaced, kept
	s.Write(recs)
	st := waitFor(t, s, "9 written and 1 rejected", func(st SinkStats) bool { return st.Written == 9 && st.Dropped[DropRejected] == 1 })
	if st.Queued != 0 {
		t.Errorf("queued %d after every record was written or dropped", st.Queued)
	}
	if n := count(t, url, `WHERE decision_id <> 'id-00006'`); n != 9 {
		t.Fatalf("%d rows; want the 9 others", n)
	}
	if n := count(t, url, `WHERE decision_id = 'id-00003' AND caller = 'c'||chr(65533)`); n != 1 {
		t.Fatalf("the record with invalid UTF-8 in its caller: %d rows; want 1, with U+FFFD", n)
	}
}

// TestSinkOutage: with the database stopped, Write still returns at once,
// records wait (counted as queued, lag growing) or are dropped and counted
// when the queue is full; after the restart every record is in the store
// exactly once, or counted as dropped.
func TestSinkOutage(t *testing.T) {
	t.Parallel()
	own := pgtest.Start(t) // this test stops it
	url := own.DB(t)
	// Room for about 40 records of ~560 bytes.
	s := newSink(t, url, SinkConfig{QueueBytes: 40 * 560, BatchRecords: 10})
	next := 0
	write := func(n int) {
		var recs []decisionlog.Record
		for range n {
			recs = append(recs, decision(next))
			next++
		}
		s.Write(recs)
	}
	write(20)
	waitFor(t, s, "20 written", func(st SinkStats) bool { return st.Written == 20 })

	if err := own.Stop(); err != nil {
		t.Fatal(err)
	}
	write(10)
	st := waitFor(t, s, "a failed write and a lag while the database is down", func(st SinkStats) bool {
		return st.WritesFailed > 0 && st.LastError != "" && st.LagSeconds > 0
	})
	for range 10 { // 100 more records than the queue holds
		write(10)
	}
	st = s.Stats()
	if st.Dropped[queue.Full] == 0 || st.Queued == 0 || st.Written != 20 {
		t.Fatalf("during the outage: %+v; want records queued, the rest dropped as full, none written", st)
	}
	if st.QueuedBytes > st.QueueBytes {
		t.Errorf("queued %d bytes, past the bound %d", st.QueuedBytes, st.QueueBytes)
	}
	if err := own.Restart(); err != nil {
		t.Fatal(err)
	}
	total := uint64(next)
	st = waitFor(t, s, "every record written or dropped", func(st SinkStats) bool {
		return st.Queued == 0 && st.Written+st.DroppedTotal() == total
	})
	if st.LastError != "" || st.LagSeconds != 0 {
		t.Errorf("after recovery: %+v; want no error, no lag", st)
	}
	if n := count(t, url, ""); uint64(n) != st.Written || st.Duplicates != 0 {
		t.Fatalf("%d rows, %d written (%d duplicates), %d dropped of %d: want each written record once", n, st.Written, st.Duplicates, st.DroppedTotal(), total)
	}
	if n := count(t, url, `WHERE decision_id IN (SELECT decision_id FROM arbiter_store.records GROUP BY decision_id HAVING count(*) > 1)`); n != 0 {
		t.Fatalf("%d decision ids twice", n)
	}
}

// TestSinkCloseCountsTheUnwritten: a stop whose deadline passes with the
// database away counts what was not written as dropped (shutdown).
func TestSinkCloseCountsTheUnwritten(t *testing.T) {
	t.Parallel()
	s, err := NewSink("postgres://nobody:s3cret-pw@127.0.0.1:1/none?sslmode=disable&connect_timeout=1", SinkConfig{MaxRetryDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	recs := []decisionlog.Record{decision(1), decision(2), decision(3)}
	s.Write(recs)
	st := waitFor(t, s, "a failed write", func(st SinkStats) bool { return st.WritesFailed > 0 && st.LastError != "" })
	if b, _ := json.Marshal(st); strings.Contains(string(b), "s3cret-pw") || !strings.Contains(st.URL, "nobody:xxxxx@") {
		t.Errorf("the status shows the password: %s", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); err == nil || !strings.Contains(err.Error(), "3 records not written") {
		t.Fatalf("Close: %v; want 3 records not written", err)
	}
	if st := s.Stats(); st.Dropped[DropShutdown] != 3 || st.Queued != 0 {
		t.Fatalf("after Close: %+v; want 3 dropped at shutdown", st)
	}
	s.Write(recs[:1])
	if st := s.Stats(); st.Dropped[queue.Closed] != 1 {
		t.Fatalf("after Close, a write: %+v; want 1 dropped as closed", st)
	}
}

// TestSinkRetention: on start the sink creates today's and tomorrow's
// partitions and drops the days past the retention.
func TestSinkRetention(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	st := open(t, url)
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	if err := st.EnsurePartitions(ctxT(t), now.AddDate(0, 0, -40), now.AddDate(0, 0, -31), now.AddDate(0, 0, -29)); err != nil {
		t.Fatal(err)
	}
	newSink(t, url, SinkConfig{Retention: 30 * 24 * time.Hour, now: func() time.Time { return now }})
	deadline := time.Now().Add(30 * time.Second)
	for {
		days, err := st.Partitions(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range days {
			got = append(got, d.Format("0102"))
		}
		if strings.Join(got, " ") == "1105 1204 1205" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions %v; want 1105 (29 days old), today 1204 and tomorrow 1205", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkSinkWrite: records a second the sink writes into the package's
// cluster (fsync off), each with a 2 KiB input, handed over 100 at a time
// as the pipeline does.
func BenchmarkSinkWrite(b *testing.B) {
	url := cluster.DB(b)
	var input strings.Builder // about 2 KiB, 40 objects: a GIN index's work
	input.WriteString(`{"run":{"steps":[`)
	for k := range 40 {
		if k > 0 {
			input.WriteString(",")
		}
		fmt.Fprintf(&input, `{"name":"step-%d","state":"done","attempt":%d,"host":"h-%d"}`, k, k%3, k%7)
	}
	input.WriteString(`]}}`)
	s, err := NewSink(url, SinkConfig{Replica: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	recs := make([]decisionlog.Record, 100)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(recs) {
		for j := range recs {
			recs[j] = decision(i + j)
			recs[j].DecisionID = fmt.Sprintf("b-%09d", i+j)
			recs[j].Input = json.RawMessage(input.String())
		}
		s.Write(recs)
	}
	for want := uint64((b.N + len(recs) - 1) / len(recs) * len(recs)); s.Stats().Written+s.Stats().DroppedTotal() < want; {
		time.Sleep(time.Millisecond) // until every record is written: what is measured
	}
	b.ReportMetric(float64(s.Stats().Written)/b.Elapsed().Seconds(), "records/s")
}
