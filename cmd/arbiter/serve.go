package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/server"
	"github.com/arbiter-dev/arbiter/server/ui"
	"github.com/arbiter-dev/arbiter/watch"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, done, code := parseServe(args, stdout, stderr)
	if done {
		return code
	}
	log, err := newLogger(c.logLevel, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "arbiter serve: %v\n", err)
		return exitError
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
		"max_inflight_bytes", c.maxInflightBytes, "max_inflight_values", c.maxInflightValues,
		"decision_log_queue_bytes", c.logQueueBytes, "shadow_queue_bytes", c.shadowQueueBytes)
	code, err = serve(ctx, c, log, stdout)
	if err != nil {
		log.Error("arbiter serve stopped", "err", err)
		return exitError
	}
	return code
}

// serve runs the server until ctx ends. It returns exitUnlogged when it
// stopped but decision records were not written.
func serve(ctx context.Context, c *serveConfig, log *slog.Logger, stdout io.Writer) (int, error) {
	var tokens []server.Token
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return exitError, fmt.Errorf("reading --auth-token-file: %w", err)
		}
		if tokens, err = server.ParseTokenFile(b); err != nil {
			return exitError, fmt.Errorf("--auth-token-file: %w", err)
		}
	}
	tlsConfig, err := c.tlsConfig(log)
	if err != nil {
		return exitError, err
	}

	ecfg := engine.Config{
		Policies: c.policies, Schemas: c.schemas, Tests: c.tests,
		EvalTimeout: c.evalTimeout, TestTimeout: c.testTimeout, ReloadTimeout: c.reloadTimeout,
		MaxFileBytes: c.maxFileBytes, MaxInputValues: int(c.maxInputValues),
		SelfCheck: selfCheck(c.selfCheckRate, log),
	}
	// The semantic diff of each revision made live against the one it
	// replaced, and of the shadow candidate against the live one: in the
	// background, one at a time, never holding up an activation.
	var diffs *diff.Runner
	var opts []engine.Option
	if c.diffTimeout > 0 {
		diffs = diff.NewRunner(c.diffTimeout, log)
		defer diffs.Close()
		opts = append(opts, engine.OnActivate(diffs.Activated))
	}
	eng, err := newEngine(ctx, c, ecfg, log, opts...)
	if err != nil {
		return exitError, fmt.Errorf("loading policies: %w", err)
	}
	if st := eng.LastReload(); !st.OK && c.bundleURL == "" {
		log.Error("the configured policies do not load; serving the last good revision until they do", "revision", st.Revision, "problems", problemList(st.Problems))
	}
	if snap := eng.Snapshot(); snap != nil {
		log.Info("policies loaded", "revision", snap.Revision, "decisions", strings.Join(snap.Names(), ","), "files", len(snap.Files), "test_gate", c.tests != "")
		logSkipped(log, "start", eng.LastReload().Skipped)
		for _, ci := range snap.Compiled() {
			if !ci.Compiled {
				log.Info("decision runs on topdown", "decision", ci.Decision, "reason", ci.Reason)
			}
		}
	}
	fl, err := newFleet(c, eng, log)
	if err != nil {
		return exitError, err
	}
	sh, err := newShadowing(ctx, c, eng, ecfg, diffs, log) // a candidate in shadow (shadow.go)
	if err != nil {
		return exitError, err
	}

	ds, err := newStore(c, eng, log) // the decision store (store.go)
	if err != nil {
		return exitError, err
	}

	// The decision-record pipeline: the file, the upload, the decision
	// store and the pages' ring are its sinks, each record masked once for
	// all of them; the file, the upload and the store each have their own
	// bounded queue, so that a stalled disk or database costs the others
	// nothing.
	var sinks []decisionlog.Sink
	if fl.upload != nil {
		sinks = append(sinks, fl.upload)
	}
	if ds.sink != nil {
		sinks = append(sinks, ds.sink)
	}
	var pg *pages
	if c.ui {
		var fleetPages ui.Store // every replica's decisions, when there is a store
		if ds.sink != nil {
			fleetPages = ui.FromStore(ds.sink.Reader())
		}
		pg = newPages(c, eng, shadowPages{sh.sh, sh.srv.Gate}, diffs, fleetPages, len(tokens) > 0, log)
		sinks = append(sinks, pg.ring)
	}
	var dlog *decisionlog.Logger
	var sink server.DecisionLog
	if c.decisionLog == "" {
		log.Warn("decision log disabled")
	}
	if c.decisionLog != "" || len(sinks) > 0 {
		var mask []string
		for _, p := range strings.Split(c.logMask, ",") {
			if p = strings.TrimSpace(p); p != "" {
				mask = append(mask, p)
			}
		}
		dlog, err = decisionlog.Open(decisionlog.Options{Path: c.decisionLog, Stdout: stdout, Sinks: sinks, QueueBytes: c.logQueueBytes,
			Refuse: c.logFull == "refuse", MaxMegabytes: c.logMaxMB, MaxBackups: c.logMaxBackups, Mask: mask, Logger: log})
		if err != nil {
			return exitError, fmt.Errorf("opening the decision log: %w", err)
		}
		sink = dlog
	}

	// Readiness: not ready while the sinks drop records, nor once stopping.
	drops := &dropWatch{window: readyDropWindow, now: time.Now, total: func() uint64 {
		var n uint64
		if dlog != nil {
			n += dlog.Dropped()
		}
		if fl.upload != nil {
			n += fl.upload.Stats().Dropped()
		}
		return n
	}}
	stopping := make(chan struct{})

	tr, err := newTracing(ctx) // off unless OTEL_EXPORTER_OTLP_* asks (tracing.go)
	if err != nil {
		return exitError, err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	scfg := server.Config{
		MaxBodyBytes:      c.maxBodyBytes,
		MaxInputValues:    c.maxInputValues,
		MaxInflightBytes:  c.maxInflightBytes,
		MaxInflightValues: c.maxInflightValues,
		RequestTimeout:    min(c.requestTimeout, c.readTimeout),
		MinBodyRate:       c.minBodyRate,
		BodyGrace:         c.headerTimeout,
		RefuseUnlogged:    c.logFull == "refuse",
		Tokens:            tokens,
		Logger:            log,
		DecisionLog:       sink,
		Registry:          reg,
		ReloadCounts:      eng.ReloadCounts,
		BundleStatus:      fl.bundleStatus,
		StoreStatus:       ds.status,
		BundleStuck:       fl.bundleStuck,
		Memory:            c.memory,
		Tracer:            tr.tracer(),
		Version:           buildVersion(),
		Dropping:          drops.dropping,
		Stopping:          stopping,
		Shadow:            sh.srv,
		ClientCerts:       c.tlsClientCA != "", // authenticated, as with tokens: --shadow-admins must name who changes what runs
	}
	if diffs != nil {
		scfg.Diffs = diffs
	}
	var onShutdown []func() // run as Shutdown begins, beside closing the listeners
	if pg != nil {
		scfg.UI = pg.handler
		onShutdown = append(onShutdown, pg.endStreams) // a live stream never ends by itself
	}
	if ecfg.SelfCheck != nil {
		scfg.CompiledDisagreements = ecfg.SelfCheck.Disagreements
		scfg.SelfCheckCounts = ecfg.SelfCheck.Counts
	}
	fl.register(reg)
	sh.register(reg)
	ds.register(reg)
	if dlog != nil { // without a file too: a record the queue refused reaches no sink
		reg.MustRegister(dlog.Collector())
	}
	conns := server.NewConnLimiter(c.connectionCap(), c.minBodyRate)
	srv := &http.Server{
		Handler:           tr.handler(server.New(scfg, eng)),
		ReadHeaderTimeout: c.headerTimeout,
		ReadTimeout:       c.readTimeout, // a body trickled byte by byte is cut off
		WriteTimeout:      c.readTimeout + c.requestTimeout,
		IdleTimeout:       c.idleTimeout,
		MaxHeaderBytes:    64 << 10,
		TLSConfig:         tlsConfig,
		ConnState:         conns.ConnState,
		ConnContext:       conns.ConnContext,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	for _, f := range onShutdown {
		srv.RegisterOnShutdown(f)
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return exitError, err
	}
	ln = conns.Listener(ln)

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	reload := func(trigger string) {
		st := eng.Reload(runCtx, trigger)
		switch {
		case !st.OK:
			log.Error("reload refused; the previous revision keeps serving", "trigger", trigger, "revision", st.Revision, "problems", problemList(st.Problems))
		case st.Changed:
			log.Info("reloaded", "trigger", st.Trigger, "coalesced", st.Coalesced, "revision", st.Revision, "took", st.Duration)
		default:
			log.Debug("reload found no change", "trigger", st.Trigger, "revision", st.Revision)
		}
		logSkipped(log, st.Trigger, st.Skipped)
	}
	dirs := []string{c.policies, c.schemas}
	if c.tests != "" {
		dirs = append(dirs, c.tests)
	}
	if c.bundleURL != "" {
		log.Info("policies come from the bundle; the folders are not watched", "bundle_url", c.bundleURL)
	} else if _, err := watch.Start(runCtx, dirs, c.debounce, func() { reload("watch") }, log); err != nil {
		log.Warn("file watching unavailable; reload with SIGHUP or POST /v1/reload", "err", err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-runCtx.Done():
				return
			case <-hup:
				reload("sighup")
			}
		}
	}()

	if c.debugAddr != "" {
		if err := serveDebug(runCtx, c.debugAddr, log); err != nil {
			return exitError, err
		}
	}
	if c.metricsAddr != "" {
		if err := serveMetrics(runCtx, c.metricsAddr, reg, log); err != nil {
			return exitError, err
		}
	}

	errc := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			errc <- srv.ServeTLS(ln, "", "") // the certificate comes from tlsConfig, reloaded
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	fl.start(runCtx)
	sh.start(runCtx)
	log.Info("listening", "addr", ln.Addr().String(), "tls", tlsConfig != nil, "mtls", c.tlsClientCA != "", "auth_tokens", len(tokens), "max_connections", c.connectionCap())

	var serveErr error
	select {
	case <-ctx.Done():
		close(stopping) // /health/ready: not ready from now on
		if c.shutdownDelay > 0 {
			log.Info("stopping: not ready, still answering while the load balancer stops sending", "shutdown_delay", c.shutdownDelay)
			select {
			case <-time.After(c.shutdownDelay):
			case serveErr = <-errc:
			}
		}
		log.Info("stopping: finishing requests in flight", "timeout", c.shutdownTimeout)
	case serveErr = <-errc:
	}
	stopRun()
	shutCtx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		log.Warn("requests still in flight at the shutdown deadline were cut", "err", err)
		_ = srv.Close()
	}
	// Draining has its own budget, as long again: requests that ran to the
	// shutdown deadline must not leave the decision log an expired one.
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancelDrain()
	sh.stop(drainCtx, log) // before the log closes, so that no outcome is logged into a closed pipeline
	code := exitOK
	if dlog != nil {
		// Every answered decision was queued before its response was
		// written, so draining now loses nothing, unless the sink is stuck
		// past the drain deadline: then what is left is counted.
		if err := dlog.Close(drainCtx); err != nil {
			log.Error("decision log not fully written", "err", err)
		}
		st := dlog.Stats()
		level := slog.LevelInfo
		if st.Unwritten > 0 && c.decisionLog != "" {
			level, code = slog.LevelError, exitUnlogged
		}
		log.Log(context.Background(), level, "decision log closed", "written", st.Written, "unwritten", st.Unwritten,
			"refused", st.Refused, "failed", st.Failed, "lost_at_stop", st.Unwritten-st.Refused-st.Failed)
	}
	if err := fl.stop(log); err != nil {
		log.Error("decision-log upload not complete", "err", err)
	}
	ds.stop(log)
	traceCtx, cancelTrace := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancelTrace()
	if err := tr.shutdown(traceCtx); err != nil {
		log.Warn("spans not exported at the stop", "err", err)
	}
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
func newEngine(ctx context.Context, c *serveConfig, ecfg engine.Config, log *slog.Logger, opts ...engine.Option) (*engine.Engine, error) {
	if c.bundleURL != "" {
		return engine.New(ctx, ecfg, append(opts, engine.Pushed())...)
	}
	if c.stateDir == "" {
		return engine.New(ctx, ecfg, opts...)
	}
	opts = append(opts, engine.OnActivate(func(s *engine.Snapshot) {
		if err := s.SaveTo(c.stateDir); err != nil {
			log.Warn("could not save the last good revision", "dir", c.stateDir, "err", err)
		}
	}))
	if saved, ok := engine.LastGood(c.stateDir, ecfg); ok {
		opts = append(opts, engine.Fallback(saved))
	}
	return engine.New(ctx, ecfg, opts...)
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

// selfCheck is the runtime self-check of compiled decisions (nil when the
// rate is 0): a disagreement is logged with both answers.
func selfCheck(rate float64, log *slog.Logger) *engine.SelfCheck {
	if rate <= 0 {
		return nil
	}
	return &engine.SelfCheck{Rate: rate, OnDisagreement: func(d engine.Disagreement) {
		input := string(d.Input)
		if len(input) > 4096 {
			input = fmt.Sprintf("(%d bytes, in the decision log)", len(d.Input))
		}
		log.Error("compiled evaluation disagrees with topdown; the decision runs on topdown until the next reload",
			"decision", d.Decision, "revision", d.Revision, "compiled", d.Compiled, "topdown", d.Topdown, "input", input)
	}}
}
