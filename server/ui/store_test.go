package ui

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
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

func (s *fakeStore) List(_ context.Context, f Filter, before string, limit int) (StorePage, error) {
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

var storeRowRE = regexp.MustCompile(`<tr data-seq="([^"]+)"[^>]*>\s*<td><a href="[^"]*/decisions/([^"]+)">.*?</td>\s*<td>([^<]*)</td>`)

// TestPagesReadTheStore: with a store, the list is every replica's
// decisions with a replica column and a replica filter, a decision of
// another replica has its page, and a store that cannot be read is an
// error page, never an empty list or "not found".
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
	if status, body := h.get(t, "/ui/decisions"); status != 503 || !strings.Contains(body, "could not be read") {
		t.Errorf("the list with the store down: status %d\n%s", status, body)
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
	r := hh.rowOf(e.Entries[0], Filter{})
	want := fmt.Sprintf("%d.decision.%s", e.Entries[0].Record.Time.UnixMicro(), e.Entries[0].Record.DecisionID)
	if r.Cursor != want || !r.Fleet {
		t.Errorf("live row cursor %q (fleet %v), want %q", r.Cursor, r.Fleet, want)
	}
}
