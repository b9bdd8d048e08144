package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/input"
	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// RunPointers are, per decision, the members that lead to its run id.
type RunPointers = decisionstore.RunPointers

// runPointers are where each decision of the live revision names its run:
// the property its input schema marks with engine.RunIDKeyword (read and
// checked by the gate). A decision without one names no run.
func (h *handler) runPointers() RunPointers { return pointersOf(h.cfg.Decider.Snapshot()) }

// RunIDs returns, for RingConfig.RunID, where each decision of the live
// revision names its run, read once per revision.
func RunIDs(d Decider) func(decision string) []string {
	var mu sync.Mutex
	var snap *engine.Snapshot
	var ptrs RunPointers
	return func(decision string) []string {
		s := d.Snapshot()
		mu.Lock()
		defer mu.Unlock()
		if s != snap {
			snap, ptrs = s, pointersOf(s)
		}
		return ptrs[decision]
	}
}

func pointersOf(snap *engine.Snapshot) RunPointers {
	out := RunPointers{}
	if snap == nil {
		return out
	}
	for _, name := range snap.Names() {
		if toks, ok := snap.RunID(name); ok {
			out[name] = toks
		}
	}
	return out
}

// runFilter selects the decisions about run id: each decision that names
// a run, its input holding id at its own pointer.
func runFilter(id string, ptrs RunPointers) []decisionstore.DecisionInput {
	var out []decisionstore.DecisionInput
	for _, n := range slices.Sorted(maps.Keys(ptrs)) {
		toks := ptrs[n]
		out = append(out, decisionstore.DecisionInput{Decision: n, Match: decisionstore.InputMatch{
			Pointer: jsonptr.Join(toks), Tokens: toks, Value: mustString(id)}})
	}
	return out
}

// runURL is the page of a run.
func (h *handler) runURL(id string) string { return h.cfg.Prefix + "/runs/" + url.PathEscape(id) }

func mustString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// runIDOf is the run id an entry's input holds at its decision's pointer,
// at most decisionstore.RunIDChars characters of it; "" when none. An
// entry of a store carries it already (read in the database); one of the
// ring is read from its input (at most the ring's 64 KiB).
func runIDOf(e Entry, ptrs RunPointers) string {
	if e.RunID != "" || e.Partial != nil || e.RunRead || e.RunUnread {
		return e.RunID
	}
	toks, ok := ptrs[e.Record.Decision]
	if !ok {
		return ""
	}
	doc := e.Record.InputDocument()
	if len(doc) == 0 { // none: no JSON, no run id (and no error built to say so)
		return ""
	}
	// The engine's strict decoder, not encoding/json's. The ring reads
	// every decision's run id as it takes it: a decision's input passed the
	// engine's one pass, so only the member is built (1 against 37 µs for
	// a 2 KB Runner state decoded whole). A failed request's input is
	// decoded whole first: one it refuses (a duplicate key) names no run
	// here, as the store's list reads the last.
	if e.Record.Error != nil {
		if _, err := input.Decode(doc); err != nil {
			return ""
		}
	}
	v, found, _ := input.Lookup(doc, toks)
	if !found {
		return ""
	}
	switch x := v.(type) {
	case string:
		return cut(x, decisionstore.RunIDChars)
	case nil:
		return ""
	}
	b, _ := json.Marshal(v)
	return cut(string(b), decisionstore.RunIDChars)
}

// cut is s's first n characters, with "…" when it had more.
func cut(s string, n int) string {
	i := 0
	for k := range s {
		if i == n {
			return s[:k] + "…"
		}
		i++
	}
	return s
}

// ---- what changed in the input between two decisions ----

// inputChange is one difference between two inputs: the member added,
// removed or changed, at a JSON pointer, with its values (each cut to
// changeValueChars).
type inputChange struct {
	Path     string
	Kind     string // added, removed, changed
	Old, New string
}

// Bounds of one comparison of two inputs: the changes listed (the others
// are counted), the characters of each value shown.
const (
	maxChanges       = 50
	changeValueChars = 200
)

// diffInputs lists what changed from input a to input b, in the order of
// their members (sorted) and elements: up to max changes, and how many
// more. A member whose value changed type is one change; numbers compare
// by value (1000 is 1e3). Either side that is not JSON is an error.
func diffInputs(a, b []byte, max int) (changes []inputChange, more int, err error) {
	x, err := decodeJSON(a)
	if err != nil {
		return nil, 0, err
	}
	y, err := decodeJSON(b)
	if err != nil {
		return nil, 0, err
	}
	add := func(c inputChange) {
		if len(changes) < max {
			changes = append(changes, c)
		} else {
			more++
		}
	}
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		switch xv := x.(type) {
		case map[string]any:
			if yv, ok := y.(map[string]any); ok {
				both := maps.Clone(xv)
				maps.Copy(both, yv)
				for _, k := range slices.Sorted(maps.Keys(both)) {
					p := path + "/" + jsonptr.Escape(k)
					xe, inX := xv[k]
					ye, inY := yv[k]
					switch {
					case !inX:
						add(inputChange{Path: p, Kind: "added", New: shownValue(ye)})
					case !inY:
						add(inputChange{Path: p, Kind: "removed", Old: shownValue(xe)})
					default:
						walk(p, xe, ye)
					}
				}
				return
			}
		case []any:
			if yv, ok := y.([]any); ok {
				for i := 0; i < len(xv) || i < len(yv); i++ {
					p := path + "/" + strconv.Itoa(i)
					switch {
					case i >= len(xv):
						add(inputChange{Path: p, Kind: "added", New: shownValue(yv[i])})
					case i >= len(yv):
						add(inputChange{Path: p, Kind: "removed", Old: shownValue(xv[i])})
					default:
						walk(p, xv[i], yv[i])
					}
				}
				return
			}
		}
		if !sameScalar(x, y) {
			add(inputChange{Path: path, Kind: "changed", Old: shownValue(x), New: shownValue(y)})
		}
	}
	walk("", x, y)
	return changes, more, nil
}

