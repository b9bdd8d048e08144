package diff

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/arbiter-dev/arbiter/engine"
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
		d, err = s.DecideTopdown(ctx, name, doc, engine.Options{})
		o2 := shadow.OutcomeOf("", d, err)
		return o1, sameOutcome(o1, o2)
	}
	o, okOld := side(old)
	n, okNew := side(new)
	v, _ := new.Verdict(name)
	return confirmed{class: shadow.Classify(v, o, n), agree: okOld && okNew, old: o, new: n}
}

func sameOutcome(a, b shadow.Outcome) bool {
	if a.Error != nil || b.Error != nil {
		return a.Error != nil && b.Error != nil && a.Error.Code == b.Error.Code
	}
	return engine.SameJSON(a.Result, b.Result)
}

// found reports a confirmed example, made small: each field that differs
// from the base document goes back to the base's value while the example
// still confirms.
func found(ctx context.Context, old, new *engine.Snapshot, name string, q shadow.Class, d *domain, doc []byte) *Answer {
	var cur map[string]any
	_ = decodeJSON(doc, &cur)
	differs := func(n *node) bool {
		bv, inBase := lookup(d.base, n.path)
		cv, inCur := lookup(cur, n.path)
		return inBase != inCur || (inBase && string(encodeJSON(bv)) != string(encodeJSON(cv)))
	}
	// revert puts the fields of ns back to the base's values, if the
	// example still confirms without them.
	revert := func(ns []*node) {
		try := deepCopy(cur).(map[string]any)
		for _, n := range ns {
			parent, ok := lookup(try, n.path[:len(n.path)-1])
			m, isObj := parent.(map[string]any)
			if !ok || !isObj {
				return
			}
			if bv, inBase := lookup(d.base, n.path); inBase {
				m[n.path[len(n.path)-1]] = deepCopy(bv)
			} else {
				delete(m, n.path[len(n.path)-1])
			}
		}
		if c := confirm(ctx, old, new, name, encodeJSON(try)); c.class == q && c.agree {
			cur = try
		}
	}
	// Fields compared with each other took the same value together: they
	// go back together first, then one by one.
	groups := map[string][]*node{}
	var keys []string
	for _, n := range d.nodes {
		if len(n.children) == 0 && differs(n) {
			if v, ok := lookup(cur, n.path); ok {
				k := string(encodeJSON(v))
				if groups[k] == nil {
					keys = append(keys, k)
				}
				groups[k] = append(groups[k], n)
			}
		}
	}
	for _, k := range keys {
		if len(groups[k]) > 1 {
			revert(groups[k])
		}
	}
	for _, n := range d.nodes {
		if differs(n) {
			revert([]*node{n})
		}
	}
	doc = encodeJSON(cur)
	var fields []string
	for _, n := range d.nodes {
		bv, inBase := lookup(d.base, n.path)
		cv, inCur := lookup(cur, n.path)
		if inBase != inCur || (inBase && string(encodeJSON(bv)) != string(encodeJSON(cv)) && len(n.children) == 0) {
			fields = append(fields, n.pointer())
		}
	}
	slices.Sort(fields)
	return &Answer{Verdict: Found, Example: doc, Fields: fields, Old: explain(ctx, old, name, doc), New: explain(ctx, new, name, doc)}
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
