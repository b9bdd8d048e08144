package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
)

// replayChange is one logged decision that the policies under review decide
// differently.
type replayChange struct {
	DecisionID string        `json:"decision_id"`
	Decision   string        `json:"decision"`
	Line       int           `json:"line"`
	Old        replayOutcome `json:"old"`
	New        replayOutcome `json:"new"`
}

// replayOutcome is what one revision of the policies made of an input: a
// result (with its reasons, when it has a reasons array) or an error code.
type replayOutcome struct {
	Revision string          `json:"policy_revision,omitempty"`
	Reasons  json.RawMessage `json:"reasons,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty"`
}

type replaySummary struct {
	Replayed     int      `json:"replayed"`
	Changed      int      `json:"changed"`
	Unchanged    int      `json:"unchanged"`
	Skipped      int      `json:"skipped"`
	OldRevisions []string `json:"old_revisions"`
	NewRevision  string   `json:"new_revision"`
}

type replayReport struct {
	Changed  []replayChange `json:"changed"`
	Summary  replaySummary  `json:"summary"`
	Warnings []string       `json:"warnings"`
}

// replayableCodes are the errors the engine itself returns for an input.
// The others (body_too_large, unauthorized, not_ready, ...) come from the
// server before any policy ran, so deciding their input again says nothing
// about a policy change.
var replayableCodes = map[engine.Code]bool{
	engine.CodeMalformedJSON:      true,
	engine.CodeInputSchemaInvalid: true,
	engine.CodeUnknownDecision:    true,
	engine.CodePolicyError:        true,
	engine.CodePolicyTimeout:      true,
}

func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f folders
	f.register(fs, false)
	logPath := fs.String("log", "", "decision log file (JSON lines) to replay (required)")
	format := fs.String("format", "text", "output format: text or json")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitInput
	}
	switch {
	case *logPath == "" || fs.NArg() > 0:
		fmt.Fprintln(stderr, "arbiter replay: --log FILE is required, and nothing else")
		return exitInput
	case *format != "text" && *format != "json":
		fmt.Fprintf(stderr, "arbiter replay: --format must be text or json, not %q\n", *format)
		return exitInput
	}
	lf, err := os.Open(*logPath)
	if err != nil {
		fmt.Fprintf(stderr, "arbiter replay: %v\n", err)
		return exitInput
	}
	_ = lf.Close()
	snap, err := engine.Load(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas})
	if err != nil {
		fmt.Fprintf(stderr, "arbiter replay: loading the policies: %v\n", err)
		return exitInput
	}

	rep := replayReport{Changed: []replayChange{}, Warnings: []string{}, Summary: replaySummary{OldRevisions: []string{}, NewRevision: snap.Revision}}
	seenRev := map[string]bool{}
	readWarnings, err := decisionlog.ReadFile(*logPath, func(line int, rec decisionlog.Record) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if rec.Revision != "" && !seenRev[rec.Revision] {
			seenRev[rec.Revision] = true
			rep.Summary.OldRevisions = append(rep.Summary.OldRevisions, rec.Revision)
		}
		ch, skip := replayRecord(ctx, snap, rec)
		switch {
		case skip != "":
			rep.Summary.Skipped++
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s:%d: decision %s skipped: %s", *logPath, line, rec.DecisionID, skip))
		case ch != nil:
			ch.Line = line
			rep.Summary.Changed++
			rep.Changed = append(rep.Changed, *ch)
		default:
			rep.Summary.Unchanged++
		}
		return nil
	})
	rep.Warnings = append(rep.Warnings, readWarnings...)
	slices.SortStableFunc(rep.Warnings, func(a, b string) int { return warningLine(*logPath, a) - warningLine(*logPath, b) })
	rep.Summary.Skipped += len(readWarnings) // each reader warning is one line skipped
	rep.Summary.Replayed = rep.Summary.Changed + rep.Summary.Unchanged + rep.Summary.Skipped
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "arbiter replay: interrupted after %d decisions\n", rep.Summary.Replayed)
			return exitError
		}
		fmt.Fprintf(stderr, "arbiter replay: %v\n", err)
		return exitInput
	}

	if *format == "json" {
		writeJSON(stdout, rep)
	} else {
		for _, w := range rep.Warnings {
			fmt.Fprintf(stderr, "arbiter replay: warning: %s\n", w)
		}
		for _, c := range rep.Changed {
			fmt.Fprintf(stdout, "changed %s %s (line %d): revision %s -> %s: %s -> %s\n",
				c.DecisionID, c.Decision, c.Line, orNone(c.Old.Revision), c.New.Revision, c.Old.describe(c.New), c.New.describe(c.Old))
		}
		s := rep.Summary
		old := "none"
		if len(s.OldRevisions) > 0 {
			old = strings.Join(s.OldRevisions, ", ")
		}
		fmt.Fprintf(stdout, "replayed %d decisions: %d changed, %d unchanged, %d skipped (revision %s -> %s)\n",
			s.Replayed, s.Changed, s.Unchanged, s.Skipped, old, s.NewRevision)
	}
	if rep.Summary.Changed > 0 {
		return exitError
	}
	return exitOK
}

// replayRecord decides rec again and returns the change, nil when the
// outcome is the same, or why rec cannot be replayed.
func replayRecord(ctx context.Context, snap *engine.Snapshot, rec decisionlog.Record) (*replayChange, string) {
	if rec.Decision == "" {
		return nil, "the record names no decision"
	}
	old := replayOutcome{Revision: rec.Revision}
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
	// On the OPA Data API path the request body is the {"input": ...}
	// wrapper. A decision logs the input it unwrapped; a request that failed
	// logs its body as received, in input when it is JSON and in
	// body_base64 otherwise.
	var body []byte
	opts := engine.Options{Wrapped: strings.HasPrefix(rec.Path, "/v1/data/") && old.Error != ""}
	switch {
	case len(rec.Input) > 0:
		if decisionlog.ContainsMasked(rec.Input) {
			return nil, "its input was masked when logged"
		}
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
	now := replayOutcome{Revision: snap.Revision}
	d, err := snap.Decide(ctx, rec.Decision, body, opts)
	if err != nil {
		now.Error = string(engine.AsError(err).Code)
	} else {
		now.Result, now.Reasons = d.Result, reasonsOf(d.Result)
	}
	if old.Error != "" && old.Error == now.Error || old.Error == "" && now.Error == "" && engine.SameJSON(old.Result, now.Result) {
		return nil, ""
	}
	return &replayChange{DecisionID: rec.DecisionID, Decision: rec.Decision, Old: old, New: now}, ""
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

// describe shows an outcome next to the one it is compared with: its
// reasons, unless both have the same reasons (then the whole result shows
// what changed).
func (o replayOutcome) describe(other replayOutcome) string {
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

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// warningLine is the line number a warning about file starts with, so that
// the reader's warnings and replay's own come out in file order.
func warningLine(file, w string) int {
	rest, _ := strings.CutPrefix(w, file+":")
	n, _ := strconv.Atoi(rest[:max(strings.IndexByte(rest, ':'), 0)])
	return n
}
