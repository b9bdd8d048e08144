package main

import (
	"context"
	"fmt"
	"io"

	"github.com/arbiter-dev/arbiter/engine"
)

func checkCommand() *command {
	c := newCommand("check", "Compile and type-check the policies, and check the fixtures' inputs", `Compile and type-check the policies against the schemas, check their capabilities and
opa fmt, and validate every fixture's input; then name the decisions the compiled
evaluator runs and those on topdown. Each problem is printed as file:line: message.`, exitError)
	var f folders
	f.register(c, true)
	c.run = func(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
		if err := f.missing(); err != nil {
			fmt.Fprintf(stderr, "arbiter check: %v\n", err)
			return exitError
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
	return c
}
