package diff

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/jsonptr"
	"github.com/arbiter-dev/arbiter/shadow"
)

type confirmed struct {
	class    shadow.Class
	agree    bool // the compiled program and topdown decided alike, on both sides
	old, new shadow.Outcome
}

// confirm decides doc with both revisions, each on its compiled program
// and on topdown, and classifies the change as shadow evaluation does.
func confirm(ctx context.Context, old, new *engine.Snapshot, name string, doc []byte) confirmed {
	side := func(s *engine.Snapshot) (shadow.Outcome, bool) {
		d, err := s.Decide(ctx, name, doc, engine.Options{})
		o1 := shadow.OutcomeOf("", d, err)
		d, err = s.Decide(ctx, name, doc, engine.Options{Topdown: true})
		o2 := shadow.OutcomeOf("", d, err)
		return o1, shadow.SameAnswer(o1, o2)
	}
	o, okOld := side(old)
	n, okNew := side(new)
	v, _ := new.Verdict(name)
	return confirmed{class: shadow.Classify(v, o, n), agree: okOld && okNew, old: o, new: n}
}

// found reports a confirmed example, made close to a fixture input: the
// leaves where it differs from one go back to the fixture's values, each
// while the example still confirms, and the fixture that leaves the
// fewest differences is the one reported against.
func found(ctx context.Context, old, new *engine.Snapshot, name string, q shadow.Class, doc []byte, inputs [][]byte) *Answer {
	var ex any
	if decodeJSON(doc, &ex) != nil {
		return &Answer{Verdict: Found, Example: doc}
	}
	best, bestFields, haveBase := ex, []string{""}, false
	for _, in := range inputs[:min(8, len(inputs))] {
		var base any
		if decodeJSON(in, &base) != nil {
			continue
		}
		cur := ex
		// Leaves the solver gave one value (identifiers that must match)
		// go back together first, then each leaf alone.
		diffs := leafDiff(base, ex, "")
		groups := map[string][]string{}
		var keys []string
		for _, p := range diffs {
			k := string(encodeJSON(valueAt(ex, p)))
			if groups[k] == nil {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], p)
		}
		var tries [][]string
		for _, k := range keys {
			if len(groups[k]) > 1 {
				tries = append(tries, groups[k])
			}
		}
		for _, p := range diffs {
			tries = append(tries, []string{p})
		}
		for _, ps := range tries {
			try := deepCopy(cur)
			for _, p := range ps {
				try = setAt(try, base, p)
			}
			if c := confirm(ctx, old, new, name, encodeJSON(try)); c.class == q && c.agree {
				cur = try
			}
		}
		if f := leafDiff(base, cur, ""); !haveBase || len(f) < len(bestFields) {
			best, bestFields, haveBase = cur, f, true
		}
	}
	doc = encodeJSON(best)
	slices.Sort(bestFields)
	return &Answer{Verdict: Found, Example: doc, Fields: bestFields, Old: explain(ctx, old, name, doc), New: explain(ctx, new, name, doc)}
}

// leafDiff lists the JSON pointers where b differs from a: members of
// objects one by one, elements of arrays of one length one by one, any
// other difference whole.
func leafDiff(a, b any, at string) []string {
	ao, aObj := a.(map[string]any)
	bo, bObj := b.(map[string]any)
	if aObj && bObj {
		var out []string
		for _, k := range slices.Sorted(maps.Keys(bo)) {
			p := at + "/" + jsonptr.Escape(k)
			if av, ok := ao[k]; ok {
				out = append(out, leafDiff(av, bo[k], p)...)
			} else {
				out = append(out, p)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(ao)) {
			if _, ok := bo[k]; !ok {
				out = append(out, at+"/"+jsonptr.Escape(k))
			}
		}
		return out
	}
	aa, aArr := a.([]any)
	ba, bArr := b.([]any)
	if aArr && bArr && len(aa) == len(ba) {
		var out []string
		for i := range ba {
			out = append(out, leafDiff(aa[i], ba[i], fmt.Sprintf("%s/%d", at, i))...)
		}
		return out
	}
	if string(encodeJSON(a)) == string(encodeJSON(b)) {
		return nil
	}
	if at == "" {
		return []string{""}
	}
	return []string{at}
}

// valueAt is the value doc holds at pointer p (nil where it holds none).
func valueAt(doc any, p string) any {
	toks, _ := jsonptr.Split(p) // leafDiff's, well formed
	for _, k := range toks {
		switch d := doc.(type) {
		case map[string]any:
			doc = d[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(d) {
				return nil
			}
			doc = d[i]
		default:
			return nil
		}
	}
	return doc
}

// setAt is doc with the value base holds at pointer p (or without it,
// where base has none).
func setAt(doc, base any, p string) any {
	if p == "" {
		return deepCopy(base)
	}
	parts, _ := jsonptr.Split(p)
	var walk func(d, b any, parts []string) any
	walk = func(d, b any, parts []string) any {
		k, last := parts[0], len(parts) == 1
		switch dv := d.(type) {
		case map[string]any:
			bm, _ := b.(map[string]any)
			switch bv, inBase := bm[k]; {
			case last && inBase:
				dv[k] = deepCopy(bv)
			case last:
				delete(dv, k)
			default:
				dv[k] = walk(dv[k], bv, parts[1:])
			}
		case []any:
			ba, _ := b.([]any)
			switch i, err := strconv.Atoi(k); {
			case err != nil || i >= len(dv) || i >= len(ba):
			case last:
				dv[i] = deepCopy(ba[i])
			default:
				dv[i] = walk(dv[i], ba[i], parts[1:])
			}
		}
		return d
	}
	return walk(doc, base, parts)
}

func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

func encodeJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// deepCopy copies a JSON document (decodeJSON's).
func deepCopy(v any) any {
	var out any
	_ = decodeJSON(encodeJSON(v), &out)
	return out
}

// explain decides doc with explanations and keeps the rules that fired.
func explain(ctx context.Context, s *engine.Snapshot, name string, doc []byte) *Outcome {
	d, err := s.Decide(ctx, name, doc, engine.Options{Explain: true})
	if err != nil {
		return &Outcome{Error: engine.AsError(err)}
	}
	o := &Outcome{Result: json.RawMessage(d.Result)}
	for _, r := range d.Explanation {
		if r.Fired {
			o.Fired = append(o.Fired, r)
		}
	}
	return o
}
