package decisionlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

// gateWriter blocks every Write until release is closed, and closes started
// when the first Write begins: the writer goroutine is then known to be stuck.
type gateWriter struct {
	started, release chan struct{}
	once             sync.Once
	out              testfiles.Buffer
}

func newGateWriter() *gateWriter {
	return &gateWriter{started: make(chan struct{}), release: make(chan struct{})}
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.started) })
	<-g.release
	return g.out.Write(p)
}

func testLogger(buf io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, nil))
}

func rec(id string) Record {
	return Record{
		DecisionID: id,
		Time:       time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Decision:   "quota_check",
		Revision:   "0123456789abcdef",
		Path:       "/v1/decisions/quota_check",
		Input:      json.RawMessage(`{"tenant":"t","used":1}`),
		Result:     json.RawMessage(`{"allow":true,"reasons":[]}`),
		DurationNS: 1000,
	}
}

func closeLog(t *testing.T, l *Logger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// readLines reads a log file strictly: every line must be one record.
func readLines(t *testing.T, path string) ([]string, []Record) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		return nil, nil
	}
	if !bytes.HasSuffix(data, []byte("\n")) {
		t.Fatalf("%s does not end with a newline", path)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	recs := make([]Record, len(lines))
	for i, line := range lines {
		if err := json.Unmarshal([]byte(line), &recs[i]); err != nil {
			t.Fatalf("%s:%d: %v: %s", path, i+1, err, line)
		}
	}
	return lines, recs
}

func TestLogWritesOneCompactLinePerRecord(t *testing.T) {
	tests := []struct {
		name       string
		rec        Record
		wantInput  string
		wantBody   string
		wantResult string
	}{
		{
			name:       "compact input kept byte for byte",
			rec:        Record{DecisionID: "a", Input: json.RawMessage(`{"z":1,"a":"<&>","n":18446744073709551615}`), Result: json.RawMessage(`{"allow":true}`)},
			wantInput:  `{"z":1,"a":"<&>","n":18446744073709551615}`,
			wantResult: `{"allow":true}`,
		},
		{
			name:       "pretty-printed input and result compacted",
			rec:        Record{DecisionID: "b", Input: json.RawMessage("{\n  \"tenant\": \"x y\",\n  \"used\": 1.50\n}\n"), Result: json.RawMessage("{\n \"reasons\": [\n  \"r\"\n ]\n}")},
			wantInput:  `{"tenant":"x y","used":1.50}`,
			wantResult: `{"reasons":["r"]}`,
		},
		{
			name:     "body_base64 kept",
			rec:      Record{DecisionID: "d", BodyBase64: "AAEC", Error: &RecordError{Code: "malformed_json", Message: "m"}},
			wantBody: "AAEC",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "decisions.jsonl")
			l, err := Open(Options{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			l.Log(tc.rec)
			closeLog(t, l)
			lines, recs := readLines(t, path)
			if len(lines) != 1 {
				t.Fatalf("got %d lines, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
			}
			got := recs[0]
			if got.DecisionID != tc.rec.DecisionID || string(got.Input) != tc.wantInput || got.BodyBase64 != tc.wantBody || string(got.Result) != tc.wantResult {
				t.Errorf("got id %q input %s body %q result %s\nwant id %q input %s body %q result %s",
					got.DecisionID, got.Input, got.BodyBase64, got.Result, tc.rec.DecisionID, tc.wantInput, tc.wantBody, tc.wantResult)
			}
			if (got.Error == nil) != (tc.rec.Error == nil) || got.Error != nil && !reflect.DeepEqual(*got.Error, *tc.rec.Error) {
				t.Errorf("error: got %+v, want %+v", got.Error, tc.rec.Error)
			}
			if l.Written() != 1 || l.Dropped() != 0 {
				t.Errorf("Written %d Dropped %d, want 1 and 0", l.Written(), l.Dropped())
			}
		})
	}
}

func TestOpenCreatesFoldersAndAppends(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "decisions.jsonl")
	for i := range 2 {
		l, err := Open(Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		l.Log(rec(fmt.Sprint(i)))
		closeLog(t, l)
	}
	_, recs := readLines(t, path)
	if len(recs) != 2 || recs[0].DecisionID != "0" || recs[1].DecisionID != "1" {
		t.Fatalf("got %+v, want records 0 and 1 in order", recs)
	}
	for p, want := range map[string]os.FileMode{dir: 0o750, path: 0o640} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got&^want != 0 {
			t.Errorf("%s: mode %v, want at most %v", p, got, want)
		}
	}
}

