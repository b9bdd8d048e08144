package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/golden"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/internal/wait"
	"github.com/arbiter-dev/arbiter/policybundle"
)

// quotaSide copies the quota test decision (engine/testdata/quota) to
// root, its result schema saying that allow: true allows.
func quotaSide(t *testing.T, root string) {
	t.Helper()
	if err := os.CopyFS(root, os.DirFS("../../engine/testdata/quota")); err != nil {
		t.Fatal(err)
	}
	testfiles.Edit(t, filepath.Join(root, "schemas", "quota_check", "result.json"), `"x-arbiter-outcome": "allow",`, `"x-arbiter-outcome": "allow", "x-arbiter-allow": [true],`)
}

// secondsField is the one field of a diff's JSON that differs per run.
var secondsField = regexp.MustCompile(`"seconds": [0-9.e+-]+`)

// TestDiffCommand: arbiter diff proves an unchanged revision changes
// nothing (exit 0), finds the input a raised limit newly allows (exit 1,
// the example in the text output with its fields marked), and exits 2 on
// bad arguments.
func TestDiffCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old, new := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	quotaSide(t, old)
	quotaSide(t, new)
	tests := []string{"--tests", filepath.Join(old, "tests")}

	out, stderr, code := runCLI(t, nil, append(append([]string{"diff"}, tests...), old, new)...)
	if code != exitOK {
		t.Fatalf("same revision: exit %d, want 0\n%s%s", code, out, stderr)
	}
	// How long each decision took, and the solvers this machine has, are
	// not the golden file's.
	measured := func(text string) []byte {
		text = regexp.MustCompile(`(?m)^solvers .*\n`).ReplaceAllString(text, "")
		return golden.Mask([]byte(regexp.MustCompile(`(?m)^(decision \S+) \([0-9.]+s\)$`).ReplaceAllString(text, "$1 (<seconds>)")), dir)
	}
	golden.Check(t, "testdata/diff/same.txt", measured(out))

	testfiles.Edit(t, filepath.Join(new, "policies", "decisions", "quota_check", "data.json"), `"limit": 10`, `"limit": 11`)
	out, stderr, code = runCLI(t, nil, append(append([]string{"diff"}, tests...), old, new)...)
	if code != exitError {
		t.Fatalf("raised limit: exit %d, want 1\n%s%s", code, out, stderr)
	}
	golden.Check(t, "testdata/diff/raised_limit.txt", measured(out))
	text := out
	// The documented form: the flags after the operands.
	out, _, code = runCLI(t, nil, append([]string{"diff", old, new, "--format", "json"}, tests...)...)
	if code != exitError {
		t.Fatalf("raised limit, json: exit %d, want 1", code)
	}
	var doc any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	textHasJSON(t, "diff", text, "", doc) // seconds aside: two runs
	out = secondsField.ReplaceAllString(out, `"seconds": 0`)
	golden.Check(t, "testdata/diff/raised_limit.json", golden.Mask([]byte(out), dir))

	if _, _, code := runCLI(t, nil, "diff", old); code != exitInput {
		t.Errorf("one side: exit %d, want 2", code)
	}
}

