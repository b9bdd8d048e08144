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

	"github.com/arbiter-dev/arbiter/engine/input"
)

// FixtureChange is one fixture whose recorded result an intended edit
// changed, re-recorded by UpdateFixtures.
type FixtureChange struct {
	Name string // decision/case
	File string
	// Diff is FieldDiff of the recorded result and the new one.
	Diff string
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
		edits[fx.File] = append(edits[fx.File], fixtureEdit{name: fx.Name, want: fx.WantResult, got: d.Result})
		changes = append(changes, FixtureChange{Name: name, File: fx.File, Diff: FieldDiff(fx.WantResult, d.Result)})
	}
	for _, f := range files {
		if err := rewriteFixtures(f, edits[f]); err != nil {
			return changes, probs, fmt.Errorf("%s: %w", f, err)
		}
	}
	return changes, probs, nil
}

type fixtureEdit struct {
	name      string
	want, got []byte
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
	okO, okeys := orderedKeys(old)
	gkeys, gm, okG := orderedObject(got)
	if !okO || !okG {
		return got
	}
	var keys []string
	for _, k := range okeys {
		if _, ok := gm[k]; ok {
			keys = append(keys, k)
		}
	}
	for _, k := range gkeys {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
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
	var b bytes.Buffer
	var compact bytes.Buffer
	if json.Compact(&compact, v) != nil {
		return v
	}
	composite := len(compact.Bytes()) > 2 && (compact.Bytes()[0] == '{' || compact.Bytes()[0] == '[')
	if !multiline && !composite {
		return compact.Bytes()
	}
	if json.Indent(&b, compact.Bytes(), string(prefix), "  ") != nil {
		return compact.Bytes()
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

// String is a change as `arbiter test --update` prints it.
func (c FixtureChange) String() string {
	return fmt.Sprintf("updated %s (%s):\n%s", c.Name, c.File, strings.TrimRight(c.Diff, "\n"))
}
