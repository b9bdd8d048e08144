package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/server"
	"github.com/arbiter-dev/arbiter/server/ui"
	"github.com/spf13/pflag"
)

// serveConfig is every setting of `arbiter serve`, parsed and validated here
// and handed down as plain values.
type serveConfig struct {
	folders
	fleetConfig
	shadowConfig
	storeConfig     // the decision store (store.go)
	addr            string
	decisionLog     string
	logMask         string
	logFull         string
	maxConnections  int
	requestTimeout  time.Duration
	diffTimeout     time.Duration
	diffMemory      byteSize
	diffGate        bool
	readTimeout     time.Duration
	headerTimeout   time.Duration
	idleTimeout     time.Duration
	shutdownTimeout time.Duration
	shutdownDelay   time.Duration
	debounce        time.Duration
	tokenFile       string
	tlsCert         string
	tlsKey          string
	tlsClientCA     string
	insecureListen  bool
	logLevel        string
	debugAddr       string
	metricsAddr     string
	memoryLimit     byteSize
	gcPercent       int
	stateDir        string
	selfCheckRate   float64
	ui              bool // serve the /ui pages (cmd/arbiter/ui.go)
	uiRecent        int  // decisions the pages keep in memory
	uiTraceURL      string

	// What the flags set of the API server's, the engine's and the decision
	// log's own configurations; the rest of each is filled in at the start.
	api     server.Config
	engine  engine.Config
	records decisionlog.Options

	set    map[string]bool // the flags given, on the command line or in the environment
	memory *memoryPlan     // the memory limit and the budgets fitted inside it (memory.go)
}

// Defaults of serve's flags that are not another package's.
const (
	defaultMemoryLimit = 1 << 30
	defaultIdleTimeout = 30 * time.Second
	// defaultDiffTimeout bounds one background diff: the shipped policies
	// take 8-19 s on a quiet 2-core machine (docs/DIFF.md).
	defaultDiffTimeout = 5 * time.Minute
	// defaultDiffMemory bounds the diff's child process and each solver
	// it starts: the shipped policies need tens of MiB, a solver on a hard
	// question can take gigabytes before its time is up.
	defaultDiffMemory = 2 << 30
)