// TestServeDiffsEachReload boots the binary with the background diff on: a
// raised limit, its fixtures re-recorded by `arbiter test --update`, goes
// live on POST /v1/reload without waiting for the diff (a found loosening
// does not refuse a reload); /v1/status then shows the diff of the new live
// revision against the one it replaced, with the example, and the log
// warns of it.
func TestServeDiffsEachReload(t *testing.T) {
	t.Parallel()
	root := copyQuota(t)
	testfiles.Edit(t, filepath.Join(root, "schemas", quotaDecision, "result.json"), `"x-arbiter-outcome": "allow",`, `"x-arbiter-outcome": "allow", "x-arbiter-allow": [true],`)
	srv := startServer(t, append(folderArgs(root), "--decision-log", "", "--diff-timeout", "1m", "--reload-debounce", "1h")...)
	client := &http.Client{Timeout: 30 * time.Second}
	first := status(t, client, srv.url)["policy_revision"]

	testfiles.Edit(t, filepath.Join(root, "policies", "decisions", quotaDecision, "data.json"), `"limit": 10`, `"limit": 11`)
	if out, _, code := runCLI(t, nil, append([]string{"test", "--update"}, folderArgs(root)...)...); code != exitOK || !strings.Contains(out, "updated ") {
		t.Fatalf("test --update: exit %d\n%s", code, out)
	}
	resp, err := client.Post(srv.url+"/v1/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var st live.ReloadStatus
	_ = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if !st.OK || !st.Changed || st.From != first {
		t.Fatalf("reload: %+v, want the raised limit live, from %v", st, first)
	}
	d := liveDiff(t, client, srv.url)
	if d.Old != first || d.New != st.Revision || d.Report.Decisions[quotaDecision].RefuseToAllow.Verdict != diff.Found || len(d.Report.Decisions[quotaDecision].RefuseToAllow.Example) == 0 {
		t.Errorf("/v1/status diff %+v, want %v against %s with a found refuse_to_allow example", d, first, st.Revision)
	}
	// arbiter status shows the verdicts and the example, as its JSON does.
	text, _, code := runCLI(t, nil, "status", "--server", srv.url)
	js, _, _ := runCLI(t, nil, "status", "--server", srv.url, "--format", "json")
	var doc any
	if err := json.Unmarshal([]byte(js), &doc); code != exitOK || err != nil || !strings.Contains(text, "refuse_to_allow: found") {
		t.Fatalf("arbiter status: exit %d, %v\n%s", code, err, text)
	}
	textHasJSON(t, "status", text, "", doc)
	wait.Until(t, 10*time.Second, "the warning in the log", func() bool {
		return strings.Contains(srv.stderr.String(), "diff: the new revision allows an input the old one refuses")
	})
}

// TestServeDiffChildEndsUnknown: the background diff runs in a child
// process, so one that cannot live within --diff-memory ends alone: the
// diff of the reload is every answer unknown, saying why, and the server
// goes on answering. (With the bound lifted, TestServeDiffsEachReload's
// child finds the example.)
func TestServeDiffChildEndsUnknown(t *testing.T) {
	t.Parallel()
	root := copyQuota(t)
	testfiles.Edit(t, filepath.Join(root, "schemas", quotaDecision, "result.json"), `"x-arbiter-outcome": "allow",`, `"x-arbiter-outcome": "allow", "x-arbiter-allow": [true],`)
	srv := startServer(t, append(folderArgs(root), "--decision-log", "", "--diff-timeout", "1m", "--diff-memory", "8MiB", "--reload-debounce", "1h")...)
	client := &http.Client{Timeout: 30 * time.Second}

	setLimit(t, root, `"limit": 10`, `"limit": 11`)
	resp, err := client.Post(srv.url+"/v1/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	d := liveDiff(t, client, srv.url)
	for _, q := range diff.Questions {
		a := d.Report.Decisions[quotaDecision].Get(q)
		if a.Verdict != diff.Unknown || !strings.Contains(a.Reason, "--diff-memory") {
			t.Errorf("%s: %+v, want unknown, saying the child ended within --diff-memory", q, a)
		}
	}
	resp, err = client.Post(srv.url+"/v1/decisions/"+quotaDecision, "application/json", strings.NewReader(`{"tenant":"a","used":3}`))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("deciding after the child ended: %v %v", err, resp)
	}
	resp.Body.Close()
}

// TestDiffGate: with --diff-gate, a reload whose diff against the live
// revision finds an input newly allowed is refused, with the example, and
// the live revision stays.
func TestDiffGate(t *testing.T) {
	t.Parallel()
	root := copyQuota(t)
	testfiles.Edit(t, filepath.Join(root, "schemas", quotaDecision, "result.json"), `"x-arbiter-outcome": "allow",`, `"x-arbiter-outcome": "allow", "x-arbiter-allow": [true],`)
	srv := startServer(t, append(folderArgs(root), "--decision-log", "", "--diff-gate", "--diff-timeout", "1m", "--reload-debounce", "1h")...)
	client := &http.Client{Timeout: time.Minute}
	first := status(t, client, srv.url)["policy_revision"]

	setLimit(t, root, `"limit": 10`, `"limit": 11`)
	st := reload(t, client, srv.url)
	if st.OK || !strings.Contains(fmt.Sprint(st.Problems), "--diff-gate") || !strings.Contains(fmt.Sprint(st.Problems), "refuse_to_allow found") {
		t.Fatalf("reload of a raised limit under --diff-gate: %+v, want refused by the diff", st)
	}
	if got := status(t, client, srv.url)["policy_revision"]; got != first {
		t.Errorf("live revision %v after the refusal, want %v", got, first)
	}
	// A tightening is proved to allow nothing new: it goes live.
	setLimit(t, root, `"limit": 11`, `"limit": 9`)
	if st := reload(t, client, srv.url); !st.OK || !st.Changed {
		t.Fatalf("reload of a lowered limit under --diff-gate: %+v, want it live", st)
	}
}

// TestBuildCarriesTheDiff: arbiter build --diff-against writes the diff
// into the signed manifest; a replica with --diff-gate uses that report
// instead of running its own: it refuses the bundle that loosens, takes
// the one proved to allow nothing new, and shows its carried report.
func TestBuildCarriesTheDiff(t *testing.T) {
	t.Parallel()
	root := copyQuota(t)
	testfiles.Edit(t, filepath.Join(root, "schemas", quotaDecision, "result.json"), `"x-arbiter-outcome": "allow",`, `"x-arbiter-outcome": "allow", "x-arbiter-allow": [true],`)
	dir := t.TempDir()
	private, public := writeKeyPair(t, dir)
	build := func(name, rev string, extra ...string) []byte {
		t.Helper()
		out := filepath.Join(dir, name)
		args := append(append([]string{"build", "--output", out, "--revision", rev, "--signing-key", private, "--signing-key-id", "ops"}, folderArgs(root)...), extra...)
		if _, stderr, code := runCLI(t, nil, args...); code != exitOK {
			t.Fatalf("arbiter build %s: exit %d\n%s", name, code, stderr)
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	a := build("a.tar.gz", "r1")
	setLimit(t, root, `"limit": 10`, `"limit": 11`)
	loose := build("loose.tar.gz", "r2", "--diff-against", filepath.Join(dir, "a.tar.gz"))
	setLimit(t, root, `"limit": 11`, `"limit": 9`)
	tight := build("tight.tar.gz", "r3", "--diff-against", filepath.Join(dir, "a.tar.gz"))

	// The report is in the manifest, of r1 against r2.
	rev, err := policybundle.ReadLocalFile(filepath.Join(dir, "loose.tar.gz"), policybundle.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var rep diff.Report
	if err := json.Unmarshal(rev.Files.Diff, &rep); err != nil || rep.Old != "r1" || rep.New != "r2" || rep.Decisions[quotaDecision].RefuseToAllow.Verdict != diff.Found {
		t.Fatalf("the loose bundle's manifest diff: %v %+v", err, rep)
	}

	bundles := &staticBundle{}
	bs := httptest.NewServer(bundles)
	defer bs.Close()
	// No solver on PATH: a diff run here could only be unknown (refused),
	// so the tight bundle goes live on its carried report alone.
	srv := startServerWith(t, func(c *exec.Cmd) { c.Env = append(os.Environ(), "PATH=/nonexistent") }, append(folderArgs(root), "--decision-log", "", "--diff-gate", "--diff-timeout", "1m",
		"--bundle-url", bs.URL+"/bundles/arbiter.tar.gz", "--bundle-verification-key-file", public, "--bundle-verification-key-id", "ops",
		"--bundle-poll-min-delay", "1s", "--bundle-poll-max-delay", "1s")...)
	client := &http.Client{Timeout: 30 * time.Second}
	revision := func() any { return status(t, client, srv.url)["policy_revision"] }
	bundles.set(a)
	wait.Until(t, 30*time.Second, "r1 live", func() bool { return revision() == "r1" })
	bundles.set(loose)
	wait.Until(t, 30*time.Second, "the loose bundle refused", func() bool {
		return strings.Contains(fmt.Sprint(status(t, client, srv.url)["bundles"]), "--diff-gate")
	})
	if got := revision(); got != "r1" {
		t.Fatalf("live revision %v after a loosening bundle under --diff-gate, want r1", got)
	}
	bundles.set(tight)
	wait.Until(t, 30*time.Second, "r3 live", func() bool { return revision() == "r3" })
	var d *diff.Status
	wait.Until(t, 30*time.Second, "the carried diff in /v1/status", func() bool {
		b, _ := json.Marshal(status(t, client, srv.url)["diff"])
		d = nil
		_ = json.Unmarshal(b, &d)
		return d != nil && d.State == diff.StateDone
	})
	if !d.Carried || d.Old != "r1" || d.New != "r3" || d.Report.Decisions[quotaDecision].RefuseToAllow.Verdict != diff.None {
		t.Errorf("/v1/status diff %+v, want the carried report of r1 against r3, refuse_to_allow none", d)
	}
}

// reload asks POST /v1/reload and returns its status.
func reload(t *testing.T, client *http.Client, url string) live.ReloadStatus {
	t.Helper()
	resp, err := client.Post(url+"/v1/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st live.ReloadStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// hangingSolver writes a stand-in for z3 that records its pid in the file
// it returns and then never answers.
func hangingSolver(t *testing.T) (path, pids string) {
	t.Helper()
	dir := t.TempDir()
	path, pids = filepath.Join(dir, "z3"), filepath.Join(dir, "pids")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho $$ >> '"+pids+"'\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, pids
}

// solverPIDs are the pids the stand-in recorded.
func solverPIDs(pids string) []string {
	b, _ := os.ReadFile(pids)
	return strings.Fields(string(b))
}

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// TestKilledDiffLeavesNoSolver: a solver ends with the `arbiter diff` that
// asked it, even one killed outright.
func TestKilledDiffLeavesNoSolver(t *testing.T) {
	t.Parallel()
	solver, pids := hangingSolver(t)
	root, edited := copyQuota(t), copyQuota(t)
	setLimit(t, edited, `"limit": 10`, `"limit": 11`) // a question to ask (a self-diff asks none)
	cmd := exec.Command(binPath, "diff", "--solver", solver, "--tests", "", root, edited)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 30*time.Second, "the solver started", func() bool { return len(solverPIDs(pids)) > 0 })
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	wait.Until(t, 10*time.Second, "the solver gone with arbiter diff", func() bool {
		for _, p := range solverPIDs(pids) {
			if running(p) {
				return false
			}
		}
		return true
	})
}

// TestServeDiffTimeoutEndsUnknown: a diff past --diff-timeout is every
// answer unknown, saying so, and its child and the child's solvers are
// stopped together.
func TestServeDiffTimeoutEndsUnknown(t *testing.T) {
	t.Parallel()
	solver, pids := hangingSolver(t)
	root := copyQuota(t)
	srv := startServerWith(t, func(c *exec.Cmd) { c.Env = append(os.Environ(), "ARBITER_SOLVER="+solver) },
		append(folderArgs(root), "--decision-log", "", "--diff-timeout", "3s", "--reload-debounce", "1h")...)
	client := &http.Client{Timeout: 30 * time.Second}
	setLimit(t, root, `"limit": 10`, `"limit": 11`)
	if st := reload(t, client, srv.url); !st.OK {
		t.Fatalf("reload: %+v", st)
	}
	d := liveDiff(t, client, srv.url)
	if a := d.Report.Decisions[quotaDecision].RefuseToAllow; a.Verdict != diff.Unknown || !strings.Contains(a.Reason, "did not finish within") {
		t.Errorf("refuse_to_allow %+v, want unknown: did not finish", a)
	}
	if len(solverPIDs(pids)) == 0 {
		t.Fatal("the child never started its solver")
	}
	wait.Until(t, 10*time.Second, "the child's solver stopped", func() bool {
		for _, p := range solverPIDs(pids) {
			if running(p) {
				return false
			}
		}
		return true
	})
}

// liveDiff waits for the diff of the live revision in /v1/status to be done.
func liveDiff(t *testing.T, client *http.Client, url string) *diff.Status {
	t.Helper()
	var d *diff.Status
	wait.Until(t, time.Minute, "the diff of the reload in /v1/status", func() bool {
		b, _ := json.Marshal(status(t, client, url)["diff"])
		d = nil
		_ = json.Unmarshal(b, &d)
		return d != nil && d.State == diff.StateDone
	})
	return d
}

// setLimit edits the quota decision's data and re-records its fixtures,
// as an engineer making the edit on purpose would.
func setLimit(t *testing.T, root, from, to string) {
	t.Helper()
	testfiles.Edit(t, filepath.Join(root, "policies", "decisions", quotaDecision, "data.json"), from, to)
	if _, _, code := runCLI(t, nil, append([]string{"test", "--update"}, folderArgs(root)...)...); code != exitOK {
		t.Fatalf("test --update: exit %d", code)
	}
}

// TestDiffSignedBundles: arbiter diff reads signed bundles without a key
// (their signature unverified, as -h says), and with opa build's
// --verification-key, --verification-key-id and --signing-alg verifies each
// bundle side: a bundle signed with another key, or not signed, is refused
// by name, before anything is compared.
func TestDiffSignedBundles(t *testing.T) {
	t.Parallel()
	root := copyQuota(t)
	dir := t.TempDir()
	private, public := writeKeyPair(t, dir)
	_, otherPublic := writeKeyPair(t, t.TempDir())
	build := func(name string, sign ...string) string {
		t.Helper()
		out := filepath.Join(dir, name)
		args := append(append([]string{"build", "--output", out}, folderArgs(root)...), sign...)
		if _, stderr, code := runCLI(t, nil, args...); code != exitOK {
			t.Fatalf("arbiter build %s: exit %d\n%s", name, code, stderr)
		}
		return out
	}
	signed := build("signed.tar.gz", "--signing-key", private, "--signing-key-id", "ops")
	unsigned := build("unsigned.tar.gz")
	verify := func(key string) []string {
		return []string{"--verification-key", key, "--verification-key-id", "ops", "--signing-alg", "RS256"}
	}
	for _, tc := range []struct {
		name    string
		args    []string
		refused string // the bundle refused, "" for none
	}{
		{"signed, no key", []string{signed, signed}, ""},
		{"signed, its key", append([]string{signed, signed}, verify(public)...), ""},
		{"signed, another key", append([]string{signed, signed}, verify(otherPublic)...), signed},
		{"signed and unsigned, its key", append([]string{signed, unsigned}, verify(public)...), unsigned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{"diff"}, tc.args...), "--format", "json", "--budget", "2s", "--tests", "")
			stdout, stderr, code := runCLI(t, nil, args...)
			if tc.refused == "" {
				var rep diff.Report
				if err := json.Unmarshal([]byte(stdout), &rep); err != nil || len(rep.Decisions) == 0 || strings.Contains(stderr, "loading") {
					t.Fatalf("exit %d, want a report (%v)\nstdout:\n%s\nstderr:\n%s", code, err, stdout, stderr)
				}
				return
			}
			if code != exitInput || stdout != "" || !strings.Contains(stderr, "loading "+tc.refused+": ") {
				t.Fatalf("exit %d, want 2 refusing %s\nstdout:\n%s\nstderr:\n%s", code, tc.refused, stdout, stderr)
			}
		})
	}
}
