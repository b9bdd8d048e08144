package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
)

func TestDiffInputs(t *testing.T) {
	many := func(n int, v string) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"k%03d":%s`, i, v)
		}
		return b.String() + "}"
	}
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		name  string
		a, b  string
		want  []inputChange
		more  int
		isErr bool
	}{
		{name: "the same", a: `{"a":1,"b":{"c":[1,2]}}`, b: `{"b":{"c":[1,2]},"a":1}`},
		{name: "a scalar changed", a: `{"s":{"state":"up"}}`, b: `{"s":{"state":"down"}}`,
			want: []inputChange{{Path: "/s/state", Kind: "changed", Old: `"up"`, New: `"down"`}}},
		{name: "added and removed, by member name", a: `{"b":1,"c":true}`, b: `{"a":null,"b":1}`,
			want: []inputChange{{Path: "/a", Kind: "added", New: "null"}, {Path: "/c", Kind: "removed", Old: "true"}}},
		{name: "numbers by value", a: `{"n":1000,"m":18446744073709551615}`, b: `{"n":1e3,"m":18446744073709551615.0}`},
		{name: "exact beyond float64", a: `{"m":18446744073709551615}`, b: `{"m":18446744073709551614}`,
			want: []inputChange{{Path: "/m", Kind: "changed", Old: "18446744073709551615", New: "18446744073709551614"}}},
		{name: "a type changed is one change", a: `{"o":{"x":1,"y":2}}`, b: `{"o":"gone"}`,
			want: []inputChange{{Path: "/o", Kind: "changed", Old: `{"x":1,"y":2}`, New: `"gone"`}}},
		{name: "null to an object", a: `{"o":null}`, b: `{"o":{}}`,
			want: []inputChange{{Path: "/o", Kind: "changed", Old: "null", New: "{}"}}},
		{name: "arrays by index", a: `{"l":[1,2,3]}`, b: `{"l":[1,5]}`,
			want: []inputChange{{Path: "/l/1", Kind: "changed", Old: "2", New: "5"}, {Path: "/l/2", Kind: "removed", Old: "3"}}},
		{name: "an array grows", a: `[]`, b: `["a"]`, want: []inputChange{{Path: "/0", Kind: "added", New: `"a"`}}},
		{name: "members escaped in the pointer", a: `{"a/b":{"c~d":1}}`, b: `{"a/b":{"c~d":2}}`,
			want: []inputChange{{Path: "/a~1b/c~0d", Kind: "changed", Old: "1", New: "2"}}},
		{name: "a long value is cut", a: `{"v":"` + long + `"}`, b: `{}`,
			want: []inputChange{{Path: "/v", Kind: "removed", Old: `"` + strings.Repeat("x", changeValueChars-1) + "…"}}},
		{name: "bounded: the first max, the rest counted", a: many(60, "1"), b: many(60, "2"), more: 10},
		{name: "markup is data", a: `{"h":"<b>"}`, b: `{"h":"<script>"}`,
			want: []inputChange{{Path: "/h", Kind: "changed", Old: `"\u003cb\u003e"`, New: `"\u003cscript\u003e"`}}},
		{name: "not JSON", a: `{"a":1}`, b: `{"a":`, isErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, more, err := diffInputs([]byte(tc.a), []byte(tc.b), maxChanges)
			if (err != nil) != tc.isErr {
				t.Fatalf("error %v, want one: %v", err, tc.isErr)
			}
			if tc.more > 0 {
				if len(got) != maxChanges || more != tc.more || got[0].Path != "/k000" || got[maxChanges-1].Path != fmt.Sprintf("/k%03d", maxChanges-1) {
					t.Errorf("%d changes listed (first %v), %d more; want the first %d and %d more", len(got), got[:min(1, len(got))], more, maxChanges, tc.more)
				}
				return
			}
			if !slices.Equal(got, tc.want) || more != 0 {
				t.Errorf("changes %+v (+%d), want %+v", got, more, tc.want)
			}
		})
	}
}

