package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/redact"
	"github.com/arbiter-dev/arbiter/policybundle"
	"github.com/arbiter-dev/arbiter/server"
	"github.com/arbiter-dev/arbiter/server/ui"
	"github.com/arbiter-dev/arbiter/watch"
)

// assembly is what `arbiter serve` runs, assembled from its configuration
// in this order: the engine and its first revision, the fleet (bundle,
// upload), shadow, the decision-record pipeline and its sinks, the HTTP
// server and its listener; then it runs (reloads, side listeners, the
// server) until told to stop, and stops in the reverse order, draining
// every record.
type assembly struct {
	c   *Config
	log *slog.Logger

	tokens    []server.Token
	tlsConfig *tls.Config
	ecfg      engine.Config
	diffs     *diff.Runner // nil: --diff-timeout 0
	eng       *live.Engine
	fl        *fleet
	sh        *shadowing
	ds        *store              // the decision store (store.go); its sink is nil without --decision-store
	pg        *pages              // nil: --ui=false
	dlog      *decisionlog.Logger // nil: no file and no sink
	stopping  chan struct{}       // closed when a stop begins
	tr        *tracing
	reg       *prometheus.Registry
	conns     *server.ConnLimiter
	srv       *http.Server
	ln        net.Listener
	locks     []*os.File // held open: the locks of the decision log and the state folder (lock.go)
	// group runs what serves until the stop (the server, the side
	// listeners); served ends when the server ends on its own.
	group  *errgroup.Group
	served context.Context
}

// close releases what outlives the stop: the reloads still running (they
// may save into the state folder, whose lock goes next) and the background
// diffs.
func (a *assembly) close() {
	if a.eng != nil {
		a.eng.Close()
	}
	if a.diffs != nil {
		a.diffs.Close()
	}
	for _, l := range a.locks {
		_ = l.Close()
	}
}

// unwind ends what a start that failed had begun, before close releases
// the locks: the listeners it opened, then the parts that exist, as a stop
// does (stop skips the parts not built).
func (a *assembly) unwind() {
	if a.ln != nil {
		_ = a.ln.Close()
	}
	if a.group != nil {
		_ = a.group.Wait() // the side listeners that started end with their ctx
	}
	a.stop()
}

// assemble builds every part; nothing serves yet.
func (a *assembly) assemble(ctx context.Context, stdout io.Writer) error {
	c, log := a.c, a.log
	// First: the start saves a revision into the state folder, and a
	// second process must not touch what the first one owns.
	var err error
	if a.locks, err = c.lockOwned(); err != nil {
		return err
	}
	if c.TokenFile != "" {
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return fmt.Errorf("reading --auth-token-file: %w", err)
		}
		if a.tokens, err = server.ParseTokenFile(b); err != nil {
			return fmt.Errorf("--auth-token-file: %w", err)
		}
	}
	if a.tlsConfig, err = c.tlsConfig(log); err != nil {
		return err
	}
	if err := a.startEngine(ctx); err != nil {
		return err
	}
	if a.fl, err = newFleet(c, a.eng, log); err != nil {
		return err
	}
	if err = a.sh.start(ctx, c, a.eng, a.ecfg, log); err != nil { // a candidate in shadow (shadow.go)
		return err
	}
	if a.ds, err = newStore(c, a.eng, log); err != nil {
		return err
	}
	sink, err := a.openRecords(stdout)
	if err != nil {
		return err
	}
	a.stopping = make(chan struct{})
	a.group, a.served = errgroup.WithContext(context.Background()) // not ctx's: a stop is not the server's end
	if a.tr, err = newTracing(ctx, c.Version, a.log); err != nil { // off unless OTEL_TRACES_EXPORTER or OTEL_EXPORTER_OTLP_* asks (tracing.go)
		return err
	}
	a.newServer(sink)
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return err
	}
	a.ln = a.conns.Listener(ln)
	return nil
}

