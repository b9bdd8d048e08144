package service

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// testConfig serves the repository's policies on loopback ports the
// kernel picks, with a decision log file of its own.
func testConfig(t *testing.T) Config {
	t.Helper()
	return Config{
		Engine:          engine.Config{Policies: "../policies", Schemas: "../schemas"},
		Addr:            "127.0.0.1:0",
		DecisionLog:     filepath.Join(t.TempDir(), "decisions.log"),
		RequestTimeout:  5 * time.Second,
		ReadTimeout:     5 * time.Second,
		HeaderTimeout:   time.Second,
		IdleTimeout:     5 * time.Second,
		ShutdownTimeout: 5 * time.Second,
		Version:         "test",
	}
}

// TestRunStopsItsPartsAsAGroup: Run serves the API and its side listeners
// until ctx ends, then stops in order (requests, the decision log, then
// "stopped") and returns only once every listener is closed.
func TestRunStopsItsPartsAsAGroup(t *testing.T) {
	c := testConfig(t)
	c.MetricsAddr, c.DebugAddr = "127.0.0.1:0", "127.0.0.1:0"
	logs := &testfiles.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- Run(ctx, c, slog.New(slog.NewTextHandler(logs, nil)), nil) }()
	wait.Until(t, 30*time.Second, "the server to listen", func() bool { return strings.Contains(logs.String(), "msg=listening") })

	addrs := map[string]string{}
	for _, m := range regexp.MustCompile(`msg="?(listening|serving metrics|serving profiles)"? addr=(\S+)`).FindAllStringSubmatch(logs.String(), -1) {
		addrs[m[1]] = m[2]
	}
	for what, path := range map[string]string{"listening": "/health/live", "serving metrics": "/metrics", "serving profiles": "/debug/pprof/"} {
		if addrs[what] == "" {
			t.Fatalf("no %q line with its address:\n%s", what, logs)
		}
		resp, err := http.Get("http://" + addrs[what] + path)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s on the %q listener: %d", path, what, resp.StatusCode)
		}
	}

	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Errorf("exit status %d, want %d:\n%s", code, ExitOK, logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not return after its context ended:\n%s", logs)
	}
	for what, addr := range addrs {
		if conn, err := net.Dial("tcp", addr); err == nil {
			_ = conn.Close()
			t.Errorf("the %q listener %s still accepts once Run returned", what, addr)
		}
	}
	out, last := logs.String(), -1
	for _, line := range []string{`msg="stopping: finishing requests in flight"`, `msg="decision log closed"`, `msg=stopped exit_status=0`} {
		i := strings.Index(out, line)
		if i < 0 || i < last { // i < last alone passes a missing first line (-1 < -1 is false)
			t.Fatalf("%s is missing or out of order:\n%s", line, out)
		}
		last = i
	}
}

// TestRunFailsToStart: a part that cannot start is a failed start: one
// line naming its flag, and ExitError; and Run returns with nothing it
// started left running: the API's and the side listeners closed, the
// shadow's workers and the decision log's stopped.
func TestRunFailsToStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0") // a port for the API, known before Run
	if err != nil {
		t.Fatal(err)
	}
	_ = free.Close()
	c := testConfig(t)
	c.Addr, c.DebugAddr, c.MetricsAddr = free.Addr().String(), "127.0.0.1:0", taken.Addr().String()
	logs := &testfiles.Buffer{}
	if code := Run(context.Background(), c, slog.New(slog.NewTextHandler(logs, nil)), nil); code != ExitError {
		t.Errorf("exit status %d, want %d", code, ExitError)
	}
	if !strings.Contains(logs.String(), `msg="arbiter serve stopped" err="--metrics-addr: listen tcp `+taken.Addr().String()) {
		t.Errorf("the failed start does not name --metrics-addr:\n%s", logs)
	}
	debugAddr := regexp.MustCompile(`msg="serving profiles" addr=(\S+)`).FindStringSubmatch(logs.String())
	if debugAddr == nil {
		t.Fatalf("no \"serving profiles\" line:\n%s", logs)
	}
	for what, addr := range map[string]string{"API": c.Addr, "--debug-addr": debugAddr[1]} {
		if conn, err := net.Dial("tcp", addr); err == nil {
			_ = conn.Close()
			t.Errorf("the %s listener %s still accepts once the failed start returned", what, addr)
		}
	}
	// The parts' goroutines (the file's, the upload's and the store's
	// writers run on Batchers) end; one that closed its done may still be
	// leaving, so look again until none is left or 5 s have gone by.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		left := ""
		for _, part := range []string{"shadow.New ", "decisionlog.Open ", "decisionlog.(*Batcher["} {
			if strings.Contains(stacks, "created by github.com/arbiter-dev/arbiter/"+part) {
				left = part
			}
		}
		if left == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a goroutine %s started still runs once the failed start returned:\n%s", left, stacks)
		}
	}
}
