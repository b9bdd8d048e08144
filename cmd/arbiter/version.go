package main

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/open-policy-agent/opa/v1/version"
)

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	c := newCommand("version", "")
	if done, code := c.parse(args, stdout, stderr, exitError); done {
		return code
	}
	if c.NArg() > 0 {
		fmt.Fprintf(stderr, "arbiter version: no arguments expected, got %q\n", c.Args())
		return exitError
	}
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	fmt.Fprintf(stdout, "arbiter %s (opa %s)\n", v, version.Version)
	return exitOK
}
