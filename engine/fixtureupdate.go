package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/arbiter-dev/arbiter/engine/input"
)

// FixtureChange is one fixture whose recorded result an intended edit
// changed, re-recorded by UpdateFixtures.
type FixtureChange struct {
	Name string `json:"name"` // decision/case
	File string `json:"file"`
	// Diff is FieldDiff of the recorded result and the new one.
	Diff string `json:"diff"`
	// Stale lists the words of the fixture's name or note that the
	// recorded result says and the new one does not (staleWords): the
	// name or note may now say the opposite of what the fixture expects.
	Stale []string `json:"stale_words,omitempty"`
}

// UpdateFixtures re-records the expected results of the fixtures of the
// test folder dir that s decides otherwise (`arbiter test --update`): in
// each fixture file, only the members of want_result that changed are
// rewritten, in place, so the rest of the file (its key order, formatting
// and notes) stays byte for byte. It returns the changes, and the problems
// of the fixtures it does not re-record: one that fails or wants an error
// (an error code is not re-recorded, nor a result turned into an error).
// run, when set, limits it to the fixtures whose decision/case it matches.
func (s *Snapshot) UpdateFixtures(ctx context.Context, dir string, run *regexp.Regexp) ([]FixtureChange, []Problem, error) {
	fixtures, err := LoadFixtures(dir)
	if err != nil {
		return nil, nil, err
	}
	var changes []FixtureChange
	var probs []Problem
	edits := map[string][]fixtureEdit{} // by file
	var files []string
	for _, fx := range fixtures {
		name := fx.Decision + "/" + fx.Name
		if run != nil && !run.MatchString(name) {
			continue
		}
		d, err := s.Decide(ctx, fx.Decision, fx.RequestBody(), Options{})
		msg := CheckOutcome(fx, d, err)
		switch {
		case msg == "":
			continue
		case fx.WantError != nil || err != nil:
			probs = append(probs, Problem{File: fx.File, Message: fmt.Sprintf("fixture %s is not re-recorded (only a result is): %s", name, msg)})
			continue
		}
		if edits[fx.File] == nil {
			files = append(files, fx.File)
		}
		edits[fx.File] = append(edits[fx.File], fixtureEdit{name: fx.Name, got: d.Result})
		changes = append(changes, FixtureChange{Name: name, File: fx.File, Diff: FieldDiff(fx.WantResult, d.Result),
			Stale: staleWords(fx.Name+" "+fx.Note, fx.WantResult, d.Result)})
	}
	for _, f := range files {
		if err := rewriteFixtures(f, edits[f]); err != nil {
			return changes, probs, fmt.Errorf("%s: %w", f, err)
		}
	}
	return changes, probs, nil
}

type fixtureEdit struct {
	name string
	got  []byte
}

// rewriteFixtures replaces, in the fixture file at path, the want_result
// of each edited case by its new result, and writes it back (a temporary
// file renamed over it).
func rewriteFixtures(path string, edits []fixtureEdit) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var reps []span
	cases, ok := memberSpans(b, 0)
	if !ok {
		return fmt.Errorf("not a JSON object")
	}
	for _, e := range edits {
		c, ok := cases[e.name]
		if !ok {
			return fmt.Errorf("case %s not found", e.name)
		}
		members, ok := memberSpans(b[c.start:c.end], c.start)
		w, found := members["want_result"]
		if !ok || !found {
			return fmt.Errorf("case %s has no want_result", e.name)
		}
		reps = append(reps, wantEdits(b, w, e.got)...)
	}
	slices.SortFunc(reps, func(x, y span) int { return y.start - x.start }) // last first: offsets stay valid
	for _, r := range reps {
		b = slices.Concat(b[:r.start], r.text, b[r.end:])
	}
	if _, err := input.Decode(b); err != nil {
		return fmt.Errorf("the rewritten file is not valid JSON: %w", err)
	}
	tmp := path + ".update~"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// span is a value's bytes [start, end) in a file, and its new text.
type span struct {
	start, end int
	order      int // the member's place in its object
	text       []byte
}

