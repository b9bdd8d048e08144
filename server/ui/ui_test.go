package ui

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/jsonptr"
	"github.com/arbiter-dev/arbiter/shadow"
)

// The repository's policies and fixtures: the pages know no decision, so
// every test takes its decisions, inputs and outcomes from the fixtures.
var repo = engine.Config{Policies: "../../policies", Schemas: "../../schemas"}

const repoTests = "../../policy_test"

func mustEngine(t testing.TB, cfg engine.Config) *live.Engine {
	t.Helper()
	eng, err := live.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// decided is a fixture's input decided by the engine, as the server would
// log it.
type decided struct {
	fx  engine.Fixture
	rec decisionlog.Record
	d   *engine.Decision
}

// decideAll decides every fixture with an input and no expected error.
func decideAll(eng *live.Engine) ([]decided, error) {
	fixtures, err := engine.LoadFixtures(repoTests)
	if err != nil {
		return nil, err
	}
	var out []decided
	for _, fx := range fixtures {
		if fx.Input == nil || fx.WantError != nil {
			continue
		}
		d, err := eng.Decide(context.Background(), fx.Decision, fx.Input, engine.Options{})
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %v", fx.Decision, fx.Name, err)
		}
		out = append(out, decided{fx: fx, d: d, rec: decisionlog.Record{
			DecisionID: d.ID, Time: time.Now().UTC(), Decision: d.Name, Revision: d.Revision,
			Path: "/v1/decisions/" + d.Name, Input: d.Input, Result: d.Result, DurationNS: 1000, Caller: "caller-" + fx.Decision,
		}})
	}
	if len(out) < 20 {
		return nil, fmt.Errorf("only %d fixtures decided", len(out))
	}
	return out, nil
}

// repoDecided is the repository's engine and its fixtures decided, loaded
// once for the tests that only read them (none reloads it): under -race a
// load and the fixtures' decisions cost a second or more each time.
func repoDecided(t testing.TB) (*live.Engine, []decided) {
	t.Helper()
	eng, err := loadRepo()
	if err != nil {
		t.Fatal(err)
	}
	all, err := decideRepo()
	if err != nil {
		t.Fatal(err)
	}
	return eng, slices.Clone(all)
}

var (
	loadRepo   = sync.OnceValues(func() (*live.Engine, error) { return live.New(context.Background(), repo) })
	decideRepo = sync.OnceValues(func() ([]decided, error) {
		eng, err := loadRepo()
		if err != nil {
			return nil, err
		}
		return decideAll(eng)
	})
)

// countingDecider counts the decisions made for the pages, which must never
// reach the ring or the log.
type countingDecider struct {
	*live.Engine
	n int
}

func (c *countingDecider) Decide(ctx context.Context, name string, body []byte, opts engine.Options) (*engine.Decision, error) {
	c.n++
	return c.Engine.Decide(ctx, name, body, opts)
}