func TestConcurrentLogWritesEachRecordOnce(t *testing.T) {
	const writers, each = 16, 250
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	l, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				l.Log(rec(fmt.Sprintf("%d-%d", w, i)))
			}
		})
	}
	wg.Wait()
	closeLog(t, l)
	_, recs := readLines(t, path)
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.DecisionID]++
	}
	for w := range writers {
		for i := range each {
			if id := fmt.Sprintf("%d-%d", w, i); seen[id] != 1 {
				t.Errorf("record %s written %d times", id, seen[id])
			}
		}
	}
	if len(recs) != writers*each || l.Written() != writers*each || l.Dropped() != 0 {
		t.Errorf("%d lines, Written %d, Dropped %d; want %d, %d, 0", len(recs), l.Written(), l.Dropped(), writers*each, writers*each)
	}
}

// bigRec is a record whose input is n bytes of JSON.
func bigRec(id string, n int) Record {
	r := rec(id)
	r.Input = json.RawMessage(`{"pad":"` + strings.Repeat("x", n-10) + `"}`)
	return r
}

// stuckLog opens a Logger whose sink blocks until released, and waits until
// the writer is stuck in its first write (holding the record "first").
func stuckLog(t *testing.T, opts Options) (*Logger, *gateWriter, *testfiles.Buffer) {
	t.Helper()
	gate := newGateWriter()
	var warnings testfiles.Buffer
	opts.Path, opts.sink, opts.Logger = "-", gate, testLogger(&warnings)
	l, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Log(rec("first")) {
		t.Fatal("an empty queue refused a record")
	}
	select {
	case <-gate.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not write a record while the queue was idle")
	}
	return l, gate, &warnings
}

// TestQueueIsBoundedInBytes: behind a stalled sink, records are refused once
// the queued bytes reach the bound, whatever their number; each refusal is
// counted and warned about (at most once a second, never silently).
func TestQueueIsBoundedInBytes(t *testing.T) {
	const bound = 4 << 20
	// The warnings' rate limit reads this clock, which only the test moves.
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	l, gate, warnings := stuckLog(t, Options{QueueBytes: bound, now: now})
	accepted := 0
	for i := range 40 {
		if l.Log(bigRec(fmt.Sprint(i), 1<<20)) {
			accepted++
		}
	}
	if accepted != 3 { // 1 MiB plus overhead each: three fit under 4 MiB
		t.Errorf("%d records of 1 MiB queued under a 4 MiB bound, want 3", accepted)
	}
	if got, m := l.Dropped(), droppedMetric(t, l); got != uint64(40-accepted) || m["full"] != float64(40-accepted) || len(m) != 4 || m["closed"]+m["failed"]+m["abandoned"] != 0 {
		t.Errorf("Dropped = %d (metric %v), want %d, all full", got, m, 40-accepted)
	}
	if n := strings.Count(warnings.String(), "queue is full"); n != 1 {
		t.Errorf("%d refusal warnings within one second, want exactly 1:\n%s", n, warnings.String())
	}
	clock.Add(int64(time.Second))
	if l.Log(bigRec("late", 1<<20)) {
		t.Fatal("a full queue took a record")
	}
	if n := strings.Count(warnings.String(), "queue is full"); n != 2 {
		t.Errorf("%d refusal warnings once a second passed, want 2:\n%s", n, warnings.String())
	}
	close(gate.release)
	closeLog(t, l)
	st := l.Stats()
	if st.Written != uint64(1+accepted) || st.Unwritten != uint64(41-accepted) || st.Refused != st.Unwritten {
		t.Errorf("stats %+v, want %d written and %d refused", st, 1+accepted, 41-accepted)
	}
}

// TestCloseAccountsForEveryRecord: a Close that runs out of time behind a
// stalled file counts every record it leaves unwritten, in Stats, in
// Dropped and in its error; none is reported written. The other sinks got
// every record all the same.
func TestCloseAccountsForEveryRecord(t *testing.T) {
	const n = 61
	sink := make(idSink, n+1)
	l, gate, _ := stuckLog(t, Options{Sinks: []Sink{sink}})
	for i := range n {
		if !l.Log(rec(fmt.Sprint(i))) {
			t.Fatal("record refused by an almost empty queue")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := l.Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), fmt.Sprintf("%d records not written", n+1)) {
		t.Fatalf("Close behind a stalled sink: %v, want %d records not written", err, n+1)
	}
	if l.Log(rec("late")) {
		t.Error("a record was queued after Close")
	}
	st := l.Stats()
	if st.Written != 0 || st.Unwritten != n+2 || l.Dropped() != n+2 {
		t.Errorf("stats %+v, Dropped %d; want 0 written, %d unwritten", st, l.Dropped(), n+2)
	}
	if m := droppedMetric(t, l); m["abandoned"] != n+1 || m["closed"] != 1 || m["full"]+m["failed"] != 0 {
		t.Errorf("arbiter_decision_log_dropped_total %v, want %d abandoned and 1 closed", m, n+1)
	}
	for i := range n + 1 {
		if id := sink.next(t); i > 0 && id != fmt.Sprint(i-1) {
			t.Fatalf("the other sink got %s, want %d", id, i-1)
		}
	}
	close(gate.release)
}

