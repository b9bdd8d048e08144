package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/arbiter-dev/arbiter/engine"
)

func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f folders
	f.register(fs, true)
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	probs := engine.Check(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas}, f.tests)
	for _, p := range probs {
		fmt.Fprintln(stdout, p.String())
	}
	if len(probs) > 0 {
		fmt.Fprintf(stderr, "arbiter check: %d problem(s)\n", len(probs))
		return exitError
	}
	// Which decisions run compiled (engine/ireval) and which on topdown.
	infos, err := engine.CompiledDecisions(engine.Config{Policies: f.policies, Schemas: f.schemas})
	if err != nil {
		fmt.Fprintln(stderr, "arbiter check:", err)
		return exitError
	}
	for _, ci := range infos {
		if ci.Compiled {
			fmt.Fprintf(stdout, "decision %s: compiled\n", ci.Decision)
		} else {
			fmt.Fprintf(stdout, "decision %s: runs on topdown: %s\n", ci.Decision, ci.Reason)
		}
	}
	fmt.Fprintln(stdout, "arbiter check: ok")
	return exitOK
}
