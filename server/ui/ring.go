package ui

import (
	"iter"
	"slices"
	"strings"
	"sync"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/internal/defaults"
)

// Entry is one decision as the pages show it: the decision-log record and
// what is read from its result for filtering.
type Entry struct {
	Seq    uint64 // order of arrival in the ring, 1-based; 0 from a store
	Record decisionlog.Record
	// Replica is the id of the replica that made the decision.
	Replica string
	// Outcome is the result member that the decision's result schema names
	// as its outcome (x-arbiter-outcome, default "outcome"), or "error".
	Outcome string
	// Reasons are the result's conventional "reasons" member.
	Reasons []string
	// InputDropped means the input was too large to keep in memory: the
	// decision log has it.
	InputDropped bool
	// Partial, from a store, is a stored record not shown whole (larger
	// than a reader loads, or not a decision record): Record is then what
	// the row's columns say.
	Partial *decisionstore.Partial
	// RunID, from a store's list, is the run id of its input, read in the
	// database (decisionstore.Reader.ListRuns); RunUnread says its record
	// was too large to read it from. The ring's entries are read when
	// shown (runIDOf).
	RunID     string
	RunUnread bool
	// RunRead: the ring read RunID from the input when it took the
	// decision (RingConfig.RunID), so a run's filter compares it instead
	// of parsing the input again.
	RunRead bool
	// Shadows are the shadow candidates' answers to this decision (their
	// outcome records, which the decision log writes after the
	// decision's), as the ring took them, at most maxShadows.
	Shadows []decisionlog.Shadow
}

// maxShadows bounds the candidates' answers kept for one decision: a
// candidate decides a decision once, but a hostile log may repeat one.
const maxShadows = 4

// ErrorCode is the error code of a decision that ended in an error.
func (e Entry) ErrorCode() string {
	if e.Record.Error == nil {
		return ""
	}
	return e.Record.Error.Code
}

// OutcomeError is the outcome of every entry whose request ended in an error.
const OutcomeError = decisionlog.OutcomeError

// Defaults of a Ring.
const (
	DefaultRingSize = 10_000
	// DefaultRingBytes bounds the inputs, bodies and results kept in memory;
	// past it the oldest entries give up their inputs first (their pages
	// read them from the decision log) and only then whole entries go.
	DefaultRingBytes = 16 << 20
	// DefaultMaxKeptInput is the largest input the ring keeps in memory; a
	// larger one is read from the decision log when its page is opened.
	DefaultMaxKeptInput = 64 << 10
)

// RingConfig bounds a Ring. Zero values mean the defaults.
type RingConfig struct {
	Size         int // entries kept
	Bytes        int // input and result bytes kept, over all entries
	MaxKeptInput int // inputs above this size are not kept
	// OutcomeKey names, per decision, the result member that is its
	// outcome; nil or "" means "outcome".
	OutcomeKey func(decision string) string
	// Replica is this replica's id, which every entry carries.
	Replica string
	// RunID names, per decision, the members that lead to the run id in
	// its input (RunIDs): each entry keeps its run id, read when it is
	// added, so that a run's page finds a decision whose input the ring
	// gave up. nil: entries are matched on their inputs only.
	RunID func(decision string) []string
}

// Ring holds the most recent decisions in memory, bounded in count and in
// bytes, beside the decision log. It is safe for concurrent use; Add never
// blocks on a reader.
type Ring struct {
	cfg RingConfig

	mu      sync.Mutex
	entries []Entry // circular, len == cfg.Size once full
	start   int     // index of the oldest entry
	n       int
	kept    int // entries from start on whose inputs were shed to the byte budget
	bytes   int
	seq     uint64
	subs    map[chan Entry]struct{}
}

// NewRing returns an empty Ring.
func NewRing(cfg RingConfig) *Ring {
	defaults.Set(&cfg.Size, DefaultRingSize)
	defaults.Set(&cfg.Bytes, DefaultRingBytes)
	defaults.Set(&cfg.MaxKeptInput, DefaultMaxKeptInput)
	return &Ring{cfg: cfg, entries: make([]Entry, cfg.Size), subs: map[chan Entry]struct{}{}}
}

// Write adds the decisions among recs, and each shadow outcome to the
// decision it answers when the ring holds it (promotions are not kept):
// the ring is a sink of the decision-record pipeline, which hands it
// every record it took, masked.
func (r *Ring) Write(recs []decisionlog.Record) {
	for _, rec := range recs {
		switch {
		case rec.IsShadowOutcome():
			r.addShadow(rec)
		case rec.IsDecision():
			r.Add(rec)
		}
	}
}