// registerServe adds serve's flags to fs, parsed into the config it
// returns.
func registerServe(fs *command) *serveConfig {
	c := &serveConfig{memoryLimit: defaultMemoryLimit}
	c.folders.register(fs, true)
	c.fleetConfig.register(fs)
	c.shadowConfig.register(fs)
	c.storeConfig.register(fs)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8181", "listen address HOST:PORT")
	fs.StringVar(&c.decisionLog, "decision-log", "var/decisions.log", "decision log file, - for stdout, '' to disable")
	fs.IntVar(&c.records.MaxMegabytes, "decision-log-max-mb", decisionlog.DefaultMaxMegabytes, "rotate the decision log file at this many MiB; it must hold the largest record")
	fs.IntVar(&c.records.MaxBackups, "decision-log-max-backups", decisionlog.DefaultMaxBackups, "rotated decision log files to keep (negative: all)")
	fs.Int64Var(&c.records.QueueBytes, "decision-log-queue-bytes", decisionlog.DefaultQueueBytes, "bytes of records that may wait to be written; past it records are refused (see --decision-log-full)")
	fs.StringVar(&c.logMask, "decision-log-mask", "", "comma-separated JSON pointers into the input to mask in the decision log")
	fs.StringVar(&c.logFull, "decision-log-full", "drop", "when the decision log's queue is full: drop the record and answer, or refuse the decision (503 overloaded)")
	fs.Int64Var(&c.api.MaxBodyBytes, "max-body-bytes", server.DefaultMaxBodyBytes, "largest request body accepted")
	fs.Int64Var(&c.api.MaxInputValues, "max-input-values", server.DefaultMaxInputValues, "most JSON values in one input (body_too_large past it)")
	fs.Int64Var(&c.api.MaxInflightBytes, "max-inflight-bytes", server.DefaultMaxInflightBytes, "admission: body bytes of all requests in flight (503 overloaded past it)")
	fs.Int64Var(&c.api.MaxInflightValues, "max-inflight-values", server.DefaultMaxInflightValues, "admission: JSON values of all requests in flight (503 overloaded past it)")
	fs.IntVar(&c.maxConnections, "max-connections", 0, "most open connections; at the cap the longest idle one is closed, else the sender furthest below --min-body-rate (0: half the file descriptor limit)")
	fs.Int64Var(&c.engine.MaxFileBytes, "max-file-bytes", engine.DefaultMaxFileBytes, "largest policy, data, schema or test file read")
	fs.DurationVar(&c.engine.EvalTimeout, "eval-timeout", engine.DefaultEvalTimeout, "deadline of one policy evaluation")
	fs.DurationVar(&c.requestTimeout, "request-timeout", server.DefaultRequestTimeout, "deadline of a whole decision request: reading the body, decoding, validation and evaluation (at most --read-timeout)")
	fs.DurationVar(&c.readTimeout, "read-timeout", 30*time.Second, "deadline for reading one request, headers and body: a body trickled byte by byte is cut off")
	fs.DurationVar(&c.headerTimeout, "read-header-timeout", server.DefaultBodyGrace, "deadline for a request's headers, and the grace before its body must keep --min-body-rate")
	fs.Int64Var(&c.api.MinBodyRate, "min-body-rate", server.DefaultMinBodyRate, "bytes per second a request body must average after --read-header-timeout; a slower one is cut off")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", defaultIdleTimeout, "how long a keep-alive connection may stay idle")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful stop waits for requests in flight, and then again for the decision log to drain")
	fs.DurationVar(&c.shutdownDelay, "shutdown-delay", 0, "after SIGTERM, keep answering this long with /health/ready not ready before the graceful stop begins: the time the load balancer takes to stop sending (a preStop delay in the process)")
	fs.DurationVar(&c.debounce, "reload-debounce", 100*time.Millisecond, "quiet time after file events before a reload")
	fs.DurationVar(&c.engine.ReloadTimeout, "reload-timeout", engine.DefaultReloadTimeout, "deadline of a whole reload: reading, compiling and the test gate")
	fs.DurationVar(&c.engine.TestTimeout, "test-timeout", engine.DefaultTestTimeout, "deadline of each Rego test and fixture of the reload gate")
	fs.DurationVar(&c.diffTimeout, "diff-timeout", defaultDiffTimeout, "deadline of one semantic diff (arbiter diff), run in the background after a revision goes live (against the one it replaced) and after a shadow candidate is gated (against the live one); 0 runs none")
	c.diffMemory = defaultDiffMemory
	fs.BoolVar(&c.diffGate, "diff-gate", false, "refuse a reload, bundle or shadow candidate unless the diff against the live revision proves that no decision newly allows an input (refuse_to_allow none; a found or an unknown refuses): the report its bundle carries (arbiter build --diff-against), else a diff run in the gate within --reload-timeout")
	fs.Var(&c.diffMemory, "diff-memory", "address space of the semantic diff's child process and of each SMT solver it starts (2GiB, 1500MiB; 0 for no bound; the child's Go runtime alone needs about 1GiB): past it the process ends and the diff's answers are unknown")
	fs.StringVar(&c.tokenFile, "auth-token-file", "", "file of bearer tokens, one per line (CALLER TOKEN or TOKEN)")
	fs.StringVar(&c.tlsCert, "tls-cert-file", "", "TLS certificate (PEM), reloaded when it changes")
	fs.StringVar(&c.tlsKey, "tls-key-file", "", "TLS private key (PEM), reloaded when it changes")
	fs.StringVar(&c.tlsClientCA, "tls-client-ca-file", "", "CA bundle (PEM) that client certificates must chain to (mTLS)")
	fs.BoolVar(&c.insecureListen, "insecure-listen", false, "allow a non-loopback address without authentication")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.stateDir, "state-dir", "var/state", "where the last good revision's files are kept, served when the configured folders do not load at start ('' to disable)")
	fs.Var(&c.memoryLimit, "memory-limit", "Go memory limit (GOMEMLIMIT syntax: 1GiB, 800MiB; 0 for none); unset, 90% of the container's cgroup limit when it has one; the environment's GOMEMLIMIT wins when set")
	fs.IntVar(&c.gcPercent, "gc-percent", 100, "Go garbage collector target (GOGC); the environment's GOGC wins when set")
	fs.Float64Var(&c.selfCheckRate, "selfcheck-rate", 0.01, "fraction of compiled decisions re-decided by topdown in the background (0 disables the self-check)")
	fs.BoolVar(&c.ui, "ui", true, "serve the pages for reliability engineers at /ui, behind the same authentication")
	fs.IntVar(&c.uiRecent, "ui-recent", 10000, "decisions the /ui pages keep in memory (the decision log has the rest)")
	fs.StringVar(&c.uiTraceURL, "ui-trace-url", "", "a trace in your tracing UI, an http(s) URL with "+ui.TraceIDPlaceholder+" where the trace id goes (http://jaeger:16686/trace/"+ui.TraceIDPlaceholder+"): a decision's page links its trace id there ('' shows it as text)")
	fs.StringVar(&c.debugAddr, "debug-addr", "", "loopback HOST:PORT serving Go's /debug/pprof/ profiles (off when empty)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "HOST:PORT serving /metrics without authentication, for Prometheus when the API needs a token or a client certificate (off when empty)")
	fs.fromEnvAll() // every flag of serve: its variable sets it
	return c
}

