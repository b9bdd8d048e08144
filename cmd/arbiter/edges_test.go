package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/engine/input"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/internal/wait"
	"github.com/arbiter-dev/arbiter/server"
)

// exitCode waits for a stopped server and returns its exit status.
func (s *proc) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		t.Fatal("arbiter serve did not stop within 60s")
		return -1
	}
}

var closedLine = regexp.MustCompile(`msg="decision log closed" written=(\d+) unwritten=(\d+) refused=(\d+) failed=(\d+)`)

// TestStalledDecisionLogIsAccounted: with the decision log on a pipe that
// nobody reads, the queue stays bounded in bytes; each record that is not
// written is counted (the metric while serving, the stop message, the exit
// status 3), in the default drop mode and in refuse mode (where no decision
// is answered without its record queued).
func TestStalledDecisionLogIsAccounted(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	const n = 150
	fx := decidedFixture(t)
	for _, mode := range []string{"drop", "refuse"} {
		t.Run(mode, func(t *testing.T) {
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer pr.Close()
			args, _ := quickArgs(t)
			srv := startServerWith(t, func(c *exec.Cmd) { c.Stdout = pw }, append(args, "--decision-log", "-",
				"--decision-log-queue-bytes", "65536", "--decision-log-full", mode, "--shutdown-timeout", "1s")...)
			pw.Close() // the server holds the only writer
			client := &http.Client{Timeout: 10 * time.Second}
			statuses := map[int]int{}
			for range n {
				a, _, err := tryFixture(client, srv.url, fx)
				if err != nil {
					t.Fatal(err)
				}
				statuses[a.status]++
			}
			dropped := metricValue(t, client, srv.url, "arbiter_decision_log_dropped_total")
			// Dropping records, the replica is not ready (it is alive).
			if code, doc := getJSON(t, srv.url+"/health/ready"); code != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(doc), "dropped") {
				t.Errorf("/health/ready with the log dropping: %d %v, want 503 naming the drops", code, doc)
			}
			if code, _ := getJSON(t, srv.url+"/health/live"); code != http.StatusOK {
				t.Errorf("/health/live with the log dropping: %d, want 200", code)
			}
			if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := srv.exitCode(t); code != exitUnlogged {
				t.Errorf("exit status %d, want %d (records were not written)", code, exitUnlogged)
			}
			m := closedLine.FindStringSubmatch(srv.stderr.String())
			if m == nil {
				t.Fatalf("no decision log account at the stop:\n%s", srv.stderr.String())
			}
			written, _ := strconv.Atoi(m[1])
			unwritten, _ := strconv.Atoi(m[2])
			// Every request left one record, and a refused decision two (its
			// own, then the overloaded error's).
			if want := n + statuses[503]; written+unwritten != want || unwritten == 0 || dropped == 0 {
				t.Errorf("written %d + unwritten %d, want %d; dropped metric %v; answers %v", written, unwritten, want, dropped, statuses)
			}
			switch mode {
			case "drop":
				if statuses[200] != n {
					t.Errorf("answers %v, want every decision answered", statuses)
				}
			case "refuse":
				if statuses[503] == 0 || statuses[200]+statuses[503] != n {
					t.Errorf("answers %v, want decisions refused once the log is full", statuses)
				}
			}
			// What the stop reported written is in the pipe.
			lines := 0
			sc := bufio.NewScanner(pr)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if json.Valid(sc.Bytes()) {
					lines++
				}
			}
			if lines < written {
				t.Errorf("%d records in the pipe, but %d reported written", lines, written)
			}
		})
	}
}

// metricValue reads a metric from /metrics, summed over its labels.
func metricValue(t *testing.T, client *http.Client, url, name string) float64 {
	t.Helper()
	resp, err := client.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum, found := 0.0, false
	for _, line := range strings.Split(string(b), "\n") {
		// NAME VALUE, or NAME{LABELS} VALUE: the sum over the labels.
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			v, _ := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
			sum, found = sum+v, true
		}
	}
	if !found {
		t.Fatalf("no metric %s", name)
	}
	return sum
}