// putAt is input with the string v at the members toks (created as
// needed).
func putAt(t *testing.T, input []byte, toks []string, v string) []byte {
	t.Helper()
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	m := doc
	for _, tk := range toks[:len(toks)-1] {
		next, ok := m[tk].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[tk] = next
		}
		m = next
	}
	m[toks[len(toks)-1]] = v
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// aRun is a run of decisions in the harness's ring: for each decision
// that names a run (read from its input schema, as the pages do), two of
// its fixtures' inputs naming run, interleaved in time, and beside them
// the same inputs naming another run. It returns the run's records,
// oldest first.
func aRun(t *testing.T, h *harness, run string) ([]decisionlog.Record, RunPointers) {
	t.Helper()
	ptrs := (&handler{cfg: Config{Decider: h.dec}}).runPointers()
	if len(ptrs) < 2 {
		t.Fatalf("the repository's input schemas mark %d run ids (%v), want one per decision", len(ptrs), ptrs)
	}
	var recs []decisionlog.Record
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	for k := range 2 {
		for _, name := range slices.Sorted(maps.Keys(ptrs)) {
			var seen int
			for _, d := range h.all {
				if d.rec.Decision != name {
					continue
				}
				if seen++; seen != k+1 {
					continue
				}
				for _, r := range []string{"other-" + run, run} {
					rec := d.rec
					rec.Input = putAt(t, d.rec.Input, ptrs[name], r)
					rec.Time = t0.Add(time.Duration(len(recs)) * time.Second)
					rec.DecisionID = fmt.Sprintf("%s-%02d", r, len(recs))
					h.ring.Add(rec)
					if r == run {
						recs = append(recs, rec)
					}
				}
			}
		}
	}
	return recs, ptrs
}

var (
	stepRE    = regexp.MustCompile(`<li class="step" data-id="([^"]+)">`)
	listRowRE = regexp.MustCompile(`<tr data-seq="[^"]*"[^>]*>\s*<td><a href="/ui/decisions/([^"]+)">`)
)

// TestRunView: a run's page lists every decision about it, of every
// decision that names a run, oldest first, each linking its page, the
// first said so and each other with what changed in the input since the
// one before; the list's run filter lists the same decisions, newest
// first, each row with its run id linking the run's page.
func TestRunView(t *testing.T) {
	h := newHarness(t, Config{})
	recs, _ := aRun(t, h, "run-ui-test-1")
	var want []string
	for _, r := range recs {
		want = append(want, r.DecisionID)
	}
	status, body := h.get(t, "/ui/runs/run-ui-test-1")
	var got []string
	for _, m := range stepRE.FindAllStringSubmatch(body, -1) {
		got = append(got, m[1])
	}
	if status != 200 || !slices.Equal(got, want) {
		t.Fatalf("the run's page: status %d, steps %v; want %v\n%.3000s", status, got, want, body)
	}
	steps := strings.Split(body, `<li class="step"`)[1:]
	for i, st := range steps {
		if !strings.Contains(st, `href="/ui/decisions/`+url.PathEscape(want[i])+`"`) {
			t.Errorf("step %d does not link its decision's page:\n%s", i, st)
		}
		if i == 0 {
			if !strings.Contains(st, "The first decision of this run") {
				t.Errorf("the first step does not say it is the first:\n%s", st)
			}
			continue
		}
		prev := -1
		for j := i - 1; j >= 0 && prev < 0; j-- {
			if recs[j].Decision == recs[i].Decision {
				prev = j
			}
		}
		if prev < 0 {
			if !strings.Contains(st, "first "+recs[i].Decision+" decision") {
				t.Errorf("step %d, its decision's first in the run, does not say so:\n%s", i, st)
			}
			continue
		}
		changes, _, err := diffInputs(recs[prev].Input, recs[i].Input, maxChanges)
		if err != nil || len(changes) == 0 {
			t.Fatalf("step %d: %v, %d changes: the test wants inputs that differ", i, err, len(changes))
		}
		for _, c := range changes {
			if !strings.Contains(st, `<td><code>`+c.Path+`</code></td><td>`+c.Kind+`</td>`) {
				t.Errorf("step %d does not show the change %+v:\n%s", i, c, st)
			}
		}
	}

	status, body = h.get(t, "/ui/decisions?run=run-ui-test-1")
	got = got[:0]
	for _, m := range listRowRE.FindAllStringSubmatch(body, -1) {
		got = append(got, m[1])
	}
	slices.Reverse(want)
	if status != 200 || !slices.Equal(got, want) {
		t.Fatalf("the list filtered by run: status %d, rows %v; want %v", status, got, want)
	}
	if n := strings.Count(body, `<td class="run"><a href="/ui/runs/run-ui-test-1"`); n != len(want) {
		t.Errorf("%d rows show the run id linking its page, want %d", n, len(want))
	}
	// A decision's page links its run's.
	if _, body := h.get(t, "/ui/decisions/"+url.PathEscape(recs[0].DecisionID)); !strings.Contains(body, `<a id="run-link" href="/ui/runs/run-ui-test-1"`) {
		t.Errorf("the page of %s does not link its run:\n%.3000s", recs[0].DecisionID, body)
	}
	// An unknown run: an empty page, not an error.
	if status, body := h.get(t, "/ui/runs/no-such-run"); status != 200 || !strings.Contains(body, "No decision about this run") {
		t.Errorf("an unknown run: status %d\n%.2000s", status, body)
	}
}

