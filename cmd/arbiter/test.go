package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/arbiter-dev/arbiter/engine"
)

func testCommand() *command {
	c := newCommand("test", "Run the Rego tests and every fixture through the engine", "", exitError)
	var f folders
	f.register(c, true)
	coverage := c.Bool("coverage", false, "report coverage of the policy files by the Rego tests")
	threshold := c.Float64("threshold", 0, "fail when coverage is below this percentage (implies --coverage)")
	runRe := c.String("run", "", "only run tests and fixtures whose name matches this regular expression")
	format := c.format("text", "output format: text or json")
	verbose := c.BoolP("verbose", "v", false, "list every test, not only failures")
	update := c.Bool("update", false, "re-record the expected results of the fixtures the policies now decide otherwise (an intended edit), printing each change field by field and naming on stderr those whose name or note repeats a word only the old result had; then run the tests")
	c.run = func(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
		if err := f.missing(); err != nil || c.NArg() > 0 {
			return say(stderr, exitError, "arbiter test: %v", orArgs(err, c.Args()))
		}
		if f.tests == "" {
			return say(stderr, exitError, "arbiter test: --tests is empty: nothing to run")
		}
		var upd *updateReport
		if *update {
			var code int
			upd, code = updateFixtures(ctx, f, *runRe, stderr)
			if upd != nil && *format == "text" {
				upd.print(stdout)
			}
			if code != exitOK {
				return code
			}
		}
		rep, err := engine.RunTests(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas},
			engine.TestOptions{Tests: f.tests, Run: *runRe, Coverage: *coverage || *threshold > 0})
		if err != nil {
			return say(stderr, exitError, "arbiter test: %v", err)
		}
		pass, fail, skip := rep.Counts()
		if *format == "json" {
			writeJSON(stdout, struct {
				*engine.TestReport
				Update *updateReport `json:"update,omitempty"`
			}{rep, upd})
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
		if *threshold > 0 && rep.Coverage != nil && rep.Coverage.Percent < *threshold {
			return say(stderr, exitError, "arbiter test: coverage %.1f%% is below the threshold %.1f%%", rep.Coverage.Percent, *threshold)
		}
		if fail > 0 || pass == 0 {
			return exitError
		}
		return exitOK
	}
	return c
}

func printText(w io.Writer, rep *engine.TestReport, verbose bool) {
	for _, p := range rep.Setup {
		fmt.Fprintf(w, "ERROR %s\n", p)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "SKIP  file %s: %s\n", s.File, s.Reason)
	}
	for _, t := range rep.Results {
		loc := t.File
		if t.Line > 0 {
			loc = fmt.Sprintf("%s:%d", t.File, t.Line)
		}
		switch {
		case t.Skip:
			if verbose {
				fmt.Fprintf(w, "SKIP  %s %s (%s)\n", t.Kind, t.Name, loc)
			}
		case t.Pass:
			if verbose {
				fmt.Fprintf(w, "PASS  %s %s (%s, %s)\n", t.Kind, t.Name, loc, t.Duration)
			}
		default:
			fmt.Fprintf(w, "FAIL  %s %s (%s)\n      %s\n", t.Kind, t.Name, loc, t.Message)
		}
	}
}

// updateReport is what test --update did, in --format json's "update".
type updateReport struct {
	Updated    []engine.FixtureChange `json:"updated"`
	NotUpdated []engine.Problem       `json:"not_updated"`
}

// print writes the report as text: each change field by field, for review.
func (u *updateReport) print(w io.Writer) {
	for _, c := range u.Updated {
		fmt.Fprintln(w, c)
	}
	for _, p := range u.NotUpdated {
		fmt.Fprintf(w, "NOT UPDATED %s\n", p)
	}
	fmt.Fprintf(w, "updated %d fixtures\n", len(u.Updated))
}

// updateFixtures is test --update: the fixtures' results re-recorded
// under the policies as they are now. Each re-recorded fixture whose name
// or note repeats words that only its old result had is named on stderr,
// whatever the format: what it says may now be the opposite of what it
// expects, and only a person can reword it.
func updateFixtures(ctx context.Context, f folders, runRe string, stderr io.Writer) (*updateReport, int) {
	var run *regexp.Regexp
	if runRe != "" {
		var err error
		if run, err = regexp.Compile(runRe); err != nil {
			return nil, say(stderr, exitError, "arbiter test: --run: %v", err)
		}
	}
	snap, err := engine.Load(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas})
	if err != nil {
		return nil, say(stderr, exitError, "arbiter test: --update: loading the policies: %v", err)
	}
	changes, probs, err := snap.UpdateFixtures(ctx, f.tests, run)
	// Empty lists, not null, in --format json.
	u := &updateReport{Updated: append([]engine.FixtureChange{}, changes...), NotUpdated: append([]engine.Problem{}, probs...)}
	if err != nil {
		return u, say(stderr, exitError, "arbiter test: --update: %v", err)
	}
	stale := 0
	for _, c := range changes {
		if len(c.Stale) > 0 {
			stale++
			fmt.Fprintf(stderr, "arbiter test: --update: %s (%s): its name or note says %s, which only its old result said: reword it\n",
				c.Name, c.File, quoteWords(c.Stale))
		}
	}
	if stale > 0 {
		fmt.Fprintf(stderr, "arbiter test: --update: %d of %d re-recorded fixtures may now be misnamed or misdescribed\n", stale, len(changes))
	}
	return u, exitOK
}

// quoteWords is words quoted and joined by commas.
func quoteWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = strconv.Quote(w)
	}
	return strings.Join(q, ", ")
}
