// Package replay decides the records of a decision log again under other
// policies and reports what changed: the impact of a policy edit on real
// traffic, before it ships. The command line is cmd/arbiter's replay.
package replay

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/defaults"
	"github.com/arbiter-dev/arbiter/internal/jsonenc"
	"github.com/arbiter-dev/arbiter/shadow"
)

// Change is one logged decision that the policies under review decide
// differently.
type Change struct {
	DecisionID string       `json:"decision_id"`
	Decision   string       `json:"decision"`
	Class      shadow.Class `json:"class"`
	// File and Line are where a log file holds the record; Replica is the
	// replica that made a decision read from a decision store.
	File    string  `json:"file,omitempty"`
	Line    int     `json:"line,omitempty"`
	Replica string  `json:"replica,omitempty"`
	Old     Outcome `json:"old"`
	New     Outcome `json:"new"`
}

// Outcome is what one revision of the policies made of an input: a result
// (with its reasons, when it has a reasons array) or an error code.
type Outcome struct {
	Revision string          `json:"policy_revision,omitempty"`
	Reasons  json.RawMessage `json:"reasons,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// Summary counts the records replayed. Replayed is Changed + Unchanged +
// Skipped; Skipped counts records that cannot be decided again and lines
// that are not records.
type Summary struct {
	Replayed  int      `json:"replayed"`
	Changed   int      `json:"changed"`
	Unchanged int      `json:"unchanged"`
	Skipped   int      `json:"skipped"`
	Files     []string `json:"files"`
	// Store says that the records were read from a decision store (Files
	// is then empty).
	Store        bool     `json:"store,omitempty"`
	OldRevisions []string `json:"old_revisions"`
	NewRevision  string   `json:"new_revision"`
	// Promotions counts the records of promotions (who made which
	// candidate live): not decisions, so not replayed.
	Promotions int `json:"promotions"`
}

// Report is the outcome of a replay.
type Report struct {
	// Impact is the classified report of the replayed decisions, the one
	// GET /v1/shadow shows for a candidate in shadow (refuse_to_allow
	// first): both judge a record with package shadow's FromRecord and
	// Judge.
	Impact shadow.Report `json:"impact"`
	// Changed lists every decision whose outcome changed, the most
	// dangerous class first, in log order within a class.
	Changed  []Change `json:"changed"`
	Summary  Summary  `json:"summary"`
	Warnings []string `json:"warnings"` // one per skipped record or line, as file:line: why
}

// Options tune a replay.
type Options struct {
	// Examples is how many decision ids the impact report keeps per
	// decision and class (shadow.DefaultExamples when zero).
	Examples int
	// Workers decide records in parallel (GOMAXPROCS when zero). The
	// report is the same for any number: results are taken in the
	// records' order.
	Workers int
	// Progress, when set, is called with the number of records taken so
	// far, after each one, from one goroutine.
	Progress func(records int)
}

// Files expands paths into the log files to replay: a file is itself, a
// folder the decision logs in it as the writer names them
// (decisionlog.FilesIn): each log's rotated backups, oldest first, then
// the log.
func Files(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, p)
			continue
		}
		files, err := decisionlog.FilesIn(p)
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: no log files in this folder", p)
		}
		out = append(out, files...)
	}
	return out, nil
}

// Run decides every record of files again with snap. Only an error reading
// a file, or ctx ending, stops it; a record that cannot be decided again is
// skipped with a warning.
func Run(ctx context.Context, snap *engine.Snapshot, files []string, opts Options) (*Report, error) {
	r := newRun(snap, opts)
	r.rep.Summary.Files = files
	defer r.finish()
	for _, file := range files {
		var readWarnings []string
		skips, err := r.source(ctx, func(take func(at place, rec decisionlog.Record) error) error {
			var err error
			readWarnings, err = decisionlog.ReadFile(file, func(line int, rec decisionlog.Record) error {
				return take(place{file: file, line: line}, rec)
			})
			return err
		})
		// Both kinds of warning start with file:line; in the file's order.
		warnings := append(skips, readWarnings...)
		slices.SortStableFunc(warnings, func(a, b string) int { return cmp.Compare(lineOf(file, a), lineOf(file, b)) })
		r.rep.Warnings = append(r.rep.Warnings, warnings...)
		r.rep.Summary.Skipped += len(readWarnings) // each reader warning is one line skipped
		if err != nil {
			return r.rep, err
		}
	}
	return r.rep, nil
}

// Stream is a source of records other than log files (a decision store):
// it calls fn with each record, in order, the replica that made it, and
// why the record could not be read when it could not (rec is then what
// the source knows of it, its id at least), and stops at fn's first
// error, returning it.
type Stream func(ctx context.Context, fn func(replica string, rec decisionlog.Record, unreadable string) error) error

// RunStream is Run over the records of stream: the same judgement, the
// same report, each change naming its replica instead of a file. A record
// the stream could not read is skipped with a warning, as Run skips a
// line that is not a record.
func RunStream(ctx context.Context, snap *engine.Snapshot, stream Stream, opts Options) (*Report, error) {
	r := newRun(snap, opts)
	r.rep.Summary.Files, r.rep.Summary.Store = []string{}, true
	defer r.finish()
	var unread []string
	skips, err := r.source(ctx, func(take func(at place, rec decisionlog.Record) error) error {
		return stream(ctx, func(replica string, rec decisionlog.Record, unreadable string) error {
			if unreadable != "" {
				unread = append(unread, fmt.Sprintf("%s: decision %s skipped: %s", place{replica: replica}, decisionlog.Shown(rec.DecisionID), unreadable))
				return nil
			}
			return take(place{replica: replica}, rec)
		})
	})
	r.rep.Warnings = append(append(r.rep.Warnings, skips...), unread...)
	r.rep.Summary.Skipped += len(unread)
	return r.rep, err
}

// place is where a record was read: a file's line, or a replica's
// decision in a store.
type place struct {
	file    string
	line    int
	replica string
}

func (p place) String() string {
	if p.file != "" {
		return fmt.Sprintf("%s:%d", p.file, p.line)
	}
	return "replica " + decisionlog.Shown(p.replica)
}

// run is one replay's report as it is built.
type run struct {
	snap    *engine.Snapshot
	opts    Options
	rep     *Report
	tally   *shadow.Tally
	seenRev map[string]bool
	taken   int
}

func newRun(snap *engine.Snapshot, opts Options) *run {
	defaults.Set(&opts.Workers, runtime.GOMAXPROCS(0))
	return &run{snap: snap, opts: opts, tally: shadow.NewTally(opts.Examples), seenRev: map[string]bool{},
		rep: &Report{Changed: []Change{}, Warnings: []string{}, Summary: Summary{OldRevisions: []string{}, NewRevision: snap.Revision}}}
}

func (r *run) finish() {
	r.rep.Impact = r.tally.Report()
	r.rep.Summary.Replayed = r.rep.Summary.Changed + r.rep.Summary.Unchanged + r.rep.Summary.Skipped
	sort.SliceStable(r.rep.Changed, func(i, j int) bool { return classRank(r.rep.Changed[i].Class) < classRank(r.rep.Changed[j].Class) })
}

// source replays the records read calls take with: read runs on this
// goroutine, the decisions on opts.Workers goroutines, and their results
// are taken in the order read gave the records (each job carries its own
// answer, awaited in turn), so the report is the one a single worker would
// make. At most 16 records per worker are in flight between reading and
// taking. It returns the skipped records' warnings, in order.
func (r *run) source(ctx context.Context, read func(take func(at place, rec decisionlog.Record) error) error) ([]string, error) {
	type result struct {
		ch   *Change
		skip string
	}
	type job struct {
		at  place
		rec decisionlog.Record
		out chan result
	}
	jobs := make(chan job, r.opts.Workers)
	inOrder := make(chan job, 16*r.opts.Workers-1) // and the one being taken
	var workers sync.WaitGroup
	for range r.opts.Workers {
		workers.Go(func() {
			for j := range jobs {
				ch, skip := Record(ctx, r.snap, j.rec)
				j.out <- result{ch, skip}
			}
		})
	}
	var skips []string
	taken := make(chan struct{})
	go func() {
		defer close(taken)
		for j := range inOrder {
			res := <-j.out
			if w, ok := r.take(j.at, j.rec, res.ch, res.skip); ok {
				skips = append(skips, w)
			}
		}
	}()
	err := read(func(at place, rec decisionlog.Record) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if rec.Promotion != nil {
			r.rep.Summary.Promotions++
		}
		if !rec.IsDecision() { // a promotion, or a shadow outcome (its decision is a record of its own)
			return nil
		}
		if rec.Revision != "" && !r.seenRev[rec.Revision] {
			r.seenRev[rec.Revision] = true
			r.rep.Summary.OldRevisions = append(r.rep.Summary.OldRevisions, rec.Revision)
		}
		j := job{at, rec, make(chan result, 1)}
		select {
		case inOrder <- j:
		case <-ctx.Done():
			return ctx.Err()
		}
		jobs <- j
		return nil
	})
	close(jobs)
	close(inOrder)
	workers.Wait()
	<-taken
	return skips, cmp.Or(err, ctx.Err()) // a record decided after ctx ended is no judgement
}

// take adds one record's judgement to the report, and returns the warning
// of a skipped one.
func (r *run) take(at place, rec decisionlog.Record, ch *Change, skip string) (string, bool) {
	r.taken++
	if r.opts.Progress != nil {
		defer r.opts.Progress(r.taken)
	}
	if skip != "" {
		r.rep.Summary.Skipped++
		return fmt.Sprintf("%s: decision %s skipped: %s", at, decisionlog.Shown(rec.DecisionID), skip), true
	}
	r.tally.Add(rec.Decision, ch.Class, rec.DecisionID)
	if ch.Class == shadow.Same {
		r.rep.Summary.Unchanged++
		return "", false
	}
	ch.File, ch.Line, ch.Replica = at.file, at.line, at.replica
	r.rep.Summary.Changed++
	r.rep.Changed = append(r.rep.Changed, *ch)
	return "", false
}

// lineOf is the line number a warning about file starts with.
func lineOf(file, w string) int {
	rest, _ := strings.CutPrefix(w, file+":")
	n := 0
	fmt.Sscanf(rest, "%d", &n)
	return n
}

// Record decides rec again with snap and returns the judgement as a
// Change (its class Same when nothing changed), or why rec cannot be
// replayed. It is package shadow's judgement, the one live shadow
// evaluation makes: whether the input was masked is read from the
// record's masked and erased lists, never from the content.
func Record(ctx context.Context, snap *engine.Snapshot, rec decisionlog.Record) (*Change, string) {
	req, skip := shadow.FromRecord(rec)
	if skip != "" {
		return nil, skip
	}
	j := shadow.Judge(ctx, snap, req)
	return &Change{DecisionID: rec.DecisionID, Decision: rec.Decision, Class: j.Class, Old: outcomeOf(j.Live), New: outcomeOf(j.Candidate)}, ""
}

func outcomeOf(o shadow.Outcome) Outcome {
	out := Outcome{Revision: o.Revision, Result: o.Result, Reasons: reasonsOf(o.Result)}
	if o.Error != nil {
		out.Error = o.Error.Code
	}
	return out
}

// classRank orders classes as reports do, the most dangerous first.
func classRank(c shadow.Class) int { return slices.Index(shadow.Classes, c) }

// reasonsOf returns the result's "reasons" array, or nil when it has none.
func reasonsOf(result json.RawMessage) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(result, &obj) != nil {
		return nil
	}
	r := bytes.TrimSpace(obj["reasons"])
	if len(r) == 0 || r[0] != '[' {
		return nil
	}
	return r
}

// Describe shows an outcome next to the one it is compared with: its
// reasons, unless both have the same reasons (then the whole result shows
// what changed), as one word (decisionlog.Shown).
func (o Outcome) Describe(other Outcome) string {
	switch {
	case o.Error != "":
		return "error " + decisionlog.Shown(o.Error)
	case o.Reasons != nil && (other.Reasons == nil || !engine.SameJSON(o.Reasons, other.Reasons)):
		return "reasons " + decisionlog.Shown(jsonenc.Compact(o.Reasons))
	default:
		return "result " + decisionlog.Shown(jsonenc.Compact(o.Result))
	}
}