// settle validates the config once its flags and variables are parsed, and
// notes which were given.
func (c *serveConfig) settle(fs *command) error {
	if err := c.validate(fs); err != nil {
		return err
	}
	c.set = map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { c.set[f.Name] = true })
	return nil
}

func (c *serveConfig) validate(fs *command) error {
	// In order: with two wrong, the message names the same one each run.
	for _, p := range []struct {
		name string
		ok   bool
	}{
		{"--max-body-bytes", c.api.MaxBodyBytes > 0}, {"--max-input-values", c.api.MaxInputValues > 0}, {"--max-inflight-bytes", c.api.MaxInflightBytes > 0},
		{"--max-inflight-values", c.api.MaxInflightValues > 0}, {"--max-file-bytes", c.engine.MaxFileBytes > 0}, {"--decision-log-max-mb", c.records.MaxMegabytes > 0},
		{"--decision-log-queue-bytes", c.records.QueueBytes > 0}, {"--eval-timeout", c.engine.EvalTimeout > 0}, {"--request-timeout", c.requestTimeout > 0},
		{"--read-timeout", c.readTimeout > 0}, {"--read-header-timeout", c.headerTimeout > 0}, {"--min-body-rate", c.api.MinBodyRate > 0},
		{"--idle-timeout", c.idleTimeout > 0}, {"--reload-timeout", c.engine.ReloadTimeout > 0}, {"--test-timeout", c.engine.TestTimeout > 0},
	} {
		if !p.ok {
			return fmt.Errorf("%s must be positive", p.name)
		}
	}
	if err := c.fleetConfig.validate(); err != nil {
		return err
	}
	if err := c.shadowConfig.validate(); err != nil {
		return err
	}
	if err := c.storeConfig.validate(); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case !(c.selfCheckRate >= 0 && c.selfCheckRate <= 1):
		return errors.New("--selfcheck-rate must be between 0 and 1")
	case c.maxConnections < 0:
		return errors.New("--max-connections must not be negative")
	case c.shutdownDelay < 0:
		return errors.New("--shutdown-delay must not be negative")
	case c.diffTimeout < 0:
		return errors.New("--diff-timeout must not be negative (0 runs no diff)")
	case c.diffGate && c.diffTimeout == 0:
		return errors.New("--diff-gate needs the diff: --diff-timeout 0 turns it off")
	case c.logFull != "drop" && c.logFull != "refuse":
		return fmt.Errorf("--decision-log-full must be drop or refuse, not %q", c.logFull)
	case c.decisionLog != "" && c.decisionLog != "-" && int64(c.records.MaxMegabytes)<<20 < c.api.MaxBodyBytes+1<<20:
		return fmt.Errorf("--decision-log-max-mb %d cannot hold the record of a %d-byte input: raise it above %d", c.records.MaxMegabytes, c.api.MaxBodyBytes, (c.api.MaxBodyBytes>>20)+1)
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return errors.New("--tls-cert-file and --tls-key-file go together")
	case c.tlsClientCA != "" && c.tlsCert == "":
		return errors.New("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")
	case c.uiTraceURL != "" && !isTraceURL(c.uiTraceURL):
		return fmt.Errorf("--ui-trace-url %q must be an http or https URL with %s where the trace id goes", c.uiTraceURL, ui.TraceIDPlaceholder)
	case c.debugAddr != "" && !isLoopback(c.debugAddr):
		return fmt.Errorf("--debug-addr %s must be a loopback address: profiles are not authenticated", c.debugAddr)
	case !isLoopback(c.addr) && c.tokenFile == "" && c.tlsClientCA == "" && !c.insecureListen:
		return fmt.Errorf("refusing to listen on non-loopback address %s without --auth-token-file or --tls-client-ca-file (pass --insecure-listen to override)", c.addr)
	}
	return nil
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

// byteSize is a flag of bytes in GOMEMLIMIT's syntax: an integer with an
// optional B, KiB, MiB, GiB or TiB suffix.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Type() string { return "size" }

func (b *byteSize) Set(s string) error {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return fmt.Errorf("%q is not a size such as 1GiB or 800MiB", s)
	}
	*b = byteSize(n * mult)
	return nil
}

// isTraceURL says whether raw is a URL template --ui-trace-url takes: a
// web address, once a trace id is in place of each placeholder.
func isTraceURL(raw string) bool {
	if !strings.Contains(raw, ui.TraceIDPlaceholder) {
		return false
	}
	u, err := url.Parse(strings.ReplaceAll(raw, ui.TraceIDPlaceholder, "4bf92f3577b34da6a3ce929d0e0e4736"))
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
