package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/wait"
	"github.com/arbiter-dev/arbiter/replay"
)

// crashReadLog reads a decision log, with its rotated backups (every file
// of its folder, oldest first), and returns the ids it holds, in order, and
// the reader's warnings.
func crashReadLog(t *testing.T, path string) ([]string, []string) {
	t.Helper()
	files, err := replay.Files([]string{filepath.Dir(path)})
	if err != nil {
		t.Fatal(err)
	}
	var ids, warnings []string
	for _, f := range files {
		w, err := decisionlog.ReadFile(f, func(_ int, rec decisionlog.Record) error {
			ids = append(ids, rec.DecisionID)
			return nil
		})
		if err != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		warnings = append(warnings, w...)
	}
	return ids, warnings
}

// crashReplay runs `arbiter replay` as an operator would.
func crashReplay(t *testing.T, root, logPath string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binPath, "replay", "--log", filepath.Dir(logPath), "--policies", filepath.Join(root, "policies"), "--schemas", filepath.Join(root, "schemas"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestCrashKill9 kills the server with SIGKILL in the middle of load, then
// checks what a crash leaves: a decision log that the reader and replay
// accept with at most its last line torn, every logged record one that was
// answered or in flight, and a restart on the same files and log that
// serves the same answers and appends cleanly even after a torn last line.
func TestCrashKill9(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	const clients = 4
	root := copyRepo(t)
	logPath := filepath.Join(t.TempDir(), "decisions.log")
	args := append(folderArgs(root), "--decision-log", logPath)
	srv := startServer(t, args...)

	fixtures, err := engine.LoadFixtures(filepath.Join(root, "policy_test"))
	if err != nil {
		t.Fatal(err)
	}
	var good []engine.Fixture
	for _, fx := range fixtures {
		if fx.WantResult != nil && fx.Input != nil {
			good = append(good, fx)
		}
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var mu sync.Mutex
	answered := map[string]bool{}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	killed := make(chan struct{})
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := c; ; n += clients {
				fx := good[n%len(good)]
				resp, err := client.Post(srv.url+"/v1/decisions/"+fx.Decision, "application/json", bytes.NewReader(fx.Input))
				if err != nil {
					select {
					case <-killed:
					default:
						t.Errorf("before the kill: %v", err)
					}
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("answer %d", resp.StatusCode)
					return
				}
				mu.Lock()
				answered[resp.Header.Get("X-Arbiter-Decision-Id")] = true
				mu.Unlock()
			}
		}()
	}
	wait.Until(t, 20*time.Second, "load to build up", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) >= 500
	})
	close(killed)
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	exitErr := <-srv.done
	srv.done <- exitErr
	wg.Wait()

	// What the crash left: every line a record but perhaps the last.
	ids, warnings := crashReadLog(t, logPath)
	if len(warnings) > 1 || len(warnings) == 1 && !strings.Contains(warnings[0], "torn last line") {
		t.Errorf("more than a torn last line: %v", warnings)
	}
	notAnswered, logged := 0, map[string]bool{}
	for _, id := range ids {
		if logged[id] {
			t.Errorf("decision %s logged twice", id)
		}
		logged[id] = true
		if !answered[id] {
			notAnswered++ // queued, then killed before its answer was written
		}
	}
	lost := 0
	for id := range answered {
		if !logged[id] {
			lost++ // answered, but still queued or buffered at the kill
		}
	}
	t.Logf("killed after %d answers: %d records logged, %d of them unanswered, %d answers lost, warnings %v", len(answered), len(ids), notAnswered, lost, warnings)
	if notAnswered > clients {
		t.Errorf("%d logged records were never answered, but only %d requests were in flight", notAnswered, clients)
	}
	// The writer flushes whenever its queue is empty, so a crash loses what
	// was queued or buffered (64 KiB at most) at that moment, not history:
	// loose, so that a starved writer on a busy machine does not flake it,
	// yet a writer that only flushed at Close would lose all 500.
	if lost > len(answered)/2 {
		t.Errorf("%d of %d answers were never written", lost, len(answered))
	}

	code, stdout, stderr := crashReplay(t, root, logPath)
	if wantCode := map[bool]int{true: exitSkipped, false: exitOK}[len(warnings) == 1]; code != wantCode || strings.Count(stderr, "warning:") > 1 || !strings.Contains(stdout, "0 changed") {
		t.Errorf("replay after kill -9: exit %d\n%s%s", code, stdout, stderr)
	}

	// Tear the last line explicitly, as a crash in mid-write would.
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i == len(b)-1 {
		start := bytes.LastIndexByte(b[:i], '\n') + 1
		b = b[:start+(i-start)/2]
	}
	if err := os.WriteFile(logPath, b, 0o640); err != nil {
		t.Fatal(err)
	}
	ids2, warnings := crashReadLog(t, logPath)
	if len(warnings) != 1 || !strings.Contains(warnings[0], "torn last line") {
		t.Errorf("after tearing the last line: warnings %v", warnings)
	}
	if len(ids2) < len(ids)-1 || len(ids2) == 0 {
		t.Errorf("after tearing the last line %d records are left of %d", len(ids2), len(ids))
	}
	code, stdout, stderr = crashReplay(t, root, logPath)
	if code != exitSkipped || strings.Count(stderr, "warning:") != 1 || !strings.Contains(stderr, "torn last line") || !strings.Contains(stdout, fmt.Sprintf("replayed %d decisions from 1 files: 0 changed, %d unchanged, 1 skipped", len(ids2)+1, len(ids2))) {
		t.Errorf("replay of a torn log: exit %d\n%s%s", code, stdout, stderr)
	}

	// Restart on the same files and log: the same answers; the torn file is
	// rotated away whole (a backup ending in its torn line) and the new
	// records start a new file, the first of them not lost with the torn one.
	srv2 := startServer(t, args...)
	var after []string
	for i, fx := range good {
		if i%5 != 0 {
			continue
		}
		a := post(t, client, srv2.url+"/v1/decisions/"+fx.Decision, fx.Input)
		checkAnswer(t, fx, a, false)
		after = append(after, a.id)
	}
	srv2.stop(t)
	ids3, warnings := crashReadLog(t, logPath)
	if len(warnings) != 1 || !strings.Contains(warnings[0], "torn last line") {
		t.Errorf("after the restart: warnings %v, want the one torn line, last in its backup", warnings)
	}
	if files, _ := replay.Files([]string{filepath.Dir(logPath)}); len(files) != 2 {
		t.Errorf("after the restart the log folder holds %v, want the torn backup and the new file", files)
	}
	if len(ids3) < len(ids2) {
		t.Fatalf("the restart lost records: %d before, %d after", len(ids2), len(ids3))
	}
	if got := ids3[len(ids2):]; strings.Join(got, ",") != strings.Join(after, ",") {
		t.Errorf("after the restart the log holds %d new records, want the %d answered (first lost: %v)", len(got), len(after), len(got) > 0 && got[0] != after[0])
	}
}

