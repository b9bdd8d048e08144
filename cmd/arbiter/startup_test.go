package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/wait"
	"github.com/arbiter-dev/arbiter/policybundle"
)

// The start's one line about a misconfiguration that leaves the process
// up: logged once, at level ERROR, naming the flag (fleet.sayAtStart,
// store.sayAtStart). One that stops it is the line of its exit.
const (
	bundleStartLine = `level=ERROR msg="no policy revision at start: not ready until a bundle activates"`
	storeStartLine  = `level=ERROR msg="decision store unusable at start: decisions are answered, their records wait for it"`
)

// linesWith are the lines of log that contain every one of subs.
func linesWith(log string, subs ...string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		all := l != ""
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

// readyBody is /health/ready's status and body.
func readyBody(t *testing.T, url string) (int, string) {
	t.Helper()
	code, doc := getJSON(t, url+"/health/ready")
	return code, fmt.Sprint(doc)
}

// closedURL is the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/bundles/arbiter.tar.gz"
}

// TestStartNamesBundleMisconfiguration: a replica whose bundle can never go
// live (a key that verifies nothing, a placeholder key, a bundle server
// that cannot be reached) says so once at start, in one line naming the
// flag, and stays not ready with that reason in /health/ready's body,
// while its polls go on (counted as failed requests).
func TestStartNamesBundleMisconfiguration(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	root := copyRepo(t)
	keys := t.TempDir()
	private, _ := writeKeyPair(t, keys)
	_, otherPublic := writeKeyPair(t, t.TempDir()) // a key pair the bundle was not signed with
	placeholder := filepath.Join(keys, "placeholder.pem")
	if err := os.WriteFile(placeholder, []byte("REPLACE_ME\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	raw, _, err := policybundle.Build(context.Background(), policybundle.BuildOptions{
		Policies: filepath.Join(root, "policies"), Schemas: filepath.Join(root, "schemas"), Tests: filepath.Join(root, "policy_test"),
		Revision: "signed-1", SigningKey: private,
	})
	if err != nil {
		t.Fatal(err)
	}
	bundles := &staticBundle{}
	bundles.set(raw)
	bs := httptest.NewServer(bundles)
	t.Cleanup(bs.Close) // after the parallel subtests, which run once this function returns

	for _, tc := range []struct {
		name string
		args []string
		flag string // the flag the line and the reason name
	}{
		{"another key", []string{"--bundle-url", bs.URL + "/bundles/arbiter.tar.gz", "--bundle-verification-key-file", otherPublic}, "--bundle-verification-key-file " + otherPublic},
		{"placeholder key", []string{"--bundle-url", bs.URL + "/bundles/arbiter.tar.gz", "--bundle-verification-key-file", placeholder}, "--bundle-verification-key-file " + placeholder},
		{"unreachable bundle server", []string{"--bundle-url", closedURL(t)}, "--bundle-url http://127.0.0.1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, append(append(folderArgs(root), "--bundle-poll-min-delay", "1s", "--bundle-poll-max-delay", "1s"), tc.args...)...)
			wait.Until(t, 30*time.Second, "the start's line", func() bool { return len(linesWith(s.stderr.String(), bundleStartLine)) > 0 })
			// Polls after the first fail the same way, and do not repeat it.
			wait.Until(t, 30*time.Second, "three failed polls", func() bool {
				return metricValue(t, http.DefaultClient, s.url, `arbiter_bundle_requests_total{bundle="arbiter",result="failed"}`) >= 3
			})
			if got := linesWith(s.stderr.String(), bundleStartLine); len(got) != 1 || !strings.Contains(got[0], "problem=\""+tc.flag) {
				t.Errorf("start lines naming %q: %q, want one", tc.flag, got)
			}
			code, body := readyBody(t, s.url)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "not_ready") || !strings.Contains(body, tc.flag) {
				t.Errorf("/health/ready = %d %s, want 503 not_ready naming %s", code, body, tc.flag)
			}
			s.stop(t)
		})
	}
}

// TestStartRefusesAnEmptyPolicyFolder: no policies and no last good copy:
// nothing could be answered, so serve exits non-zero, before it listens,
// with one line naming --policies.
func TestStartRefusesAnEmptyPolicyFolder(t *testing.T) {
	t.Parallel()
	root := copyRepo(t)
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	code, stderr, listened := runServe(t, nil, "--addr", "127.0.0.1:0", "--policies", empty,
		"--schemas", filepath.Join(root, "schemas"), "--tests", "")
	got := linesWith(stderr, "level=ERROR", "--policies "+empty+": no policies loaded")
	if listened || code != exitError || len(got) != 1 || len(linesWith(stderr, "level=ERROR")) != 1 {
		t.Fatalf("serve with an empty --policies: exit %d, listened %v, start lines %q, want exit %d and one ERROR line naming --policies:\n%s",
			code, listened, got, exitError, stderr)
	}
}

