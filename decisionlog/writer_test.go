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
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for the writer goroutine and the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// gateWriter blocks every Write until release is closed, and closes started
// when the first Write begins: the writer goroutine is then known to be stuck.
type gateWriter struct {
	started, release chan struct{}
	once             sync.Once
	out              lockedBuffer
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
			name:     "malformed input moved to body_base64",
			rec:      Record{DecisionID: "c", Input: json.RawMessage("{\"tenant\":\n"), Error: &RecordError{Code: "malformed_json", Message: "unexpected end"}},
			wantBody: "eyJ0ZW5hbnQiOgo=",
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
			if (got.Error == nil) != (tc.rec.Error == nil) || got.Error != nil && *got.Error != *tc.rec.Error {
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
	l, err := Open(Options{Path: path, BufferSize: writers * each})
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

func TestFullQueueDropsAndWarns(t *testing.T) {
	gate := newGateWriter()
	var logs lockedBuffer
	l, err := Open(Options{Path: "-", Stdout: gate, BufferSize: 1, Logger: testLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(rec("first"))
	select {
	case <-gate.started: // the writer holds "first" and is stuck writing it
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not write a record while the queue was idle")
	}
	for i := range 10 {
		l.Log(rec(fmt.Sprint(i))) // "0" fills the queue; the rest find it full
	}
	if got := l.Dropped(); got != 9 {
		t.Errorf("Dropped = %d, want 9", got)
	}
	if n := strings.Count(logs.String(), "queue is full"); n != 1 {
		t.Errorf("%d drop warnings, want exactly 1 (at most one per second, never none):\n%s", n, logs.String())
	}

	// Close is bounded by its context while the writer is stuck.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a stuck writer: %v, want DeadlineExceeded", err)
	}
	l.Log(rec("late")) // after Close: counted, no panic
	close(gate.release)
	closeLog(t, l)
	if got := l.Dropped(); got != 10 {
		t.Errorf("Dropped after a Log past Close = %d, want 10", got)
	}
	out := gate.out.String()
	if l.Written() != 2 || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"decision_id":"first"`) || !strings.Contains(out, `"decision_id":"0"`) {
		t.Errorf("Written %d, output:\n%s\nwant the records first and 0", l.Written(), out)
	}
}

func TestRotationKeepsMaxBackups(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	line, _ := json.Marshal(rec("00"))
	size := int64(len(line) + 1)
	l, err := Open(Options{Path: path, MaxBytes: 3 * size, MaxBackups: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 20; i++ {
		l.Log(rec(fmt.Sprintf("%02d", i)))
	}
	closeLog(t, l)
	// 20 records of 3 per file: ... [13-15] [16-18] [19-20]; two backups kept.
	want := map[string][]string{
		path:        {"19", "20"},
		path + ".1": {"16", "17", "18"},
		path + ".2": {"13", "14", "15"},
	}
	for p, ids := range want {
		_, recs := readLines(t, p)
		var got []string
		for _, r := range recs {
			got = append(got, r.DecisionID)
		}
		if fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Errorf("%s holds %v, want %v", filepath.Base(p), got, ids)
		}
	}
	if _, err := os.Stat(path + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.3 exists (err %v): more than MaxBackups kept", path, err)
	}
	if l.Written() != 20 {
		t.Errorf("Written = %d, want 20 (rotated-away records were written)", l.Written())
	}
}

// fakeFile records the order of writes, syncs and closes; its first write
// waits for release.
type fakeFile struct {
	mu      sync.Mutex
	events  []string
	data    bytes.Buffer
	release chan struct{}
}

func (f *fakeFile) Write(p []byte) (int, error) {
	<-f.release
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, "write")
	return f.data.Write(p)
}

func (f *fakeFile) Sync() error  { f.event("sync"); return nil }
func (f *fakeFile) Close() error { f.event("close"); return nil }
func (f *fakeFile) event(e string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
}

func TestCloseDrainsFlushesAndSyncs(t *testing.T) {
	ff := &fakeFile{release: make(chan struct{})}
	l, err := newLogger(Options{Path: "fake", BufferSize: 1000}, func(string) (logFile, int64, error) { return ff, 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		l.Log(rec(fmt.Sprint(i)))
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while records were still queued behind a blocked write", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(ff.release)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if got := strings.Count(ff.data.String(), "\n"); got != n || l.Written() != n {
		t.Errorf("%d lines written, Written %d; want %d", got, l.Written(), n)
	}
	ev := strings.Join(ff.events, " ")
	if !strings.HasSuffix(ev, "write sync close") || strings.Count(ev, "sync") != 1 {
		t.Errorf("events %q, want the last write, then one sync, then close", ev)
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
