package main

import (
	"bufio"
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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/pgtest"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// binPath is the arbiter binary under test, and stamp the version it was
// built with (TestStampedVersion): make test passes the one make build
// built (ARBITER_BIN, stamped ARBITER_VERSION), so the tests boot the
// artifact itself; without it TestMain builds one, stamped testStamp.
var binPath, stamp = os.Getenv("ARBITER_BIN"), os.Getenv("ARBITER_VERSION")

// pg is the PostgreSQL cluster the store's tests share, each with a
// database of its own (pgtest.Main); a test that stops the server starts
// its own (pgtest.Start).
var pg *pgtest.Cluster

func TestMain(m *testing.M) {
	if binPath != "" {
		os.Exit(pgtest.Main(m, &pg))
	}
	dir, err := os.MkdirTemp("", "arbiter-bin-")
	if err != nil {
		panic(err)
	}
	binPath, stamp = filepath.Join(dir, "arbiter"), testStamp
	// Stamped as the Makefile and the Dockerfile stamp it.
	out, err := exec.Command("go", "build", "-ldflags", "-X main.version="+stamp, "-o", binPath, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building arbiter: %v\n%s", err, out)
		os.Exit(1)
	}
	code := pgtest.Main(m, &pg)
	os.RemoveAll(dir)
	os.Exit(code)
}

type proc struct {
	cmd    *exec.Cmd
	url    string
	stderr *testfiles.Buffer
	done   chan error
}

var listening = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startServer boots `arbiter serve` on a free loopback port.
func startServer(t *testing.T, args ...string) *proc {
	t.Helper()
	return startServerWith(t, func(*exec.Cmd) {}, args...)
}

// startServerWith is startServer with the command adjusted by setup before
// it starts (its stdout, environment or program).
func startServerWith(t *testing.T, setup func(*exec.Cmd), args ...string) *proc {
	t.Helper()
	s := &proc{stderr: &testfiles.Buffer{}, done: make(chan error, 1)}
	base := []string{"serve", "--addr", "127.0.0.1:0"}
	if !containsArg(args, "--state-dir") {
		base = append(base, "--state-dir", t.TempDir())
	}
	// A log of its own: two servers on one log file refuse to share it
	// (service/lock.go), and the default is the working directory's.
	if !containsArg(args, "--decision-log") {
		base = append(base, "--decision-log", filepath.Join(t.TempDir(), "decisions.log"))
	}
	// The background diff of every reload costs seconds of CPU and up to a
	// GB with the shipped policies (docs/DIFF.md): only the tests of it
	// run it.
	if !containsArg(args, "--diff-timeout") {
		base = append(base, "--diff-timeout", "0")
	}
	s.cmd = exec.Command(binPath, append(base, args...)...)
	s.cmd.Stderr = s.stderr
	s.cmd.Stdout = io.Discard
	setup(s.cmd)
	// Its temporary files (OPA's OCI store among them) go in the test's
	// folder, removed after the test even when the process was killed.
	if s.cmd.Env == nil {
		s.cmd.Env = os.Environ()
	}
	s.cmd.Env = append(s.cmd.Env, "TMPDIR="+t.TempDir())
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.done
		if t.Failed() {
			t.Logf("server stderr:\n%s", s.stderr.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if m := listening.FindStringSubmatch(s.stderr.String()); m != nil {
			s.url = "http://" + m[1]
			return s
		}
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("arbiter serve exited early: %v\n%s", err, s.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("arbiter serve did not start:\n%s", s.stderr.String())
	return nil
}

func containsArg(args []string, name string) bool {
	for _, a := range args {
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// stop sends SIGTERM and waits for a clean exit.
func (s *proc) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			t.Fatalf("arbiter serve exited with %v\n%s", err, s.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("arbiter serve did not stop within 30s of SIGTERM")
	}
}

// copyRepo copies the repository's policies, schemas and tests into a
// temporary folder that a test may edit.
func copyRepo(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, dir := range []string{"policies", "schemas", "policy_test"} {
		if err := os.CopyFS(filepath.Join(root, dir), os.DirFS(filepath.Join("..", "..", dir))); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func folderArgs(root string) []string {
	return []string{"--policies", filepath.Join(root, "policies"), "--schemas", filepath.Join(root, "schemas"), "--tests", filepath.Join(root, "policy_test")}
}

type answer struct {
	status int
	id     string
	body   []byte
}

func post(t testing.TB, client *http.Client, url string, body []byte) answer {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Errorf("POST %s: %v", url, err)
		return answer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, id: resp.Header.Get("X-Arbiter-Decision-Id"), body: b}
}

func status(t *testing.T, client *http.Client, url string) map[string]any {
	resp, err := client.Get(url + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// editFile replaces old by new in a file as an editor does (write, then
// rename), failing when old is absent.
var editFile = testfiles.Edit

// TestServeEndToEnd boots the real binary, decides every fixture over TCP on
// both endpoints, edits policies under load (a data edit goes live, a broken
// policy and a failing test are refused while the old revision answers, the
// fix activates), stops it with SIGTERM and checks the decision log against
// every answer.
func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	root := copyRepo(t)
	addQuota(t, root) // the decision this test edits
	logPath := filepath.Join(t.TempDir(), "decisions.log")
	srv := startServer(t, append(folderArgs(root), "--decision-log", logPath)...)
	client := &http.Client{Timeout: 10 * time.Second}

	var mu sync.Mutex
	answered := map[string]answer{} // decision id -> answer
	keep := func(a answer) {
		if a.id == "" {
			t.Errorf("answer without decision id: %d %s", a.status, a.body)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, dup := answered[a.id]; dup {
			t.Errorf("decision id %s answered twice", a.id)
		}
		answered[a.id] = a
	}

	fixtures, err := engine.LoadFixtures(filepath.Join(root, "policy_test"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fx := range fixtures {
		body := fx.RequestBody()
		plain := post(t, client, srv.url+"/v1/decisions/"+fx.Decision, body)
		keep(plain)
		checkAnswer(t, fx, plain, false)
		if fx.Body == nil { // the Data API wraps a JSON input
			wrapped := post(t, client, srv.url+"/v1/data/decisions/"+fx.Decision+"/decision", []byte(`{"input":`+string(body)+`}`))
			keep(wrapped)
			checkAnswer(t, fx, wrapped, true)
		}
	}

	// Load: keep deciding while the files change underneath.
	ctx, stopLoad := context.WithCancel(context.Background())
	var loadWG sync.WaitGroup
	// Runs before the server is killed (cleanups run last-in first-out), so
	// no load request outlives the test when it fails early.
	t.Cleanup(func() { stopLoad(); loadWG.Wait() })
	var loadCount, loadFailures atomic.Int64
	// The edits below touch only the quota decision: the answer to a
	// repository fixture must not change while they happen.
	typical := decidedFixture(t)
	for i := 0; i < 4; i++ {
		loadWG.Add(1)
		go func() {
			defer loadWG.Done()
			for ctx.Err() == nil {
				a := post(t, client, srv.url+"/v1/decisions/"+typical.Decision, typical.Input)
				keep(a)
				loadCount.Add(1)
				var env struct {
					Result json.RawMessage `json:"result"`
				}
				if a.status != http.StatusOK || json.Unmarshal(a.body, &env) != nil || !engine.SameJSON(env.Result, typical.WantResult) {
					loadFailures.Add(1)
				}
			}
		}()
	}

	rev0 := status(t, client, srv.url)["policy_revision"].(string)
	used50 := []byte(`{"tenant": "t", "used": 50}`)
	isAllowed := func() bool {
		a := post(t, client, srv.url+"/v1/decisions/"+quotaDecision, used50)
		keep(a)
		return bytes.Contains(a.body, []byte(`"allow":true`))
	}
	if isAllowed() {
		t.Fatal("50 is within the quota before the edit")
	}
	data := filepath.Join(root, "policies", "decisions", quotaDecision, "data.json")
	editFile(t, data, `"limit": 10`, `"limit": 100`)
	// Debounce, rebuild and the test gate take about 0.3 s on an idle
	// machine; the generous deadline only ends a test that would hang.
	took := wait.Until(t, 30*time.Second, "the data edit to go live", isAllowed)
	t.Logf("data edit live after %s", took)
	rev1 := status(t, client, srv.url)["policy_revision"].(string)
	if rev1 == rev0 {
		t.Fatal("revision did not change")
	}

	// A policy that does not compile is refused; the last good one answers.
	policy := filepath.Join(root, "policies", "decisions", quotaDecision, "policy.rego")
	editFile(t, policy, quotaAllow, quotaAllowBroken)
	wait.Until(t, 5*time.Second, "the broken policy to be refused", func() bool {
		lr := status(t, client, srv.url)["last_reload"].(map[string]any)
		return lr["ok"] == false && strings.Contains(fmt.Sprint(lr["problems"]), "policy.rego")
	})
	if got := status(t, client, srv.url)["policy_revision"]; got != rev1 {
		t.Fatalf("revision after a refused reload = %v, want %s", got, rev1)
	}
	editFile(t, policy, quotaAllowBroken, quotaAllow)
	wait.Until(t, 5*time.Second, "the fixed policy to load", func() bool {
		return status(t, client, srv.url)["last_reload"].(map[string]any)["ok"] == true
	})

	// A change that a policy test contradicts is refused, naming the test.
	editFile(t, data, `"limit": 100`, `"limit": 9`)
	wait.Until(t, 10*time.Second, "the test-breaking edit to be refused", func() bool {
		lr := status(t, client, srv.url)["last_reload"].(map[string]any)
		return lr["ok"] == false && strings.Contains(fmt.Sprint(lr["problems"]), "failed")
	})
	if got := status(t, client, srv.url)["policy_revision"]; got != rev1 {
		t.Fatalf("revision after a refused reload = %v, want %s", got, rev1)
	}
	editFile(t, data, `"limit": 9`, `"limit": 100`)
	wait.Until(t, 10*time.Second, "the fix to load", func() bool {
		return status(t, client, srv.url)["last_reload"].(map[string]any)["ok"] == true
	})

	stopLoad()
	loadWG.Wait()
	if n := loadFailures.Load(); n > 0 {
		t.Errorf("%d of %d decisions under reload failed or changed", n, loadCount.Load())
	}
	srv.stop(t)

	// Every answer is in the log exactly once, with the same outcome.
	seen := map[string]int{}
	warnings, err := decisionlog.ReadFile(logPath, func(_ int, rec decisionlog.Record) error {
		seen[rec.DecisionID]++
		a, ok := answered[rec.DecisionID]
		if !ok {
			t.Errorf("logged decision %s was never answered", rec.DecisionID)
			return nil
		}
		if a.status == http.StatusOK {
			var env struct {
				Result json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal(a.body, &env); err != nil || !engine.SameJSON(env.Result, rec.Result) {
				t.Errorf("decision %s: logged result %s, answered %s", rec.DecisionID, rec.Result, a.body)
			}
		} else if rec.Error == nil || !strings.Contains(string(a.body), rec.Error.Code) {
			t.Errorf("decision %s: logged %+v, answered %d %s", rec.DecisionID, rec.Error, a.status, a.body)
		}
		return nil
	})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("reading the decision log: %v %v", err, warnings)
	}
	for id := range answered {
		if seen[id] != 1 {
			t.Errorf("decision %s is in the log %d times", id, seen[id])
		}
	}
	t.Logf("%d answers, %d under load, all logged once", len(answered), loadCount.Load())
}

// checkAnswer compares an HTTP answer with what a fixture wants.
func checkAnswer(t *testing.T, fx engine.Fixture, a answer, wrapped bool) {
	t.Helper()
	var d *engine.Decision
	var err error
	if a.status == http.StatusOK {
		var env struct {
			Result json.RawMessage `json:"result"`
		}
		if e := json.Unmarshal(a.body, &env); e != nil {
			t.Errorf("%s: %v", fx.Name, e)
			return
		}
		d = &engine.Decision{Result: env.Result}
	} else {
		var doc engine.Document
		if e := json.Unmarshal(a.body, &doc); e != nil {
			t.Errorf("%s: status %d, body %s", fx.Name, a.status, a.body)
			return
		}
		err = &engine.Error{Code: doc.Error.Code, Message: doc.Error.Message, Violations: doc.Error.Violations}
	}
	if msg := engine.CheckOutcome(fx, d, err); msg != "" {
		t.Errorf("%s/%s (wrapped %v): %s", fx.Decision, fx.Name, wrapped, msg)
	}
}

// TestTypeScriptSDKInterop runs interop/sdk.test.mjs (OPA's official
// TypeScript SDK) against the real binary.
func TestTypeScriptSDKInterop(t *testing.T) {
	t.Parallel()
	interop := filepath.Join("..", "..", "interop")
	if _, err := os.Stat(filepath.Join(interop, "node_modules", "@open-policy-agent", "opa")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("interop/node_modules is missing: .ci/run installs it with npm ci")
		}
		t.Skip("run `npm ci --prefix interop` to enable the TypeScript SDK interop test")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed")
	}
	root := copyRepo(t)
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte("host-preparation s3cret-interop-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, append(folderArgs(root), "--decision-log", filepath.Join(t.TempDir(), "d.log"), "--auth-token-file", tokenFile)...)
	// A second server on the quota test decision, edited to return a member
	// its result schema does not allow: every decision is a policy_error
	// (500), for the SDK's ServerError. Without the gate, which would refuse it.
	broken := quotaCopy(t, `{"limit": 10}`)
	editFile(t, filepath.Join(broken, "decisions", "quota_check", "policy.rego"), `"reasons": reasons}`, `"reasons": reasons, "extra": 1}`)
	brokenSrv := startServer(t, "--policies", broken, "--schemas", quotaSchemas, "--tests", "", "--decision-log", "")
	cmd := exec.Command(node, "--test", "sdk.test.mjs")
	cmd.Dir = interop
	cmd.Env = append(os.Environ(), "ARBITER_URL="+srv.url, "ARBITER_TOKEN=s3cret-interop-token", "ARBITER_BROKEN_URL="+brokenSrv.url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "# pass") || strings.HasPrefix(line, "# fail") {
			t.Log(line)
		}
	}
	if strings.Contains(srv.stderr.String(), "s3cret-interop-token") {
		t.Error("the bearer token appears in the server log")
	}
}