// TestServeSkipsWhatIsNotARegularFile: a FIFO and a symlink to /dev/zero in
// the policies are skipped and named (log and status); the server starts,
// reloads, and its status answers.
func TestServeSkipsWhatIsNotARegularFile(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	root := copyRepo(t)
	pol := filepath.Join(root, "policies")
	if err := syscall.Mkfifo(filepath.Join(pol, "blocked.rego"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(pol, "zero.json")); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, append(folderArgs(root), "--decision-log", "")...)
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Post(srv.url+"/v1/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		OK      bool `json:"ok"`
		Skipped []struct{ File, Reason string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if !st.OK || len(st.Skipped) != 2 {
		t.Errorf("reload with a FIFO and /dev/zero: %+v", st)
	}
	doc := status(t, client, srv.url)
	if skipped, _ := doc["skipped_files"].([]any); len(skipped) != 2 || doc["reload"] != "idle" {
		t.Errorf("status: skipped %v, reload %v", doc["skipped_files"], doc["reload"])
	}
	logged := srv.stderr.String()
	if !strings.Contains(logged, `msg="file skipped"`) || !strings.Contains(logged, "blocked.rego") || !strings.Contains(logged, "zero.json") {
		t.Errorf("the skipped files are not logged:\n%s", logged)
	}
	srv.stop(t)
}

// TestTLSCertificateReloaded: replacing the certificate and key files (as a
// rotation does) changes the certificate served, without a restart.
func TestTLSCertificateReloaded(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	dir := t.TempDir()
	ca := newCA(t, "arbiter test CA")
	certA, keyA := ca.issue(t, "first", true)
	certFile := writeFile(t, dir, "server.crt", certA)
	keyFile := writeFile(t, dir, "server.key", keyA)
	args, _ := quickArgs(t)
	srv := startServer(t, append(args, "--tls-cert-file", certFile, "--tls-key-file", keyFile)...)
	addr := strings.TrimPrefix(srv.url, "http://")
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	served := func() string {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := served(); cn != "first" {
		t.Fatalf("serves %q, want first", cn)
	}
	// A rotation writes both files anew and renames them into place.
	certB, keyB := ca.issue(t, "second", true)
	for name, data := range map[string][]byte{"server.crt": certB, "server.key": keyB} {
		tmp := writeFile(t, dir, name+".new", data)
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	wait.Until(t, 30*time.Second, "the new certificate to be served", func() bool { return served() == "second" })
	// A broken pair keeps the last good one serving.
	writeFile(t, dir, "server.key", keyA)
	wait.Until(t, 30*time.Second, "the mismatch to be logged", func() bool {
		served()
		return strings.Contains(srv.stderr.String(), "TLS key pair changed but does not load")
	})
	if cn := served(); cn != "second" {
		t.Errorf("after a broken rotation serves %q, want second", cn)
	}
}

// TestIdleConnectionsCannotExhaustDescriptors: a process with 128 file
// descriptors and 117 idle keep-alive connections still answers a new
// caller, reloads its policies (which opens files) and stops cleanly.
func TestIdleConnectionsCannotExhaustDescriptors(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	args, _ := quickArgs(t)
	srv := startServerWith(t, func(c *exec.Cmd) {
		// The shell lowers the limit for the server alone.
		c.Path = "/bin/sh"
		c.Args = append([]string{"sh", "-c", `ulimit -n 128 && exec "$0" "$@"`, binPath}, c.Args[1:]...)
	}, args...)
	var idle []*http.Client
	t.Cleanup(func() {
		for _, c := range idle {
			c.CloseIdleConnections()
		}
	})
	for i := range 117 {
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		resp, err := c.Get(srv.url + "/health")
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		idle = append(idle, c)
	}
	fresh := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	fx := decidedFixture(t)
	if a, wrong, err := tryFixture(fresh, srv.url, fx); err != nil || a.status != http.StatusOK || wrong != "" {
		t.Fatalf("a new caller beside 117 idle connections: %v %d %s", err, a.status, wrong)
	}
	resp, err := fresh.Post(srv.url+"/v1/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ OK bool }
	_ = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if !st.OK {
		t.Errorf("reload beside 117 idle connections failed:\n%s", srv.stderr.String())
	}
	srv.stop(t)
	if strings.Contains(srv.stderr.String(), "too many open files") {
		t.Errorf("the server ran out of descriptors:\n%s", srv.stderr.String())
	}
}

// TestEveryCommandHelp: every command (so a new one too) takes -h and
// --help, printing its usage on stdout with exit 0, and so does arbiter.
func TestEveryCommandHelp(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	root, _ := rootCommand(nil, nil, nil)
	for _, c := range append(root.Commands(), root) {
		for _, sub := range append(c.Commands(), c) {
			path := strings.Fields(sub.CommandPath())[1:]
			for _, flag := range []string{"-h", "--help"} {
				out, stderr, code := runCLI(t, nil, append(path, flag)...)
				if code != 0 || !strings.Contains(out, "Usage:\n  "+sub.UseLine()) {
					t.Errorf("%s %s: exit %d\nstdout:\n%s\nstderr:\n%s", sub.CommandPath(), flag, code, out, stderr)
				}
			}
		}
	}
}

// TestMalformedEnvironmentIsAnError: a value the flag would refuse is
// refused from the environment too, naming the variable.
func TestMalformedEnvironmentIsAnError(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	fx := decidedFixture(t)
	in := writeFile(t, t.TempDir(), "input.json", fx.Input)
	quiet := []string{"--addr", "127.0.0.1:0", "--tests", "", "--decision-log", ""}
	for _, env := range []string{"ARBITER_MAX_BODY_BYTES=32MiB", "ARBITER_EVAL_TIMEOUT=2", "ARBITER_INSECURE_LISTEN=maybe", "ARBITER_MEMORY_LIMIT=lots"} {
		name, _, _ := strings.Cut(env, "=")
		// A server that ignores the variable starts: runServe stops it and says so.
		code, stderr, listened := runServe(t, []string{env}, quiet...)
		if listened || code != 1 || !strings.Contains(stderr, name) {
			t.Errorf("%s arbiter serve: exit %d, listened %v, stderr %q; want 1 naming %s", env, code, listened, stderr, name)
		}
	}
	for _, tc := range []struct{ env, cmd string }{
		{"ARBITER_MAX_BODY_BYTES=32MiB", "eval"},
		{"ARBITER_MAX_INPUT_VALUES=-", "bench"},
	} {
		cmd := exec.Command(binPath, tc.cmd, "--decision", fx.Decision, "--input", in, "--duration", "1ms")
		if tc.cmd == "eval" {
			cmd.Args = cmd.Args[:len(cmd.Args)-2]
		}
		cmd.Env = append(os.Environ(), tc.env)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		_ = cmd.Run()
		name, _, _ := strings.Cut(tc.env, "=")
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), name) {
			t.Errorf("%s arbiter %s: exit %d, stderr %q; want 1 naming %s", tc.env, tc.cmd, code, stderr.String(), name)
		}
	}
}

// TestFolderDefaults: the default folders are those of the working
// directory or of its git work tree's root, never of another ancestor, and
// never of a folder another user can write or could have planted a .git in:
// an empty file named .git beside policies/ in a world-writable folder made
// every command below it load those policies.
func TestFolderDefaults(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	fx := decidedFixture(t)
	in := writeFile(t, t.TempDir(), "input.json", fx.Input)
	evalIn := func(dir string) (string, int) {
		cmd := exec.Command(binPath, "eval", "--decision", fx.Decision, "--input", in)
		cmd.Dir = dir
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "ARBITER_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		_ = cmd.Run()
		return out.String(), cmd.ProcessState.ExitCode()
	}
	// gitDir makes dir a repository folder as git checks one (HEAD,
	// objects/, refs/), and returns it.
	gitDir := func(t *testing.T, dir string) string {
		for _, d := range []string{"objects", "refs"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		writeFile(t, dir, "HEAD", []byte("ref: refs/heads/main\n"))
		return dir
	}
	chmod := func(t *testing.T, dir string, mode os.FileMode) {
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		// plant prepares the repository copy at root; the command runs in
		// root/a/b (or root itself with inRoot).
		plant  func(t *testing.T, root string)
		inRoot bool
		loaded bool // whether root's folders are the defaults
	}{
		{"the working directory", func(*testing.T, string) {}, true, true},
		{"a working directory another user can write", func(t *testing.T, root string) { chmod(t, root, 0o777|os.ModeSticky) }, true, false},
		{"an ancestor that is not a git root", func(*testing.T, string) {}, false, false},
		{"the root of a git folder", func(t *testing.T, root string) { gitDir(t, filepath.Join(root, ".git")) }, false, true},
		{"a linked worktree's gitfile", func(t *testing.T, root string) {
			common := gitDir(t, t.TempDir())
			wt := filepath.Join(common, "worktrees", "wt")
			if err := os.MkdirAll(wt, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, wt, "HEAD", []byte("ref: refs/heads/wt\n"))
			writeFile(t, wt, "commondir", []byte("../..\n"))
			writeFile(t, root, ".git", []byte("gitdir: "+wt+"\n"))
		}, false, true},
		{"an empty .git file", func(t *testing.T, root string) { writeFile(t, root, ".git", nil) }, false, false},
		{"a gitfile naming no git folder", func(t *testing.T, root string) { writeFile(t, root, ".git", []byte("gitdir: "+t.TempDir()+"\n")) }, false, false},
		{"an empty .git folder", func(t *testing.T, root string) {
			if err := os.Mkdir(filepath.Join(root, ".git"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, false, false},
		{"planted in a world-writable folder", func(t *testing.T, root string) {
			writeFile(t, root, ".git", nil)
			chmod(t, root, 0o777)
		}, false, false},
		{"a world-writable git root", func(t *testing.T, root string) {
			gitDir(t, filepath.Join(root, ".git"))
			chmod(t, root, 0o777|os.ModeSticky)
		}, false, false},
		{"a group-writable git root", func(t *testing.T, root string) {
			gitDir(t, filepath.Join(root, ".git"))
			chmod(t, root, 0o775)
		}, false, false},
		{"a git root another user owns", func(t *testing.T, root string) {
			gitDir(t, filepath.Join(root, ".git"))
			if os.Geteuid() != 0 {
				t.Skip("only root can give a folder away")
			}
			if err := os.Chown(root, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, false, false},
		{"a world-writable folder on the way", func(t *testing.T, root string) {
			gitDir(t, filepath.Join(root, ".git"))
			chmod(t, filepath.Join(root, "a"), 0o777)
		}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := copyRepo(t)
			dir := filepath.Join(root, "a", "b")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.plant(t, root)
			if tc.inRoot {
				dir = root
			}
			out, code := evalIn(dir)
			switch {
			case tc.loaded && code != 0:
				t.Errorf("exit %d, want 0 (the folders of %s)\n%s", code, root, out)
			case !tc.loaded && (code != 1 || !strings.Contains(out, "policies") && !strings.Contains(out, "no folder configured")):
				t.Errorf("exit %d, want 1 (no policies in %s)\n%s", code, dir, out)
			}
		})
	}
}

// TestSignalStopsEveryCommand: every command (main.go's commands) but
// those that stop themselves (serve) stops on SIGTERM and SIGINT with exit
// status 130, whatever it is blocked on. Each is held running by something
// that never ends, and signalled only once the test has seen it there:
//   - eval, bench, replay read a FIFO that never ends (the test's open for
//     writing returns once the command has opened it to read);
//   - check, test and build write far more to stdout than a pipe holds
//     (problems about 2,000 FIFOs among the tests; a bundle carrying 400 KB
//     of incompressible data) to a pipe that the test reads one byte of:
//     that byte shows the command running, the rest keeps it blocked.
//
// A command the test does not know how to hold fails it, so a new command
// needs a way here, or a reason in cannotHold.
func TestSignalStopsEveryCommand(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	root := copyRepo(t)
	dirs := []string{"--policies", filepath.Join(root, "policies"), "--schemas", filepath.Join(root, "schemas")}
	decision := decidedFixture(t).Decision
	readingFIFO := map[string]func(fifo string) []string{
		"eval": func(f string) []string {
			return append([]string{"eval", "--decision", decision, "--input", f}, dirs...)
		},
		"bench": func(f string) []string {
			return append([]string{"bench", "--decision", decision, "--input", f}, dirs...)
		},
		"replay": func(f string) []string { return append([]string{"replay", "--log", f}, dirs...) },
		"diff":   func(f string) []string { return []string{"diff", "--schemas", filepath.Join(root, "schemas"), f, f} }, // a bundle file
	}
	// The quota test decision, with 2,000 FIFOs among its tests (each a
	// "skipped: not a regular file" line of check and test, about 250 KB)
	// and 400 KB of base64 of random bytes among its policies (the bundle's bulk).
	quota := copyQuota(t)
	long := strings.Repeat("x", 100)
	for i := range 2000 {
		if err := syscall.Mkfifo(filepath.Join(quota, "policy_test", fmt.Sprintf("fifo_%04d_%s.rego", i, long)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	blob := make([]byte, 300<<10)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(blob) // the same bytes every run
	if err := os.Mkdir(filepath.Join(quota, "policies", "padding"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(quota, "policies", "padding"), "data.json", []byte(fmt.Sprintf(`{"blob": %q}`, base64.StdEncoding.EncodeToString(blob))))
	quotaDirs := folderArgs(quota)
	writingStdout := map[string][]string{
		"check": append([]string{"check"}, quotaDirs...),
		"test":  append([]string{"test"}, quotaDirs...),
		"build": append([]string{"build", "--output", "-", "--tests", ""}, folderArgs(quota)[:4]...),
	}
	// The commands for a running server, and those reading a decision
	// store, wait for a server that accepts the connection and never
	// answers.
	server := func(args ...string) func(addr string) []string {
		return func(addr string) []string { return append(args, "--server", "http://"+addr) }
	}
	awaitingAnswer := map[string]func(addr string) []string{
		"status": server("status"), "reloads": server("reloads"), "shadow": server("shadow", "status"),
		"decisions": func(addr string) []string {
			return []string{"decisions", "--store", "postgres://arbiter@" + addr + "/arbiter"}
		},
	}
	cannotHold := map[string]string{
		"version": "it prints one short line and exits: nothing it does can be held open for the signal",
	}
	for _, c := range commands() {
		if c.stopsItself {
			continue
		}
		_, fifo := readingFIFO[c.Command.Name()]
		_, pipe := writingStdout[c.Command.Name()]
		_, silent := awaitingAnswer[c.Command.Name()]
		if _, ok := cannotHold[c.Command.Name()]; ok || (!fifo && !pipe && !silent) {
			if !ok {
				t.Errorf("arbiter %s: no way to hold it running for the signal; add one, or a reason to cannotHold", c.Command.Name())
			}
			continue
		}
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
			t.Run(fmt.Sprintf("%s %v", c.Command.Name(), sig), func(t *testing.T) {
				var cmd *exec.Cmd
				var stderr testfiles.Buffer
				var held func() // returns once the command is seen running, held
				switch {
				case silent:
					ln, err := net.Listen("tcp", "127.0.0.1:0")
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { ln.Close() })
					accepted := make(chan net.Conn, 1)
					go func() {
						if conn, err := ln.Accept(); err == nil {
							accepted <- conn
						}
					}()
					cmd = exec.Command(binPath, awaitingAnswer[c.Command.Name()](ln.Addr().String())...)
					held = func() {
						select {
						case conn := <-accepted: // the request is on its way; no answer comes
							t.Cleanup(func() { conn.Close() })
						case <-time.After(2 * time.Minute): // a hang guard only
							t.Fatalf("arbiter %s never connected\n%s", c.Command.Name(), stderr.String())
						}
					}
				case fifo:
					path := filepath.Join(t.TempDir(), "fifo")
					if err := syscall.Mkfifo(path, 0o600); err != nil {
						t.Fatal(err)
					}
					cmd = exec.Command(binPath, readingFIFO[c.Command.Name()](path)...)
					held = func() {
						// Opening the FIFO for writing returns once the
						// command has opened it to read: it is then blocked
						// reading.
						w, err := os.OpenFile(path, os.O_WRONLY, 0)
						if err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { w.Close() })
						if _, err := w.Write([]byte(`{"run": `)); err != nil { // a start, and never an end
							t.Fatal(err)
						}
					}
				default:
					r, w, err := os.Pipe()
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { r.Close() })
					cmd = exec.Command(binPath, writingStdout[c.Command.Name()]...)
					cmd.Stdout = w
					held = func() {
						w.Close() // the command holds the only write end
						// A hang guard only: the first byte comes once the
						// command has done its work.
						_ = r.SetReadDeadline(time.Now().Add(2 * time.Minute))
						if _, err := io.ReadFull(r, make([]byte, 1)); err != nil {
							t.Fatalf("no output from arbiter %s: %v\n%s", c.Command.Name(), err, stderr.String())
						}
					}
				}
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				done := make(chan struct{})
				go func() { _ = cmd.Wait(); close(done) }()
				held()
				if err := cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				select {
				case <-done:
				case <-time.After(30 * time.Second): // a hang guard only
					_ = cmd.Process.Kill()
					t.Fatalf("arbiter %s did not stop on %v while held", c.Command.Name(), sig)
				}
				if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(stderr.String(), "interrupted") {
					t.Errorf("exit %d, stderr %q; want %d and interrupted", code, stderr.String(), exitInterrupted)
				}
			})
		}
	}
}

// TestInputReadAtMostMaxBody: eval and bench read at most --max-body-bytes
// of their input; more is body_too_large (exit 2), even from a file that
// never ends.
func TestInputReadAtMostMaxBody(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	root := copyRepo(t)
	dirs := []string{"--policies", filepath.Join(root, "policies"), "--schemas", filepath.Join(root, "schemas")}
	decision := decidedFixture(t).Decision
	for _, cmd := range []string{"eval", "bench"} {
		out, stderr, code := runCLI(t, nil, append([]string{cmd, "--decision", decision, "--input", "/dev/zero", "--max-body-bytes", "1048576"}, dirs...)...)
		if code != exitInput || !strings.Contains(out, `"body_too_large"`) {
			t.Errorf("%s --input /dev/zero: exit %d\n%s%s", cmd, code, out, stderr)
		}
	}
}

// TestMemoryLimitByDefault: serve sets a Go memory limit of 1 GiB unless
// told otherwise (or in a cgroup with a limit: TestMemoryFromCgroup);
// GOMEMLIMIT in the environment wins over the flag.
func TestMemoryLimitByDefault(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	args, _ := quickArgs(t)
	client := &http.Client{Timeout: 10 * time.Second}
	for _, tc := range []struct {
		env  string
		args []string
		want float64
	}{
		{"", nil, 1 << 30},
		{"", []string{"--memory-limit", "768MiB"}, 768 << 20},
		{"GOMEMLIMIT=512MiB", []string{"--memory-limit", "768MiB"}, 512 << 20},
	} {
		srv := startServerWith(t, func(c *exec.Cmd) {
			// In no cgroup with a limit, wherever the test runs.
			c.Env = append(os.Environ(), cgroupRootEnv+"="+t.TempDir())
			if tc.env != "" {
				c.Env = append(c.Env, tc.env)
			}
		}, append(args, tc.args...)...)
		if got := metricValue(t, client, srv.url, "go_gc_gomemlimit_bytes"); got != tc.want {
			t.Errorf("%s %v: memory limit %v, want %v", tc.env, tc.args, got, tc.want)
		}
		srv.stop(t)
	}
}

// TestValueCapsAgree: the server counts values against the same default cap
// as the engine.
func TestValueCapsAgree(t *testing.T) {
	t.Parallel()
	if server.DefaultMaxInputValues != input.DefaultMaxValues {
		t.Errorf("server cap %d, engine cap %d", server.DefaultMaxInputValues, input.DefaultMaxValues)
	}
}
