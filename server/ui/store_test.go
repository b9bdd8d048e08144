package ui

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/internal/pgtest"
)

// fakeStore is every replica's decisions in memory, newest first, its
// cursors the rows' indexes; down makes every read fail, as a stopped
// database does. The pages' handling of a store is tested on it; the
// decision store's own queries on PostgreSQL (decisionstore, and the
// fleet test booting replicas on one database).
type fakeStore struct {
	entries []Entry
	down    bool
}

var errDown = errors.New("connection refused")

func (s *fakeStore) Records(ctx context.Context, f Filter, before string, limit int, _ int64) (StorePage, error) {
	return s.List(ctx, f, before, limit, nil)
}

func (s *fakeStore) List(_ context.Context, f Filter, before string, limit int, _ RunPointers) (StorePage, error) {
	if s.down {
		return StorePage{}, errDown
	}
	from := 0
	if before != "" {
		n, err := strconv.Atoi(before)
		if err != nil {
			return StorePage{}, fmt.Errorf("%w: %q", ErrBadCursor, before)
		}
		from = n + 1
	}
	var p StorePage
	for i, e := range s.entries {
		if !match(f, e) {
			continue
		}
		p.Matched++
		if i < from {
			continue
		}
		if len(p.Entries) < limit {
			p.Entries = append(p.Entries, e)
			p.Cursors = append(p.Cursors, strconv.Itoa(i))
		} else if p.Older == "" {
			p.Older = p.Cursors[len(p.Cursors)-1]
		}
	}
	return p, nil
}

func (s *fakeStore) Get(_ context.Context, id string) (Entry, bool, error) {
	if s.down {
		return Entry{}, false, errDown
	}
	for _, e := range s.entries {
		if e.Record.DecisionID == id {
			return e, true, nil
		}
	}
	return Entry{}, false, nil
}

func (s *fakeStore) Values(context.Context, int) (map[string][]string, error) {
	if s.down {
		return nil, errDown
	}
	return map[string][]string{"replica": {"replica-a", "replica-b"}}, nil
}

func (s *fakeStore) Refusals(_ context.Context, q decisionstore.RefusalQuery) (decisionstore.Refusals, error) {
	if s.down {
		return decisionstore.Refusals{}, errDown
	}
	f := q.Filter
	f.Since, f.Until = q.Window.Since, q.Window.Until
	return decisionstore.TallyRefusals(q, func(yield func(decisionstore.Refusal) bool) {
		for _, e := range s.entries {
			if match(f, e) && !yield(e.refusal()) {
				return
			}
		}
	}), nil
}

func (s *fakeStore) Shadows(context.Context, string) ([]Entry, error) {
	if s.down {
		return nil, errDown
	}
	return nil, nil
}

var storeRowRE = regexp.MustCompile(`<tr data-seq="([^"]+)"[^>]*>\s*<td><a href="[^"]*/decisions/([^"]+)">.*?</td>\s*<td>([^<]*)</td>`)

