package main

import (
	"context"
	"io"
	"runtime/debug"

	opaversion "github.com/open-policy-agent/opa/v1/version"
)

func versionCommand() *command {
	c := newCommand("version", "Print arbiter's version and OPA's", "", exitError)
	c.run = func(_ context.Context, _ io.Reader, stdout, stderr io.Writer) int {
		if c.NArg() > 0 {
			return say(stderr, exitError, "arbiter version: no arguments expected, got %q", c.Args())
		}
		return say(stdout, exitOK, "arbiter %s (opa %s)", buildVersion(), opaversion.Version)
	}
	return c
}

// version is the release, set when building: the Makefile and the
// Dockerfile pass -ldflags "-X main.version=$(git describe --always
// --dirty)" (the image's build context has no .git, so there it is the
// VERSION build argument).
var version string

// buildVersion is the version every report of this binary names (arbiter
// version, /v1/status, arbiter_build_info, the upload's labels, the traces'
// service.version): the stamped version; else the module's version (go
// install PATH@VERSION); else the commit Go stamped from the checkout
// (vcs.revision, -dirty when vcs.modified), else (devel).
func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return "(devel)"
	}
	return shortRev(rev) + dirty
}
