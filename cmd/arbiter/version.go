package main

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/open-policy-agent/opa/v1/version"
)

func cmdVersion(stdout io.Writer) int {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	fmt.Fprintf(stdout, "arbiter %s (opa %s)\n", v, version.Version)
	return exitOK
}