// startEngine makes the first revision live and says what it is.
func (a *assembly) startEngine(ctx context.Context) error {
	c, log := a.c, a.log
	a.ecfg = c.Engine
	a.ecfg.MaxInputValues = int(c.API.MaxInputValues)
	// The semantic diff of each revision made live against the one it
	// replaced, and of the shadow candidate against the live one: in the
	// background, one at a time, never holding up an activation.
	var opts []live.Option
	if c.DiffTimeout > 0 {
		// Each diff in a child process of this binary: its fault, memory
		// or time is its answer (unknown), never this server's.
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("the diff's child process: %w", err)
		}
		child := &diff.Child{Path: exe, Memory: uint64(c.DiffMemory)}
		a.diffs = diff.NewRunner(c.DiffTimeout, log, child)
		opts = append(opts, live.OnActivate(a.diffs.Activated))
		if c.DiffGate {
			opts = append(opts, live.WithChecks(diff.GateCheck(child)))
		}
	}
	a.sh = newShadow(c, a.diffs, log)
	if c.SelfCheckRate > 0 {
		a.ecfg.SelfCheck = a.sh.sh.SelfCheck
	}
	eng, err := newEngine(ctx, c, a.ecfg, log, opts...)
	if err != nil {
		return noPolicies(c, err)
	}
	a.eng = eng
	if st := eng.LastReload(); !st.OK && c.BundleURL == "" {
		log.Error("the configured policies do not load; serving the last good revision until they do", "revision", st.Revision, "problems", problemList(st.Problems))
	}
	if snap := eng.Snapshot(); snap != nil {
		log.Info("policies loaded", "revision", snap.Revision, "decisions", strings.Join(snap.Names(), ","), "files", len(snap.Files), "test_gate", c.Engine.Tests != "")
		logSkipped(log, "start", eng.LastReload().Skipped)
		for _, ci := range snap.Compiled() {
			if !ci.Compiled {
				log.Info("decision runs on topdown", "decision", ci.Decision, "reason", ci.Reason)
			}
		}
	}
	return nil
}

// noPolicies is the start's one line when the folders load no revision
// and no last good copy serves instead: it names the flags to look at.
func noPolicies(c *Config, err error) error {
	why := err.Error()
	if le := (*engine.LoadError)(nil); errors.As(err, &le) {
		why = problemList(le.Problems)
	}
	saved := "no last good copy in --state-dir " + c.StateDir
	if c.StateDir == "" {
		saved = "--state-dir is off"
	}
	return fmt.Errorf("--policies %s: no policies loaded, nothing to serve (%s): %s (with --schemas %s, --tests %q)", c.Engine.Policies, saved, why, c.Engine.Schemas, c.Engine.Tests)
}

// openRecords opens the decision-record pipeline: the file, the upload,
// the decision store and the pages' ring are its sinks, each record masked
// once for all of them; the file, the upload and the store each have their
// own bounded queue, so that a stalled disk or database costs the others
// nothing. The sink it returns is nil when nothing is logged.
func (a *assembly) openRecords(stdout io.Writer) (server.DecisionLog, error) {
	c, log := a.c, a.log
	var sinks []decisionlog.Sink
	if a.fl.upload != nil {
		sinks = append(sinks, a.fl.upload)
	}
	if a.ds.sink != nil {
		sinks = append(sinks, a.ds.sink)
	}
	if c.UI {
		var fleetPages ui.Store // every replica's decisions, when there is a store
		if a.ds.sink != nil {
			fleetPages = ui.FromStore(a.ds.sink.Reader())
		}
		a.pg = newPages(c, a.eng, a.sh, a.diffs, fleetPages, len(a.tokens) > 0, log)
		sinks = append(sinks, a.pg.ring)
	}
	if c.DecisionLog == "" {
		log.Warn("decision log disabled")
	}
	if c.DecisionLog == "" && len(sinks) == 0 {
		return nil, nil
	}
	o := c.Records
	o.Path, o.Stdout, o.Sinks, o.Refuse, o.Mask, o.Logger = c.DecisionLog, stdout, sinks, c.RefuseUnlogged, c.DecisionLogMask, log
	dlog, err := decisionlog.Open(o)
	if err != nil {
		return nil, fmt.Errorf("opening the decision log: %w", err)
	}
	a.dlog = dlog
	return dlog, nil
}