// wantEdits returns the replacements that make the recorded result at w
// the new result got: the members that changed, when both are objects of
// the same members; otherwise the whole value.
func wantEdits(file []byte, w span, got []byte) []span {
	old := file[w.start:w.end]
	wm, okW := memberSpans(old, w.start)
	_, gm, okG := orderedObject(got)
	if okW && okG && len(wm) == len(gm) {
		var out []span
		for k, s := range wm {
			g, ok := gm[k]
			if !ok {
				return []span{{start: w.start, end: w.end, text: formatAt(file, w.start, reorder(old, got), true)}}
			}
			if !SameJSON(file[s.start:s.end], g) {
				s.text = formatAt(file, s.start, g, bytes.ContainsRune(file[s.start:s.end], '\n'))
				out = append(out, s)
			}
		}
		return out
	}
	return []span{{start: w.start, end: w.end, text: formatAt(file, w.start, reorder(old, got), true)}}
}

// reorder is got with its members in old's key order first (when both are
// objects), then its others.
func reorder(old, got []byte) []byte {
	okeys, _, okO := orderedObject(old)
	gkeys, gm, okG := orderedObject(got)
	if !okO || !okG {
		return got
	}
	rank := func(k string) int {
		if i := slices.Index(okeys, k); i >= 0 {
			return i
		}
		return len(okeys)
	}
	slices.SortStableFunc(gkeys, func(x, y string) int { return rank(x) - rank(y) })
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range gkeys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(k))
		b.WriteByte(':')
		b.Write(gm[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// formatAt is v as it would be written at offset at of file: indented by
// two spaces from the indentation of the line it starts on (the fixture
// files' style), or on one line when multiline is false and v is a
// scalar or empty.
func formatAt(file []byte, at int, v []byte, multiline bool) []byte {
	line := bytes.LastIndexByte(file[:at], '\n') + 1
	prefix := file[line:at]
	prefix = prefix[:len(prefix)-len(bytes.TrimLeft(prefix, " \t"))]
	var b, compact bytes.Buffer
	if json.Compact(&compact, v) != nil {
		return v
	}
	c := compact.Bytes()
	composite := len(c) > 2 && (c[0] == '{' || c[0] == '[')
	if !multiline && !composite || json.Indent(&b, c, string(prefix), "  ") != nil {
		return c
	}
	return b.Bytes()
}

// memberSpans returns the byte spans of the member values of the JSON
// object b, offset by base, with their order.
func memberSpans(b []byte, base int) (map[string]span, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	out := map[string]span{}
	for i := 0; dec.More(); i++ {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		end := int(dec.InputOffset())
		k, _ := t.(string)
		out[k] = span{start: base + end - len(raw), end: base + end, order: i}
	}
	return out, true
}

// minStaleWord is the length below which a word of a result's strings is
// not looked for in names and notes: short words of codes ("not", "run")
// are ordinary prose there.
const minStaleWord = 4

// staleWords returns, sorted, the words of text (a fixture's name and
// note) that a string of the result want holds and no string of the result
// got does: a word of an outcome or reason code that the fixture's name or
// note repeats (the code itself, or its words in prose) and that the new
// result dropped. The words come from the results alone, so no rule is named
// here: a word is a run of letters and digits, lower-cased, a camelCase
// boundary splitting it, of at least minStaleWord characters.
func staleWords(text string, want, got []byte) []string {
	gone := map[string]bool{}
	for _, s := range jsonStrings(want) {
		for _, w := range words(s) {
			gone[w] = true
		}
	}
	for _, s := range jsonStrings(got) {
		for _, w := range words(s) {
			delete(gone, w)
		}
	}
	var out []string
	for _, w := range words(text) {
		if gone[w] && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out
}

// jsonStrings returns the string values in the JSON value b, at any depth
// (not the keys: a member's name says nothing of the outcome).
func jsonStrings(b []byte) []string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// words splits s as staleWords reads it.
func words(s string) []string {
	var out []string
	var w []rune
	flush := func() {
		if len(w) >= minStaleWord {
			out = append(out, string(w))
		}
		w = w[:0]
	}
	prev := rune(0)
	for _, r := range s {
		switch {
		case unicode.IsUpper(r):
			if unicode.IsLower(prev) || unicode.IsDigit(prev) {
				flush()
			}
			w = append(w, unicode.ToLower(r))
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			w = append(w, r)
		default:
			flush()
		}
		prev = r
	}
	flush()
	return out
}

// String is a change as `arbiter test --update` prints it.
func (c FixtureChange) String() string {
	return fmt.Sprintf("updated %s (%s):\n%s", c.Name, c.File, strings.TrimRight(c.Diff, "\n"))
}
