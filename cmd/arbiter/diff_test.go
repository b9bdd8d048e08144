package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/golden"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/internal/wait"
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
	golden.Check(t, "testdata/diff/same.txt", golden.Mask([]byte(out), dir))

	testfiles.Edit(t, filepath.Join(new, "policies", "decisions", "quota_check", "data.json"), `"limit": 10`, `"limit": 11`)
	out, stderr, code = runCLI(t, nil, append(append([]string{"diff"}, tests...), old, new)...)
	if code != exitError {
		t.Fatalf("raised limit: exit %d, want 1\n%s%s", code, out, stderr)
	}
	golden.Check(t, "testdata/diff/raised_limit.txt", golden.Mask([]byte(out), dir))
	out, _, code = runCLI(t, nil, append(append([]string{"diff", "--format", "json"}, tests...), old, new)...)
	if code != exitError {
		t.Fatalf("raised limit, json: exit %d, want 1", code)
	}
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
	var st engine.ReloadStatus
	_ = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if !st.OK || !st.Changed || st.From != first {
		t.Fatalf("reload: %+v, want the raised limit live, from %v", st, first)
	}
	var d *diff.Status
	wait.Until(t, time.Minute, "the diff of the reload in /v1/status", func() bool {
		b, _ := json.Marshal(status(t, client, srv.url)["diff"])
		d = nil
		_ = json.Unmarshal(b, &d)
		return d != nil && d.State == diff.StateDone
	})
	if d.Old != first || d.New != st.Revision || d.Report.Decisions[quotaDecision].RefuseToAllow.Verdict != diff.Found || len(d.Report.Decisions[quotaDecision].RefuseToAllow.Example) == 0 {
		t.Errorf("/v1/status diff %+v, want %v against %s with a found refuse_to_allow example", d, first, st.Revision)
	}
	wait.Until(t, 10*time.Second, "the warning in the log", func() bool {
		return strings.Contains(srv.stderr.String(), "diff: the new revision allows an input the old one refuses")
	})
}