// newServer builds the HTTP server, its handler and its metrics registry.
func (a *assembly) newServer(sink server.DecisionLog) {
	c, fl, dlog := a.c, a.fl, a.dlog
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
	scfg := c.API
	scfg.RequestTimeout, scfg.BodyGrace = min(c.RequestTimeout, c.ReadTimeout), c.HeaderTimeout
	scfg.RefuseUnlogged, scfg.Tokens, scfg.Logger, scfg.DecisionLog, scfg.ReloadCounts = c.RefuseUnlogged, a.tokens, a.log, sink, a.eng.ReloadCounts
	scfg.Tracer, scfg.Version, scfg.Dropping, scfg.Stopping, scfg.Shadow = a.tr.tracer(), c.Version, drops.dropping, a.stopping, a.sh.srv
	scfg.ClientCerts = c.TLSClientCA != "" // authenticated, as with tokens: --shadow-admins must name who changes what runs
	// The live bundle's and the shadow's bundle's metrics, by their bundle
	// label, and the shadow's; the others' when they are on.
	scfg.Registry = prometheus.NewRegistry()
	a.reg = scfg.Registry
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		policybundle.Collector(fl.source, a.sh.source), a.sh.sh.Collector())
	if fl.source != nil {
		scfg.BundleStatus, scfg.BundleStuck, scfg.Unloaded = fl.bundleStatus, fl.bundleStuck, fl.unloaded
	}
	if fl.upload != nil {
		a.reg.MustRegister(fl.upload.Collector())
	}
	if a.ds.sink != nil {
		a.reg.MustRegister(a.ds.sink.Collector())
		scfg.StoreStatus = func() any { return a.ds.sink.Stats() }
	}
	if dlog != nil { // without a file too: a record the queue refused reaches no sink
		a.reg.MustRegister(dlog.Collector())
	}
	if a.diffs != nil {
		scfg.Diffs = a.diffs
	}
	if a.pg != nil {
		scfg.UI = a.pg.handler
	}
	a.conns = server.NewConnLimiter(c.connectionCap(), c.API.MinBodyRate)
	a.srv = &http.Server{
		Handler:           a.tr.handler(server.New(scfg, a.eng)),
		ReadHeaderTimeout: c.HeaderTimeout,
		ReadTimeout:       c.ReadTimeout, // a body trickled byte by byte is cut off
		WriteTimeout:      c.ReadTimeout + c.RequestTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		TLSConfig:         a.tlsConfig,
		ConnState:         a.conns.ConnState,
		ConnContext:       a.conns.ConnContext,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	if a.pg != nil {
		a.srv.RegisterOnShutdown(a.pg.endStreams) // as Shutdown begins: a live stream never ends by itself
	}
}

// watchReloads reloads on file events (unless the revisions come from the
// bundle) and on SIGHUP, until ctx ends; the function it returns stops
// listening for the signal.
func (a *assembly) watchReloads(ctx context.Context) func() {
	c, eng, log := a.c, a.eng, a.log
	reload := func(trigger string) {
		st := eng.Reload(ctx, trigger)
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
	dirs := []string{c.Engine.Policies, c.Engine.Schemas}
	if c.Engine.Tests != "" {
		dirs = append(dirs, c.Engine.Tests)
	}
	if c.BundleURL != "" {
		log.Info("policies come from the bundle; the folders are not watched", "bundle_url", redact.URL(c.BundleURL))
	} else if _, err := watch.Start(ctx, dirs, c.ReloadDebounce, func() { reload("watch") }, log); err != nil {
		log.Warn("file watching unavailable; reload with SIGHUP or POST /v1/reload", "err", err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload("sighup")
			}
		}
	}()
	return func() { signal.Stop(hup) }
}

// run serves on the listener, and starts the bundle polls, the upload and
// shadow; the server's end ends served.
func (a *assembly) run(ctx context.Context) {
	a.group.Go(func() error {
		if a.tlsConfig != nil {
			return a.srv.ServeTLS(a.ln, "", "") // the certificate comes from tlsConfig, reloaded
		}
		return a.srv.Serve(a.ln)
	})
	for _, src := range []*policybundle.Source{a.fl.source, a.sh.source} { // the live bundle's polls, the shadow's
		if src != nil {
			src.Start(ctx)
		}
	}
	a.fl.sayAtStart(ctx, a.eng, a.log)
	a.ds.sayAtStart(ctx, a.log)
	a.log.Info("listening", "addr", a.ln.Addr().String(), "tls", a.tlsConfig != nil, "mtls", a.c.TLSClientCA != "", "auth_tokens", len(a.tokens), "max_connections", a.c.connectionCap())
}

// waitForStop waits for ctx to end (then readiness turns off, and after
// --shutdown-delay the stop begins) or for the server to end on its own.
func (a *assembly) waitForStop(ctx context.Context) {
	c, log := a.c, a.log
	select {
	case <-ctx.Done():
		close(a.stopping) // /health/ready: not ready from now on
		if c.ShutdownDelay > 0 {
			log.Info("stopping: not ready, still answering while the load balancer stops sending", "shutdown_delay", c.ShutdownDelay)
			select {
			case <-time.After(c.ShutdownDelay):
			case <-a.served.Done():
			}
		}
		log.Info("stopping: finishing requests in flight", "timeout", c.ShutdownTimeout)
	case <-a.served.Done():
	}
}

