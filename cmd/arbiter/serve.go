package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
)

func serveCommand() *command {
	fs := newCommand("serve", "Serve decisions over HTTP, reloading the policies when they change",
		`Serve the decisions of the policy folders, or of a polled OPA bundle, over HTTP, with the
reload gate, the decision log, the pages at /ui and the shadow candidate. SIGTERM and SIGINT
stop it gracefully. Exit 3: stopped, but decision records were not written.`, exitError)
	fs.stopsItself = true
	c := registerServe(fs)
	fs.run = func(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
		if err := c.settle(fs); err != nil {
			return say(stderr, exitError, "arbiter serve: %v", err)
		}
		return serveWith(ctx, c, stdout, stderr)
	}
	return fs
}

func serveWith(ctx context.Context, c *serveConfig, stdout, stderr io.Writer) int {
	log, err := newLogger(c.logLevel, stderr)
	if err != nil {
		return say(stderr, exitError, "arbiter serve: %v", err)
	}
	// A memory limit bounds the heap however many large requests arrive
	// together (admission control bounds what they hold; the limit makes
	// the collector return the rest in time), instead of a collector target
	// tuned for throughput (docs/BENCHMARKS.md). The environment wins, then
	// the flag, then the container's cgroup limit; the budgets that were
	// not set are fitted inside it (memory.go).
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(c.gcPercent)
	}
	c.memory = planMemory(c, c.set, cgroupProvider())
	log.Info("memory", "limit_bytes", c.memory.LimitBytes, "source", c.memory.Source, "cgroup_limit_bytes", c.memory.CgroupBytes,
		"max_inflight_bytes", c.api.MaxInflightBytes, "max_inflight_values", c.api.MaxInflightValues,
		"decision_log_queue_bytes", c.records.QueueBytes, "shadow_queue_bytes", c.sampling.QueueBytes, "decision_log_upload_queue_bytes", c.uploadQueueBytes)
	code, err := serve(ctx, c, log, stdout)
	if err != nil {
		log.Error("arbiter serve stopped", "err", err)
		return exitError
	}
	return code
}

// serve runs the server until ctx ends. It returns exitUnlogged when it
// stopped but decision records were not written. The parts and their
// order are in assembly.go.
func serve(ctx context.Context, c *serveConfig, log *slog.Logger, stdout io.Writer) (int, error) {
	a := &assembly{c: c, log: log}
	defer a.close()
	if err := a.assemble(ctx, stdout); err != nil {
		return exitError, err
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	defer a.watchReloads(runCtx)()
	if err := a.serveSide(runCtx); err != nil {
		return exitError, err
	}
	errc := a.run(runCtx)
	serveErr := a.waitForStop(ctx, errc)
	stopRun()
	code := a.stop()
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	log.Info("stopped", "exit_status", code)
	return code, serveErr
}

// newEngine makes the first revision live from where the revisions come
// from: the bundle (the engine then starts empty and not ready until it
// activates) or the folders, with the last good copy below --state-dir to
// fall back to at the start and each revision made live saved there.
func newEngine(ctx context.Context, c *serveConfig, ecfg engine.Config, log *slog.Logger, opts ...live.Option) (*live.Engine, error) {
	if c.bundleURL != "" {
		return live.New(ctx, ecfg, append(opts, live.Pushed())...)
	}
	if c.stateDir == "" {
		return live.New(ctx, ecfg, opts...)
	}
	opts = append(opts, live.OnActivate(func(s *engine.Snapshot) {
		if err := s.SaveTo(c.stateDir); err != nil {
			log.Warn("could not save the last good revision", "dir", c.stateDir, "err", err)
		}
	}))
	if saved, ok := live.LastGood(c.stateDir, ecfg); ok {
		opts = append(opts, live.Fallback(saved))
	}
	return live.New(ctx, ecfg, opts...)
}

// connectionCap is --max-connections, or half of the file descriptor limit:
// the other half stays for policy files, the decision log and reloads.
func (c *serveConfig) connectionCap() int {
	if c.maxConnections > 0 {
		return c.maxConnections
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<20 {
		return 1 << 19
	}
	return max(int(rl.Cur/2), 8)
}

// problemList is problems on one log line.
func problemList(problems []engine.Problem) string {
	out := make([]string, len(problems))
	for i, p := range problems {
		out[i] = p.String()
	}
	return strings.Join(out, "; ")
}

// logSkipped names every file a load did not read.
func logSkipped(log *slog.Logger, trigger string, skipped []engine.SkippedFile) {
	for _, s := range skipped {
		log.Warn("file skipped", "trigger", trigger, "file", s.File, "reason", s.Reason)
	}
}
