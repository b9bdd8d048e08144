package shadow

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/internal/defaults"
)

// DefaultExamples is how many decision ids a report keeps per decision and
// class when the caller does not say.
const DefaultExamples = 10

// Report is the impact of a candidate: per decision, and for all decisions
// together, how many requests fell in each class, with the ids of the
// first ones (a bounded sample: the full list is in the decision log).
// Every class is listed, in the order of Classes, refuse_to_allow first.
type Report struct {
	// Total is the decisions judged, LaterJudged included.
	Total uint64 `json:"total"`
	// Dropped is the decisions sampled for the candidate that it did not
	// judge in time (its queue was full, or they waited past the shadow's
	// timeout): the traffic a caller sends can cause that, so each one is
	// owed until it is judged from the decision log (LaterJudged).
	Dropped     uint64           `json:"dropped"`
	LaterJudged uint64           `json:"later_judged"`
	Classes     []ClassCount     `json:"classes"`
	Decisions   []DecisionReport `json:"decisions"`
}

// DecisionReport is the impact on one decision.
type DecisionReport struct {
	Decision string       `json:"decision"`
	Total    uint64       `json:"total"`
	Classes  []ClassCount `json:"classes"`
}

// ClassCount is one class of a report.
type ClassCount struct {
	Class    Class    `json:"class"`
	Count    uint64   `json:"count"`
	Examples []string `json:"examples"`
}

// Count returns the count of class c.
func (r Report) Count(c Class) uint64 { return r.class(c).Count }

// Examples returns the example decision ids of class c.
func (r Report) Examples(c Class) []string { return r.class(c).Examples }

func (r Report) class(c Class) ClassCount {
	if i := c.index(); i >= 0 && i < len(r.Classes) {
		return r.Classes[i]
	}
	return ClassCount{}
}

// Tally counts judgements into a Report. It is safe for concurrent use.
type Tally struct {
	examples int
	mu       sync.Mutex
	per      map[string]tallyRow

	dropped, later uint64
	owed           map[string]bool // ids of dropped decisions not judged yet, at most maxOwed
}

// maxOwed bounds the ids of dropped decisions a Tally keeps (about a
// hundred bytes each). Past it, the ids it did not keep can never be judged
// and the gate refuses the candidate for good (see Gate.Refusals).
const maxOwed = 1 << 16

type tallyRow struct {
	counts   [6]uint64
	examples [6][]string
}

// NewTally returns a Tally keeping at most examples ids per decision and
// class (DefaultExamples when examples <= 0).
func NewTally(examples int) *Tally {
	defaults.Set(&examples, DefaultExamples)
	return &Tally{examples: examples, per: map[string]tallyRow{}, owed: map[string]bool{}}
}

// Add counts one judged request.
func (t *Tally) Add(decision string, c Class, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.add(decision, c, id)
}

// Drop counts a request sampled for the candidate that it did not judge,
// and keeps its id to be judged later (AddLate).
func (t *Tally) Drop(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropped++
	if len(t.owed) < maxOwed {
		t.owed[id] = true
	}
}

// Owed returns the kept ids of the dropped requests not judged yet.
func (t *Tally) Owed() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Collect(maps.Keys(t.owed))
}

// AddLate counts the judgement of a dropped request, once.
func (t *Tally) AddLate(decision string, c Class, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.owed[id] {
		delete(t.owed, id)
		t.later++
		t.add(decision, c, id)
	}
}

func (t *Tally) add(decision string, c Class, id string) {
	i := c.index()
	if i < 0 {
		return
	}
	row := t.per[decision]
	row.counts[i]++
	if len(row.examples[i]) < t.examples {
		row.examples[i] = append(row.examples[i], id)
	}
	t.per[decision] = row
}

