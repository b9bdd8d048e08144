package main

import (
	"context"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/replay"
)

// checkPagesShowTheFleet: the pages of each replica show decisions made
// on the others, in the list (with the replica column), by id and on the
// page of the run they are about.
func (f *storeFleet) checkPagesShowTheFleet(t *testing.T) {
	t.Helper()
	get := func(r int, path string) (int, string) {
		resp, err := f.client.Get(f.replicas[r].url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for r, name := range f.names {
		// A decision another replica answered, found on this one's pages.
		for id, by := range f.answered {
			if by == name {
				continue
			}
			status, body := get(r, "/ui/decisions/"+url.PathEscape(id))
			if status != 200 || !strings.Contains(body, "<dt>Replica</dt><dd>"+by+"</dd>") {
				t.Errorf("%s's page of decision %s (answered by %s): status %d, its replica not shown", name, id, by, status)
			}
			break
		}
		// The list, filtered to each other replica, shows its decisions.
		for _, other := range f.names {
			want := 0
			for _, by := range f.answered {
				if by == other {
					want++
				}
			}
			status, body := get(r, "/ui/decisions?replica="+url.QueryEscape(other))
			got := strings.Count(body, "<td>"+other+"</td>")
			if status != 200 || got != min(want, 50) || !strings.Contains(body, "matching in the decision store") {
				t.Errorf("%s's list of %s's decisions: status %d, %d rows, want %d", name, other, status, got, min(want, 50))
			}
		}
	}

	// The run the fleet's input names (where its input schema marks it):
	// one replica's run page shows every replica's decisions about it,
	// oldest first.
	eng, err := live.New(context.Background(), engine.Config{Policies: filepath.Join("..", "..", "policies"), Schemas: filepath.Join("..", "..", "schemas")})
	if err != nil {
		t.Fatal(err)
	}
	toks, ok := eng.Snapshot().RunID(f.fx.Decision)
	if !ok {
		t.Fatalf("decision %s names no run (x-arbiter-run-id): the fleet's run page cannot be checked", f.fx.Decision)
	}
	var in any = map[string]any{}
	if err := json.Unmarshal(f.fx.Input, &in); err != nil {
		t.Fatal(err)
	}
	for _, tk := range toks {
		m, _ := in.(map[string]any)
		in = m[tk]
	}
	run, _ := in.(string)
	if run == "" {
		t.Fatalf("the fleet's input names no run at %q", toks)
	}
	var want []string
	for id := range f.answered {
		if !f.refused[id] {
			want = append(want, id)
		}
	}
	status, body := get(0, "/ui/runs/"+url.PathEscape(run))
	var got []string
	by := map[string]bool{}
	for _, step := range strings.Split(body, `<li class="step" data-id="`)[1:] {
		id, _, _ := strings.Cut(step, `"`)
		got = append(got, id)
		by[f.answered[id]] = true
	}
	slices.Sort(want)
	slices.Sort(got)
	if status != 200 || !slices.Equal(got, want) || len(by) != len(f.names) || !strings.Contains(body, "of every replica") {
		t.Errorf("%s's page of run %s: status %d, %d decisions of %d replicas; want the fleet's %d, of %d replicas", f.names[0], run, status, len(got), len(by), len(want), len(f.names))
	}
}

// checkReplayFromStore: replay from the store finds the same changes as
// replay from the three replicas' log files, against a candidate without
// the decision the fleet answered (each of its decisions changes).
func (f *storeFleet) checkReplayFromStore(t *testing.T) {
	t.Helper()
	cand := copyRepo(t)
	for _, dir := range []string{"policies/decisions", "schemas", "policy_test"} {
		if err := os.RemoveAll(filepath.Join(cand, dir, f.fx.Decision)); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) replay.Report {
		t.Helper()
		args = append(append([]string{"replay"}, args...), "--policies", filepath.Join(cand, "policies"), "--schemas", filepath.Join(cand, "schemas"), "--format", "json")
		code, stdout, stderr := runCommand(t, args...)
		var rep replay.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != exitError {
			t.Fatalf("arbiter %s: exit %d, %v\n%s\n%s", strings.Join(args, " "), code, err, stdout, stderr)
		}
		return rep
	}
	var logArgs []string
	for _, l := range f.logs {
		logArgs = append(logArgs, "--log", l)
	}
	files, store := run(logArgs...), run("--store", f.url, "--since", "1h")
	changes := func(rep replay.Report) []string {
		var out []string
		for _, c := range rep.Changed {
			out = append(out, c.DecisionID+" "+string(c.Class))
		}
		slices.Sort(out)
		return out
	}
	if got, want := changes(store), changes(files); len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("replay from the store found %d changes, from the files %d:\n%q\n%q", len(got), len(want), got, want)
	}
	if files.Summary.Replayed != len(f.answered) || store.Summary.Replayed != files.Summary.Replayed {
		t.Errorf("replayed %d from the store, %d from the files; %d answered", store.Summary.Replayed, files.Summary.Replayed, len(f.answered))
	}
}