// TestStartSaysTheStoreRefusesTheLogin: a database that refuses the login
// is one ERROR line naming --decision-store at start (without the
// password), /v1/status' store.last_error and arbiter_decision_store_failing
// 1; the replica stays ready and answers, since the store is not on the
// answer path. The shared cluster trusts every password (initdb
// --auth=trust), so the login it refuses is a role it does not have
// (SQLSTATE 28000, the class of a wrong password's 28P01).
func TestStartSaysTheStoreRefusesTheLogin(t *testing.T) {
	t.Parallel()
	good := pg.DB(t)
	const password = "startup-s3cret"
	bad := strings.Replace(good, "postgres@", "no_such_role:"+password+"@", 1)
	args, _ := quickArgs(t)
	s := startServer(t, append(args, "--decision-store", bad, "--shutdown-timeout", "1s")...) // the stop cannot write what waits
	wait.Until(t, 30*time.Second, "the start's line", func() bool { return len(linesWith(s.stderr.String(), storeStartLine)) > 0 })
	got := linesWith(s.stderr.String(), storeStartLine)
	if len(got) != 1 || !strings.Contains(got[0], `problem="--decision-store postgres://no_such_role:`) || !strings.Contains(got[0], "no_such_role") {
		t.Errorf("start lines: %q, want one naming --decision-store and the refused role", got)
	}

	fx := decidedFixture(t)
	if a := post(t, http.DefaultClient, s.url+"/v1/decisions/"+fx.Decision, fx.RequestBody()); a.status != http.StatusOK {
		t.Errorf("a decision with the store refusing the login: %d %s, want 200", a.status, a.body)
	}
	if code, body := readyBody(t, s.url); code != http.StatusOK {
		t.Errorf("/health/ready = %d %s, want 200: the store is not on the answer path", code, body)
	}
	st, _ := status(t, http.DefaultClient, s.url)["store"].(map[string]any)
	if e := fmt.Sprint(st["last_error"]); !strings.Contains(e, "no_such_role") {
		t.Errorf("/v1/status store.last_error = %q, want the refused login", e)
	}
	if v := metricValue(t, http.DefaultClient, s.url, "arbiter_decision_store_failing"); v != 1 {
		t.Errorf("arbiter_decision_store_failing = %v, want 1", v)
	}
	if strings.Contains(s.stderr.String(), password) {
		t.Error("the log shows the store's password")
	}
	s.stop(t)
}

// TestSecondServerOnOneLogRefusesToStart: a second server given the
// decision log file, or the state folder, of a running one exits before
// it listens, naming the flag and the first one's pid; the lock goes with
// the process that held it, even killed with SIGKILL.
func TestSecondServerOnOneLogRefusesToStart(t *testing.T) {
	t.Parallel()
	args, logPath := quickArgs(t)
	state := t.TempDir()
	first := startServer(t, append(args, "--state-dir", state)...)
	pid := first.cmd.Process.Pid

	for _, tc := range []struct {
		name, flag string
		args       []string
	}{
		{"one log file", "--decision-log " + logPath, []string{"--decision-log", logPath, "--state-dir", t.TempDir()}},
		{"one state folder", "--state-dir " + state, []string{"--decision-log", filepath.Join(t.TempDir(), "decisions.log"), "--state-dir", state}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The first one's flags, then the case's (the last of a flag wins).
			code, stderr, listened := runServe(t, nil, append(append([]string{"--addr", "127.0.0.1:0"}, args...), tc.args...)...)
			want := fmt.Sprintf("%s is in use by process %d", tc.flag, pid)
			if listened || code != exitError || len(linesWith(stderr, "level=ERROR", want)) != 1 {
				t.Errorf("a second server on %s: exit %d, listened %v, want exit %d and one ERROR line %q:\n%s", tc.name, code, listened, exitError, want, stderr)
			}
		})
	}

	if err := first.cmd.Process.Kill(); err != nil { // SIGKILL: no chance to release anything
		t.Fatal(err)
	}
	<-first.done
	first.done <- nil
	again := startServer(t, append(args, "--state-dir", state)...)
	again.stop(t)
}
