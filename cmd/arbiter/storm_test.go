package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// The storm edits the quota test decision added to a copy of the
// repository (quota_test.go), never the repository's own rules. Its good
// states: which copy the policies symlink points at (copy b adds 100 to the
// quota limit) and whether flip adds 10. Their revisions are content hashes,
// so a state reached by any sequence of edits has the revision it has when
// loaded from scratch.

type stormState struct{ b, flip bool }

func (s stormState) String() string { return fmt.Sprintf("copy b=%v flip=%v", s.b, s.flip) }

// stormData is the quota data.json in state s.
func stormData(s stormState) []byte {
	limit := 10
	if s.flip {
		limit += 10
	}
	if s.b {
		limit += 100
	}
	return fmt.Appendf(nil, "{\"limit\": %d}\n", limit)
}

// stormInputs are decided differently in different states.
var stormInputs = []string{`{"tenant": "t", "used": 15}`, `{"tenant": "t", "used": 115}`}

// stormAnswer is one answer of the storm with what the client asked.
type stormAnswer struct {
	id, revision string
	body         int // index into the storm's bodies
	result       json.RawMessage
}

// TestReloadStormUnderLoad: while clients keep deciding, the policy files
// are rewritten many times a second, in two rounds of these steps: valid
// data edits that
// flip an answer, a syntax error, a policy and a data edit that break
// tests, a write-then-rename, an in-place write, a delete and restore, a
// symlink flip between two copies, and SIGHUP. No request may fail; every
// answer must come from a revision that passed its tests and be the answer
// of that revision; the service must end on the final state; and after
// SIGTERM, sent while the clients still run, the decision log holds each
// answer exactly once.
func TestReloadStormUnderLoad(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	const (
		clients = 2 // concurrent with the reloads and each other; more only burn the cores
		rounds  = 2 // the second starts from the other copy, the first's end
	)
	ctx := context.Background()
	root := copyRepo(t)
	addQuota(t, root)
	schemas, tests := filepath.Join(root, "schemas"), filepath.Join(root, "policy_test")
	rel := filepath.Join("decisions", quotaDecision, "data.json")

	// Two copies of the policies, a served through the symlink.
	copies := map[bool]string{false: filepath.Join(root, "versions", "a"), true: filepath.Join(root, "versions", "b")}
	for isB, dir := range copies {
		if err := os.CopyFS(dir, os.DirFS(filepath.Join(root, "policies"))); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, rel), stormData(stormState{b: isB}), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "policies")
	if err := os.RemoveAll(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(copies[false], link); err != nil {
		t.Fatal(err)
	}

	// Every good state passes its tests (`arbiter test`, the reload gate's
	// suite, run by the binary) and loads in process, where its snapshot gives the revision and the
	// answers the server must give under it.
	states := []stormState{{false, false}, {false, true}, {true, false}, {true, true}}
	snaps := make([]*engine.Snapshot, len(states))
	errs := make([]error, len(states))
	var loadWG sync.WaitGroup
	for i, s := range states {
		dir := filepath.Join(t.TempDir(), "policies")
		loadWG.Add(1)
		go func() { // two at a time, on a 2-core machine
			defer loadWG.Done()
			if err := os.CopyFS(dir, os.DirFS(copies[false])); err != nil {
				errs[i] = err
				return
			}
			if err := os.WriteFile(filepath.Join(dir, rel), stormData(s), 0o644); err != nil {
				errs[i] = err
				return
			}
			out, err := exec.Command(binPath, "test", "--policies", dir, "--schemas", schemas, "--tests", tests).CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte(" 0 failed")) {
				errs[i] = fmt.Errorf("good state %s fails its tests: %v\n%s", s, err, out)
				return
			}
			if snaps[i], err = engine.Load(ctx, engine.Config{Policies: dir, Schemas: schemas}); err != nil {
				errs[i] = fmt.Errorf("good state %s does not load: %v", s, err)
			}
		}()
		if i%2 == 1 {
			loadWG.Wait()
		}
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	good := map[string]stormState{}
	revOf := map[stormState]string{}
	for i, s := range states {
		good[snaps[i].Revision] = s
		revOf[s] = snaps[i].Revision
	}
	if len(good) != len(states) {
		t.Fatalf("the good states share revisions: %v", good)
	}

	// The bodies: every fixture with a known result, of every decision, and
	// the two inputs whose answer depends on the state.
	fixtures, err := engine.LoadFixtures(tests)
	if err != nil {
		t.Fatal(err)
	}
	type stormBody struct {
		decision string
		input    []byte
		want     json.RawMessage            // a fixture's result, the same in every state
		byRev    map[string]json.RawMessage // otherwise: the result under each revision
	}
	var bodies []stormBody
	decisions := map[string]bool{}
	for _, fx := range fixtures {
		if fx.WantResult != nil && fx.Input != nil {
			bodies = append(bodies, stormBody{decision: fx.Decision, input: fx.Input, want: fx.WantResult})
			decisions[fx.Decision] = true
		}
	}
	if len(decisions) < 2 || len(bodies) < 20 {
		t.Fatalf("want fixtures of several decisions, got %d of %v", len(bodies), decisions)
	}
	nFixtures := len(bodies)
	for _, in := range stormInputs {
		b := stormBody{decision: quotaDecision, input: []byte(in), byRev: map[string]json.RawMessage{}}
		distinct := map[string]bool{}
		for _, snap := range snaps {
			d, err := snap.Decide(ctx, b.decision, b.input, engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			b.byRev[snap.Revision] = d.Result
			distinct[string(d.Result)] = true
		}
		if len(distinct) != 2 {
			t.Fatalf("%s does not tell the states apart: %v", in, distinct)
		}
		bodies = append(bodies, b)
	}

	logPath := filepath.Join(t.TempDir(), "decisions.log")
	srv := startServer(t, "--policies", link, "--schemas", schemas, "--tests", tests,
		"--decision-log", logPath, "--reload-debounce", "20ms")
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	if rev, _ := status(t, client, srv.url)["policy_revision"].(string); rev != snaps[0].Revision {
		t.Fatalf("starts on %v, want the state %s", rev, stormState{})
	}

	// Clients: odd requests alternate the two state-dependent inputs, even
	// ones rotate through the fixtures.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var clientWG sync.WaitGroup
	t.Cleanup(func() { stopLoad(); clientWG.Wait() })
	var mu sync.Mutex
	var answers []stormAnswer
	var failures []string
	servedBy := map[string]bool{} // revisions some answer came from
	// answered waits for an answer from state s: each state the storm
	// must cover is seen served, not hoped to be.
	answered := func(s stormState) {
		wait.Until(t, 60*time.Second, "an answer from the state "+s.String(), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return servedBy[revOf[s]]
		})
	}
	terminated := make(chan struct{})
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	for c := 0; c < clients; c++ {
		clientWG.Add(1)
		go func() {
			defer clientWG.Done()
			for n := c; loadCtx.Err() == nil; n++ {
				i := nFixtures + n%2
				if n%2 == 0 {
					i = (n / 2) % nFixtures
				}
				b := bodies[i]
				resp, err := client.Post(srv.url+"/v1/decisions/"+b.decision, "application/json", bytes.NewReader(b.input))
				if err != nil {
					select {
					case <-terminated: // the server stopped listening
					default:
						fail("request failed: %v", err)
					}
					return
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var env struct {
					ID       string          `json:"decision_id"`
					Revision string          `json:"policy_revision"`
					Result   json.RawMessage `json:"result"`
				}
				if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &env) != nil || env.ID != resp.Header.Get("X-Arbiter-Decision-Id") {
					fail("answer %d %s", resp.StatusCode, raw)
					continue
				}
				want := b.want
				if want == nil {
					want = b.byRev[env.Revision]
				}
				if _, ok := good[env.Revision]; !ok {
					fail("answer %s from revision %s, which is not a good state", env.ID, env.Revision)
				} else if !engine.SameJSON(env.Result, want) {
					fail("%s under %s (%s): got %s, want %s", b.input, env.Revision, good[env.Revision], env.Result, want)
				}
				mu.Lock()
				answers = append(answers, stormAnswer{id: env.ID, revision: env.Revision, body: i, result: env.Result})
				servedBy[env.Revision] = true
				mu.Unlock()
			}
		}()
	}

	// The storm. Each step leaves the files in a good state, except for a
	// broken edit held for a while and then undone.
	cur := stormState{}
	active := func() string { return copies[cur.b] }
	write := func(path string, data []byte, rename bool) {
		if !rename {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Error(err)
			}
			return
		}
		tmp := path + ".tmp~" // an editor leftover: never loaded
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Error(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Error(err)
		}
	}
	// hold keeps a broken state until the server has refused it: the
	// refused reloads counter passes refused, its value before the break.
	hold := func(refused int) {
		wait.Until(t, 60*time.Second, "the broken state to be refused", func() bool {
			return reloadsRefused(t, client, srv.url) > refused
		})
	}
	policy := func() string { return filepath.Join(active(), "decisions", quotaDecision, "policy.rego") }
	breakFile := func(path, old, new string, rename bool) {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(b, []byte(old)) {
			t.Errorf("%s: %v, or it lacks %q", path, err, old)
			return
		}
		refused := reloadsRefused(t, client, srv.url)
		write(path, bytes.Replace(b, []byte(old), []byte(new), 1), rename)
		hold(refused)
		write(path, b, !rename)
	}
	steps := []struct {
		name string
		do   func()
	}{
		{"toggle the flip code, write then rename, and see it served", func() {
			cur.flip = !cur.flip
			write(filepath.Join(active(), rel), stormData(cur), true)
			answered(cur)
		}},
		{"syntax error, then fixed", func() {
			breakFile(policy(), quotaAllow, quotaAllowBroken, false)
		}},
		{"toggle the flip code in place", func() {
			cur.flip = !cur.flip
			write(filepath.Join(active(), rel), stormData(cur), false)
		}},
		{"data edit that breaks a test, then undone", func() {
			breakFile(filepath.Join(active(), rel), `{"limit": `, `{"limit": 9, "was": `, true)
		}},
		{"flip the symlink to the other copy, and see it served", func() {
			cur.b = !cur.b
			tmp := filepath.Join(root, ".policies.tmp")
			if err := os.Symlink(active(), tmp); err != nil {
				t.Error(err)
			}
			if err := os.Rename(tmp, link); err != nil {
				t.Error(err)
			}
			// The copy now served keeps its own flip state.
			b, _ := os.ReadFile(filepath.Join(active(), rel))
			cur.flip = bytes.Equal(b, stormData(stormState{b: cur.b, flip: true}))
			answered(cur)
		}},
		{"policy edit that breaks tests, then undone", func() {
			breakFile(policy(), quotaAllow, `{"allow": count(reasons) >= 0,`, true)
		}},
		{"delete the data file, then restore it", func() {
			p := filepath.Join(active(), rel)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Error(err)
			}
			refused := reloadsRefused(t, client, srv.url)
			if err := os.Remove(p); err != nil {
				t.Error(err)
			}
			hold(refused)
			write(p, b, true)
		}},
		{"SIGHUP", func() {
			if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Error(err)
			}
		}},
	}
	// A round covers at least three states, each seen served: the start,
	// the toggled flip and the other copy. Rounds, not a duration: a slow
	// machine runs every step too.
	answered(cur)
	var stepCount int
	for stepCount < rounds*len(steps) {
		steps[stepCount%len(steps)].do()
		stepCount++
		time.Sleep(time.Duration(60+40*(stepCount%3)) * time.Millisecond)
	}
	final := snaps[0]
	for i, s := range states {
		if s == cur {
			final = snaps[i]
		}
	}
	// The service ends on the final state: no file event was lost.
	wait.Until(t, 15*time.Second, "the final state "+cur.String()+" to be served", func() bool {
		return status(t, client, srv.url)["policy_revision"] == final.Revision
	})
	answered(cur)

	// SIGTERM under load: requests in flight are answered, and logged.
	metrics := stormMetrics(t, client, srv.url)
	close(terminated)
	srv.stop(t)
	stopLoad()
	clientWG.Wait()

	for i, f := range failures {
		if i == 10 {
			t.Errorf("... and %d more failures", len(failures)-10)
			break
		}
		t.Error(f)
	}
	served := map[string]int{}
	for _, a := range answers {
		served[good[a.revision].String()]++
	}
	t.Logf("%d steps, %d answers, %d failures; answers by state %v; %s", stepCount, len(answers), len(failures), served, metrics)
	if len(served) < 3 {
		t.Errorf("answers came from %d states only, %v: the storm did not exercise reloads", len(served), served)
	}
	if !strings.Contains(metrics, `result="failed"`) {
		t.Errorf("no reload was refused: the broken edits were never seen (%s)", metrics)
	}

	// The decision log holds each answer once, as answered.
	byID := map[string]stormAnswer{}
	for _, a := range answers {
		byID[a.id] = a
	}
	seen := map[string]int{}
	warnings, err := decisionlog.ReadFile(logPath, func(_ int, rec decisionlog.Record) error {
		seen[rec.DecisionID]++
		a, ok := byID[rec.DecisionID]
		switch {
		case !ok:
			t.Errorf("logged decision %s was never answered", rec.DecisionID)
		case rec.Revision != a.revision || !engine.SameJSON(rec.Result, a.result):
			t.Errorf("decision %s: logged %s %s, answered %s %s", rec.DecisionID, rec.Revision, rec.Result, a.revision, a.result)
		}
		return nil
	})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("reading the decision log: %v %v", err, warnings)
	}
	missing := 0
	for id := range byID {
		if seen[id] != 1 {
			missing++
			if missing <= 5 {
				t.Errorf("decision %s is in the log %d times", id, seen[id])
			}
		}
	}
	if len(seen) != len(byID) || missing > 0 {
		t.Errorf("%d answers, %d logged ids, %d not logged exactly once", len(byID), len(seen), missing)
	}
}

// reloadCounts scrapes arbiter_reloads_total: result -> count.
func reloadCounts(t *testing.T, client *http.Client, url string) map[string]int {
	t.Helper()
	resp, err := client.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	counts := map[string]int{}
	for _, m := range reloadMetric.FindAllStringSubmatch(string(b), -1) {
		counts[m[1]], _ = strconv.Atoi(m[2])
	}
	return counts
}

var reloadMetric = regexp.MustCompile(`(?m)^arbiter_reloads_total\{result="(\w+)"\} (\d+)`)

// reloadsRefused returns the count of refused reloads.
func reloadsRefused(t *testing.T, client *http.Client, url string) int {
	return reloadCounts(t, client, url)["failed"]
}

// stormMetrics returns the reload counters, e.g. `result="ok" 12`.
func stormMetrics(t *testing.T, client *http.Client, url string) string {
	t.Helper()
	var out []string
	for result, n := range reloadCounts(t, client, url) {
		if n != 0 {
			out = append(out, fmt.Sprintf("result=%q %d", result, n))
		}
	}
	sort.Strings(out)
	return "reloads " + strings.Join(out, ", ")
}