// stop finishes the requests in flight, then drains shadow, the decision
// log, the upload, the store and the traces, and returns the exit status:
// ExitUnlogged when decision records were not written.
func (a *assembly) stop() int {
	c, log, dlog := a.c, a.log, a.dlog
	shutCtx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	if a.srv != nil { // nil: a start that failed before the server was built (unwind)
		if err := a.srv.Shutdown(shutCtx); err != nil {
			log.Warn("requests still in flight at the shutdown deadline were cut", "err", err)
			_ = a.srv.Close()
		}
	}
	// Draining has its own budget, as long again: requests that ran to the
	// shutdown deadline must not leave the decision log an expired one.
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancelDrain()
	a.sh.stop(drainCtx, log) // before the log closes, so that no outcome is logged into a closed pipeline
	code := ExitOK
	if dlog != nil {
		// Every answered decision was queued before its response was
		// written, so draining now loses nothing, unless the sink is stuck
		// past the drain deadline: then what is left is counted.
		if err := dlog.Close(drainCtx); err != nil {
			log.Error("decision log not fully written", "err", err)
		}
		st := dlog.Stats()
		level := slog.LevelInfo
		if st.Unwritten > 0 && c.DecisionLog != "" {
			level, code = slog.LevelError, ExitUnlogged
		}
		log.Log(context.Background(), level, "decision log closed", "written", st.Written, "unwritten", st.Unwritten,
			"refused", st.Refused, "failed", st.Failed, "lost_at_stop", st.Unwritten-st.Refused-st.Failed)
	}
	if err := a.fl.stop(log); err != nil {
		log.Error("decision-log upload not complete", "err", err)
	}
	a.ds.stop(log)
	traceCtx, cancelTrace := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancelTrace()
	if err := a.tr.shutdown(traceCtx); err != nil {
		log.Warn("spans not exported at the stop", "err", err)
	}
	return code
}

// readyDropWindow is how long /health/ready stays not ready after the
// decision sinks last dropped a record: long enough for a probe period or
// two to see it, short enough that a replica that caught up takes traffic
// again soon.
const readyDropWindow = 10 * time.Second

// dropWatch says whether decision records were dropped recently: the
// readiness half of "the decision sinks are not dropping". total is every
// record dropped so far (the file's and the upload's counters, which only
// grow); a probe that sees it grow marks the time.
type dropWatch struct {
	total  func() uint64
	window time.Duration
	now    func() time.Time

	mu     sync.Mutex
	seen   uint64
	grewAt time.Time
}

// dropping is nil unless total grew within the window.
func (d *dropWatch) dropping() error {
	n, now := d.total(), d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if n > d.seen {
		d.seen, d.grewAt = n, now
	}
	if d.grewAt.IsZero() || now.Sub(d.grewAt) >= d.window {
		return nil
	}
	return fmt.Errorf("decision records were dropped within the last %s (%d in all): the decision log or its upload cannot keep up", d.window, d.seen)
}

// serveSide starts the side listeners, each stopping with ctx: Go's
// profiles (chi's middleware.Profiler: /debug/pprof/ and /debug/vars) on a
// loopback listener, so that an operator can profile a live process without
// exposing them on the API; and the metrics at /metrics without
// authentication, for Prometheus when the API requires a token or a client
// certificate: the metrics carry counts and revisions, no input.
func (a *assembly) serveSide(ctx context.Context) error {
	if a.c.DebugAddr != "" {
		r := chi.NewRouter()
		r.Mount("/debug", middleware.Profiler())
		if err := a.serveAside(ctx, "--debug-addr", a.c.DebugAddr, &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}, "serving profiles"); err != nil {
			return err
		}
	}
	if a.c.MetricsAddr != "" {
		r := chi.NewRouter()
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
		return a.serveAside(ctx, "--metrics-addr", a.c.MetricsAddr, srv, "serving metrics")
	}
	return nil
}

// serveAside serves srv on a listener of its own at the address of flag,
// until ctx ends, and says so in the log line said. Its end is not the
// server's: it joins the group only so that Run returns once it is closed.
func (a *assembly) serveAside(ctx context.Context, flag, addr string, srv *http.Server, said string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	a.group.Go(func() error { _ = srv.Serve(ln); return nil })
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	a.log.Info(said, "addr", ln.Addr().String())
	return nil
}
