package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/arbiter-dev/arbiter/engine/live"
)

func reloadsCommand() *command {
	return clientCommand("reloads", "Show the running server's reload history, newest first",
		"Print GET /v1/reloads of a running arbiter serve: one line per reload attempt, newest\nfirst, and its problems under it.", 0, printReloads)
}

func printReloads(ctx context.Context, cl *client, _ []string) int {
	stdout := cl.stdout
	var doc struct {
		Reloads []live.ReloadStatus `json:"reloads"`
	}
	if printed, code := cl.call(ctx, http.MethodGet, "/v1/reloads", nil, &doc); printed || code != exitOK {
		return code
	}
	for _, st := range doc.Reloads {
		fmt.Fprintln(stdout, reloadLine(st))
		writeIndented(stdout, st.Problems)
	}
	return exitOK
}
