package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// An open /ui live stream (server-sent events) does not hold a graceful
// stop: at SIGTERM the stream ends as the shutdown begins, the server
// finishes without cutting a request at its deadline, the decision log
// is drained with its own budget, and the process exits 0 with every
// decision in the log. Synchronised on events only: the stream's first
// bytes, its end, the process's exit; the deadlines are generous bounds.
func TestLiveStreamDoesNotHoldShutdown(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	args, logPath := quickArgs(t)
	s := startServer(t, append(args, "--shutdown-timeout", "20s")...)
	fx := decidedFixture(t)
	client := &http.Client{Timeout: 30 * time.Second}
	var ids []string
	for range 3 {
		ids = append(ids, decideFixture(t, client, s.url, fx).id)
	}

	resp, err := http.Get(s.url + "/ui/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET /ui/events: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	stream := bufio.NewReader(resp.Body)
	if line, err := stream.ReadString('\n'); err != nil || line != ": live\n" {
		t.Fatalf("the stream's first line: %q %v", line, err)
	}
	// A decision made now reaches the open stream: it is live.
	ids = append(ids, decideFixture(t, client, s.url, fx).id)
	for {
		line, err := stream.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before the decision's event: %v", err)
		}
		if line == "event: decision\n" {
			break
		}
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, stream)
		ended <- err
	}()

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Logf("the stream ended with %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the live stream was still open two minutes after SIGTERM")
	}
	var exit error
	select {
	case exit = <-s.done:
		s.done <- exit
	case <-time.After(2 * time.Minute):
		t.Fatal("arbiter serve had not exited two minutes after SIGTERM")
	}
	if exit != nil {
		t.Errorf("arbiter serve exited with %v, want 0", exit)
	}
	stderr := s.stderr.String()
	for _, bad := range []string{"requests still in flight at the shutdown deadline were cut", "decision log not fully written"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("the stop logged %q", bad)
		}
	}
	assertLogged(t, logPath, ids)
}

// A request that holds past --shutdown-timeout is cut at that deadline;
// the decision log then drains with a budget of its own, not the expired
// one: no record is reported unwritten and the process exits 0. The held
// request is an administrative body that never completes (it writes no
// decision record); the server's "100 Continue" says its handler is
// reading it.
func TestDecisionLogDrainsAfterTheShutdownDeadline(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	args, logPath := quickArgs(t)
	s := startServer(t, append(args, "--shutdown-timeout", "2s", "--read-timeout", "10m")...)
	fx := decidedFixture(t)
	client := &http.Client{Timeout: 30 * time.Second}

	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/shadow HTTP/1.1\r\nHost: arbiter\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("the held request was not being read: %q %v", line, err)
	}
	if _, err := io.WriteString(conn, "{"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		ids = append(ids, decideFixture(t, client, s.url, fx).id)
	}

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exit error
	select {
	case exit = <-s.done:
		s.done <- exit
	case <-time.After(2 * time.Minute):
		t.Fatal("arbiter serve had not exited two minutes after SIGTERM")
	}
	stderr := s.stderr.String()
	if !strings.Contains(stderr, "requests still in flight at the shutdown deadline were cut") {
		t.Fatal("the held request was not cut at the shutdown deadline: the test proves nothing")
	}
	if exit != nil {
		t.Errorf("arbiter serve exited with %v, want 0", exit)
	}
	if strings.Contains(stderr, "decision log not fully written") {
		t.Error(`the stop logged "decision log not fully written": the log was closed with the expired shutdown deadline`)
	}
	assertLogged(t, logPath, ids)
}

// assertLogged fails the test for each of ids that is not in the decision
// log at logPath.
func assertLogged(t *testing.T, logPath string, ids []string) {
	t.Helper()
	var logged []string
	for _, rec := range readDecisionLog(t, logPath) {
		logged = append(logged, rec.DecisionID)
	}
	for _, id := range ids {
		if !slices.Contains(logged, id) {
			t.Errorf("decision %s is not in the log (%d records)", id, len(logged))
		}
	}
}

// With --shutdown-delay, SIGTERM first turns /health/ready not ready while
// decisions are still answered (and logged), and /health/live stays 200:
// the load balancer stops sending before the listener closes. Then the
// graceful stop runs as without the delay and the process exits 0.
// Synchronised on the readiness flip and the exit; the delay is a generous
// window for the requests made inside it.
func TestShutdownDelayKeepsAnsweringWhileNotReady(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	args, logPath := quickArgs(t)
	s := startServer(t, append(args, "--shutdown-delay", "10s")...)
	fx := decidedFixture(t)
	client := &http.Client{Timeout: 30 * time.Second}
	if code, _ := getJSON(t, s.url+"/health/ready"); code != http.StatusOK {
		t.Fatalf("/health/ready before SIGTERM: %d", code)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, "/health/ready not ready after SIGTERM", func() bool {
		code, doc := getJSON(t, s.url+"/health/ready")
		e, _ := doc["error"].(map[string]any)
		msg, _ := e["message"].(string)
		return code == http.StatusServiceUnavailable && strings.Contains(msg, "stopping")
	})
	if code, _ := getJSON(t, s.url+"/health/live"); code != http.StatusOK {
		t.Errorf("/health/live while stopping: %d, want 200", code)
	}
	id := decideFixture(t, client, s.url, fx).id
	if code := s.exitCode(t); code != exitOK {
		t.Fatalf("exit status %d, want 0", code)
	}
	if !strings.Contains(s.stderr.String(), "stopping: not ready, still answering") {
		t.Error("the delay was not logged")
	}
	assertLogged(t, logPath, []string{id})
}
