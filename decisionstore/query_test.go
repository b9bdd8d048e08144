package decisionstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
)

// stored is a record as a test stored it, with the columns it was stored
// under: what a filter is checked against.
type stored struct {
	replica string
	rec     decisionlog.Record
}

var testReplicas = []string{"replica-a", "replica-b", "replica-c"}

// fixtureRecords are the repository's fixtures decided by its policies,
// as three replicas would have logged them over a day boundary: every
// decision, outcome, reason and error code comes from the fixtures, none
// from this test.
func fixtureRecords(t *testing.T) []stored {
	t.Helper()
	ctx := context.Background()
	eng, err := live.New(ctx, engine.Config{Policies: "../policies", Schemas: "../schemas"})
	if err != nil {
		t.Fatal(err)
	}
	fixtures, err := engine.LoadFixtures("../policy_test")
	if err != nil {
		t.Fatal(err)
	}
	// Across midnight, so the rows sit in two daily partitions.
	base := time.Now().UTC().Truncate(24 * time.Hour).Add(-time.Duration(len(fixtures)) * time.Second / 2)
	var out []stored
	for i, fx := range fixtures {
		rec := decisionlog.Record{
			DecisionID: fmt.Sprintf("%08d-%s", i, fx.Name), Time: base.Add(time.Duration(i)*time.Second + time.Duration(i)*time.Microsecond),
			Decision: fx.Decision, Path: "/v1/decisions/" + fx.Decision, Input: fx.Input, DurationNS: int64(1000 + i),
			Caller: fmt.Sprintf("caller-%d", i%4),
		}
		if !json.Valid(fx.Input) {
			rec.Input = nil
		}
		d, err := eng.Decide(ctx, fx.Decision, fx.RequestBody(), engine.Options{})
		if err != nil {
			e := engine.AsError(err)
			rec.Error = &decisionlog.RecordError{Code: string(e.Code), Message: e.Message}
			rec.Revision = eng.Snapshot().Revision
		} else {
			rec.Revision, rec.Result = d.Revision, d.Result
		}
		out = append(out, stored{replica: testReplicas[len(out)%len(testReplicas)], rec: rec})
	}
	if len(out) < 30 {
		t.Fatalf("only %d fixtures", len(out))
	}
	return out
}

// storedFixtures stores fixtureRecords in a database of its own and
// returns a Reader of it.
func storedFixtures(t *testing.T) (*Reader, []stored) {
	t.Helper()
	url := cluster.DB(t)
	s := open(t, url)
	recs := fixtureRecords(t)
	storeRecords(t, url, recs)
	return NewReader(s.Pool()), recs
}

// storeRecords writes records through each replica's sink, and waits for
// them: Close writes what is queued.
func storeRecords(t *testing.T, url string, recs []stored) {
	t.Helper()
	storeRecordsWith(t, url, recs, SinkConfig{})
}

// storeRecordsWith is storeRecords through sinks of cfg (its Replica
// each record's).
func storeRecordsWith(t *testing.T, url string, recs []stored, cfg SinkConfig) {
	t.Helper()
	byReplica := map[string][]decisionlog.Record{}
	for _, r := range recs {
		byReplica[r.replica] = append(byReplica[r.replica], r.rec)
	}
	for replica, rs := range byReplica {
		cfg.Replica = replica
		sink, err := NewSink(url, cfg)
		if err != nil {
			t.Fatal(err)
		}
		sink.Write(rs)
		if err := sink.Close(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if st := sink.Stats(); st.Written != uint64(len(rs)) {
			t.Fatalf("the sink of %s wrote %d of %d records: %+v", replica, st.Written, len(rs), st)
		}
	}
}

// matches is the reference of what a filter selects, read from the
// records in Go: the store must agree with it.
func matches(f Filter, s stored) bool {
	rec := s.rec
	outcome, reasons := rec.Summary("")
	code := ""
	if rec.Error != nil {
		code = rec.Error.Code
	}
	switch {
	case f.Decision != "" && rec.Decision != f.Decision,
		f.Outcome != "" && outcome != f.Outcome,
		f.Reason != "" && !slices.Contains(reasons, f.Reason) && code != f.Reason,
		f.Revision != "" && !strings.HasPrefix(rec.Revision, f.Revision),
		f.Caller != "" && rec.Caller != f.Caller,
		f.Replica != "" && s.replica != f.Replica,
		f.Path != "" && rec.Path != f.Path,
		!f.Since.IsZero() && rec.Time.Truncate(time.Microsecond).Before(f.Since),
		!f.Until.IsZero() && !rec.Time.Truncate(time.Microsecond).Before(f.Until):
		return false
	}
	for _, m := range f.Input {
		// jsonb holds no \u0000: such an input has no input column
		// (TestSinkKeepsTheLineExactly), and no input filter finds it.
		if !m.Match(rec.InputDocument()) || bytes.Contains(rec.InputDocument(), []byte(`\u0000`)) {
			return false
		}
	}
	return true
}

// leaf finds, in the records' inputs, a pointer to an object member
// holding a scalar of the wanted JSON kind (a string, a number), for an
// input filter built from the data.
func leaf(t *testing.T, recs []stored, kind func(any) bool) InputMatch {
	t.Helper()
	var walk func(v any, toks []string) (InputMatch, bool)
	walk = func(v any, toks []string) (InputMatch, bool) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				if m, ok := walk(v[k], append(slices.Clone(toks), k)); ok {
					return m, true
				}
			}
		default:
			if len(toks) > 1 && kind(v) {
				b, _ := json.Marshal(v)
				ptr := ""
				for _, tok := range toks {
					ptr += "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(tok)
				}
				m, err := ParseInputMatch(ptr + " = " + string(b))
				return m, err == nil
			}
		}
		return InputMatch{}, false
	}
	for _, r := range recs {
		dec := json.NewDecoder(bytes.NewReader(r.rec.Input))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			continue
		}
		if m, ok := walk(v, nil); ok {
			return m
		}
	}
	t.Fatal("no input of the fixtures has such a nested member")
	return InputMatch{}
}

