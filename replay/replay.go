// Package replay decides the records of a decision log again under other
// policies and reports what changed: the impact of a policy edit on real
// traffic, before it ships. The command line is cmd/arbiter's replay.
package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/jsonenc"
	"github.com/arbiter-dev/arbiter/shadow"
)

// Change is one logged decision that the policies under review decide
// differently.
type Change struct {
	DecisionID string       `json:"decision_id"`
	Decision   string       `json:"decision"`
	Class      shadow.Class `json:"class"`
	File       string       `json:"file"`
	Line       int          `json:"line"`
	Old        Outcome      `json:"old"`
	New        Outcome      `json:"new"`
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
	Replayed     int      `json:"replayed"`
	Changed      int      `json:"changed"`
	Unchanged    int      `json:"unchanged"`
	Skipped      int      `json:"skipped"`
	Files        []string `json:"files"`
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
}

// Files expands paths into the log files to replay: a file is itself, a
// folder is every regular file in it (rotated backups included) whose name
// does not start with a dot. Within a folder files are ordered by name,
// which puts lumberjack's timestamped backups (NAME-2026-12-02T17-41-42.300.log)
// before the file being written (NAME.log), oldest first.
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
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, e := range entries {
			if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		if len(names) == 0 {
			return nil, fmt.Errorf("%s: no log files in this folder", p)
		}
		for _, n := range names {
			out = append(out, filepath.Join(p, n))
		}
	}
	return out, nil
}

// Run decides every record of files again with snap. Only an error reading
// a file, or ctx ending, stops it; a record that cannot be decided again is
// skipped with a warning.
func Run(ctx context.Context, snap *engine.Snapshot, files []string, opts Options) (*Report, error) {
	rep := &Report{Changed: []Change{}, Warnings: []string{}, Summary: Summary{Files: files, OldRevisions: []string{}, NewRevision: snap.Revision}}
	tally := shadow.NewTally(opts.Examples)
	defer func() {
		rep.Impact = tally.Report()
		sort.SliceStable(rep.Changed, func(i, j int) bool { return classRank(rep.Changed[i].Class) < classRank(rep.Changed[j].Class) })
	}()
	seenRev := map[string]bool{}
	for _, file := range files {
		type warning struct {
			line int
			text string
		}
		var warnings []warning
		readWarnings, err := decisionlog.ReadFile(file, func(line int, rec decisionlog.Record) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if rec.Promotion != nil {
				rep.Summary.Promotions++
			}
			if !rec.IsDecision() { // a promotion, or a shadow outcome (its decision is a record of its own)
				return nil
			}
			if rec.Revision != "" && !seenRev[rec.Revision] {
				seenRev[rec.Revision] = true
				rep.Summary.OldRevisions = append(rep.Summary.OldRevisions, rec.Revision)
			}
			ch, skip := Record(ctx, snap, rec)
			if skip == "" {
				tally.Add(rec.Decision, ch.Class, rec.DecisionID)
			}
			switch {
			case skip != "":
				rep.Summary.Skipped++
				warnings = append(warnings, warning{line, fmt.Sprintf("%s:%d: decision %s skipped: %s", file, line, rec.DecisionID, skip)})
			case ch.Class != shadow.Same:
				ch.File, ch.Line = file, line
				rep.Summary.Changed++
				rep.Changed = append(rep.Changed, *ch)
			default:
				rep.Summary.Unchanged++
			}
			return nil
		})
		for _, w := range readWarnings {
			warnings = append(warnings, warning{lineOf(file, w), w})
		}
		sort.SliceStable(warnings, func(i, j int) bool { return warnings[i].line < warnings[j].line })
		for _, w := range warnings {
			rep.Warnings = append(rep.Warnings, w.text)
		}
		rep.Summary.Skipped += len(readWarnings) // each reader warning is one line skipped
		rep.Summary.Replayed = rep.Summary.Changed + rep.Summary.Unchanged + rep.Summary.Skipped
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// lineOf is the line number a reader warning about file starts with.
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
// what changed).
func (o Outcome) Describe(other Outcome) string {
	switch {
	case o.Error != "":
		return "error " + o.Error
	case o.Reasons != nil && (other.Reasons == nil || !engine.SameJSON(o.Reasons, other.Reasons)):
		return "reasons " + jsonenc.Compact(o.Reasons)
	default:
		return "result " + jsonenc.Compact(o.Result)
	}
}