type harness struct {
	eng  *live.Engine
	ring *Ring
	dec  *countingDecider
	srv  *httptest.Server
	all  []decided
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	eng, all := repoDecided(t)
	h := &harness{eng: eng, dec: &countingDecider{Engine: eng}, all: all}
	h.ring = NewRing(RingConfig{OutcomeKey: OutcomeKeys(eng), RunID: RunIDs(eng)})
	for _, d := range h.all {
		h.ring.Add(d.rec)
	}
	cfg.Recent, cfg.Decider, cfg.Reloads = h.ring, h.dec, eng
	h.srv = httptest.NewServer(New(cfg))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *harness) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(h.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (h *harness) post(t *testing.T, path string, form url.Values, origin string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", h.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var rowRE = regexp.MustCompile(`<tr data-seq="(\d+)"`)

// TestListIsBoundedAndPaged: whatever the ring holds (10,000 decisions
// here), a page shows PageSize rows, newest first, and the "Older" cursor
// walks every matching decision exactly once.
func TestListIsBoundedAndPaged(t *testing.T) {
	h := newHarness(t, Config{PageSize: 40})
	for i := 0; h.ring.Len() < DefaultRingSize; i++ {
		rec := h.all[i%len(h.all)].rec
		rec.DecisionID = fmt.Sprintf("%s-%d", rec.DecisionID, i)
		h.ring.Add(rec)
	}
	status, body := h.get(t, "/ui/decisions")
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	rows := rowRE.FindAllStringSubmatch(body, -1)
	if len(rows) != 40 {
		t.Fatalf("%d rows on a page of 40 with %d decisions in memory", len(rows), h.ring.Len())
	}
	if len(body) > 200<<10 {
		t.Errorf("a page of 40 rows is %d bytes", len(body))
	}
	// Walk one decision's pages to the end.
	name := h.all[0].rec.Decision
	want := h.ring.Query(Filter{Decision: name}, 0, DefaultRingSize).Matched
	seen := map[string]bool{}
	next := "/ui/decisions?decision=" + name
	last := uint64(1 << 62)
	for pages := 0; next != ""; pages++ {
		if pages > want/40+2 {
			t.Fatal("the pages do not end")
		}
		_, body := h.get(t, next)
		for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
			var seq uint64
			fmt.Sscan(m[1], &seq)
			if seq >= last {
				t.Fatalf("row %d after %d: not newest first", seq, last)
			}
			last = seq
			if seen[m[1]] {
				t.Fatalf("row %s twice", m[1])
			}
			seen[m[1]] = true
		}
		next = ""
		if m := regexp.MustCompile(`<a id="older" rel="next" href="([^"]+)">`).FindStringSubmatch(body); m != nil {
			next = strings.TrimPrefix(strings.ReplaceAll(m[1], "&amp;", "&"), h.srv.URL)
		}
	}
	if len(seen) != want {
		t.Errorf("the pages showed %d decisions of %s, the ring holds %d", len(seen), name, want)
	}
}

// TestFilters: each filter of the form keeps exactly the ring's entries
// that have the value, for values taken from the entries themselves.
func TestFilters(t *testing.T) {
	h := newHarness(t, Config{PageSize: 1000})
	all := h.ring.Query(Filter{}, 0, 1000).Entries
	pick := all[len(all)/2]
	if len(pick.Reasons) == 0 {
		for _, e := range all {
			if len(e.Reasons) > 0 {
				pick = e
				break
			}
		}
	}
	// One decision of another revision and caller, later.
	alt := pick.Record
	alt.DecisionID, alt.Revision, alt.Caller, alt.Time = "alt", "0123456789abcdef", "another-caller", pick.Record.Time.Add(time.Second)
	h.ring.Add(alt)
	all = h.ring.Query(Filter{}, 0, 1000).Entries
	cases := []struct {
		name, query string
		keep        func(Entry) bool
	}{
		{"decision", "decision=" + url.QueryEscape(pick.Record.Decision), func(e Entry) bool { return e.Record.Decision == pick.Record.Decision }},
		{"outcome", "outcome=" + url.QueryEscape(pick.Outcome), func(e Entry) bool { return e.Outcome == pick.Outcome }},
		{"reason", "reason=" + url.QueryEscape(pick.Reasons[len(pick.Reasons)-1]), func(e Entry) bool {
			for _, r := range e.Reasons {
				if r == pick.Reasons[len(pick.Reasons)-1] {
					return true
				}
			}
			return false
		}},
		{"revision", "revision=" + pick.Record.Revision[:6], func(e Entry) bool { return strings.HasPrefix(e.Record.Revision, pick.Record.Revision[:6]) }},
		{"caller", "caller=" + url.QueryEscape(pick.Record.Caller), func(e Entry) bool { return e.Record.Caller == pick.Record.Caller }},
		{"since", "since=" + url.QueryEscape(pick.Record.Time.Format(time.RFC3339Nano)), func(e Entry) bool { return !e.Record.Time.Before(pick.Record.Time) }},
		{"until", "until=" + url.QueryEscape(pick.Record.Time.Format(time.RFC3339Nano)), func(e Entry) bool { return e.Record.Time.Before(pick.Record.Time) }},
		{"path", "path=" + url.QueryEscape(pick.Record.Path), func(e Entry) bool { return e.Record.Path == pick.Record.Path }},
		{"input", "input=" + url.QueryEscape(inputFilter(t, all)), func(e Entry) bool {
			m, _ := decisionstore.ParseInputMatch(inputFilter(t, all))
			return m.Match(e.Record.Input)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, body := h.get(t, "/ui/decisions?"+tc.query)
			got := map[string]bool{}
			for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
				got[m[1]] = true
			}
			want := 0
			for _, e := range all {
				keep := tc.keep(e)
				if keep {
					want++
				}
				if got[fmt.Sprint(e.Seq)] != keep {
					t.Errorf("entry %d (%s %s %v): shown %v, want %v", e.Seq, e.Record.Decision, e.Outcome, e.Reasons, !keep, keep)
				}
			}
			if want == 0 || want == len(all) && tc.name != "since" {
				t.Errorf("the filter %s keeps %d of %d: it tells nothing apart", tc.query, want, len(all))
			}
		})
	}
}

// inputFilter is "POINTER = VALUE" for a string two members deep in the
// first input that has one, found in the data.
func inputFilter(t *testing.T, entries []Entry) string {
	t.Helper()
	for _, e := range entries {
		var top map[string]json.RawMessage
		if json.Unmarshal(e.Record.Input, &top) != nil {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(top)) {
			var inner map[string]json.RawMessage
			if json.Unmarshal(top[k], &inner) != nil {
				continue
			}
			for _, k2 := range slices.Sorted(maps.Keys(inner)) {
				var v string
				if json.Unmarshal(inner[k2], &v) == nil && v != "" && strings.TrimSpace(v) == v && !json.Valid([]byte(v)) {
					return jsonptr.Join([]string{k, k2}) + " = " + v
				}
			}
		}
	}
	t.Fatal("no input has a string two members deep")
	return ""
}

// TestBadInputFilterMatchesNothing: an input filter the page cannot read
// is said, and shows no rows, never every row.
func TestBadInputFilterMatchesNothing(t *testing.T) {
	h := newHarness(t, Config{PageSize: 1000})
	for _, bad := range []string{"/a/0 = 1", "a = 1", "/a~2 = 1", "/a", `/a = {"b": 1}`, "/attempt = 1e999999"} {
		status, body := h.get(t, "/ui/decisions?input="+url.QueryEscape(bad))
		if status != 200 || len(rowRE.FindAllStringSubmatch(body, -1)) != 0 || !strings.Contains(body, `class="problem" role="alert"`) {
			t.Errorf("input filter %q: status %d, %d rows, problem said %v", bad, status, len(rowRE.FindAllStringSubmatch(body, -1)), strings.Contains(body, `class="problem"`))
		}
	}
}

