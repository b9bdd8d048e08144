package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/server"
	"github.com/arbiter-dev/arbiter/watch"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// serveConfig is every setting of `arbiter serve`, parsed and validated here
// and handed down as plain values.
type serveConfig struct {
	folders
	fleetConfig
	addr            string
	decisionLog     string
	logMaxBytes     int64
	logMask         string
	maxBodyBytes    int64
	evalTimeout     time.Duration
	readTimeout     time.Duration
	shutdownTimeout time.Duration
	debounce        time.Duration
	tokenFile       string
	tlsCert         string
	tlsKey          string
	tlsClientCA     string
	insecureListen  bool
	logLevel        string
	debugAddr       string
	gcPercent       int64
	stateDir        string
	selfCheckRate   float64
	ui              bool  // serve the /ui pages (cmd/arbiter/ui.go)
	uiRecent        int64 // decisions the pages keep in memory
}

func envDuration(key string, def time.Duration) time.Duration {
	if v, ok := os.LookupEnv(key); ok {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

func envFloat(key string, def float64) float64 {
	if v, ok := os.LookupEnv(key); ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
	}
	return def
}

func envInt(key string, def int64) int64 {
	if v, ok := os.LookupEnv(key); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return def
}

func envBool(key string) bool {
	b, _ := strconv.ParseBool(os.Getenv(key))
	return b
}

func parseServe(args []string, stderr io.Writer) (*serveConfig, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &serveConfig{}
	c.folders.register(fs, true)
	c.fleetConfig.register(fs)
	fs.StringVar(&c.addr, "addr", envOr("ARBITER_ADDR", "127.0.0.1:8181"), "listen address HOST:PORT")
	fs.StringVar(&c.decisionLog, "decision-log", envOr("ARBITER_DECISION_LOG", "var/decisions.log"), "decision log file, - for stdout, '' to disable")
	fs.Int64Var(&c.logMaxBytes, "decision-log-max-bytes", envInt("ARBITER_DECISION_LOG_MAX_BYTES", 100<<20), "rotate the decision log at this size")
	fs.StringVar(&c.logMask, "decision-log-mask", envOr("ARBITER_DECISION_LOG_MASK", ""), "comma-separated JSON pointers into the input to mask in the decision log")
	fs.Int64Var(&c.maxBodyBytes, "max-body-bytes", envInt("ARBITER_MAX_BODY_BYTES", 16<<20), "largest request body accepted")
	fs.DurationVar(&c.evalTimeout, "eval-timeout", envDuration("ARBITER_EVAL_TIMEOUT", engine.DefaultEvalTimeout), "deadline of one policy evaluation")
	// Rarely changed (tests shorten it), so the README's table leaves it out.
	fs.DurationVar(&c.readTimeout, "read-timeout", envDuration("ARBITER_READ_TIMEOUT", 30*time.Second), "deadline for reading one request, body included: a body trickled byte by byte is cut off")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", envDuration("ARBITER_SHUTDOWN_TIMEOUT", 10*time.Second), "how long a graceful stop waits for requests in flight")
	fs.DurationVar(&c.debounce, "reload-debounce", envDuration("ARBITER_RELOAD_DEBOUNCE", 100*time.Millisecond), "quiet time after file events before a reload")
	fs.StringVar(&c.tokenFile, "auth-token-file", envOr("ARBITER_AUTH_TOKEN_FILE", ""), "file of bearer tokens, one per line (CALLER TOKEN or TOKEN)")
	fs.StringVar(&c.tlsCert, "tls-cert-file", envOr("ARBITER_TLS_CERT_FILE", ""), "TLS certificate (PEM)")
	fs.StringVar(&c.tlsKey, "tls-key-file", envOr("ARBITER_TLS_KEY_FILE", ""), "TLS private key (PEM)")
	fs.StringVar(&c.tlsClientCA, "tls-client-ca-file", envOr("ARBITER_TLS_CLIENT_CA_FILE", ""), "CA bundle (PEM) that client certificates must chain to (mTLS)")
	fs.BoolVar(&c.insecureListen, "insecure-listen", envBool("ARBITER_INSECURE_LISTEN"), "allow a non-loopback address without authentication")
	fs.StringVar(&c.logLevel, "log-level", envOr("ARBITER_LOG_LEVEL", "info"), "debug, info, warn or error")
	fs.StringVar(&c.stateDir, "state-dir", envOr("ARBITER_STATE_DIR", "var/state"), "where the last good revision's files are kept, served when the configured folders do not load at start ('' to disable)")
	fs.BoolVar(&c.ui, "ui", envOr("ARBITER_UI", "true") == "true", "serve the pages for reliability engineers at /ui")
	fs.Int64Var(&c.uiRecent, "ui-recent", envInt("ARBITER_UI_RECENT", 10000), "decisions the /ui pages keep in memory (the decision log has the rest)")
	fs.Int64Var(&c.gcPercent, "gc-percent", envInt("ARBITER_GC_PERCENT", 200), "Go garbage collector target (GOGC); the environment's GOGC wins when set")
	fs.Float64Var(&c.selfCheckRate, "selfcheck-rate", envFloat("ARBITER_SELFCHECK_RATE", 0.01), "fraction of compiled decisions re-decided by topdown in the background (0 disables the self-check)")
	fs.StringVar(&c.debugAddr, "debug-addr", envOr("ARBITER_DEBUG_ADDR", ""), "loopback HOST:PORT serving Go's /debug/pprof/ profiles (off when empty)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := c.fleetConfig.validate(); err != nil {
		return nil, err
	}
	if c.maxBodyBytes <= 0 {
		return nil, errors.New("--max-body-bytes must be positive")
	}
	if c.evalTimeout <= 0 {
		return nil, errors.New("--eval-timeout must be positive")
	}
	if c.readTimeout <= 0 {
		return nil, errors.New("--read-timeout must be positive")
	}
	if !(c.selfCheckRate >= 0 && c.selfCheckRate <= 1) {
		return nil, errors.New("--selfcheck-rate must be between 0 and 1")
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, errors.New("--tls-cert-file and --tls-key-file go together")
	}
	if c.tlsClientCA != "" && c.tlsCert == "" {
		return nil, errors.New("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")
	}
	if c.debugAddr != "" && !isLoopback(c.debugAddr) {
		return nil, fmt.Errorf("--debug-addr %s must be a loopback address: profiles are not authenticated", c.debugAddr)
	}
	if !isLoopback(c.addr) && c.tokenFile == "" && c.tlsClientCA == "" && !c.insecureListen {
		return nil, fmt.Errorf("refusing to listen on non-loopback address %s without --auth-token-file or --tls-client-ca-file (pass --insecure-listen to override)", c.addr)
	}
	return c, nil
}

// isLoopback reports whether addr only listens on the loopback interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseServe(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "arbiter serve: %v\n", err)
		}
		return exitError
	}
	log, err := newLogger(c.logLevel, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "arbiter serve: %v\n", err)
		return exitError
	}
	// Each decision allocates its input tree and OPA's evaluation state
	// and drops them at once: a heap allowed to grow to 3x the live data
	// instead of 2x halves the collector's share of the CPU under load, for
	// a resident size that stays below stock OPA's (docs/BENCHMARKS.md).
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(int(c.gcPercent))
	}
	if err := serve(ctx, c, log, stdout); err != nil {
		log.Error("arbiter serve stopped", "err", err)
		return exitError
	}
	return exitOK
}