// TestRunViewIsBoundedAndPaged: a run of more decisions than a page shows
// the newest page, oldest first, and links the earlier ones; the decision
// before a page's first is still read, as the base of its comparison.
func TestRunViewIsBoundedAndPaged(t *testing.T) {
	h := newHarness(t, Config{PageSize: 3})
	recs, _ := aRun(t, h, "run-paged")
	if len(recs) < 4 {
		t.Fatalf("%d decisions in the run, want more than a page of 3", len(recs))
	}
	_, body := h.get(t, "/ui/runs/run-paged")
	ids := stepRE.FindAllStringSubmatch(body, -1)
	if len(ids) != 3 || ids[2][1] != recs[len(recs)-1].DecisionID || strings.Contains(body, "The first decision of this run") {
		t.Fatalf("the newest page: %v; want the newest 3, the first compared with the one before\n%.3000s", ids, body)
	}
	// The page's oldest decision of the first run's decision is compared
	// with its predecessor, which only the page's extra row holds.
	for _, st := range strings.Split(body, `<li class="step"`)[1:] {
		if strings.Contains(st, `data-id="`+recs[len(recs)-2].DecisionID+`"`) && !strings.Contains(st, `<table class="changes">`) {
			t.Errorf("%s is not compared with %s, read beyond the page:\n%s", recs[len(recs)-2].DecisionID, recs[len(recs)-4].DecisionID, st)
		}
	}
	m := regexp.MustCompile(`id="earlier" rel="prev" href="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no link to the earlier decisions:\n%.3000s", body)
	}
	_, body = h.get(t, strings.ReplaceAll(m[1], "&amp;", "&"))
	earlier := stepRE.FindAllStringSubmatch(body, -1)
	if len(earlier) == 0 || earlier[0][1] != recs[0].DecisionID || earlier[len(earlier)-1][1] != recs[len(recs)-4].DecisionID {
		t.Errorf("the earlier page: %v; want from %s to %s", earlier, recs[0].DecisionID, recs[len(recs)-4].DecisionID)
	}
}

// TestRunPagesEscapeHostileValues: a run id with markup is text on the
// list, in its run column and on its run's page; an input too large to
// keep in memory is not compared (said), and an input that changed in
// thousands of places is shown as the first maxChanges changes and a
// count.
func TestRunPagesEscapeHostileValues(t *testing.T) {
	h := newHarness(t, Config{})
	const run = `<script>alert("r")</script>`
	recs, ptrs := aRun(t, h, run)
	base := recs[len(recs)-1]
	wide := base
	wide.DecisionID, wide.Time = "wide-input", base.Time.Add(time.Minute)
	wide.Input = base.Input
	for i := range 2000 {
		wide.Input = putAt(t, wide.Input, []string{fmt.Sprintf("zz-%04d", i)}, "v")
	}
	wide.Input = putAt(t, wide.Input, ptrs[base.Decision], run)
	h.ring.Add(wide)
	huge := base
	huge.DecisionID, huge.Time = "huge-input", base.Time.Add(2*time.Minute)
	huge.Input = putAt(t, base.Input, []string{"zz-blob"}, strings.Repeat("x", DefaultMaxKeptInput+1))
	h.ring.Add(huge)

	for _, path := range []string{"/ui/decisions?run=" + url.QueryEscape(run), "/ui/runs/" + url.PathEscape(run)} {
		status, body := h.get(t, path)
		if status != 200 || strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;alert(&#34;r&#34;)&lt;/script&gt;") {
			t.Errorf("%s: status %d; the run id is not escaped:\n%.3000s", path, status, body)
		}
	}
	_, body := h.get(t, "/ui/runs/"+url.PathEscape(run))
	steps := strings.Split(body, `<li class="step"`)
	wideStep, hugeStep := steps[len(steps)-2], steps[len(steps)-1]
	if !strings.Contains(hugeStep, "Input not compared: an input this replica no longer keeps in memory") {
		t.Errorf("the huge input's step does not say it is not compared:\n%.2000s", hugeStep)
	}
	if n := strings.Count(wideStep, `<tr class="`); n != maxChanges || !strings.Contains(wideStep, fmt.Sprintf("and %d more changes", 2000-maxChanges)) {
		t.Errorf("the wide input's step shows %d changes; want %d and %d more", n, maxChanges, 2000-maxChanges)
	}
	if len(body) > 256<<10 {
		t.Errorf("the run's page is %d bytes; want it bounded by its changes, not its inputs", len(body))
	}
}

