package decisionstore

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
)

// TestListRunsReadsTheRunIDWithinBounds: ListRuns gives each row the run
// id its input holds at its decision's pointer, as a column: a run id of
// 100,000 characters costs the list RunIDChars of them, a record larger
// than RunRecordBytes is not parsed (RunUnread, no run id), a decision
// with no pointer and a row that is not JSON have none, and the page
// still reads the columns, not the records (a few KiB beside 4 MiB).
func TestListRunsReadsTheRunIDWithinBounds(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	big, bad := hostileRows(t, url)
	s := newSink(t, url, SinkConfig{})
	long := decision(10)
	long.Input = json.RawMessage(`{"run":{"id":"` + strings.Repeat("r", 100_000) + `"}}`)
	large := decision(11)
	large.Input = json.RawMessage(`{"run":{"id":"run-large"},"blob":"` + strings.Repeat("x", RunRecordBytes) + `"}`)
	other := decision(12)
	other.Decision = "d2"
	s.Write([]decisionlog.Record{long, large, other})
	waitFor(t, s, "3 written", func(st SinkStats) bool { return st.Written == 3 })

	r, read := countedReader(t, url)
	read.Store(0)
	rows, _, err := r.ListRuns(ctxT(t), Filter{}, Cursor{}, 50, RunPointers{"d1": {"run", "id"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := read.Load(); n > 64<<10 {
		t.Errorf("listing %d rows with their run ids read %d bytes from the database; want the columns and %d characters of each run id", len(rows), n, RunIDChars)
	}
	got := map[string]string{}
	for _, row := range rows {
		v := row.RunID
		if row.RunUnread {
			v += "(unread)"
		}
		got[row.Record.DecisionID] = v
	}
	want := map[string]string{
		"id-00000": "run-0", "id-00001": "run-1", "id-00003": "run-3", "id-00004": "run-4",
		big: "(unread)", bad: "", long.DecisionID: strings.Repeat("r", RunIDChars), large.DecisionID: "(unread)", other.DecisionID: "",
	}
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			t.Errorf("row %s: run id %.80q (listed: %v), want %.80q", id, g, ok, w)
		}
	}
}

// TestAnyInputFindsARunAcrossDecisions: a run's decisions name its id at
// a pointer of each decision's own; AnyInput finds them all, newest
// first, page by page, and no decision of another run, nor a decision
// that holds the id at another decision's pointer.
func TestAnyInputFindsARunAcrossDecisions(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	s := newSink(t, url, SinkConfig{})
	var recs []decisionlog.Record
	var wantIDs []string
	for i := range 12 {
		rec := decision(i)
		run := "run-a"
		if i%3 == 0 {
			run = "run-b"
		}
		if i%2 == 0 {
			rec.Decision, rec.Input = "d2", json.RawMessage(`{"runKey":"`+run+`","n":`+string(rune('1'+i%3))+`}`)
		} else {
			rec.Input = json.RawMessage(`{"run":{"id":"` + run + `"}}`)
		}
		if i == 11 { // d1 holding the id at d2's pointer: not this run's
			rec.Input = json.RawMessage(`{"runKey":"run-a","run":{"id":"run-c"}}`)
			run = "run-c"
		}
		rec.Time = t0.Add(time.Duration(i) * time.Second)
		recs = append(recs, rec)
		if run == "run-a" {
			wantIDs = append([]string{rec.DecisionID}, wantIDs...)
		}
	}
	s.Write(recs)
	waitFor(t, s, "12 written", func(st SinkStats) bool { return st.Written == 12 })
	mustMatch := func(s string) InputMatch {
		m, err := ParseInputMatch(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	f := Filter{AnyInput: []DecisionInput{{"d1", mustMatch("/run/id = run-a")}, {"d2", mustMatch("/runKey = run-a")}}}
	r := NewReader(open(t, url).Pool())
	var got []string
	for cur := (Cursor{}); ; {
		rows, next, err := r.List(ctxT(t), f, cur, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			got = append(got, row.Record.DecisionID)
		}
		if next.IsZero() {
			break
		}
		cur = next
	}
	if !slices.Equal(got, wantIDs) {
		t.Errorf("run-a's decisions: %v, want %v", got, wantIDs)
	}
	if n, more, err := r.Count(ctxT(t), f, 100); err != nil || n != len(wantIDs) || more {
		t.Errorf("count %d (more %v, %v), want %d", n, more, err, len(wantIDs))
	}
	for _, rec := range recs {
		in := slices.Contains(wantIDs, rec.DecisionID)
		if f.MatchesAny(rec.Decision, rec.Input) != in {
			t.Errorf("MatchesAny(%s, %s) = %v, want %v (as the store)", rec.Decision, rec.Input, !in, in)
		}
	}
}
