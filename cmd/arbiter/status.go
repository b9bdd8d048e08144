package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
)

// statusView is what `arbiter status` shows of GET /v1/status.
type statusView struct {
	Revision   string              `json:"policy_revision"`
	Origin     string              `json:"policy_origin"`
	LoadedAt   *time.Time          `json:"loaded_at"`
	Decisions  []string            `json:"decisions"`
	LastReload engine.ReloadStatus `json:"last_reload"`
	Reload     string              `json:"reload"`
	Bundles    map[string]struct {
		ActiveRevision string `json:"active_revision"`
		Code           string `json:"code"`
		Message        string `json:"message"`
	} `json:"bundles"`
	UptimeSeconds float64 `json:"uptime_seconds"`
}

func statusCommand() *command {
	return clientCommand("status", "Show the running server's revision, last reload and bundles",
		"Print GET /v1/status of a running arbiter serve: its revision, origin, decisions, the last\nreload and its problems, the bundles.", 0, printStatus)
}

func printStatus(ctx context.Context, cl *client, _ []string) int {
	stdout := cl.stdout
	var st statusView
	if printed, code := cl.call(ctx, http.MethodGet, "/v1/status", nil, &st); printed || code != exitOK {
		return code
	}
	fmt.Fprintf(stdout, "revision   %s\n", orNone(st.Revision))
	fmt.Fprintf(stdout, "origin     %s\n", orNone(st.Origin))
	fmt.Fprintf(stdout, "decisions  %s\n", orNone(strings.Join(st.Decisions, ", ")))
	fmt.Fprintf(stdout, "reload     %s\n", st.Reload)
	fmt.Fprintf(stdout, "last       %s\n", reloadLine(st.LastReload))
	writeProblems(stdout, "  ", st.LastReload.Problems)
	for name, b := range st.Bundles {
		line := fmt.Sprintf("bundle     %s: %s", name, orNone(b.ActiveRevision))
		if b.Code != "" {
			line += fmt.Sprintf(" (%s: %s)", b.Code, b.Message)
		}
		fmt.Fprintln(stdout, line)
	}
	fmt.Fprintf(stdout, "uptime     %s\n", (time.Duration(st.UptimeSeconds) * time.Second).String())
	return exitOK
}
