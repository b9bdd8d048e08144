package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// server is one process under test, started in its own process group so
// that stopping it stops everything it started.
type server struct {
	name    string
	addr    string // 127.0.0.1:PORT
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	client  *http.Client
}

func (s *server) pid() int { return s.cmd.Process.Pid }

func (s *server) url(path string) string { return "http://" + s.addr + path }

// waitReady polls path until it answers 200, the process exits or the
// deadline passes.
func (s *server) waitReady(ctx context.Context, path string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if status, _, err := s.request(ctx, http.MethodGet, path, nil); err == nil && status == http.StatusOK {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("%s exited before it was ready (%v):\n%s", s.name, s.waitErr, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s:\n%s", s.name, within, s.logTail())
		}
	}
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// stop asks the process group to stop (Arbiter drains its decision log on
// SIGTERM), then kills it.
func (s *server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = syscall.Kill(-s.pid(), syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.pid(), syscall.SIGKILL)
		<-s.done
	}
}

func (s *server) alive() error {
	select {
	case <-s.done:
		return fmt.Errorf("%s exited (%v):\n%s", s.name, s.waitErr, s.logTail())
	default:
		return nil
	}
}

// launch starts the server argv(addr) on a free loopback address, its
// output in logPath, in its own process group (killed with the driver even
// if the driver is killed outright), and waits until health answers 200
// (else stops it); the caller stops the server it returns.
func launch(ctx context.Context, name, logPath, health string, argv func(addr string) []string) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	a := argv(addr)
	cmd := exec.Command(a[0], a[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	s := &server{
		name: name, addr: addr, logPath: logPath, cmd: cmd, done: make(chan struct{}),
		client: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}},
	}
	go func() {
		s.waitErr = cmd.Wait()
		out.Close()
		close(s.done)
	}()
	t0 := time.Now()
	if err := s.waitReady(ctx, health, 2*time.Minute); err != nil {
		s.stop()
		return nil, err
	}
	logf("%s ready on %s in %s", name, addr, time.Since(t0).Round(time.Millisecond))
	return s, nil
}

// launchArbiter launches arbiterArgs as name, its output in out.
func launchArbiter(ctx context.Context, name, out, decisionLog string, extra ...string) (*server, []string, error) {
	var argv []string
	s, err := launch(ctx, name, out, "/health", func(addr string) []string {
		argv = arbiterArgs(addr, decisionLog, extra...)
		return argv
	})
	return s, argv, err
}

// arbiterArgs is `arbiter serve` on the repository's policies at addr,
// quiet, with no tests or state, logging its decisions to decisionLog.
func arbiterArgs(addr, decisionLog string, extra ...string) []string {
	return append([]string{"bin/arbiter", "serve", "--addr", addr, "--policies", "policies", "--schemas", "schemas",
		"--tests", "", "--decision-log", decisionLog, "--state-dir", "", "--log-level", "error"}, extra...)
}

// post sends body to path and returns the status and answer.
func (s *server) post(ctx context.Context, path string, body []byte) (int, []byte, error) {
	return s.request(ctx, http.MethodPost, path, body)
}

// getJSON decodes the answer to GET path into v.
func (s *server) getJSON(ctx context.Context, path string, v any) error {
	_, out, err := s.request(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	return json.Unmarshal(out, v)
}

// request sends method path with body (JSON, when there is one) and
// returns the status and answer.
func (s *server) request(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.url(path), bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// metric reads an unlabelled metric from the server's /metrics.
func (s *server) metric(ctx context.Context, name string) (float64, error) {
	_, out, err := s.request(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return 0, err
	}
	sum, found := 0.0, false
	for _, line := range strings.Split(string(out), "\n") {
		// NAME VALUE, or NAME{LABELS} VALUE: the sum over the labels.
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
			if err != nil {
				return 0, err
			}
			sum, found = sum+v, true
		}
	}
	if !found {
		return 0, fmt.Errorf("%s: no %s in /metrics", s.name, name)
	}
	return sum, nil
}

// procStatus reads a "VmXXX:   1234 kB" line of /proc/PID/status, in bytes.
func procStatus(pid int, key string) (int64, error) {
	v, _ := procLine(fmt.Sprintf("/proc/%d/status", pid), key+":")
	if f := strings.Fields(v); len(f) > 0 {
		kb, err := strconv.ParseInt(f[0], 10, 64)
		return kb << 10, err
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", key, pid)
}

// procLine is the rest of the first line of file that starts with key.
func procLine(file, key string) (string, bool) {
	b, _ := os.ReadFile(file)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			return v, true
		}
	}
	return "", false
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat.
var clockTicks = func() float64 {
	out, _ := exec.Command("getconf", "CLK_TCK").Output() // none: no number
	if n, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && n > 0 {
		return n
	}
	return 100
}()

// cpuSeconds is the user and system CPU time the process has used.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc/PID/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// Fields after the name: state is [0], utime is field 14 of the file, [11] here.
	if len(f) < 13 {
		return 0, errors.New("short /proc/PID/stat")
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return (ut + st) / clockTicks, nil
}

// sampleRSS samples the VmRSS of a process every so often until the
// function it returns is called, which returns the largest.
func sampleRSS(pid int, every time.Duration) func() int64 {
	stop, largest := make(chan struct{}), make(chan int64)
	go func() {
		var max int64
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if v, err := procStatus(pid, "VmRSS"); err == nil && v > max {
				max = v
			}
			select {
			case <-stop:
				largest <- max
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(stop)
		return <-largest
	}
}

// nullServer answers every request with the same small JSON document after
// reading the body: the most a Go HTTP server on this machine can do, the
// ceiling for the two servers under test.
func nullServer(addr string) error {
	answer := []byte(`{"result":{"answer":"the null server's","of the size":"of a decision","reasons":[]}}`)
	srv := &http.Server{
		Addr:              addr,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
			_, _ = w.Write(answer)
		}),
	}
	return srv.ListenAndServe()
}