func decodeJSON(b []byte) (any, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// sameScalar compares two decoded values that are not both objects or
// both arrays: numbers by value.
func sameScalar(x, y any) bool {
	switch xv := x.(type) {
	case json.Number:
		yv, ok := y.(json.Number)
		if !ok {
			return false
		}
		a, okA := new(big.Float).SetString(string(xv))
		b, okB := new(big.Float).SetString(string(yv))
		return okA && okB && a.Cmp(b) == 0 || xv == yv
	case map[string]any, []any:
		return false // against a value of another type
	default:
		return x == y
	}
}

// shownValue is a value as compact JSON, cut to changeValueChars.
func shownValue(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return cut(string(b), changeValueChars)
}

// ---- the run view ----

// RunRecordBytes bounds each input the run view compares: a page of a
// run loads up to PageSize+1 records at once. A larger one is listed, and
// its page shows it whole, but it is not compared.
const RunRecordBytes = decisionstore.RunRecordBytes

type runData struct {
	RunID      string
	Pointers   []string // "decision: /pointer", where each decision names its run
	Stored     bool
	StoreDown  bool
	Steps      []runStep // oldest first
	EarlierURL string
	LaterURL   string
}

// runStep is one decision of the run and what changed in its input since
// the run's decision of the same decision before it (the inputs of two
// decisions are documents of two schemas: comparing them says nothing).
type runStep struct {
	row
	FirstOfRun      bool   // no decision of the run before it
	FirstOfDecision bool   // no decision of its decision in the run before it
	NoBase          bool   // the one before it is on an earlier page
	NotCompared     string // why its input is not compared with the one before
	Changes         []inputChange
	More            int
}

func (h *handler) run(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "runId")
	if r.URL.RawPath != "" { // chi routes on the escaped path
		if u, err := url.PathUnescape(id); err == nil {
			id = u
		}
	}
	ptrs := h.runPointers()
	d := runData{RunID: id}
	for _, n := range slices.Sorted(maps.Keys(ptrs)) {
		d.Pointers = append(d.Pointers, n+": "+jsonptr.Join(ptrs[n]))
	}
	if len(ptrs) == 0 {
		h.render(w, r, http.StatusOK, "run", page{Title: "Run " + cut(id, 80), Nav: "decisions", Data: d})
		return
	}
	f := Filter{AnyInput: runFilter(id, ptrs)}
	limit := h.cfg.PageSize
	before := r.URL.Query().Get("before")
	// One more than a page: the oldest is the base the page's first
	// decision is compared with.
	got, err := h.readDecisions(r.Context(), f, before, limit+1, func(ctx context.Context) (StorePage, error) {
		return h.cfg.Store.Records(ctx, f, before, limit+1, RunRecordBytes)
	})
	if err != nil {
		h.badCursor(w, r, "the run's newest decisions")
		return
	}
	if d.Stored, d.StoreDown = got.Stored, got.StoreDown; got.StoreDown {
		before = "" // a store's cursor means nothing to the ring
	}
	entries, cursors, older := got.Page.Entries, got.Cursors, got.Older
	shown := entries
	if len(entries) > limit {
		shown = entries[:limit]
		older = cursors[limit-1]
	}
	if older != "" {
		d.EarlierURL = h.runURL(id) + "?before=" + url.QueryEscape(older)
	}
	if before != "" {
		d.LaterURL = h.runURL(id)
	}
	// Oldest first: the order of what happened.
	for i := len(shown) - 1; i >= 0; i-- {
		e := shown[i]
		st := runStep{row: h.rowOf(e, Filter{}, ptrs)}
		base := slices.IndexFunc(entries[i+1:], func(b Entry) bool { return b.Record.Decision == e.Record.Decision })
		switch {
		case base >= 0:
			st.Changes, st.More, st.NotCompared = compareInputs(entries[i+1+base], e)
		case older != "":
			st.NoBase = true
		default:
			st.FirstOfRun, st.FirstOfDecision = i+1 >= len(entries), true
		}
		d.Steps = append(d.Steps, st)
	}
	h.render(w, r, http.StatusOK, "run", page{Title: "Run " + cut(id, 80), Nav: "decisions", Data: d})
}

// compareInputs is what changed in the input from decision a to b, or why
// it is not compared.
func compareInputs(a, b Entry) ([]inputChange, int, string) {
	for _, e := range []Entry{a, b} {
		switch {
		case e.Partial != nil:
			return nil, 0, "an input of a record of " + strconv.FormatInt(e.Partial.Bytes, 10) + " bytes is not compared here (its page shows it)"
		case e.InputDropped:
			return nil, 0, "an input this replica no longer keeps in memory is not compared here (its page reads it from the decision log)"
		case len(e.Record.InputDocument()) == 0:
			return nil, 0, "a decision without its input is not compared"
		}
	}
	changes, more, err := diffInputs(a.Record.InputDocument(), b.Record.InputDocument(), maxChanges)
	if err != nil {
		return nil, 0, "an input that is not JSON is not compared"
	}
	return changes, more, ""
}