// TestQueryFilters: every filter of the pages, and those only a store of
// every replica has, selects from a populated store what the reference
// selects from the records, in the store's order (newest first), the
// count agrees, and keyset pages of any size walk the same rows.
func TestQueryFilters(t *testing.T) {
	t.Parallel()
	r, recs := storedFixtures(t)

	// Values from the data.
	first := recs[0].rec
	var outcome, reason, errCode string
	for _, x := range recs {
		o, rs := x.rec.Summary("")
		if outcome == "" && o != "" && o != decisionlog.OutcomeError {
			outcome = o
		}
		if reason == "" && len(rs) > 1 {
			reason = rs[1] // not only the first reason matches
		}
		if errCode == "" && x.rec.Error != nil {
			errCode = x.rec.Error.Code
		}
	}
	if outcome == "" || reason == "" || errCode == "" {
		t.Fatalf("the fixtures lack an outcome (%q), a second reason (%q) or an error (%q)", outcome, reason, errCode)
	}
	str := leaf(t, recs, func(v any) bool { _, ok := v.(string); return ok })
	num := leaf(t, recs, func(v any) bool { _, ok := v.(json.Number); return ok })
	mid := recs[len(recs)/2].rec.Time.Truncate(time.Microsecond)

	for _, tc := range []struct {
		name string
		f    Filter
	}{
		{"everything", Filter{}},
		{"decision", Filter{Decision: first.Decision}},
		{"outcome", Filter{Outcome: outcome}},
		{"refused", Filter{Outcome: decisionlog.OutcomeError}},
		{"a reason not the first", Filter{Reason: reason}},
		{"an error code as reason", Filter{Reason: errCode}},
		{"revision prefix", Filter{Revision: first.Revision[:6]}},
		{"no such revision", Filter{Revision: "not-a-revision"}},
		{"caller", Filter{Caller: "caller-1"}},
		{"replica", Filter{Replica: testReplicas[1]}},
		{"path", Filter{Path: recs[3].rec.Path}},
		{"since", Filter{Since: mid}},
		{"until", Filter{Until: mid}},
		{"since and until", Filter{Since: recs[3].rec.Time.Truncate(time.Microsecond), Until: mid}},
		{"input string", Filter{Input: []InputMatch{str}}},
		{"input number", Filter{Input: []InputMatch{num}}},
		{"input both", Filter{Input: []InputMatch{str, num}}},
		{"replica and decision", Filter{Replica: testReplicas[2], Decision: first.Decision}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []string
			for i := len(recs) - 1; i >= 0; i-- { // newest first
				if matches(tc.f, recs[i]) {
					want = append(want, recs[i].rec.DecisionID)
				}
			}
			if strings.HasPrefix(tc.name, "input") && (len(want) == 0 || len(want) == len(recs)) {
				t.Fatalf("the input filter %s selects %d of %d records: no test", tc.f.Input, len(want), len(recs))
			}
			for _, size := range []int{1000, 7} {
				var got []string
				var cur Cursor
				for page := 0; ; page++ {
					rows, next, err := r.List(ctxT(t), tc.f, cur, size)
					if err != nil {
						t.Fatal(err)
					}
					for _, row := range rows {
						got = append(got, row.Record.DecisionID)
						if row.Replica == "" || row.Kind != KindDecision {
							t.Errorf("row %s: replica %q kind %q", row.Record.DecisionID, row.Replica, row.Kind)
						}
					}
					if next.IsZero() {
						break
					}
					if page > len(recs) {
						t.Fatal("pages do not end")
					}
					// The cursor goes through a link and back.
					if cur, err = ParseCursor(next.String()); err != nil {
						t.Fatal(err)
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("pages of %d: got %d rows %q\nwant %d rows %q", size, len(got), got, len(want), want)
				}
			}
			n, more, err := r.Count(ctxT(t), tc.f, 1000)
			if err != nil || n != len(want) || more {
				t.Errorf("Count = %d, more %v, %v; want %d", n, more, err, len(want))
			}
			if len(want) > 2 {
				n, more, err := r.Count(ctxT(t), tc.f, 2)
				if err != nil || n != 2 || !more {
					t.Errorf("Count bounded at 2 = %d, more %v, %v; want 2, more", n, more, err)
				}
			}
		})
	}
}

