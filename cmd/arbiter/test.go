package main

import (
	"context"
	"fmt"
	"io"
	"regexp"

	"github.com/arbiter-dev/arbiter/engine"
)

func cmdTest(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("test", "[--policies DIR] [--schemas DIR] [--tests DIR] [flags]")
	var f folders
	f.register(c, true)
	coverage := c.Bool("coverage", false, "report coverage of the policy files by the Rego tests")
	threshold := c.Float64("threshold", 0, "fail when coverage is below this percentage (implies --coverage)")
	runRe := c.String("run", "", "only run tests and fixtures whose name matches this regular expression")
	format := c.String("format", "text", "output format: text or json")
	verbose := c.Bool("v", false, "list every test, not only failures")
	update := c.Bool("update", false, "re-record the expected results of the fixtures the policies now decide otherwise (an intended edit), printing each change field by field; then run the tests")
	if done, code := c.parse(args, stdout, stderr, exitError); done {
		return code
	}
	if c.NArg() > 0 {
		fmt.Fprintf(stderr, "arbiter test: %v\n", orArgs(nil, c.Args()))
		return exitError
	}
	if *format != "text" && *format != "json" {
		fmt.Fprintf(stderr, "arbiter test: --format must be text or json, not %q\n", *format)
		return exitError
	}
	if f.tests == "" {
		fmt.Fprintln(stderr, "arbiter test: --tests is empty: nothing to run")
		return exitError
	}
	if *update {
		if code := updateFixtures(ctx, f, *runRe, stdout, stderr); code != exitOK {
			return code
		}
	}
	rep, err := engine.RunTests(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas},
		engine.TestOptions{Tests: f.tests, Run: *runRe, Coverage: *coverage || *threshold > 0})
	if err != nil {
		fmt.Fprintf(stderr, "arbiter test: %v\n", err)
		return exitError
	}
	pass, fail, skip := rep.Counts()
	belowThreshold := *threshold > 0 && rep.Coverage != nil && rep.Coverage.Percent < *threshold
	if *format == "json" {
		writeJSON(stdout, rep)
	} else {
		printText(stdout, rep, *verbose)
		if rep.Coverage != nil {
			fmt.Fprintf(stdout, "coverage: %.1f%% of policy lines\n", rep.Coverage.Percent)
			for _, nc := range rep.Coverage.NotCovered {
				fmt.Fprintf(stdout, "  not covered: %s\n", nc)
			}
		}
		fmt.Fprintf(stdout, "summary: %d passed, %d failed, %d skipped\n", pass, fail, skip)
	}
	if belowThreshold {
		fmt.Fprintf(stderr, "arbiter test: coverage %.1f%% is below the threshold %.1f%%\n", rep.Coverage.Percent, *threshold)
		return exitError
	}
	if fail > 0 || pass == 0 {
		return exitError
	}
	return exitOK
}

func printText(w io.Writer, rep *engine.TestReport, verbose bool) {
	for _, p := range rep.Setup {
		fmt.Fprintf(w, "ERROR %s\n", p)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "SKIP  file %s: %s\n", s.File, s.Reason)
	}
	for _, t := range rep.Results {
		switch {
		case t.Skip:
			if verbose {
				fmt.Fprintf(w, "SKIP  %s %s\n", t.Kind, t.Name)
			}
		case t.Pass:
			if verbose {
				fmt.Fprintf(w, "PASS  %s %s (%s)\n", t.Kind, t.Name, t.Duration)
			}
		default:
			loc := t.File
			if t.Line > 0 {
				loc = fmt.Sprintf("%s:%d", t.File, t.Line)
			}
			fmt.Fprintf(w, "FAIL  %s %s (%s)\n      %s\n", t.Kind, t.Name, loc, t.Message)
		}
	}
}

// updateFixtures is test --update: the fixtures' results re-recorded
// under the policies as they are now, each change printed for review.
func updateFixtures(ctx context.Context, f folders, runRe string, stdout, stderr io.Writer) int {
	var run *regexp.Regexp
	if runRe != "" {
		var err error
		if run, err = regexp.Compile(runRe); err != nil {
			fmt.Fprintf(stderr, "arbiter test: --run: %v\n", err)
			return exitError
		}
	}
	snap, err := engine.Load(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas})
	if err != nil {
		fmt.Fprintf(stderr, "arbiter test: --update: loading the policies: %v\n", err)
		return exitError
	}
	changes, probs, err := snap.UpdateFixtures(ctx, f.tests, run)
	for _, c := range changes {
		fmt.Fprintln(stdout, c)
	}
	for _, p := range probs {
		fmt.Fprintf(stdout, "NOT UPDATED %s\n", p)
	}
	if err != nil {
		fmt.Fprintf(stderr, "arbiter test: --update: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "updated %d fixtures\n", len(changes))
	return exitOK
}
