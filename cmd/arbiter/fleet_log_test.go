package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
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

// The upload ships what was answered. With --decision-log-full refuse, a
// decision whose record the local log refused is answered overloaded, and
// its record, result included, is not uploaded either: the service
// receives exactly what the local log accepted. With drop (the default),
// the caller has the answer although the local log dropped its record, and
// the upload keeps that audit record.
func TestUploadWhatWasAnswered(t *testing.T) {
	for _, refuse := range []bool{true, false} {
		t.Run(map[bool]string{true: "refuse", false: "drop"}[refuse], func(t *testing.T) {
			uploadWhatWasAnswered(t, refuse)
		})
	}
}

func uploadWhatWasAnswered(t *testing.T, refuse bool) {
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
	logPath := filepath.Join(t.TempDir(), "decisions.log")
	local, err := decisionlog.Open(decisionlog.Options{Path: logPath})
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{cfg: &fleetConfig{}, upload: up}
	api := httptest.NewServer(server.New(server.Config{RefuseUnlogged: refuse, DecisionLog: f.decisionLog(local, refuse)}, eng))
	defer api.Close()

	accepted := post(t, http.DefaultClient, api.URL+"/v1/decisions/access_check", []byte(`{"tenant":"a","used":3}`))
	if accepted.status != http.StatusOK {
		t.Fatalf("with the local log open: %d %s", accepted.status, accepted.body)
	}
	// A closed log refuses every record: the case of a full queue, made
	// certain.
	if err := local.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	second := post(t, http.DefaultClient, api.URL+"/v1/decisions/access_check", []byte(`{"tenant":"b","used":4}`))
	want := []string{accepted.id}
	if refuse {
		if second.status != http.StatusServiceUnavailable || !strings.Contains(string(second.body), `"overloaded"`) || second.id == "" {
			t.Fatalf("with the local log refusing: %d %s", second.status, second.body)
		}
	} else {
		if second.status != http.StatusOK {
			t.Fatalf("with the local log dropping: %d %s", second.status, second.body)
		}
		want = append(want, second.id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := up.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// refuse: the refused decision's record (its result) and the record of
	// the 503 (refused too) both stay off the service.
	if got := sink.ids(); !slices.Equal(got, want) {
		t.Fatalf("uploaded %d events %v; want %v (the second answer was %d %s)", len(got), got, want, second.status, second.id)
	}
	var local1 []string
	for _, rec := range readDecisionLog(t, logPath) {
		local1 = append(local1, rec.DecisionID)
	}
	if !slices.Equal(local1, []string{accepted.id}) {
		t.Fatalf("local log %v, want %s", local1, accepted.id)
	}
}
