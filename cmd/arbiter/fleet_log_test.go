package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/logship"
	"github.com/arbiter-dev/arbiter/server"
)

// logSink is a decision-log service that keeps the events it receives.
type logSink struct {
	mu     sync.Mutex
	events []map[string]any
}

func (s *logSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	zr, err := gzip.NewReader(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var batch []map[string]any
	if err := json.NewDecoder(zr).Decode(&batch); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.events = append(s.events, batch...)
	s.mu.Unlock()
}

func (s *logSink) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, ev := range s.events {
		id, _ := ev["decision_id"].(string)
		out = append(out, id)
	}
	return out
}

// The upload ships what was answered, as a sink of the one pipeline, and
// a stalled file costs it nothing. With --decision-log-full refuse, a
// decision whose record the file's queue cannot take is answered
// overloaded, and its record, result included, reaches no sink, so the
// service never holds a result nobody received. With drop (the default),
// the caller has the answer although the file dropped its record (counted
// once), and the upload still ships it: the audit record survives in the
// service. A record the file fails to write after the answer is uploaded
// too: the sinks are independent.
func TestUploadWhatWasAnswered(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	for _, mode := range []string{"refuse", "drop", "file fails"} {
		t.Run(mode, func(t *testing.T) { uploadWhatWasAnswered(t, mode) })
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// stalledWriter blocks every Write until release is closed, and closes
// started when the first Write begins: a disk that stopped.
type stalledWriter struct {
	started, release chan struct{}
	once             sync.Once
	mu               sync.Mutex
	out              strings.Builder
}

func (w *stalledWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.started) })
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.Write(p)
}

// idSink is a sink that hands the test each record's id.
type idSink chan string

func (s idSink) Write(recs []decisionlog.Record) {
	for _, r := range recs {
		s <- r.DecisionID
	}
}

// receive returns when ch is closed or receives, and fails the test after 10
// seconds (a hang, never a threshold).
func receive[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing after 10 s", what)
	}
}

func uploadWhatWasAnswered(t *testing.T, mode string) {
	root := copyAccess(t)
	eng, err := live.New(context.Background(), engine.Config{Policies: filepath.Join(root, "policies"), Schemas: filepath.Join(root, "schemas")})
	if err != nil {
		t.Fatal(err)
	}
	sink := &logSink{}
	svc := httptest.NewServer(sink)
	defer svc.Close()
	up, err := logship.New(logship.Config{URL: svc.URL, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	refuse := mode == "refuse"
	file := &stalledWriter{started: make(chan struct{}), release: make(chan struct{})}
	handed := make(idSink, 100) // what the pipeline handed the sinks
	// Room for two records of 580 bytes (Record.QueueSize; the stalled
	// one's are held until its write returns), not for a third, nor for a
	// refusal's own record of 512.
	opts := decisionlog.Options{Path: "-", Stdout: file, QueueBytes: 1200, Refuse: refuse, Sinks: []decisionlog.Sink{up, handed}}
	if mode == "file fails" {
		opts.Stdout, opts.QueueBytes = failingWriter{}, 0
	}
	local, err := decisionlog.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(server.New(server.Config{RefuseUnlogged: refuse, DecisionLog: local}, eng))
	defer api.Close()

	decide := func(tenant string) answer {
		return post(t, http.DefaultClient, api.URL+"/v1/decisions/access_check", []byte(`{"tenant":"`+tenant+`","used":3}`))
	}
	first := decide("a")
	if first.status != http.StatusOK {
		t.Fatalf("with the pipeline open: %d %s", first.status, first.body)
	}
	want := []string{first.id}
	if mode == "file fails" {
		second := decide("b")
		if second.status != http.StatusOK {
			t.Fatalf("%s: %d %s", mode, second.status, second.body)
		}
		want = append(want, second.id)
		if err := local.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := local.Stats(); st.Failed != 2 || st.Written != 0 {
			t.Fatalf("file writes failed, stats %+v", st)
		}
	} else {
		receive(t, file.started, "the file's first write") // the disk stops in it
		receive(t, handed, "the first record handed to the sinks")
		second := decide("b") // the file's queue, holding the stalled one, takes it
		if second.status != http.StatusOK {
			t.Fatalf("with the file's queue empty: %d %s", second.status, second.body)
		}
		want = append(want, second.id)
		receive(t, handed, "the second record handed to the sinks with the file stalled")
		third := decide("c") // the file's queue is full
		switch {
		case refuse:
			if third.status != http.StatusServiceUnavailable || !strings.Contains(string(third.body), `"overloaded"`) || third.id == "" {
				t.Fatalf("with the file's queue full: %d %s", third.status, third.body)
			}
		case third.status != http.StatusOK:
			t.Fatalf("with the file's queue full: %d %s", third.status, third.body)
		default:
			want = append(want, third.id)
		}
		close(file.release)
		if err := local.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := local.Stats(); st.Written != 2 || st.Unwritten != local.Dropped() || st.Unwritten != st.Refused || st.Refused == 0 {
			t.Fatalf("stats %+v dropped %d: the records the file could not take are not counted", st, local.Dropped())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := up.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sink.ids(); !slices.Equal(got, want) {
		t.Fatalf("uploaded %d events %v; want %v", len(got), got, want)
	}
	if mode == "file fails" {
		return
	}
	if lines := file.out.String(); strings.Count(lines, "\n") != 2 || !strings.Contains(lines, want[0]) || !strings.Contains(lines, want[1]) {
		t.Fatalf("local log %q, want %s and %s", lines, want[0], want[1])
	}
}
