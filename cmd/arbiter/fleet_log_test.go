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

// The upload ships what was answered, as a sink of the one pipeline. A
// record the pipeline's queue refuses reaches no sink and is counted once:
// with --decision-log-full refuse its decision is answered overloaded, so
// the service never holds a result nobody received; with drop (the
// default) the caller has the answer and the log counts the lost record.
// A record the file fails to write after the answer is still uploaded:
// the sinks are independent, and the service keeps the audit record.
func TestUploadWhatWasAnswered(t *testing.T) {
	for _, mode := range []string{"refuse", "drop", "file fails"} {
		t.Run(mode, func(t *testing.T) { uploadWhatWasAnswered(t, mode) })
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func uploadWhatWasAnswered(t *testing.T, mode string) {
	root := copyAccess(t)
	eng, err := engine.New(context.Background(), engine.Config{Policies: filepath.Join(root, "policies"), Schemas: filepath.Join(root, "schemas")})
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
	opts := decisionlog.Options{Path: filepath.Join(t.TempDir(), "decisions.log"), Sinks: []decisionlog.Sink{up}}
	if mode == "file fails" {
		opts.Path, opts.Stdout = "-", failingWriter{}
	}
	local, err := decisionlog.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	refuse := mode == "refuse"
	api := httptest.NewServer(server.New(server.Config{RefuseUnlogged: refuse, DecisionLog: local}, eng))
	defer api.Close()

	first := post(t, http.DefaultClient, api.URL+"/v1/decisions/access_check", []byte(`{"tenant":"a","used":3}`))
	if first.status != http.StatusOK {
		t.Fatalf("with the pipeline open: %d %s", first.status, first.body)
	}
	want := []string{first.id}
	if mode != "file fails" {
		// A closed pipeline refuses every record: the case of a full
		// queue, made certain.
		if err := local.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	second := post(t, http.DefaultClient, api.URL+"/v1/decisions/access_check", []byte(`{"tenant":"b","used":4}`))
	switch {
	case refuse:
		if second.status != http.StatusServiceUnavailable || !strings.Contains(string(second.body), `"overloaded"`) || second.id == "" {
			t.Fatalf("with the pipeline refusing: %d %s", second.status, second.body)
		}
	case second.status != http.StatusOK:
		t.Fatalf("%s: %d %s", mode, second.status, second.body)
	case mode == "file fails":
		want = append(want, second.id)
		if err := local.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := local.Stats(); st.Failed != 2 || st.Written != 0 {
			t.Fatalf("file writes failed, stats %+v", st)
		}
	}
	if mode != "file fails" {
		if st := local.Stats(); st.Written != 1 || st.Unwritten != local.Dropped() || st.Unwritten == 0 {
			t.Fatalf("stats %+v dropped %d: the refused records are not counted", st, local.Dropped())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := up.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sink.ids(); !slices.Equal(got, want) {
		t.Fatalf("uploaded %d events %v; want %v (the second answer was %d %s)", len(got), got, want, second.status, second.id)
	}
	if mode == "file fails" {
		return
	}
	var logged []string
	for _, rec := range readDecisionLog(t, opts.Path) {
		logged = append(logged, rec.DecisionID)
	}
	if !slices.Equal(logged, []string{first.id}) {
		t.Fatalf("local log %v, want %s", logged, first.id)
	}
}
