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
		if err := f.missing(); err != nil || c.NArg() > 0 {
			return say(stderr, exitError, "arbiter check: %v", orArgs(err, c.Args()))
		}
		probs, infos := engine.Check(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas}, f.tests)
		for _, p := range probs {
			fmt.Fprintln(stdout, p.String())
		}
		if len(probs) > 0 {
			return say(stderr, exitError, "arbiter check: %d problem(s)", len(probs))
		}
		for _, ci := range infos { // which decisions run compiled (engine/ireval), which on topdown
			if ci.Compiled {
				fmt.Fprintf(stdout, "decision %s: compiled\n", ci.Decision)
			} else {
				fmt.Fprintf(stdout, "decision %s: runs on topdown: %s\n", ci.Decision, ci.Reason)
			}
		}
		return say(stdout, exitOK, "arbiter check: ok")
	}
	return c
}