// addShadow keeps a candidate's answer with the decision of its id,
// newest decisions first: its outcome follows its decision closely. Its
// result takes the ring's byte budget as a decision's does.
func (r *Ring) addShadow(rec decisionlog.Record) {
	sh := *rec.Shadow
	if len(sh.Result) > r.cfg.MaxKeptInput {
		sh.Result = nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for e := range r.newest() {
		if e.Record.DecisionID == rec.DecisionID {
			if len(e.Shadows) < maxShadows {
				e.Shadows = append(e.Shadows, sh)
				r.bytes += len(sh.Result)
			}
			return
		}
	}
}

// newest yields the entries held, newest first; r.mu is held.
func (r *Ring) newest() iter.Seq[*Entry] {
	return func(yield func(*Entry) bool) {
		for i := r.n - 1; i >= 0 && yield(&r.entries[(r.start+i)%len(r.entries)]); i-- {
		}
	}
}

// Add records one decision. The record's byte slices must not change
// afterwards (the decision log's records never do).
func (r *Ring) Add(rec decisionlog.Record) {
	e := Entry{Record: rec, Replica: r.cfg.Replica}
	if r.cfg.RunID != nil && len(rec.Input) <= RunRecordBytes {
		// Read before the input may go; a larger input is not parsed
		// here (the store's list has the same bound).
		if toks := r.cfg.RunID(rec.Decision); toks != nil {
			e.RunID = runIDOf(e, RunPointers{rec.Decision: toks})
		}
		e.RunRead = true
	}
	if len(rec.Input) > r.cfg.MaxKeptInput {
		e.Record.Input, e.InputDropped = nil, true
	}
	if len(rec.BodyBase64) > r.cfg.MaxKeptInput {
		e.Record.BodyBase64, e.InputDropped = "", true
	}
	if len(rec.Result) > r.cfg.MaxKeptInput {
		e.Record.Result = nil // a result schema keeps results small; never seen
	}
	e.Outcome, e.Reasons = rec.SummaryBy(r.cfg.OutcomeKey)

	r.mu.Lock()
	r.seq++
	e.Seq = r.seq
	size := entrySize(e)
	// Over the byte budget, the oldest entries first give up their inputs
	// (their pages read them from the decision log), then go whole.
	for r.kept < r.n && r.bytes+size > r.cfg.Bytes {
		old := &r.entries[(r.start+r.kept)%len(r.entries)]
		before := entrySize(*old)
		if len(old.Record.Input) > 0 || old.Record.BodyBase64 != "" {
			old.Record.Input, old.Record.BodyBase64, old.InputDropped = nil, "", true
		}
		r.bytes -= before - entrySize(*old)
		r.kept++
	}
	for r.n > 0 && (r.n == len(r.entries) || r.bytes+size > r.cfg.Bytes) {
		r.bytes -= entrySize(r.entries[r.start])
		r.entries[r.start] = Entry{}
		r.start = (r.start + 1) % len(r.entries)
		r.n, r.kept = r.n-1, max(r.kept-1, 0)
	}
	r.entries[(r.start+r.n)%len(r.entries)] = e
	r.n++
	r.bytes += size
	for ch := range r.subs {
		select {
		case ch <- e:
		default: // a slow page misses a live row; reloading shows it
		}
	}
	r.mu.Unlock()
}

func entrySize(e Entry) int {
	n := int(e.Record.QueueSize())
	for _, sh := range e.Shadows {
		n += len(sh.Result)
	}
	return n
}

// Filter selects entries: the decision store's filter, so that the pages
// filter the ring and the store alike (Kinds is not used here: the ring
// holds decisions only).
type Filter = decisionstore.Filter

// match reports whether e passes f, as the store's query would.
func match(f Filter, e Entry) bool {
	rec := e.Record
	switch {
	case f.Decision != "" && rec.Decision != f.Decision,
		f.Outcome != "" && e.Outcome != f.Outcome,
		f.Revision != "" && !strings.HasPrefix(rec.Revision, f.Revision),
		f.Caller != "" && rec.Caller != f.Caller,
		f.Replica != "" && e.Replica != f.Replica,
		f.Path != "" && rec.Path != f.Path,
		!f.Since.IsZero() && rec.Time.Before(f.Since),
		!f.Until.IsZero() && !rec.Time.Before(f.Until):
		return false
	}
	for _, m := range f.Input {
		if !m.Match(rec.InputDocument()) { // the store's input column
			return false
		}
	}
	if len(f.AnyInput) > 0 && !matchesRun(f, e) {
		return false
	}
	return f.Reason == "" || e.ErrorCode() == f.Reason || slices.Contains(e.Reasons, f.Reason)
}

// Page is one page of entries, newest first.
type Page struct {
	Entries []Entry
	// Older is the cursor of the next page (Before), 0 when there is none.
	Older uint64
	// Matched counts the entries that match the filter in the whole ring.
	Matched int
	// Total is the number of entries in the ring.
	Total int
}

// Query returns up to limit entries that match f and arrived before the
// entry with sequence number before (0: from the newest), newest first.
func (r *Ring) Query(f Filter, before uint64, limit int) Page {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := Page{Total: r.n}
	for e := range r.matching(f) {
		p.Matched++
		if before != 0 && e.Seq >= before {
			continue
		}
		if len(p.Entries) < limit {
			p.Entries = append(p.Entries, *e)
		} else if p.Older == 0 {
			p.Older = p.Entries[len(p.Entries)-1].Seq
		}
	}
	return p
}

// Refusals charts the refusals among the entries that match q's filter,
// newest first, as a decision store's Refusals does.
func (r *Ring) Refusals(q decisionstore.RefusalQuery) decisionstore.Refusals {
	f := q.Filter
	f.Since, f.Until = q.Window.Since, q.Window.Until
	return decisionstore.TallyRefusals(q, func(yield func(decisionstore.Refusal) bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for e := range r.matching(f) {
			if !yield(e.refusal()) {
				return
			}
		}
	})
}

// matching yields the entries that match f, newest first; r.mu is held.
func (r *Ring) matching(f Filter) iter.Seq[*Entry] {
	return func(yield func(*Entry) bool) {
		for e := range r.newest() {
			if match(f, *e) && !yield(e) {
				return
			}
		}
	}
}

// refusal is e as a chart reads it.
func (e Entry) refusal() decisionstore.Refusal {
	return decisionstore.Refusal{Time: e.Record.Time, Decision: e.Record.Decision, Revision: e.Record.Revision,
		Replica: e.Replica, Outcome: e.Outcome, ErrorCode: e.ErrorCode(), Reasons: e.Reasons}
}

// Get returns the entry of a decision id, when the ring still holds it.
func (r *Ring) Get(id string) (Entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for e := range r.newest() {
		if e.Record.DecisionID == id {
			return *e, true
		}
	}
	return Entry{}, false
}

// Values lists the distinct values of each filterable field in the ring,
// for the filter form's choices; at most max of each.
func (r *Ring) Values(max int) map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[[2]string]bool{}
	out := map[string][]string{}
	add := func(field, v string) {
		if v != "" && !seen[[2]string{field, v}] && len(out[field]) < max {
			seen[[2]string{field, v}] = true
			out[field] = append(out[field], v)
		}
	}
	for e := range r.newest() {
		add("decision", e.Record.Decision)
		add("outcome", e.Outcome)
		add("revision", e.Record.Revision)
		add("caller", e.Record.Caller)
		add("replica", e.Replica)
		add("reason", e.ErrorCode())
		for _, rs := range e.Reasons {
			add("reason", rs)
		}
	}
	return out
}

// Subscribe returns a channel that receives every entry added from now on
// (entries are dropped for a subscriber that does not keep up) and a
// function that ends the subscription.
func (r *Ring) Subscribe() (<-chan Entry, func()) {
	ch := make(chan Entry, 64)
	r.mu.Lock()
	r.subs[ch] = struct{}{}
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		delete(r.subs, ch)
		r.mu.Unlock()
	}
}

// Len is the number of entries held.
func (r *Ring) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// matchesRun reports whether e passes f's AnyInput (a run's filter): on
// its input, or, when the ring gave its input up, on the run id it kept.
func matchesRun(f Filter, e Entry) bool {
	// A run id cut for showing is matched on the input, if it is kept.
	byID := e.RunRead && !strings.HasSuffix(e.RunID, "…") || e.InputDropped && len(e.Record.Input) == 0
	if !byID {
		return f.MatchesAny(e.Record.Decision, e.Record.InputDocument())
	}
	if e.RunID == "" {
		return false
	}
	id := string(mustString(e.RunID))
	return slices.ContainsFunc(f.AnyInput, func(m decisionstore.DecisionInput) bool {
		return m.Decision == e.Record.Decision && string(m.Match.Value) == id
	})
}