// TestLargeRecordsKeepTheirPlace: a record too large to batch is written
// on its own, after the batch before it, so records of every size stay in
// the order they were logged, each whole.
func TestLargeRecordsKeepTheirPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{100, 200, batchBytes * 3, 50, batchBytes - 1, batchBytes, 300, batchBytes * 2}
	for i, n := range sizes {
		if !l.Log(bigRec(fmt.Sprint(i), n)) {
			t.Fatal("record refused")
		}
	}
	closeLog(t, l)
	_, recs := readLines(t, path)
	if len(recs) != len(sizes) {
		t.Fatalf("%d records, want %d", len(recs), len(sizes))
	}
	for i, r := range recs {
		if want := bigRec(fmt.Sprint(i), sizes[i]); r.DecisionID != want.DecisionID || !bytes.Equal(r.Input, want.Input) {
			t.Errorf("record %d: id %s, %d input bytes; want id %s, %d", i, r.DecisionID, len(r.Input), want.DecisionID, len(want.Input))
		}
	}
}

// TestRotation: files rotate at the configured size, each file holds whole
// records only and never starts with a blank line, the configured number of
// backups is kept, and every record is written once. The clock stands
// still or steps back, so every rotation falls in one millisecond or before
// the last, the time in a backup's
// name: lumberjack renamed each backup over the last one there and kept
// only the newest file's records (natefinch/lumberjack#34). A file already
// holding that name is kept too.
func TestRotation(t *testing.T) {
	frozen := time.Date(2026, 12, 4, 16, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		backups   int
		step      time.Duration // how the clock moves at each reading: not at all, or back
		wantFiles int           // the log, the backups kept, and the older file
	}{
		{backups: 2, wantFiles: 3},
		{backups: -1, wantFiles: 5},
		{backups: 2, step: -time.Hour, wantFiles: 3},
	} {
		t.Run(fmt.Sprint("backups=", tc.backups, ",step=", tc.step), func(t *testing.T) {
			var mu sync.Mutex
			clock := frozen
			now := func() time.Time {
				mu.Lock()
				defer mu.Unlock()
				clock = clock.Add(tc.step)
				return clock
			}
			dir := t.TempDir()
			path := filepath.Join(dir, "decisions.log")
			older := filepath.Join(dir, "decisions-"+frozen.Format(backupTimeFormat)+".log")
			if err := os.WriteFile(older, []byte(`{"decision_id":"older"}`+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := Open(Options{Path: path, MaxMegabytes: 1, MaxBackups: tc.backups, now: now})
			if err != nil {
				t.Fatal(err)
			}
			const n = 40 // 100 KiB each: four files' worth
			for i := range n {
				if !l.Log(bigRec(fmt.Sprintf("%02d", i), 100<<10)) {
					t.Fatal("record refused")
				}
			}
			closeLog(t, l)
			files, err := Files(path)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, p := range files {
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if len(data) > 1<<20 || len(data) == 0 || data[0] == '\n' {
					t.Errorf("%s: %d bytes, starting %q", p, len(data), data[:min(len(data), 1)])
				}
				_, recs := readLines(t, p)
				for _, r := range recs {
					ids = append(ids, r.DecisionID)
				}
			}
			if len(files) != tc.wantFiles {
				t.Errorf("%d files %v, want %d", len(files), files, tc.wantFiles)
			}
			slices.Sort(ids)
			if len(slices.Compact(slices.Clone(ids))) != len(ids) {
				t.Errorf("a record was written twice: %v", ids)
			}
			if tc.backups < 0 {
				if len(ids) != n+1 || ids[n] != "older" {
					t.Errorf("every backup kept, yet %d records of %d and the older file's: %v", len(ids), n, ids)
				}
				return
			}
			for i, id := range ids { // the newest records, none missing among them
				if want := fmt.Sprintf("%02d", n-len(ids)+i); id != want {
					t.Errorf("records kept %v: want the newest %d in a row", ids, len(ids))
					break
				}
			}
			if len(ids) < 20 {
				t.Errorf("only %d records kept in three files of 1 MiB", len(ids))
			}
			if l.Written() != n {
				t.Errorf("Written = %d, want %d", l.Written(), n)
			}
		})
	}
}

// TestRecordTooLargeForTheFile: a record larger than the rotation size is
// not written, and counted.
func TestRecordTooLargeForTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := Open(Options{Path: path, MaxMegabytes: 1, Logger: testLogger(&testfiles.Buffer{})})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(bigRec("huge", 2<<20))
	l.Log(rec("small"))
	closeLog(t, l)
	_, recs := readLines(t, path)
	if len(recs) != 1 || recs[0].DecisionID != "small" || l.Stats().Failed != 1 || l.Dropped() != 1 {
		t.Errorf("records %d, stats %+v", len(recs), l.Stats())
	}
}

// A record reaches the file within FlushDelay, without Close: a crash
// loses at most the last few milliseconds.
func TestLogFlushesWhenIdle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	l, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog(t, l)
	l.Log(rec("idle"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"decision_id":"idle"`) && l.Written() == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record is not in the file 10s after Log (Written %d): %q", l.Written(), data)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOpenOpensTheFile: the log file is open once Open returns (lumberjack
// would open it at the first write), so that a process that later runs out
// of descriptors still logs. Seen here through an unlinked file: the
// records go to the file opened at Open, not to a new one.
func TestOpenOpensTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	l.Log(rec("after-unlink"))
	closeLog(t, l)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file was opened again after Open (stat: %v)", err)
	}
	if l.Written() != 1 {
		t.Errorf("Written %d, want 1", l.Written())
	}
}

// TestCloseDrainsTheQueue: Close waits for every queued record to be
// written, even behind a slow sink, and reports nothing unwritten.
func TestCloseDrainsTheQueue(t *testing.T) {
	l, gate, _ := stuckLog(t, Options{})
	const n = 500
	for i := range n {
		if !l.Log(rec(fmt.Sprint(i))) {
			t.Fatal("record refused")
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close(context.Background()) }()
	close(gate.release) // the sink resumes only once Close is waiting, or soon after
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := strings.Count(gate.out.String(), "\n"); got != n+1 || l.Written() != n+1 || l.Stats().Unwritten != 0 {
		t.Errorf("%d lines, stats %+v; want %d written, none unwritten", got, l.Stats(), n+1)
	}
}

// idSink is a sink that hands the test each record's id; its buffer is
// larger than any test logs, so that it never blocks the pipeline.
type idSink chan string

func (s idSink) Write(recs []Record) {
	for _, r := range recs {
		s <- r.DecisionID
	}
}

func (s idSink) next(t *testing.T) string {
	t.Helper()
	select {
	case id := <-s:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("the sink got no record while the file was stalled")
		return ""
	}
}

// TestStalledFileCostsOnlyItsOwnRecords: while the file's write does not
// return, the other sinks get every record at once; the file's queue, full,
// decides at Log whether a record is queued for the file. With drop, a
// record it cannot take still reaches the other sinks and is counted once;
// with Refuse, it reaches none, and Log says so, so that its decision is
// not answered.
func TestStalledFileCostsOnlyItsOwnRecords(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(map[bool]string{false: "drop", true: "refuse"}[refuse], func(t *testing.T) {
			sink := make(idSink, 100)
			// The file's queue holds the stalled record's bytes until its
			// write returns, and room for one more.
			first, zero := rec("first"), rec("0")
			bound := first.QueueSize() + zero.QueueSize()
			l, gate, _ := stuckLog(t, Options{QueueBytes: bound, Sinks: []Sink{sink}, Refuse: refuse})
			want, got := []string{"first"}, []string{sink.next(t)}
			for i := range 10 {
				id := fmt.Sprint(i)
				if queued := l.Log(rec(id)); queued != (i == 0) {
					t.Fatalf("record %s queued for the file: %v; want only the first after the stalled one", id, queued)
				}
				if i == 0 || !refuse {
					// Each in turn, the file still stalled: the pipeline's
					// own queue, bounded alike, is empty for the next.
					want, got = append(want, id), append(got, sink.next(t))
				}
			}
			close(gate.release)
			closeLog(t, l)
			close(sink)
			for id := range sink {
				got = append(got, id)
			}
			if !slices.Equal(got, want) {
				t.Errorf("the other sink got %v, want %v", got, want)
			}
			st := l.Stats()
			if lines := gate.out.String(); st.Written != 2 || st.Refused != 9 || st.Unwritten != 9 || l.Dropped() != 9 ||
				!strings.Contains(lines, `"decision_id":"first"`) || !strings.Contains(lines, `"decision_id":"0"`) || strings.Count(lines, "\n") != 2 {
				t.Errorf("stats %+v, Dropped %d, file %q; want first and 0 written, 9 refused, each counted once", st, l.Dropped(), lines)
			}
		})
	}
}

// droppedMetric reads arbiter_decision_log_dropped_total by reason.
func droppedMetric(t *testing.T, l *Logger) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for k, v := range testfiles.Counters(t, l.Collector()) {
		if r, ok := strings.CutPrefix(k, `arbiter_decision_log_dropped_total{reason="`); ok {
			out[strings.TrimSuffix(r, `"}`)] = v
		}
	}
	return out
}
