package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/replay"
)

// cmdReplay is the command line of package replay. It exits 0 when nothing
// changed and every line was replayed, 1 when a decision changed, 3 when
// nothing changed but records or lines were skipped (masked, cut off,
// corrupt), and 2 on bad arguments, policies that do not load or a log that
// cannot be read.
func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("replay", "--log FILE|DIR [--log FILE|DIR ...] [FILE|DIR ...] [flags]")
	var f folders
	f.register(c, false)
	var logs []string
	c.Func("log", "decision log (JSON lines) to replay: a file, or a folder of them (rotated backups included); repeatable", func(s string) error {
		logs = append(logs, s)
		return nil
	})
	format := c.String("format", "text", "output format: text or json")
	if done, code := c.parse(args, stdout, stderr, exitInput); done {
		return code
	}
	logs = append(logs, c.Args()...)
	switch {
	case len(logs) == 0:
		fmt.Fprintln(stderr, "arbiter replay: --log FILE|DIR is required")
		return exitInput
	case *format != "text" && *format != "json":
		fmt.Fprintf(stderr, "arbiter replay: --format must be text or json, not %q\n", *format)
		return exitInput
	}
	files, err := replay.Files(logs)
	if err != nil {
		fmt.Fprintf(stderr, "arbiter replay: %v\n", err)
		return exitInput
	}
	snap, err := engine.Load(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas})
	if err != nil {
		fmt.Fprintf(stderr, "arbiter replay: loading the policies: %v\n", err)
		return exitInput
	}
	rep, err := replay.Run(ctx, snap, files)
	if err != nil {
		fmt.Fprintf(stderr, "arbiter replay: %v\n", err)
		return exitInput
	}

	if *format == "json" {
		writeJSON(stdout, rep)
	} else {
		for _, w := range rep.Warnings {
			fmt.Fprintf(stderr, "arbiter replay: warning: %s\n", w)
		}
		for _, ch := range rep.Changed {
			fmt.Fprintf(stdout, "changed %s %s (%s:%d): revision %s -> %s: %s -> %s\n",
				ch.DecisionID, ch.Decision, ch.File, ch.Line, orNone(ch.Old.Revision), ch.New.Revision, ch.Old.Describe(ch.New), ch.New.Describe(ch.Old))
		}
		s := rep.Summary
		old := "none"
		if len(s.OldRevisions) > 0 {
			old = strings.Join(s.OldRevisions, ", ")
		}
		fmt.Fprintf(stdout, "replayed %d decisions from %d files: %d changed, %d unchanged, %d skipped (revision %s -> %s)\n",
			s.Replayed, len(s.Files), s.Changed, s.Unchanged, s.Skipped, old, s.NewRevision)
	}
	switch {
	case rep.Summary.Changed > 0:
		return exitError
	case rep.Summary.Skipped > 0:
		return exitSkipped
	}
	return exitOK
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
