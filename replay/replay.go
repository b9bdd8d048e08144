// Package replay decides the records of a decision log again under other
// policies and reports what changed: the impact of a policy edit on real
// traffic, before it ships. The command line is cmd/arbiter's replay.
package replay

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
)

// Change is one logged decision that the policies under review decide
// differently.
type Change struct {
	DecisionID string  `json:"decision_id"`
	Decision   string  `json:"decision"`
	File       string  `json:"file"`
	Line       int     `json:"line"`
	Old        Outcome `json:"old"`
	New        Outcome `json:"new"`
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
}

// Report is the outcome of a replay.
type Report struct {
	Changed  []Change `json:"changed"`
	Summary  Summary  `json:"summary"`
	Warnings []string `json:"warnings"` // one per skipped record or line, as file:line: why
}

// replayableCodes are the errors the engine itself returns for an input.
// The others (body_too_large, request_timeout, overloaded, unauthorized,
// not_ready, ...) come from the server before any policy ran, so deciding
// their input again says nothing about a policy change.
var replayableCodes = map[engine.Code]bool{
	engine.CodeMalformedJSON:      true,
	engine.CodeInputSchemaInvalid: true,
	engine.CodeUnknownDecision:    true,
	engine.CodePolicyError:        true,
	engine.CodePolicyTimeout:      true,
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
func Run(ctx context.Context, snap *engine.Snapshot, files []string) (*Report, error) {
	rep := &Report{Changed: []Change{}, Warnings: []string{}, Summary: Summary{Files: files, OldRevisions: []string{}, NewRevision: snap.Revision}}
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
			if rec.Revision != "" && !seenRev[rec.Revision] {
				seenRev[rec.Revision] = true
				rep.Summary.OldRevisions = append(rep.Summary.OldRevisions, rec.Revision)
			}
			ch, skip := Record(ctx, snap, rec)
			switch {
			case skip != "":
				rep.Summary.Skipped++
				warnings = append(warnings, warning{line, fmt.Sprintf("%s:%d: decision %s skipped: %s", file, line, rec.DecisionID, skip)})
			case ch != nil:
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

// Record decides rec again and returns the change, nil when the outcome is
// the same, or why rec cannot be replayed. Whether its input was masked is
// read from the record's masked and erased lists, never from the content:
// a caller can put any string in its own input.
func Record(ctx context.Context, snap *engine.Snapshot, rec decisionlog.Record) (*Change, string) {
	if rec.Decision == "" {
		return nil, "the record names no decision"
	}
	old := Outcome{Revision: rec.Revision}
	switch {
	case len(rec.Result) > 0:
		old.Result, old.Reasons = rec.Result, reasonsOf(rec.Result)
	case rec.Error != nil:
		if !replayableCodes[engine.Code(rec.Error.Code)] {
			return nil, fmt.Sprintf("error %s was returned before any policy ran", rec.Error.Code)
		}
		old.Error = rec.Error.Code
	default:
		return nil, "the record has neither a result nor an error"
	}
	if ok, why := rec.Complete(); !ok {
		return nil, "its input was " + why
	}
	// On the OPA Data API path the request body is the {"input": ...}
	// wrapper. A decision logs the input it unwrapped; a request that failed
	// logs its body as received, in input when it is JSON and in
	// body_base64 otherwise.
	var body []byte
	opts := engine.Options{Wrapped: strings.HasPrefix(rec.Path, "/v1/data/") && old.Error != ""}
	switch {
	case len(rec.Input) > 0:
		body = rec.Input
	case rec.BodyBase64 != "":
		b, err := base64.StdEncoding.DecodeString(rec.BodyBase64)
		if err != nil {
			return nil, "body_base64 is not base64: " + err.Error()
		}
		body = b
	default:
		return nil, "no input was logged"
	}
	now := Outcome{Revision: snap.Revision}
	d, err := snap.Decide(ctx, rec.Decision, body, opts)
	if err != nil {
		now.Error = string(engine.AsError(err).Code)
	} else {
		now.Result, now.Reasons = d.Result, reasonsOf(d.Result)
	}
	if old.Error != "" && old.Error == now.Error || old.Error == "" && now.Error == "" && engine.SameJSON(old.Result, now.Result) {
		return nil, ""
	}
	return &Change{DecisionID: rec.DecisionID, Decision: rec.Decision, Old: old, New: now}, ""
}

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
		return "reasons " + compactJSON(o.Reasons)
	default:
		return "result " + compactJSON(o.Result)
	}
}

func compactJSON(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}