// Report returns the counts so far.
func (t *Tally) Report() Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := slices.Sorted(maps.Keys(t.per))
	var all tallyRow
	rep := Report{Dropped: t.dropped, LaterJudged: t.later, Decisions: make([]DecisionReport, 0, len(names))}
	for _, n := range names {
		row := t.per[n]
		dr := DecisionReport{Decision: n, Classes: classCounts(row)}
		for i, c := range row.counts {
			dr.Total += c
			all.counts[i] += c
			if room := t.examples - len(all.examples[i]); room > 0 {
				all.examples[i] = append(all.examples[i], row.examples[i][:min(room, len(row.examples[i]))]...)
			}
		}
		rep.Total += dr.Total
		rep.Decisions = append(rep.Decisions, dr)
	}
	rep.Classes = classCounts(all)
	return rep
}

func classCounts(row tallyRow) []ClassCount {
	out := make([]ClassCount, len(Classes))
	for i, c := range Classes {
		out[i] = ClassCount{Class: c, Count: row.counts[i], Examples: append([]string{}, row.examples[i]...)}
	}
	return out
}

// WriteText prints r for people: one line per class of all decisions
// together, then per decision, refuse_to_allow first, with the example ids
// of every class but same. Decision names and ids are the records' and
// are printed through decisionlog.Shown.
func (r Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "%d decisions judged\n", r.Total)
	if r.Dropped > 0 {
		fmt.Fprintf(w, "%d dropped before they were judged, %d of them judged later from the decision log\n", r.Dropped, r.LaterJudged)
	}
	writeClasses(w, "  ", r.Classes)
	for _, d := range r.Decisions {
		fmt.Fprintf(w, "decision %s: %d judged\n", decisionlog.Shown(d.Decision), d.Total)
		writeClasses(w, "  ", d.Classes)
	}
}

func writeClasses(w io.Writer, indent string, classes []ClassCount) {
	for _, c := range classes {
		line := fmt.Sprintf("%s%-16s %d", indent, c.Class, c.Count)
		if len(c.Examples) > 0 {
			more := ""
			if uint64(len(c.Examples)) < c.Count {
				more = fmt.Sprintf(" (first %d)", len(c.Examples))
			}
			line += "  e.g." + more
			for _, id := range c.Examples {
				line += " " + decisionlog.Shown(id)
			}
		}
		fmt.Fprintln(w, line)
	}
}

// Gate is what a candidate must have shown before it is promoted.
type Gate struct {
	// MinDecisions is the fewest judged requests, all decisions together.
	MinDecisions uint64 `json:"min_decisions"`
	// Forbidden are the classes of which a single request refuses the
	// promotion.
	Forbidden []Class `json:"forbidden"`
}

// Refusals returns why r does not pass g, empty when it does.
func (g Gate) Refusals(r Report) []string {
	var out []string
	if r.Total < g.MinDecisions {
		out = append(out, Progress(r, g.MinDecisions)+" decisions the gate requires")
	}
	// In report order, so refuse_to_allow comes first here too.
	for _, c := range Classes {
		if !slices.Contains(g.Forbidden, c) || r.Count(c) == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%d decisions are %s (forbidden), e.g. %s", r.Count(c), c, strings.Join(r.Examples(c), " ")))
	}
	// A sampled decision the candidate did not judge is no evidence of its
	// safety, and a flood of traffic is enough to have it dropped.
	if owed := r.Dropped - r.LaterJudged; owed > 0 {
		out = append(out, fmt.Sprintf("%d of the %d sampled decisions that the candidate dropped (its queue was full, or they waited too long) are not judged yet: a promotion judges them from the decision log first, and is refused while any remain", owed, r.Dropped))
	}
	return out
}

// Progress is how far r is toward a gate's minimum of judged decisions:
// "judged 57 of 100".
func Progress(r Report, min uint64) string {
	return fmt.Sprintf("judged %d of %d", r.Total, min)
}

// Stricter returns g as a promotion request may tighten it: at least
// minDecisions judged decisions when that is more than g asks, and forbid
// added to g's forbidden classes. A request never loosens the operator's
// gate; only a forced promotion passes a gate that refuses.
func (g Gate) Stricter(minDecisions uint64, forbid []Class) Gate {
	out := Gate{MinDecisions: max(g.MinDecisions, minDecisions), Forbidden: append([]Class{}, g.Forbidden...)}
	for _, c := range forbid {
		if !slices.Contains(out.Forbidden, c) {
			out.Forbidden = append(out.Forbidden, c)
		}
	}
	return out
}
