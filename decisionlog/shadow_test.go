package decisionlog

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// logged returns the records of the log file at path, by decision id.
func logged(t *testing.T, path string) map[string]Record {
	t.Helper()
	out := map[string]Record{}
	if _, err := os.Stat(path); err != nil {
		return out
	}
	warnings, err := ReadFile(path, func(_ int, rec Record) error {
		out[rec.DecisionID] = rec
		return nil
	})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("reading the log: %v %v", err, warnings)
	}
	return out
}

// waitLogged polls the log until it holds id, within a generous deadline.
func waitLogged(t *testing.T, path, id string) map[string]Record {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		recs := logged(t, path)
		if _, ok := recs[id]; ok {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("record %s never written", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A record waiting for its shadow outcome is queued (counted) at once, held
// back while later records are written, and written once, with the
// candidate's answer, when it arrives; without one when none comes.
func TestRecordWaitsForItsShadowOutcome(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(id string) Record {
		return Record{DecisionID: id, Time: time.Now(), Decision: "d", Path: "/v1/decisions/d", Input: json.RawMessage(`{}`), Result: json.RawMessage(`{"o":"no"}`)}
	}
	waiting, dropped := rec("waiting"), rec("dropped")
	pw, pd := NewPending(), NewPending()
	waiting.AwaitShadow(pw)
	dropped.AwaitShadow(pd)
	for _, r := range []Record{waiting, dropped, rec("after")} {
		if !l.Log(r) {
			t.Fatal("refused")
		}
	}
	recs := waitLogged(t, path, "after")
	if _, ok := recs["waiting"]; ok {
		t.Fatal("a record was written before its shadow outcome")
	}
	pw.Complete(&Shadow{Revision: "cand", Class: "refuse_to_allow", Result: json.RawMessage(`{"o":"yes"}`), DurationNS: 3})
	pd.Complete(nil)
	pd.Complete(&Shadow{Revision: "late"}) // only the first counts
	waitLogged(t, path, "waiting")
	recs = waitLogged(t, path, "dropped")
	if sh := recs["waiting"].Shadow; sh == nil || sh.Revision != "cand" || sh.Class != "refuse_to_allow" || string(sh.Result) != `{"o":"yes"}` {
		t.Errorf("shadow member %+v", sh)
	}
	if sh := recs["dropped"].Shadow; sh != nil {
		t.Errorf("a record without a shadow outcome has %+v", sh)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Written != 3 || st.Unwritten != 0 {
		t.Errorf("stats %+v", st)
	}
}

// A Logger that closes does not wait for a shadow outcome that never
// comes: the record is written without it, and counted as written.
func TestCloseWritesRecordsStillWaiting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	r := Record{DecisionID: "never", Time: time.Now(), Decision: "d", Path: "/p", Input: json.RawMessage(`{}`), Result: json.RawMessage(`{}`)}
	r.AwaitShadow(NewPending())
	l.Log(r)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := logged(t, path)
	if got, ok := recs["never"]; !ok || got.Shadow != nil {
		t.Fatalf("records %+v", recs)
	}
	if st := l.Stats(); st.Written != 1 {
		t.Errorf("stats %+v", st)
	}
	b, _ := os.ReadFile(path)
	if strings.Count(string(b), "\n") != 1 {
		t.Errorf("log %q", b)
	}
}
