package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
)

// statusView is what `arbiter status` formats of GET /v1/status; the
// members it does not format are printed leaf by leaf (writeLeaves).
type statusView struct {
	Version    string                `json:"version"`
	Revision   string                `json:"policy_revision"`
	Origin     string                `json:"policy_origin"`
	LoadedAt   *time.Time            `json:"loaded_at"`
	Files      []string              `json:"files"`
	Decisions  []string              `json:"decisions"`
	Compiled   []engine.CompiledInfo `json:"compiled"`
	LastReload live.ReloadStatus     `json:"last_reload"`
	Reload     string                `json:"reload"`
	StartedAt  time.Time             `json:"started_at"`
	Uptime     float64               `json:"uptime_seconds"`
	Diff       *diff.Status          `json:"diff"`
}

func statusCommand() *command {
	return clientCommand("status", "Show the running server's revision, last reload, bundles and diff",
		`Print GET /v1/status of a running arbiter serve: its version, revision, origin, files,
decisions (compiled or on topdown), the last reload and its problems, the bundles, the
decision store, the memory budgets, and the semantic diff of the live revision against the
one it replaced with its verdicts: with --format text, everything --format json shows.`, 0, printStatus)
}

func printStatus(ctx context.Context, cl *client, _ []string) int {
	w := cl.stdout
	var st statusView
	var doc map[string]any
	if printed, code := cl.call(ctx, http.MethodGet, "/v1/status", nil, &st, &doc); printed || code != exitOK {
		return code
	}
	fmt.Fprintf(w, "version    %s\n", orNone(st.Version))
	fmt.Fprintf(w, "revision   %s\n", orNone(st.Revision))
	fmt.Fprintf(w, "origin     %s\n", orNone(st.Origin))
	if st.LoadedAt != nil {
		fmt.Fprintf(w, "loaded     %s\n", st.LoadedAt.UTC().Format(time.RFC3339Nano))
	}
	var decisions []string
	for _, name := range st.Decisions {
		how := ""
		for _, ci := range st.Compiled {
			switch {
			case ci.Decision != name:
			case ci.Compiled:
				how = " (compiled)"
			default:
				how = " (topdown: " + ci.Reason + ")"
			}
		}
		decisions = append(decisions, name+how)
	}
	fmt.Fprintf(w, "decisions  %s\n", orNone(strings.Join(decisions, ", ")))
	for i, f := range st.Files {
		fmt.Fprintf(w, "%-10s %s\n", map[bool]string{true: "files"}[i == 0], f)
	}
	fmt.Fprintf(w, "reload     %s\n", st.Reload)
	fmt.Fprintf(w, "last       %s\n", reloadLine(st.LastReload))
	writeIndented(w, st.LastReload.Problems)
	writeOthers(w, doc, st)
	fmt.Fprintf(w, "started    %s\n", st.StartedAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "uptime     %s\n", (time.Duration(st.Uptime) * time.Second).String())
	if d := st.Diff; d != nil {
		line := fmt.Sprintf("diff       %s against %s: %s", orNone(d.New), orNone(d.Old), d.State)
		if d.Carried {
			line += " (the report its bundle carried)"
		}
		for _, t := range []struct {
			name string
			at   *time.Time
		}{{"queued", &d.Queued}, {"started", d.Started}, {"finished", d.Finished}} {
			if t.at != nil && !t.at.IsZero() {
				line += fmt.Sprintf(", %s %s", t.name, t.at.UTC().Format(time.RFC3339Nano))
			}
		}
		fmt.Fprintln(w, line)
		if d.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", d.Error)
		}
		if d.Report != nil {
			writeDiffText(w, d.Report)
		}
	}
	return exitOK
}

// writeOthers prints the leaves of the members of doc that the struct
// shown, the same answer decoded, has no field for: the members a command
// formats are the fields it decodes, so the two cannot drift apart. It
// deletes those members from doc.
func writeOthers(w io.Writer, doc map[string]any, shown any) {
	t := reflect.TypeOf(shown)
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		delete(doc, name)
	}
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		writeLeaves(w, k, doc[k])
	}
}

// writeLeaves prints each leaf of the JSON value v, one "name value" line
// each, its name the members' joined by / (array elements by index), for
// the parts of an answer that no line above formats: the text shows what
// the JSON has, whatever the server adds.
func writeLeaves(w io.Writer, name string, v any) {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			writeLeaves(w, name+"/"+k, v[k])
		}
	case []any:
		for i, e := range v {
			writeLeaves(w, fmt.Sprintf("%s/%d", name, i), e)
		}
	case string:
		fmt.Fprintf(w, "%-10s %s\n", name, decisionlog.Shown(v))
	case nil:
		fmt.Fprintf(w, "%-10s null\n", name)
	default:
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "%-10s %s\n", name, b)
	}
}