// TestGetAndValues: a decision is found by its id whichever replica made
// it, whole; the form's values list every replica and decision.
func TestGetAndValues(t *testing.T) {
	t.Parallel()
	r, recs := storedFixtures(t)
	for _, want := range []stored{recs[0], recs[1], recs[len(recs)-1]} {
		row, ok, err := r.Get(ctxT(t), want.rec.DecisionID)
		if err != nil || !ok {
			t.Fatalf("Get(%s) = %v, %v", want.rec.DecisionID, ok, err)
		}
		o, rs := want.rec.Summary("")
		if row.Replica != want.replica || row.Outcome != o || !slices.Equal(row.Reasons, rs) && len(rs)+len(row.Reasons) > 0 ||
			!bytes.Equal(row.Record.AppendLine(nil), want.rec.AppendLine(nil)) || !row.Record.Time.Equal(want.rec.Time) {
			t.Errorf("Get(%s) = %+v, want %+v of %s", want.rec.DecisionID, row, want.rec, want.replica)
		}
	}
	if _, ok, err := r.Get(ctxT(t), "no-such-id"); ok || err != nil {
		t.Errorf("Get of an unknown id: %v, %v", ok, err)
	}
	vals, err := r.Values(ctxT(t), 100)
	if err != nil {
		t.Fatal(err)
	}
	wantVals := map[string][]string{}
	for _, x := range recs {
		o, rs := x.rec.Summary("")
		wantVals["replica"] = append(wantVals["replica"], x.replica)
		wantVals["decision"] = append(wantVals["decision"], x.rec.Decision)
		wantVals["outcome"] = append(wantVals["outcome"], o)
		wantVals["reason"] = append(wantVals["reason"], rs...)
		if x.rec.Error != nil {
			wantVals["reason"] = append(wantVals["reason"], x.rec.Error.Code)
		}
		wantVals["caller"] = append(wantVals["caller"], x.rec.Caller)
		wantVals["revision"] = append(wantVals["revision"], x.rec.Revision)
	}
	for k, w := range wantVals {
		slices.Sort(w)
		w = slices.Compact(slices.DeleteFunc(w, func(s string) bool { return s == "" }))
		if got := vals[k]; !slices.Equal(got, w) {
			t.Errorf("Values[%s] = %q, want %q", k, got, w)
		}
	}
}

// TestStream: every matching row, oldest first, across batches, kinds as
// asked; an error of the callback stops it and is returned.
func TestStream(t *testing.T) {
	t.Parallel()
	r, recs := storedFixtures(t)
	r.batch = 7
	for _, f := range []Filter{{}, {Replica: testReplicas[0]}} {
		var want, got []string
		for _, x := range recs {
			if matches(f, x) {
				want = append(want, x.rec.DecisionID)
			}
		}
		err := r.Stream(ctxT(t), f, func(row Row) error {
			got = append(got, row.Record.DecisionID)
			return nil
		})
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("Stream(%+v) = %v\n%q\nwant %q", f, err, got, want)
		}
	}
	stop := fmt.Errorf("enough")
	n := 0
	err := r.Stream(ctxT(t), Filter{}, func(Row) error {
		if n++; n == 10 {
			return stop
		}
		return nil
	})
	if err != stop || n != 10 {
		t.Errorf("Stream stopped by its callback after %d rows: %v", n, err)
	}
}

