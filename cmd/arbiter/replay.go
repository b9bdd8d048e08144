package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"reflect"
	"time"

	"golang.org/x/term"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/replay"
	"github.com/arbiter-dev/arbiter/shadow"
)

// replayCommand is the command line of package replay: the changed decisions
// (refuse_to_allow first), then the impact report GET /v1/shadow shows for
// a candidate in shadow, classified the same way. The records are read
// from log files, or from a decision store (--store, with the filters of
// arbiter decisions), streamed either way. It exits 0 when nothing
// changed and every line was replayed, 1 when a decision changed, 3 when
// nothing changed but records or lines were skipped (masked, cut off,
// corrupt), and 2 on bad arguments, policies that do not load or a log that
// cannot be read.
func replayCommand() *command {
	c := newCommand("replay [--log FILE|DIR ...] [FILE|DIR ...] | --store URL", "Decide recorded inputs again with other policies: the impact report", "", exitInput)
	var f folders
	f.register(c, false)
	var logs []string
	c.Func("log", "decision log (JSON lines) to replay: a file, or a folder of them (rotated backups included); repeatable", func(s string) error {
		logs = append(logs, s)
		return nil
	})
	var q storeQuery
	q.register(c, "records")
	format := c.format("text", "output format: text or json")
	examples := c.Int("examples", shadow.DefaultExamples, "decision ids the impact report keeps per decision and class")
	workers := c.Int("workers", 0, "records decided in parallel, 0: one per CPU (GOMAXPROCS); the report is the same for any number")
	c.run = func(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
		logs = append(logs, c.Args()...)
		filter, ferr := q.filter(time.Now())
		if ferr == nil {
			ferr = f.missing()
		}
		switch {
		case len(logs) == 0 && q.dsn == "":
			return say(stderr, exitInput, "arbiter replay: --log FILE|DIR is required, or --store URL")
		case len(logs) > 0 && q.dsn != "":
			return say(stderr, exitInput, "arbiter replay: --log and --store are two sources: give one")
		case ferr != nil:
			return say(stderr, exitInput, "arbiter replay: %v", ferr)
		case q.dsn == "" && !reflect.DeepEqual(filter, decisionstore.Filter{}):
			return say(stderr, exitInput, "arbiter replay: the filters read a decision store: they need --store")
		case *workers < 0:
			return say(stderr, exitInput, "arbiter replay: --workers must not be negative")
		case *examples <= 0:
			return say(stderr, exitInput, "arbiter replay: --examples must be positive")
		}
		var files []string
		if len(logs) > 0 {
			var err error
			if files, err = replay.Files(logs); err != nil {
				return say(stderr, exitInput, "arbiter replay: %v", err)
			}
		}
		snap, err := engine.Load(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas})
		if err != nil {
			return say(stderr, exitInput, "arbiter replay: loading the policies: %v", err)
		}
		progress := newProgress(stderr)
		opts := replay.Options{Examples: *examples, Workers: *workers, Progress: progress.update}
		var rep *replay.Report
		if q.dsn == "" {
			rep, err = replay.Run(ctx, snap, files, opts)
		} else {
			var r *decisionstore.Reader
			var closeStore func()
			if r, closeStore, err = q.open(ctx); err != nil {
				return say(stderr, exitInput, "arbiter replay: %v", err)
			}
			defer closeStore()
			// Promotions too, which replay counts as files show them.
			filter.Kinds = []string{decisionstore.KindDecision, decisionstore.KindPromotion}
			rep, err = replay.RunStream(ctx, snap, func(ctx context.Context, fn func(string, decisionlog.Record, string) error) error {
				return r.Stream(ctx, filter, func(row decisionstore.Row) error {
					if p := row.Partial; p != nil {
						return fn(row.Replica, row.Record, fmt.Sprintf("its %d-byte stored record is not read: %s", p.Bytes, p.Why))
					}
					return fn(row.Replica, row.Record, "")
				})
			}, opts)
		}
		progress.done()
		if err != nil {
			return say(stderr, exitInput, "arbiter replay: %v", err)
		}

		if *format == "json" {
			writeJSON(stdout, rep)
		} else {
			for _, w := range rep.Warnings {
				fmt.Fprintf(stderr, "arbiter replay: warning: %s\n", w)
			}
			// Every value of a record is printed through decisionlog.Shown:
			// the records came from requests, and a store's rows from whoever
			// can write the database.
			for _, ch := range rep.Changed { // the most dangerous class first
				at := fmt.Sprintf("%s:%d", ch.File, ch.Line)
				if ch.File == "" {
					at = "replica " + decisionlog.Shown(ch.Replica)
				}
				was := "(none)"
				if ch.Old.Revision != "" {
					was = decisionlog.Shown(ch.Old.Revision)
				}
				fmt.Fprintf(stdout, "changed %s %s (%s): %s: revision %s -> %s: %s -> %s\n",
					decisionlog.Shown(ch.DecisionID), decisionlog.Shown(ch.Decision), at, ch.Class, was, ch.New.Revision, ch.Old.Describe(ch.New), ch.New.Describe(ch.Old))
			}
			fmt.Fprintf(stdout, "impact of revision %s: ", rep.Summary.NewRevision)
			rep.Impact.WriteText(stdout)
			s := rep.Summary
			old := cmp.Or(decisionlog.ShownList(s.OldRevisions), "none")
			from := fmt.Sprintf("%d files", len(s.Files))
			if s.Store {
				from = "the decision store"
			}
			fmt.Fprintf(stdout, "replayed %d decisions from %s: %d changed, %d unchanged, %d skipped (revision %s -> %s)\n",
				s.Replayed, from, s.Changed, s.Unchanged, s.Skipped, old, s.NewRevision)
		}
		switch {
		case rep.Summary.Changed > 0:
			return exitError
		case rep.Summary.Skipped > 0:
			return exitSkipped
		}
		return exitOK
	}
	return c
}

// progress shows on a terminal how many records replay took, on one line
// of stderr that it rewrites; nothing when stderr is no terminal (a file,
// a pipe, a test), whose reader wants the report only.
type progress struct {
	w io.Writer
	n int
}

func newProgress(stderr io.Writer) *progress {
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return &progress{w: f}
	}
	return &progress{}
}

// update is replay.Options.Progress: the line every 1,000 records.
func (p *progress) update(n int) {
	p.n = n
	if p.w != nil && n%1000 == 0 {
		fmt.Fprintf(p.w, "\rarbiter replay: %d records replayed", n)
	}
}

// done ends the progress line with the last count, so that what follows
// starts on a line of its own.
func (p *progress) done() {
	if p.w != nil {
		fmt.Fprintf(p.w, "\rarbiter replay: %d records replayed\n", p.n)
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