func serve(ctx context.Context, c *serveConfig, log *slog.Logger, stdout io.Writer) error {
	var tokens []server.Token
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return fmt.Errorf("reading --auth-token-file: %w", err)
		}
		if tokens, err = server.ParseTokenFile(b); err != nil {
			return fmt.Errorf("--auth-token-file: %w", err)
		}
	}
	tlsConfig, err := c.tlsConfig()
	if err != nil {
		return err
	}

	ecfg := engine.Config{Policies: c.policies, Schemas: c.schemas, Tests: c.tests, EvalTimeout: c.evalTimeout, SelfCheck: selfCheck(c.selfCheckRate, log)}
	var eng *engine.Engine
	if c.bundleURL != "" {
		// The bundle is the only source: not ready until it activates.
		eng = engine.NewEmpty(ecfg)
	} else if saved, ok := engine.SavedConfig(c.stateDir, ecfg); c.stateDir != "" && ok {
		eng, err = engine.NewOrFallback(ctx, ecfg, saved)
	} else {
		eng, err = engine.New(ctx, ecfg)
	}
	if err != nil {
		return fmt.Errorf("loading policies: %w", err)
	}
	if st := eng.LastReload(); !st.OK && c.bundleURL == "" {
		probs := make([]string, len(st.Problems))
		for i, p := range st.Problems {
			probs[i] = p.String()
		}
		log.Error("the configured policies do not load; serving the last good revision until they do", "revision", st.Revision, "problems", strings.Join(probs, "; "))
	}
	if c.stateDir != "" && c.bundleURL == "" {
		save := func(s *engine.Snapshot) {
			if err := s.SaveTo(c.stateDir); err != nil {
				log.Warn("could not save the last good revision", "dir", c.stateDir, "err", err)
			}
		}
		if eng.LastReload().OK {
			save(eng.Snapshot())
		}
		eng.OnActivate = save
	}
	if snap := eng.Snapshot(); snap != nil {
		log.Info("policies loaded", "revision", snap.Revision, "decisions", strings.Join(snap.Names(), ","), "files", len(snap.Files), "test_gate", c.tests != "")
		for _, ci := range snap.Compiled() {
			if !ci.Compiled {
				log.Info("decision runs on topdown", "decision", ci.Decision, "reason", ci.Reason)
			}
		}
	}
	fl, err := newFleet(c, eng, ecfg, c.logMask, log)
	if err != nil {
		return err
	}

	var dlog *decisionlog.Logger
	var sink server.DecisionLog
	if c.decisionLog != "" {
		var mask []string
		for _, p := range strings.Split(c.logMask, ",") {
			if p = strings.TrimSpace(p); p != "" {
				mask = append(mask, p)
			}
		}
		dlog, err = decisionlog.Open(decisionlog.Options{Path: c.decisionLog, Stdout: stdout, MaxBytes: c.logMaxBytes, Mask: mask, Logger: log})
		if err != nil {
			return fmt.Errorf("opening the decision log: %w", err)
		}
		sink = dlog
	} else {
		log.Warn("decision log disabled")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	scfg := server.Config{
		MaxBodyBytes: c.maxBodyBytes,
		Tokens:       tokens,
		Logger:       log,
		DecisionLog:  fl.decisionLog(sink),
		Registry:     reg,
		ReloadCounts: eng.ReloadCounts,
		BundleStatus: fl.bundleStatus,
	}
	if c.ui {
		pg, err := newPages(c, eng, len(tokens) > 0, log)
		if err != nil {
			return err
		}
		scfg.UI = pg.handler
		if scfg.DecisionLog == nil {
			scfg.DecisionLog = pg
		} else {
			scfg.DecisionLog = teeLog{scfg.DecisionLog, pg}
		}
	}
	if ecfg.SelfCheck != nil {
		scfg.CompiledDisagreements = ecfg.SelfCheck.Disagreements
	}
	fl.register(reg)
	if dlog != nil {
		scfg.DroppedLogRecords = dlog.Dropped
	}
	srv := &http.Server{
		Handler:           server.New(scfg, fl.serverEngine()),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       c.readTimeout, // a body trickled byte by byte is cut off
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		TLSConfig:         tlsConfig,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	reload := func(trigger string) {
		st := fl.serverEngine().Reload(runCtx, trigger)
		switch {
		case !st.OK:
			probs := make([]string, len(st.Problems))
			for i, p := range st.Problems {
				probs[i] = p.String()
			}
			log.Error("reload refused; the previous revision keeps serving", "trigger", trigger, "revision", st.Revision, "problems", strings.Join(probs, "; "))
		case st.Changed:
			log.Info("reloaded", "trigger", trigger, "revision", st.Revision, "took", st.Duration)
		default:
			log.Debug("reload found no change", "trigger", trigger, "revision", st.Revision)
		}
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
			return err
		}
	}

	errc := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			errc <- srv.ServeTLS(ln, c.tlsCert, c.tlsKey)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	fl.start(runCtx)
	log.Info("listening", "addr", ln.Addr().String(), "tls", tlsConfig != nil, "mtls", c.tlsClientCA != "", "auth_tokens", len(tokens))

	var serveErr error
	select {
	case <-ctx.Done():
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
	if dlog != nil {
		// Every answered decision was queued before its response was
		// written, so draining now loses nothing.
		if err := dlog.Close(shutCtx); err != nil {
			log.Error("decision log not fully flushed", "err", err)
			if serveErr == nil {
				serveErr = err
			}
		}
		log.Info("decision log closed", "written", dlog.Written(), "dropped", dlog.Dropped())
	}
	if err := fl.stop(log); err != nil {
		log.Error("decision-log upload not complete", "err", err)
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	log.Info("stopped")
	return serveErr
}

func (c *serveConfig) tlsConfig() (*tls.Config, error) {
	if c.tlsCert == "" {
		return nil, nil
	}
	if _, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey); err != nil {
		return nil, fmt.Errorf("loading the TLS key pair: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.tlsClientCA != "" {
		pem, err := os.ReadFile(c.tlsClientCA)
		if err != nil {
			return nil, fmt.Errorf("reading --tls-client-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("--tls-client-ca-file holds no PEM certificate")
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// serveDebug serves Go's profiles on a separate loopback listener, so that
// an operator can profile a live process without exposing them on the API.
func serveDebug(ctx context.Context, addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--debug-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Info("serving profiles", "addr", ln.Addr().String())
	return nil
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