// TestParseInputMatch: how a typed filter reads, and what it refuses.
func TestParseInputMatch(t *testing.T) {
	for _, tc := range []struct {
		in, doc, err string
	}{
		{in: "/run/runId = run-7f3a", doc: `{"run":{"runId":"run-7f3a"}}`},
		{in: "/run/runId=run-7f3a", doc: `{"run":{"runId":"run-7f3a"}}`},
		{in: "/n = 42", doc: `{"n":42}`},
		{in: `/n = "42"`, doc: `{"n":"42"}`},
		{in: "/b = true", doc: `{"b":true}`},
		{in: "/b = null", doc: `{"b":null}`},
		{in: "/s = two words", doc: `{"s":"two words"}`},
		{in: "/s = ", doc: `{"s":""}`},
		{in: `/a~1b/m~0n = x`, doc: `{"a/b":{"m~n":"x"}}`},
		{in: `/q = "un"terminated`, doc: `{"q":"\"un\"terminated"}`},
		{in: "/run/runId", err: "want POINTER = VALUE"},
		{in: "run/runId = x", err: "must start with /"},
		{in: " = x", err: "must name a field"},
		{in: "/items/0/id = x", err: "array index"},
		{in: "/items/-/id = x", err: "array index"},
		{in: "/a~2 = x", err: "a ~ must be followed by 0"},
		{in: `/a = {"b":1}`, err: "must be a string, number"},
		{in: `/a = [1]`, err: "must be a string, number"},
		// Numbers as the engine bounds them (400 characters, 3 exponent
		// digits), inside what PostgreSQL's numeric takes (an exponent of
		// at most 1000): TestInputMatchIsContainment compares the edges.
		{in: "/n = -9.99e999", doc: `{"n":-9.99e999}`},
		{in: "/n = 1E-999", doc: `{"n":1E-999}`},
		{in: "/attempt = 1e999999", err: "number beyond what a filter compares"},
		{in: "/n = 1e1001", err: "number beyond what a filter compares"},
		{in: "/n = -1e-1001", err: "number beyond what a filter compares"},
		{in: "/n = 1" + strings.Repeat("0", 400), err: "number beyond what a filter compares"},
	} {
		m, err := ParseInputMatch(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseInputMatch(%q) = %v, want an error with %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("ParseInputMatch(%q): %v", tc.in, err)
		case tc.err == "" && string(m.document()) != tc.doc:
			t.Errorf("ParseInputMatch(%q) contains %s, want %s", tc.in, m.document(), tc.doc)
		}
	}
}

// TestInputMatchIsContainment: the Go matcher (the ring's) and the
// database's containment agree, on the cases where they could differ:
// numbers by value, arrays on the way, an object at the end.
func TestInputMatchIsContainment(t *testing.T) {
	t.Parallel()
	s := open(t, cluster.DB(t))
	for _, tc := range []struct{ input, filter string }{
		{`{"n": 42.0}`, "/n = 42"},
		{`{"n": 42}`, `/n = "42"`},
		{`{"a": [{"b": 1}]}`, "/a/b = 1"},
		{`{"a": {"b": [1]}}`, "/a/b = 1"},
		{`{"a": {"b": {"c": 1}}}`, "/a/b = 1"},
		{`{"a": {"b": null}}`, "/a/b = null"},
		{`{"a": {}}`, "/a/b = null"},
		{`{"a/b": "x"}`, "/a~1b = x"},
		{`"a string"`, "/a = x"},
		// The edges of the numbers a filter takes (TestParseInputMatch).
		{`{"n": 10e998}`, "/n = 1e999"},
		{`{"n": -0.1e-998}`, "/n = -1E-999"},
		{`{"n": 1e999}`, "/n = 9.99e999"},
		{`{"n": 1` + strings.Repeat("0", 397) + `}`, "/n = 1" + strings.Repeat("0", 397) + ".0"}, // 400 characters
	} {
		m, err := ParseInputMatch(tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		var db bool
		if err := s.Pool().QueryRow(ctxT(t), "SELECT $1::jsonb @> $2::jsonb", tc.input, string(m.document())).Scan(&db); err != nil {
			t.Fatal(err)
		}
		if got := m.Match([]byte(tc.input)); got != db {
			t.Errorf("%s on %s: Match %v, PostgreSQL %v", tc.filter, tc.input, got, db)
		}
	}
}

// TestParseCursor: a cursor reads back as written, whatever its id holds;
// anything else a link could carry is refused.
func TestParseCursor(t *testing.T) {
	c := Cursor{Time: time.Date(2026, 12, 4, 9, 0, 0, 123456000, time.UTC), ID: "id.with.dots/and slash", Kind: KindDecision}
	if got, err := ParseCursor(c.String()); err != nil || got != c {
		t.Errorf("ParseCursor(%q) = %+v, %v; want %+v", c.String(), got, err, c)
	}
	if got, err := ParseCursor(""); err != nil || !got.IsZero() {
		t.Errorf(`ParseCursor("") = %+v, %v`, got, err)
	}
	for _, bad := range []string{"1", "1.decision", "1.decision.", "x.decision.id", "1e3.decision.id", ".decision.id"} {
		if _, err := ParseCursor(bad); err == nil {
			t.Errorf("ParseCursor(%q) took it", bad)
		}
	}
}