// TestPagesReadTheStore: with a store, the list is every replica's
// decisions with a replica column and a replica filter, a decision of
// another replica has its page; a store that cannot be read is an error
// page for another replica's decision, never "not found", and the list
// falls back to this replica's own decisions, saying so.
func TestPagesReadTheStore(t *testing.T) {
	st := &fakeStore{}
	h := newHarness(t, Config{PageSize: 5, Store: st})
	// The ring holds this replica's decisions; the store every replica's.
	local := h.ring.Query(Filter{}, 0, 1000).Entries
	for i, e := range local {
		e.Replica = "replica-a"
		if i%2 == 1 {
			e.Replica = "replica-b"
			e.Record.DecisionID = "b-" + e.Record.DecisionID
		}
		st.entries = append(st.entries, e)
	}
	other := st.entries[1]

	status, body := h.get(t, "/ui/decisions")
	if status != 200 || !strings.Contains(body, `<th scope="col">Replica</th>`) || !strings.Contains(body, `name="replica"`) ||
		!strings.Contains(body, "matching in the decision store") {
		t.Fatalf("status %d; the list of a store lacks its replica column, filter or count:\n%s", status, body)
	}
	rows := storeRowRE.FindAllStringSubmatch(body, -1)
	if len(rows) != 5 || rows[1][2] != url.PathEscape(other.Record.DecisionID) || rows[1][3] != "replica-b" {
		t.Fatalf("rows %q, want 5 with %s of replica-b second", rows, other.Record.DecisionID)
	}
	// The cursor of the "Older" link is the store's.
	if !strings.Contains(body, `href="/ui/decisions?before=4"`) {
		t.Errorf("the older link does not carry the store's cursor 4:\n%s", body)
	}

	_, body = h.get(t, "/ui/decisions?replica=replica-b")
	for _, m := range storeRowRE.FindAllStringSubmatch(body, -1) {
		if m[3] != "replica-b" {
			t.Errorf("the replica filter shows %s of %s", m[2], m[3])
		}
	}

	status, body = h.get(t, "/ui/decisions/"+url.PathEscape(other.Record.DecisionID))
	if status != 200 || !strings.Contains(body, "<dt>Replica</dt><dd>replica-b</dd>") {
		t.Errorf("another replica's decision: status %d, replica not shown:\n%s", status, body)
	}

	if status, _ := h.get(t, "/ui/decisions?before=not-a-cursor"); status != 400 {
		t.Errorf("a page cursor the store never gave: status %d, want 400", status)
	}

	st.down = true
	// The list falls back to this replica's own decisions, and says so.
	if status, body := h.get(t, "/ui/decisions"); status != 200 || !strings.Contains(body, `id="store-down"`) ||
		!strings.Contains(body, "only this replica's own decisions") || !strings.Contains(body, "/decisions/"+url.PathEscape(local[0].Record.DecisionID)+`"`) ||
		strings.Contains(body, `<th scope="col">Replica</th>`) || strings.Contains(body, "data-live=") {
		t.Errorf("the list with the store down: status %d; want 200 listing the ring's decisions with a notice, no replica column and no live rows (a store's)\n%s", status, body)
	}
	if status, _ := h.get(t, "/ui/decisions/"+url.PathEscape(other.Record.DecisionID)); status != 503 {
		t.Errorf("another replica's decision with the store down: status %d, want 503", status)
	}
	// This replica's own decision is in its ring: shown without the store.
	if status, _ := h.get(t, "/ui/decisions/"+url.PathEscape(local[0].Record.DecisionID)); status != 200 {
		t.Errorf("a decision of the ring with the store down: status %d, want 200", status)
	}
	st.down = false
	if status, _ := h.get(t, "/ui/decisions/no-such-id"); status != 404 {
		t.Errorf("an unknown id: status %d, want 404", status)
	}
}

// TestLiveRowsCarryStoreCursors: with a store, a live row (the ring's)
// carries the store's cursor of its decision, so that the "Older" link
// the script moves to the last row reads the store from there.
func TestLiveRowsCarryStoreCursors(t *testing.T) {
	h := newHarness(t, Config{Store: &fakeStore{}})
	e := h.ring.Query(Filter{}, 0, 1)
	if len(e.Entries) != 1 {
		t.Fatal("empty ring")
	}
	hh := &handler{cfg: Config{Prefix: "/ui", Store: &fakeStore{}}}
	r := hh.rowOf(e.Entries[0], Filter{}, nil)
	want := fmt.Sprintf("%d.decision.%s", e.Entries[0].Record.Time.UnixMicro(), e.Entries[0].Record.DecisionID)
	if r.Cursor != want || !r.Fleet {
		t.Errorf("live row cursor %q (fleet %v), want %q", r.Cursor, r.Fleet, want)
	}
}