// TestRunViewReadsTheStore: with a store, the run's page is every
// replica's decisions of the run (each with its replica); with the store
// down, this replica's own, said so.
func TestRunViewReadsTheStore(t *testing.T) {
	st := &fakeStore{}
	h := newHarness(t, Config{Store: st})
	recs, _ := aRun(t, h, "run-fleet")
	for i := len(recs) - 1; i >= 0; i-- { // the store's order: newest first
		replica := "replica-a"
		if i%2 == 1 {
			replica = "replica-b"
		}
		st.entries = append(st.entries, Entry{Record: recs[i], Replica: replica})
	}
	// One decision only the store has: another replica's, the newest.
	only := recs[len(recs)-1]
	only.DecisionID, only.Time = "only-in-the-store", only.Time.Add(time.Minute)
	st.entries = append([]Entry{{Record: only, Replica: "replica-c"}}, st.entries...)
	status, body := h.get(t, "/ui/runs/run-fleet")
	if status != 200 || len(stepRE.FindAllString(body, -1)) != len(recs)+1 || !strings.Contains(body, `data-id="only-in-the-store"`) ||
		!strings.Contains(body, "on replica-b") || !strings.Contains(body, "of every replica") {
		t.Fatalf("the run's page from the store: status %d\n%.3000s", status, body)
	}
	st.down = true
	status, body = h.get(t, "/ui/runs/run-fleet")
	if status != 200 || !strings.Contains(body, `id="store-down"`) || len(stepRE.FindAllString(body, -1)) != len(recs) {
		t.Errorf("the run's page with the store down: status %d; want this replica's decisions and a notice\n%.3000s", status, body)
	}
}