// TestDecisionPageShowsEvidence: a refused fixture's page and an allowed
// one's show each fired rule with the evidence the engine gives, each rule
// that did not fire as a condition that held with the values it checked,
// and the input as logged.
func TestDecisionPageShowsEvidence(t *testing.T) {
	h := newHarness(t, Config{})
	shown := map[bool]bool{} // by whether a reason fired
	for _, d := range h.all {
		refused := len(d.d.Reasons) > 0
		if shown[refused] {
			continue
		}
		shown[refused] = true
		exp, err := h.eng.Decide(context.Background(), d.rec.Decision, d.rec.Input, engine.Options{Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		status, body := h.get(t, "/ui/decisions/"+d.rec.DecisionID)
		if status != 200 {
			t.Fatalf("%s: status %d", d.fx.Name, status)
		}
		wantFired := 0
		for _, ro := range exp.Explanation {
			if ro.Fired {
				wantFired++
			}
		}
		fired, held := strings.Count(body, `<li class="rule fired">`), strings.Count(body, `<li class="rule held">`)
		if fired != wantFired || held != len(exp.Explanation)-wantFired {
			t.Errorf("%s: %d rules fired and %d held on the page, the explanation has %d of %d fired", d.fx.Name, fired, held, wantFired, len(exp.Explanation))
		}
		for _, ro := range exp.Explanation {
			if ro.Fired && !strings.Contains(body, `<code class="reason">`+ro.Reason+`</code>`) {
				t.Errorf("%s: fired rule %s is not on the page", d.fx.Name, ro.Reason)
			}
			if !ro.Fired && !strings.Contains(body, `<code>`+ro.Reason+`</code> <span class="title">`) {
				t.Errorf("%s: rule %s held but is not on the page", d.fx.Name, ro.Reason)
			}
			for _, ev := range ro.Read() {
				if ev.Path != "" && !strings.Contains(body, `<code class="ptr">`+ev.Path+`</code>`) {
					t.Errorf("%s: %s of %s (fired %v) is not on the page", d.fx.Name, ev.Path, ro.Reason, ro.Fired)
				}
			}
		}
	}
	if !shown[true] || !shown[false] {
		t.Fatalf("fixtures shown, by whether a reason fired: %v", shown)
	}
}

// TestWhatIfIsNotLogged: a what-if on a refused decision's page, with an
// allowed fixture's input of the same decision, shows the allowance; it is
// decided by the Decider only, so the ring (and the log beside it) gain
// nothing. A post from another origin is refused.
func TestWhatIfIsNotLogged(t *testing.T) {
	h := newHarness(t, Config{})
	var refused, allowed *decided
	for i := range h.all {
		d := &h.all[i]
		if len(d.d.Reasons) > 0 && refused == nil {
			refused = d
		}
	}
	for i := range h.all {
		d := &h.all[i]
		if d.rec.Decision == refused.rec.Decision && len(d.d.Reasons) == 0 {
			allowed = d
			break
		}
	}
	if refused == nil || allowed == nil {
		t.Fatal("no refused and allowed fixtures of one decision")
	}
	before := h.ring.Len()
	path := "/ui/decisions/" + refused.rec.DecisionID
	if status, _ := h.post(t, path, url.Values{"input": {string(allowed.rec.Input)}}, "http://elsewhere.example"); status != http.StatusForbidden {
		t.Errorf("a cross-origin what-if answered %d", status)
	}
	calls := h.dec.n
	status, body := h.post(t, path, url.Values{"input": {string(allowed.rec.Input)}}, h.srv.URL)
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	if h.dec.n != calls+2 { // the page's explanation and the what-if
		t.Errorf("the Decider decided %d times, want 2", h.dec.n-calls)
	}
	res := body[strings.Index(body, `id="whatif-result"`):]
	if !strings.Contains(res, `data-outcome="`+allowed.d.Outcome+`"`) || !strings.Contains(res, "No reason rule fired.") {
		t.Errorf("the what-if does not show the allowed outcome %q:\n%.2000s", allowed.d.Outcome, res)
	}
	if h.ring.Len() != before {
		t.Errorf("the ring went from %d to %d entries: a what-if was recorded", before, h.ring.Len())
	}
}

// TestWhatIfPaste: a document pasted into the what-if goes, unless told
// otherwise, to the input member whose schema and value have the most keys
// in common with it, even when the input's value there is nearly empty;
// its numbers keep every digit.
func TestWhatIfPaste(t *testing.T) {
	h := newHarness(t, Config{})
	var target decided
	member := ""
	for _, d := range h.all {
		var in map[string]json.RawMessage
		_ = json.Unmarshal(d.rec.Input, &in)
		best := 0
		for k, v := range in {
			var obj map[string]any
			if json.Unmarshal(v, &obj) == nil && len(obj) > best {
				best, member = len(obj), k
			}
		}
		if best >= 5 {
			target = d
			break
		}
	}
	if member == "" {
		t.Fatal("no fixture with an object member of five keys")
	}
	var in map[string]map[string]any
	dec := json.NewDecoder(bytes.NewReader(target.rec.Input))
	dec.UseNumber()
	_ = dec.Decode(&in)
	doc := in[member]
	// A key that no other member has, with a number beyond float64.
	doc["pasted_marker"] = json.Number("18446744073709551615")
	pasted, _ := json.Marshal(doc)
	in[member] = map[string]any{}
	for k := range doc {
		if k != "pasted_marker" {
			in[member][k] = "placeholder"
			break
		}
	}
	emptied, _ := json.Marshal(in)

	var schema any
	for _, d := range h.eng.Snapshot().Decisions() {
		if d.Name == target.rec.Decision {
			schema = d.InputSchema
		}
	}
	merged, at, err := paste(emptied, pasted, "", nil, schema)
	if err != nil {
		t.Fatal(err)
	}
	if at != "/"+member {
		t.Errorf("pasted at %s, want /%s", at, member)
	}
	if !bytes.Contains(merged, []byte(`"pasted_marker":18446744073709551615`)) {
		t.Errorf("the merged input lost digits: %s", merged)
	}
	// Told where, it goes there, and only to a member of the schema.
	status, body := h.post(t, "/ui/decisions/"+target.rec.DecisionID, url.Values{
		"input": {string(emptied)}, "paste": {string(pasted)}, "paste_at": {"/no-such-member"},
	}, "")
	if status != 200 || !strings.Contains(body, "is not a member of this decision") {
		t.Errorf("a paste at an unknown member: %d %.300s", status, body)
	}
}

// TestEvents: the live stream sends a row for a new decision that matches
// the page's filter, and nothing for one that does not.
func TestEvents(t *testing.T) {
	h := newHarness(t, Config{})
	a, b := h.all[0], h.all[len(h.all)-1]
	if a.rec.Decision == b.rec.Decision {
		t.Fatal("the fixtures have one decision")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.srv.URL+"/ui/events?decision="+url.QueryEscape(a.rec.Decision), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	if line, _ := r.ReadString('\n'); line != ": live\n" {
		t.Fatalf("first line %q", line)
	}
	other, match := b.rec, a.rec
	other.DecisionID, match.DecisionID = "other-id", "match-id"
	h.ring.Add(other)
	h.ring.Add(match)
	got := readEvent(t, r)
	if !strings.Contains(got, "event: decision\n") || !strings.Contains(got, "/ui/decisions/match-id") || strings.Contains(got, "other-id") {
		t.Errorf("event:\n%s", got)
	}
}

// readEvent reads the stream up to the LF that ends its next event, and
// returns the event's bytes without comment lines.
func readEvent(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var event strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\n" {
			if event.Len() > 0 {
				return event.String()
			}
			continue
		}
		if !strings.HasPrefix(line, ":") {
			event.WriteString(line)
		}
	}
}

// TestEventsCarryNoLineEnd: a value with line ends (a decision name, here)
// cannot split the live stream's lines. EventSource ends a line at CR, LF
// or CRLF; a raw CR once let a caller's name add a field, such as a forged
// event id. The row arrives whole, as the one JSON string ui.js parses.
func TestEventsCarryNoLineEnd(t *testing.T) {
	h := newHarness(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.srv.URL+"/ui/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	lineEnd := regexp.MustCompile("\r\n|\r|\n")
	tests := []struct{ name, decision string }{
		{name: "carriage return", decision: "a\rid: 999999\rdata: forged"},
		{name: "CR LF", decision: "a\r\nid: 999999"},
		{name: "CR CR: an empty line", decision: "a\r\rid: 999999\r\r"},
		{name: "line feeds", decision: "a\n\nid: 999999\n"},
		{name: "line separator", decision: "a\u2028id: 999999"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := h.all[0].rec
			rec.DecisionID, rec.Decision = fmt.Sprintf("line-end-%d", i), tc.decision
			h.ring.Add(rec)
			e, _ := h.ring.Get(rec.DecisionID)
			raw := readEvent(t, r)
			if strings.ContainsRune(raw, '\r') {
				t.Errorf("a CR reached the stream: %q", raw)
			}
			// The fields as EventSource reads them.
			var ids, data []string
			for _, line := range lineEnd.Split(strings.TrimSuffix(raw, "\n"), -1) {
				field, value, _ := strings.Cut(line, ":")
				switch value = strings.TrimPrefix(value, " "); field {
				case "":
					t.Errorf("an empty line inside the event ends it early: %q", raw)
				case "id":
					ids = append(ids, value)
				case "data":
					data = append(data, value)
				}
			}
			if want := []string{strconv.FormatUint(e.Seq, 10)}; !slices.Equal(ids, want) {
				t.Errorf("event ids %q, want %q: %q", ids, want, raw)
			}
			var row string
			if err := json.Unmarshal([]byte(strings.Join(data, "\n")), &row); err != nil || !strings.Contains(row, "/ui/decisions/"+rec.DecisionID) {
				t.Errorf("data is not the row as one JSON string (%v): %q", err, raw)
			}
		})
	}
}

// TestRingBounds: the ring holds at most Size entries and Bytes bytes,
// dropping the oldest, and keeps no input larger than MaxKeptInput.
func TestRingBounds(t *testing.T) {
	_, all := repoDecided(t)
	r := NewRing(RingConfig{Size: 10, Bytes: 20 << 10, MaxKeptInput: 2 << 10})
	big := 0
	for i := 0; i < 200; i++ {
		rec := all[i%len(all)].rec
		rec.DecisionID = fmt.Sprint(i)
		r.Add(rec)
		if len(rec.Input) > 2<<10 {
			big++
		}
	}
	if r.Len() > 10 {
		t.Errorf("%d entries in a ring of 10", r.Len())
	}
	if r.bytes > 20<<10 {
		t.Errorf("%d bytes in a ring of 20 KiB", r.bytes)
	}
	page := r.Query(Filter{}, 0, 100)
	if page.Entries[0].Record.DecisionID != "199" {
		t.Errorf("newest is %s", page.Entries[0].Record.DecisionID)
	}
	for _, e := range page.Entries {
		if len(e.Record.Input) > 2<<10 {
			t.Errorf("an input of %d bytes kept", len(e.Record.Input))
		}
	}
	if _, ok := r.Get("0"); ok {
		t.Error("the oldest entry is still there")
	}
}

// TestLogFile: the ring is filled from the decision log's tail, and a
// decision it no longer holds is found in the log.
func TestLogFile(t *testing.T) {
	eng, all := repoDecided(t)
	path := filepath.Join(t.TempDir(), "decisions.log")
	l, err := decisionlog.Open(decisionlog.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range all {
		l.Log(d.rec)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ring := NewRing(RingConfig{Size: 5})
	lf := LogFile{Path: path}
	n, err := lf.Preload(ring, 5)
	if err != nil || n != 5 {
		t.Fatalf("preloaded %d: %v", n, err)
	}
	if _, ok := ring.Get(all[len(all)-1].rec.DecisionID); !ok {
		t.Error("the newest record is not in the ring")
	}
	rec, _, found, err := lf.Lookup(all[0].rec.DecisionID)
	if err != nil || !found || !engine.SameJSON(rec.Input, all[0].rec.Input) {
		t.Errorf("lookup of the oldest: found %v, err %v", found, err)
	}
	h := &harness{}
	srv := httptest.NewServer(New(Config{Recent: ring, Archive: lf, Decider: eng}))
	defer srv.Close()
	h.srv = srv
	if status, body := h.get(t, "/ui/decisions/"+all[0].rec.DecisionID); status != 200 || !strings.Contains(body, all[0].rec.DecisionID) {
		t.Errorf("the page of a decision only the log holds: %d", status)
	}
	if status, _ := h.get(t, "/ui/decisions/no-such-id"); status != 404 {
		t.Errorf("an unknown id: %d", status)
	}
}

// TestLogFileFindsRotatedRecords: a decision whose record the writer has
// rotated into a backup (PATH-TIMESTAMP.ext) is still found by
// its page. The pages once looked for PATH.1 ... PATH.N, names the writer
// never uses, and answered 404.
func TestLogFileFindsRotatedRecords(t *testing.T) {
	eng, all := repoDecided(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "decisions.log")
	l, err := decisionlog.Open(decisionlog.Options{Path: path, MaxMegabytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Each record carries a quarter MiB of padding in a free-form field, so
	// a handful of them fill the 1 MiB file and rotate it.
	pad := `"` + strings.Repeat("p", 256<<10) + `"`
	var ids []string
	for i := 0; i < 12; i++ {
		rec := all[i%len(all)].rec
		rec.DecisionID = fmt.Sprintf("rotated-%02d", i)
		rec.Input = json.RawMessage(`{"padding":` + pad + `}`)
		if !l.Log(rec) {
			t.Fatalf("record %d refused", i)
		}
		ids = append(ids, rec.DecisionID)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	files, err := decisionlog.Files(path)
	if err != nil || len(files) < 3 {
		t.Fatalf("the writer rotated into %v (%v), want the file and at least two backups", files, err)
	}
	lf := LogFile{Path: path}
	srv := httptest.NewServer(New(Config{Recent: NewRing(RingConfig{Size: 1}), Archive: lf, Decider: eng}))
	defer srv.Close()
	h := &harness{srv: srv}
	for _, id := range []string{ids[0], ids[len(ids)/2], ids[len(ids)-1]} {
		if status, body := h.get(t, "/ui/decisions/"+id); status != 200 || !strings.Contains(body, id) {
			t.Errorf("the page of %s, whose record is in %d files: %d", id, len(files), status)
		}
	}
}

// BenchmarkListPage10k measures the newest page of decisions with 10,000
// decisions in the ring (docs/PAGES.md quotes it).
func BenchmarkListPage10k(b *testing.B) {
	eng, all := repoDecided(b)
	ring := NewRing(RingConfig{OutcomeKey: OutcomeKeys(eng), RunID: RunIDs(eng)})
	for i := 0; ring.Len() < DefaultRingSize; i++ {
		rec := all[i%len(all)].rec
		rec.DecisionID = fmt.Sprint(i)
		ring.Add(rec)
	}
	h := New(Config{Recent: ring, Decider: eng})
	for _, q := range []string{"", "?outcome=" + OutcomeError, "?run=no-such-run"} {
		b.Run("query="+q, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/ui/decisions"+q, nil))
				if w.Code != 200 {
					b.Fatal(w.Code)
				}
			}
		})
	}
}

// fakeShadow is a candidate engine beside the live one, as issue 13's
// shadow evaluation provides it.
type fakeShadow struct {
	cand   *live.Engine
	report shadow.Report
}

func (f *fakeShadow) Candidate() *shadow.Candidate {
	return &shadow.Candidate{Snapshot: f.cand.Snapshot()}
}
func (f *fakeShadow) Report() (shadow.Report, bool) { return f.report, true }
func (f *fakeShadow) Proofs() shadow.Proofs         { return shadow.Proofs{} }

// quotaCopy copies the quota test decision; scale multiplies every number
// of its data files (a data edit that names nothing).
func quotaCopy(t *testing.T, scale int64) engine.Config {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../../engine/testdata/quota")); err != nil {
		t.Fatal(err)
	}
	if scale != 1 {
		files, _ := filepath.Glob(filepath.Join(dir, "policies", "decisions", "*", "data.json"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			var doc any
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			if err := dec.Decode(&doc); err != nil {
				t.Fatal(err)
			}
			var scaleAll func(any) any
			scaleAll = func(v any) any {
				switch x := v.(type) {
				case json.Number:
					n, _ := x.Int64()
					return n * scale
				case map[string]any:
					for k := range x {
						x[k] = scaleAll(x[k])
					}
				case []any:
					for i := range x {
						x[i] = scaleAll(x[i])
					}
				}
				return v
			}
			out, _ := json.Marshal(scaleAll(doc))
			if err := os.WriteFile(f, out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return engine.Config{Policies: filepath.Join(dir, "policies"), Schemas: filepath.Join(dir, "schemas"), Tests: filepath.Join(dir, "tests")}
}

// TestWhatIfBesideTheCandidate: with a shadow candidate loaded, a what-if
// shows the live revision's and the candidate's answers side by side and
// says when they differ; nothing is recorded. The policy page shows the
// candidate and its impact summary, examples linked.
func TestWhatIfBesideTheCandidate(t *testing.T) {
	liveCfg := quotaCopy(t, 1)
	live := mustEngine(t, engine.Config{Policies: liveCfg.Policies, Schemas: liveCfg.Schemas})
	candCfg := quotaCopy(t, 0)
	cand := mustEngine(t, engine.Config{Policies: candCfg.Policies, Schemas: candCfg.Schemas})
	fixtures, err := engine.LoadFixtures(liveCfg.Tests)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var body []byte
	for _, fx := range fixtures {
		if fx.Input == nil || fx.WantError != nil {
			continue
		}
		a, err1 := live.Decide(context.Background(), fx.Decision, fx.Input, engine.Options{})
		b, err2 := cand.Decide(context.Background(), fx.Decision, fx.Input, engine.Options{})
		if err1 == nil && err2 == nil && !engine.SameJSON(a.Result, b.Result) {
			name, body = fx.Decision, fx.Input
			break
		}
	}
	if body == nil {
		t.Fatal("no quota fixture that the scaled data decides differently")
	}
	ring := NewRing(RingConfig{})
	sh := &fakeShadow{cand: cand, report: shadow.Report{Total: 7, Decisions: []shadow.DecisionReport{{Decision: name, Total: 7, Classes: []shadow.ClassCount{{Class: "example-class", Count: 3, Examples: []string{"example-id-1"}}}}}}}
	srv := httptest.NewServer(New(Config{Recent: ring, Decider: live, Shadow: sh}))
	defer srv.Close()
	h := &harness{srv: srv}
	status, page := h.post(t, "/ui/whatif", url.Values{"decision": {name}, "input": {string(body)}}, "")
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	for _, want := range []string{`id="eval-live"`, `id="eval-candidate"`, "The shadow candidate decides this input differently.", short(cand.Snapshot().Revision)} {
		if !strings.Contains(page, want) {
			t.Errorf("the what-if page lacks %q", want)
		}
	}
	if ring.Len() != 0 {
		t.Errorf("a what-if reached the ring")
	}
	_, page = h.get(t, "/ui/policy")
	for _, want := range []string{cand.Snapshot().Revision, "<code>example-class</code>", `href="/ui/decisions/example-id-1"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the policy page lacks %q", want)
		}
	}
}

func short(s string) string { return s[:8] }

// TestRingShedsInputsBeforeEntries: past its byte budget the ring keeps
// every entry (up to Size) and gives up the inputs of the oldest, whose
// pages read them from the decision log; the newest keep theirs.
func TestRingShedsInputsBeforeEntries(t *testing.T) {
	_, all := repoDecided(t)
	r := NewRing(RingConfig{Size: 100, Bytes: 100 << 10})
	for i := 0; i < 100; i++ {
		rec := all[i%len(all)].rec
		rec.DecisionID = fmt.Sprint(i)
		r.Add(rec)
	}
	if r.Len() != 100 {
		t.Fatalf("%d entries, want all 100: inputs go before entries", r.Len())
	}
	if r.bytes > 100<<10 {
		t.Errorf("%d bytes in a ring of 100 KiB", r.bytes)
	}
	oldest, _ := r.Get("0")
	newest, _ := r.Get("99")
	if !oldest.InputDropped || oldest.Record.Input != nil {
		t.Error("the oldest entry kept its input past the byte budget")
	}
	if newest.InputDropped || len(newest.Record.Input) == 0 {
		t.Error("the newest entry lost its input")
	}
}

// TestLoginNextStaysOnThePages: after logging in, the browser goes back to
// the page it came from only when that is one of these pages; every form
// that a browser resolves to another site, or that http.Redirect cleans to
// one, goes to the pages' root instead.
func TestLoginNextStaysOnThePages(t *testing.T) {
	h := newHarness(t, Config{Login: true})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	const root = "/ui/"
	tests := []struct{ name, next, want string }{
		{name: "a decision's page", next: "/ui/decisions/abc-123", want: "/ui/decisions/abc-123"},
		{name: "a filtered list", next: "/ui/decisions?decision=a&outcome=b", want: "/ui/decisions?decision=a&outcome=b"},
		{name: "the pages' root", next: "/ui/", want: root},
		{name: "none", next: "", want: root},
		{name: "scheme-relative", next: "//evil.example/x", want: root},
		{name: "slash backslash", next: `/\evil.example/x`, want: root},
		{name: "backslash slash", next: `\/evil.example/x`, want: root},
		{name: "dot-dot to slash backslash", next: `/ui/../\evil.example/x`, want: root},
		{name: "encoded slashes", next: "/ui/..%2f..%2fevil.example/x", want: root},
		{name: "encoded backslash", next: "/ui/..%5c..%5cevil.example/x", want: root},
		{name: "encoded backslash at the root", next: "/%5cevil.example/x", want: root},
		{name: "encoded dots", next: "/ui/%2e%2e/", want: root},
		{name: "dot-dot out of the pages", next: "/ui/../v1/status", want: root},
		{name: "double slash inside", next: "/ui//evil.example/x", want: root},
		{name: "tab", next: "/\t/evil.example/x", want: root},
		{name: "carriage return", next: "/\r/evil.example/x", want: root},
		{name: "line feed", next: "/ui/\n/evil.example/x", want: root},
		{name: "leading space", next: " //evil.example/x", want: root},
		{name: "absolute", next: "https://evil.example/ui/x", want: root},
		{name: "javascript", next: "javascript:alert(1)//ui/", want: root},
		{name: "userinfo scheme-relative", next: "//ui@evil.example/ui/", want: root},
		{name: "userinfo absolute", next: "https://ui:x@evil.example/ui/", want: root},
		{name: "userinfo lookalike", next: "/ui@evil.example/", want: root},
		{name: "not the pages", next: "/v1/status", want: root},
		{name: "a prefix lookalike", next: "/uix/decisions", want: root},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			form := url.Values{"next": {tc.next}, "token": {"a-token"}}
			resp, err := client.PostForm(h.srv.URL+"/ui/login", form)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != tc.want {
				t.Errorf("next %q: %d Location %q, want %q", tc.next, resp.StatusCode, loc, tc.want)
			}
		})
	}
}

// setAt returns the JSON document doc with the value at the JSON pointer
// ptr replaced by v; false when ptr names nothing in doc.
func setAt(doc []byte, ptr string, v any) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var root any
	if dec.Decode(&root) != nil {
		return nil, false
	}
	tokens := strings.Split(ptr, "/")[1:]
	parent := &root
	for i, tok := range tokens {
		obj, ok := (*parent).(map[string]any)
		key := jsonptr.Unescape(tok)
		if !ok || obj[key] == nil {
			return nil, false
		}
		if i == len(tokens)-1 {
			obj[key] = v
			break
		}
		next := obj[key]
		parent = &next
	}
	out, err := json.Marshal(root)
	return out, err == nil
}

// TestPagesShowInvisibleCharactersEscaped: a character that is invisible
// but changes what a reader sees (a bidirectional control turns
// "\u202ea3f7-nur" into "run-7f3a" on screen, a zero width hides itself, a
// control is dropped) is shown escaped, as in a JSON string, wherever the
// pages print a value: the evidence of a fired rule (an input string the
// rule read, found among the fixtures), the caller, the input, the list
// of decisions and the error page.
func TestPagesShowInvisibleCharactersEscaped(t *testing.T) {
	h := newHarness(t, Config{})
	const tail = "a3f7-nur"
	// A fixture, and a pointer to a string that a rule fires on and shows
	// as evidence, still, when the string is changed.
	with := func(d decided, ptr string, rule string, v string) ([]byte, *engine.Decision, bool) {
		in, ok := setAt(d.rec.Input, ptr, v)
		if !ok {
			return nil, nil, false
		}
		exp, err := h.eng.Decide(context.Background(), d.rec.Decision, in, engine.Options{Explain: true})
		if err != nil {
			return nil, nil, false
		}
		for _, ro := range exp.Explanation {
			for _, ev := range ro.Evidence {
				var got string
				if ro.Fired && ro.Reason == rule && ev.Path == ptr && json.Unmarshal(ev.Value, &got) == nil && got == v {
					return in, exp, true
				}
			}
		}
		return nil, nil, false
	}
	var base decided
	var ptr, rule string
search:
	for _, d := range h.all {
		exp, err := h.eng.Decide(context.Background(), d.rec.Decision, d.rec.Input, engine.Options{Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, ro := range exp.Explanation {
			for _, ev := range ro.Evidence {
				if ro.Fired && len(ev.Value) > 0 && ev.Value[0] == '"' {
					if _, _, ok := with(d, ev.Path, ro.Reason, "\u202e"+tail); ok {
						base, ptr, rule = d, ev.Path, ro.Reason
						break search
					}
				}
			}
		}
	}
	if ptr == "" {
		t.Fatal("no fixture shows a string that can be changed as evidence")
	}
	tests := []struct{ name, char, shown string }{
		{name: "right-to-left override", char: "\u202e", shown: `\u202e`},
		{name: "left-to-right override", char: "\u202d", shown: `\u202d`},
		{name: "left-to-right embedding", char: "\u202a", shown: `\u202a`},
		{name: "right-to-left embedding", char: "\u202b", shown: `\u202b`},
		{name: "pop directional formatting", char: "\u202c", shown: `\u202c`},
		{name: "left-to-right isolate", char: "\u2066", shown: `\u2066`},
		{name: "right-to-left isolate", char: "\u2067", shown: `\u2067`},
		{name: "first strong isolate", char: "\u2068", shown: `\u2068`},
		{name: "pop directional isolate", char: "\u2069", shown: `\u2069`},
		{name: "arabic letter mark", char: "\u061c", shown: `\u061c`},
		{name: "left-to-right mark", char: "\u200e", shown: `\u200e`},
		{name: "right-to-left mark", char: "\u200f", shown: `\u200f`},
		{name: "zero width space", char: "\u200b", shown: `\u200b`},
		{name: "zero width joiner", char: "\u200d", shown: `\u200d`},
		{name: "word joiner", char: "\u2060", shown: `\u2060`},
		{name: "byte order mark", char: "\ufeff", shown: `\ufeff`},
		{name: "line separator", char: "\u2028", shown: `\u2028`},
		{name: "escape", char: "\x1b", shown: `\u001b`},
		{name: "delete", char: "\x7f", shown: `\u007f`},
		{name: "next line", char: "\u0085", shown: `\u0085`},
		{name: "tag letter", char: "\U000e0041", shown: `\udb40\udc41`},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.char + tail
			in, exp, ok := with(base, ptr, rule, v)
			if !ok {
				t.Fatalf("rule %s no longer shows %q at %s", rule, v, ptr)
			}
			rec := base.rec
			rec.DecisionID, rec.Input, rec.Result, rec.Caller = fmt.Sprintf("invisible-%d", i), in, exp.Result, v
			h.ring.Add(rec)
			pages := map[string]string{
				"decision":  "/ui/decisions/" + rec.DecisionID,
				"list":      "/ui/decisions?caller=" + url.QueryEscape(v),
				"not found": "/ui/decisions/" + url.PathEscape(v),
			}
			want := map[string][]string{
				"decision":  {`<code class="val">&#34;` + tc.shown + tail + `&#34;</code>`, `<dd>` + tc.shown + tail + `</dd>`},
				"list":      {`<td>` + tc.shown + tail + `</td>`},
				"not found": {`No decision ` + tc.shown + tail + ` in memory`},
			}
			for name, path := range pages {
				_, body := h.get(t, path)
				if strings.Contains(body, tc.char) {
					i := strings.Index(body, tc.char)
					t.Errorf("%s page: %q printed raw: %q", name, tc.char, body[max(0, i-60):i+len(tc.char)+len(tail)])
				}
				for _, w := range want[name] {
					if !strings.Contains(body, w) {
						t.Errorf("%s page: no %s", name, w)
					}
				}
			}
		})
	}
}

// A decision's page shows its record's trace id, and links it where
// Config.TraceURL says, with the id in place of {trace_id}. A trace id
// that is not a W3C one (a record read back from a file someone edited)
// is shown as text, escaped, and never linked; a URL that is not a web
// address is not followed (html/template's own filter).
func TestDecisionPageShowsTheTrace(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	tests := []struct {
		name, traceURL, traceID, spanID string
		want, notWant                   []string
	}{
		{name: "plain text without a URL", traceID: id, spanID: "00f067aa0ba902b7",
			want: []string{`<dt>Trace</dt><dd><code class="trace">` + id + `</code></dd>`}, notWant: []string{`<a class="trace"`, "the caller"}},
		{name: "the caller's", traceID: id,
			want: []string{`<code class="trace">` + id + `</code> <span class="muted">(the caller's)</span>`}},
		{name: "linked", traceURL: "https://jaeger.example/trace/{trace_id}?a=1&b=2", traceID: id, spanID: "00f067aa0ba902b7",
			want: []string{`<a class="trace" href="https://jaeger.example/trace/` + id + `?a=1&amp;b=2"><code>` + id + `</code></a>`}},
		{name: "linked inside a query of JSON", traceURL: `https://grafana.example/explore?left={"queries":[{"query":"{trace_id}"}]}`, traceID: id,
			want: []string{`<a class="trace" href="https://grafana.example/explore?left=%7b%22queries%22:[%7b%22query%22:%22` + id + `%22%7d]%7d">`}},
		{name: "twice", traceURL: "https://tempo.example/{trace_id}#{trace_id}", traceID: id,
			want: []string{`href="https://tempo.example/` + id + `#` + id + `"`}},
		{name: "not a web address", traceURL: "javascript:alert('{trace_id}')", traceID: id,
			want: []string{`href="#ZgotmplZ"`}, notWant: []string{"javascript:"}},
		{name: "markup for an id", traceURL: "https://jaeger.example/trace/{trace_id}", traceID: `"><script>alert(1)</script>`,
			want: []string{`<code class="trace">&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;</code>`}, notWant: []string{`<a class="trace"`, "<script>"}},
		{name: "upper-case hex is not a W3C id", traceURL: "https://jaeger.example/trace/{trace_id}", traceID: strings.ToUpper(id),
			want: []string{`<code class="trace">` + strings.ToUpper(id) + `</code>`}, notWant: []string{`<a class="trace"`}},
		{name: "a path for an id", traceURL: "https://jaeger.example/trace/{trace_id}", traceID: "../../admin/" + id[12:],
			notWant: []string{`<a class="trace"`, "/admin/" + id[12:] + `"`}},
		{name: "no trace", traceURL: "https://jaeger.example/trace/{trace_id}",
			notWant: []string{"<dt>Trace</dt>"}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{TraceURL: tc.traceURL})
			rec := h.all[0].rec
			rec.DecisionID, rec.TraceID, rec.SpanID = fmt.Sprintf("traced-%d", i), tc.traceID, tc.spanID
			h.ring.Add(rec)
			status, body := h.get(t, "/ui/decisions/"+rec.DecisionID)
			if status != http.StatusOK {
				t.Fatalf("status %d", status)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("the page lacks %s", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(body, w) {
					t.Errorf("the page shows %s", w)
				}
			}
		})
	}
}