// TestPagesSurviveHostileRows: on a decision store in PostgreSQL, a row
// whose record is not JSON (written by hand: no replica writes one) and
// one whose record is megabytes long cost the pages nothing: the list
// shows both from their columns (it reads no record), and each one's
// page shows what its columns say, the record's size and its first bytes,
// with a note saying why it is not shown whole. Before, the row that is
// not JSON made the list of every replica answer 503.
func TestPagesSurviveHostileRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.Start(t).DB(t)
	_, all := repoDecided(t)
	var recs []decisionlog.Record
	for _, d := range all[:3] {
		recs = append(recs, d.rec)
	}
	big := all[3].rec
	big.DecisionID, big.Input = "big-record", []byte(`{"blob":"`+strings.Repeat("x", 2<<20)+`"}`)
	recs = append(recs, big)
	sink, err := decisionstore.NewSink(dbURL, decisionstore.SinkConfig{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	sink.Write(recs)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := sink.Close(cctx); err != nil || sink.Stats().Written != uint64(len(recs)) {
		t.Fatalf("the sink: %v, %+v", err, sink.Stats())
	}
	st, err := decisionstore.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Pool().Exec(ctx, `INSERT INTO arbiter_store.records (time, decision_id, kind, replica, decision, path, record)
		VALUES ($1, 'not-json', 'decision', 'replica-z', 'some-decision', '/v1/decisions/some-decision', 'this is not {JSON')`, recs[0].Time); err != nil {
		t.Fatal(err)
	}
	reader := decisionstore.NewReader(st.Pool())
	reader.MaxRecordBytes = 1 << 20
	h := newHarness(t, Config{Store: FromStore(reader)})

	status, body := h.get(t, "/ui/decisions")
	if status != 200 || !strings.Contains(body, `/decisions/not-json"`) || !strings.Contains(body, `/decisions/big-record"`) {
		t.Fatalf("the list beside a record that is not JSON: status %d, want 200 listing it and the large one:\n%.2000s", status, body)
	}
	for _, tc := range []struct{ id, says string }{
		{"not-json", "is 17 bytes, not shown whole: not a decision record: "},
		{"big-record", "bytes, not shown whole: larger than the 1048576 bytes a reader loads of one record."},
	} {
		status, body := h.get(t, "/ui/decisions/"+tc.id)
		if status != 200 || !strings.Contains(body, tc.says) || len(body) > 2*decisionstore.HeadBytes+64<<10 {
			t.Errorf("the page of %s: status %d, %d bytes; want 200 saying %q, its first bytes at most:\n%.3000s", tc.id, status, len(body), tc.says, body)
		}
	}
	if n := reader.Unreadable(); n != 1 {
		t.Errorf("%d records counted unreadable, want 1", n)
	}
}

// TestRunViewFromPostgreSQL: on a decision store in PostgreSQL, the list's
// run filter and run column and a run's page find the run's decisions of
// every decision that names a run, each with its run id read in the
// database, and compare their inputs loaded from the records.
func TestRunViewFromPostgreSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.Start(t).DB(t)
	h := newHarness(t, Config{})
	recs, ptrs := aRun(t, h, "run-in-pg")
	var all []decisionlog.Record
	for _, e := range h.ring.Query(Filter{}, 0, 10_000).Entries {
		all = append(all, e.Record)
	}
	// The run's newest decision, with an input of 1 MiB: larger than a
	// run's page loads, and than a list reads a run id from.
	huge := recs[len(recs)-1]
	huge.DecisionID, huge.Time = "huge-in-pg", huge.Time.Add(time.Minute)
	huge.Input = putAt(t, huge.Input, []string{"zz-blob"}, strings.Repeat("x", 1<<20))
	huge.Input = putAt(t, huge.Input, ptrs[huge.Decision], "run-in-pg")
	all = append(all, huge)
	sink, err := decisionstore.NewSink(dbURL, decisionstore.SinkConfig{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	sink.Write(all)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := sink.Close(cctx); err != nil || sink.Stats().Written != uint64(len(all)) {
		t.Fatalf("the sink: %v, %+v", err, sink.Stats())
	}
	st, err := decisionstore.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hs := newHarness(t, Config{Store: FromStore(decisionstore.NewReader(st.Pool()))})

	var want []string
	for _, r := range recs {
		want = append(want, r.DecisionID)
	}
	want = append(want, huge.DecisionID)
	status, body := hs.get(t, "/ui/runs/run-in-pg")
	if steps := strings.Split(body, `<li class="step"`); !strings.Contains(steps[len(steps)-1], "Input not compared: an input of a record of ") || len(body) > 256<<10 {
		t.Errorf("the 1 MiB input's step: %d bytes of page; want it not compared, said, and the page bounded:\n%.2000s", len(body), steps[len(steps)-1])
	}
	var got []string
	for _, m := range stepRE.FindAllStringSubmatch(body, -1) {
		got = append(got, m[1])
	}
	if status != 200 || !slices.Equal(got, want) || !strings.Contains(body, "of every replica") || strings.Count(body, `<table class="changes">`) == 0 {
		t.Fatalf("the run's page from PostgreSQL: status %d, steps %v; want %v with their changes\n%.3000s", status, got, want, body)
	}
	status, body = hs.get(t, "/ui/decisions?run=run-in-pg")
	if n := strings.Count(body, `<td class="run"><a href="/ui/runs/run-in-pg"`); status != 200 || n != len(want)-1 || !strings.Contains(body, `title="The record is too large to read its run id in a list`) ||
		!strings.Contains(body, fmt.Sprintf("%d shown of %d matching", len(want), len(want))) {
		t.Errorf("the list filtered by run from PostgreSQL: status %d, %d rows with the run id; want %d\n%.3000s", status, n, len(want), body)
	}
}