// TestServeRefusesBrokenPoliciesAtStart: there is no last good copy to fall
// back to at start, so a broken file is a non-zero exit naming file and line.
func TestServeRefusesBrokenPoliciesAtStart(t *testing.T) {
	t.Parallel()
	root := copyQuota(t)
	policy := filepath.Join(root, "policies", "decisions", quotaDecision, "policy.rego")
	b, err := os.ReadFile(policy)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(quotaAllow))
	if i < 0 {
		t.Fatal("the quota policy changed: no allow member")
	}
	line := bytes.Count(b[:i], []byte("\n")) + 1
	if err := os.WriteFile(policy, bytes.Replace(b, []byte(quotaAllow), []byte(quotaAllowBroken), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"serve", "--addr", "127.0.0.1:0", "--decision-log", "", "--state-dir", t.TempDir()}, folderArgs(root)...)...)
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code <= 0 {
		t.Fatalf("serve with a syntax error: exit %d (%v)\n%s", code, err, out)
	}
	want := fmt.Sprintf("policy.rego:%d", line)
	if !strings.Contains(string(out), want) || strings.Contains(string(out), "msg=listening") {
		t.Errorf("output does not name %s, or it listened:\n%s", want, out)
	}
}

// TestServeFallsBackToLastGoodAtStart: a process restarted while its
// configured folders are broken serves the last revision that passed its
// tests (saved in --state-dir), says why, and takes the configured folders
// back as soon as they load.
func TestServeFallsBackToLastGoodAtStart(t *testing.T) {
	t.Parallel()
	root := copyQuota(t)
	state := t.TempDir()
	args := append(folderArgs(root), "--decision-log", "", "--state-dir", state)
	client := &http.Client{Timeout: 10 * time.Second}
	body := []byte(`{"tenant": "t", "used": 1}`)

	first := startServer(t, args...)
	good := status(t, client, first.url)["policy_revision"].(string)
	if err := first.cmd.Process.Kill(); err != nil { // a crash, not a stop
		t.Fatal(err)
	}
	<-first.done
	first.done <- nil

	policy := filepath.Join(root, "policies", "decisions", quotaDecision, "policy.rego")
	editFile(t, policy, quotaAllow, quotaAllowBroken)

	second := startServer(t, args...)
	st := status(t, client, second.url)
	if st["policy_revision"] != good || !strings.HasPrefix(fmt.Sprint(st["policy_origin"]), "the last good copy saved in ") {
		t.Fatalf("restarted on revision %v from %v, want the last good %s", st["policy_revision"], st["policy_origin"], good)
	}
	lr := st["last_reload"].(map[string]any)
	if lr["ok"] != false || !strings.Contains(fmt.Sprint(lr["problems"]), quotaDecision+"/policy.rego line:") {
		t.Errorf("last_reload = %v, want the start reported as failed, naming policy.rego", lr)
	}
	if !strings.Contains(second.stderr.String(), "serving the last good revision") {
		t.Errorf("the log does not say it serves the last good revision:\n%s", second.stderr.String())
	}
	a := post(t, client, second.url+"/v1/decisions/"+quotaDecision, body)
	if a.status != http.StatusOK || !bytes.Contains(a.body, []byte(`"allow":true`)) || !bytes.Contains(a.body, []byte(good)) {
		t.Errorf("answer on the last good revision: %d %s", a.status, a.body)
	}

	// Fixing the configured folders activates them.
	editFile(t, policy, quotaAllowBroken, `{"allow": 0 == count(reasons),`) // fixed, and another revision
	wait.Until(t, 10*time.Second, "the fixed folders to load", func() bool {
		st := status(t, client, second.url)
		return st["last_reload"].(map[string]any)["ok"] == true && st["policy_revision"] != good
	})
	second.stop(t)
}
