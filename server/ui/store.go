package ui

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/arbiter-dev/arbiter/decisionstore"
)

// Store is every replica's decisions (a decision store), which the list
// and a decision's page read instead of the ring when there is one. Live
// rows stay the ring's: this replica's decisions as they are made.
type Store interface {
	// List returns up to limit entries that match f and come before the
	// cursor before ("": from the newest), newest first.
	// Each entry carries the run id its input holds at its decision's
	// pointer in runs (Entry.RunID), read within the store's bounds.
	List(ctx context.Context, f Filter, before string, limit int, runs RunPointers) (StorePage, error)
	// Records is List with each entry's record, loaded up to maxRecord
	// bytes (Entry.Partial past it): a run's page compares their inputs.
	Records(ctx context.Context, f Filter, before string, limit int, maxRecord int64) (StorePage, error)
	Get(ctx context.Context, id string) (Entry, bool, error)
	Values(ctx context.Context, max int) (map[string][]string, error)
	// Refusals charts the refusals of q's filter and window, every
	// replica's (decisionstore.Reader.Refusals).
	Refusals(ctx context.Context, q decisionstore.RefusalQuery) (decisionstore.Refusals, error)
	// Shadows are the shadow candidates' answers to the decision of an
	// id, newest first, at most maxShadows.
	Shadows(ctx context.Context, id string) ([]Entry, error)
}

// StorePage is one page of a store's entries, newest first.
type StorePage struct {
	Entries []Entry
	// Cursors are the entries' places, for the next page's link.
	Cursors []string
	// Older is the cursor of the next page, "" when there is none.
	Older string
	// Matched counts the entries that match, exactly up to the store's
	// bound; More says that there are more than that.
	Matched int
	More    bool
}

// ErrBadCursor is a Store's answer to a page cursor it never gave: a
// link edited by hand, not a store that cannot be read.
var ErrBadCursor = errors.New("not a page cursor")

// DefaultCountBound is how far the list of a store counts matches
// exactly: counting a broad filter over a million rows would read them
// all, so past it the page says "1000+".
const DefaultCountBound = 1_000

// FromStore is the Store of a decision store's reader.
func FromStore(r *decisionstore.Reader) Store { return storeReader{r} }

// storeReader is the reader's Values and Refusals, and the methods below.
type storeReader struct{ *decisionstore.Reader }

func entryOf(row decisionstore.Row) Entry {
	return Entry{Record: row.Record, Replica: row.Replica, Outcome: row.Outcome, Reasons: row.Reasons, Partial: row.Partial,
		RunID: row.RunID, RunUnread: row.RunUnread}
}

func (s storeReader) List(ctx context.Context, f Filter, before string, limit int, runs RunPointers) (StorePage, error) {
	return s.page(ctx, f, before, func(cur decisionstore.Cursor) ([]decisionstore.Row, decisionstore.Cursor, error) {
		return s.ListRuns(ctx, f, cur, limit, runs)
	})
}

func (s storeReader) Records(ctx context.Context, f Filter, before string, limit int, maxRecord int64) (StorePage, error) {
	return s.page(ctx, f, before, func(cur decisionstore.Cursor) ([]decisionstore.Row, decisionstore.Cursor, error) {
		return s.ListRecordsUpTo(ctx, f, cur, limit, maxRecord)
	})
}

func (s storeReader) page(ctx context.Context, f Filter, before string, list func(decisionstore.Cursor) ([]decisionstore.Row, decisionstore.Cursor, error)) (StorePage, error) {
	cur, err := decisionstore.ParseCursor(before)
	if err != nil {
		return StorePage{}, fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	rows, next, err := list(cur)
	if err != nil {
		return StorePage{}, err
	}
	p := StorePage{Older: next.String()}
	for _, row := range rows {
		p.Entries = append(p.Entries, entryOf(row))
		p.Cursors = append(p.Cursors, row.Cursor.String())
	}
	if p.Matched, p.More, err = s.Count(ctx, f, DefaultCountBound); err != nil {
		return StorePage{}, err
	}
	return p, nil
}

func (s storeReader) Get(ctx context.Context, id string) (Entry, bool, error) {
	row, ok, err := s.Reader.Get(ctx, id)
	if !ok || err != nil {
		return Entry{}, false, err
	}
	return entryOf(row), true, nil
}

// storeCursor is where a live row of the ring stands among the store's
// rows: the store keeps its time to the microsecond (pgx truncates).
func storeCursor(e Entry) string {
	return decisionstore.Cursor{Time: e.Record.Time.UTC().Truncate(time.Microsecond), ID: e.Record.DecisionID, Kind: decisionstore.KindDecision}.String()
}

func (s storeReader) Shadows(ctx context.Context, id string) ([]Entry, error) {
	rows, err := s.Reader.Shadows(ctx, id, maxShadows)
	var out []Entry
	for _, row := range rows {
		out = append(out, entryOf(row))
	}
	return out, err
}
