package main

import (
	"context"
	"fmt"
	"io"

	"github.com/arbiter-dev/arbiter/engine"
)

func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("check", "[--policies DIR] [--schemas DIR] [--tests DIR]")
	var f folders
	f.register(c, true)
	if done, code := c.parse(args, stdout, stderr, exitError); done {
		return code
	}
	if c.NArg() > 0 {
		fmt.Fprintf(stderr, "arbiter check: %v\n", orArgs(nil, c.Args()))
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
