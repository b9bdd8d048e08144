package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/logship"
	"github.com/arbiter-dev/arbiter/policybundle"
	"github.com/arbiter-dev/arbiter/server"
	"github.com/arbiter-dev/arbiter/server/ui"
	"github.com/arbiter-dev/arbiter/service"
	"github.com/arbiter-dev/arbiter/shadow"
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
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return say(stderr, exitError, "arbiter serve: --log-level: %v", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	// A memory limit bounds the heap however many large requests arrive
	// together (admission control bounds what they hold; the limit makes
	// the collector return the rest in time), instead of a collector target
	// tuned for throughput (docs/BENCHMARKS.md). The environment wins, then
	// the flag, then the container's cgroup limit; the budgets that were
	// not set are fitted inside it (memory.go).
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(c.gcPercent)
	}
	plan := planMemory(c, c.set, cgroupProvider())
	c.API.Memory = plan
	log.Info("memory", "limit_bytes", plan.LimitBytes, "source", plan.Source, "cgroup_limit_bytes", plan.CgroupBytes,
		"max_inflight_bytes", c.API.MaxInflightBytes, "max_inflight_values", c.API.MaxInflightValues,
		"decision_log_queue_bytes", c.Records.QueueBytes, "shadow_queue_bytes", c.Sampling.QueueBytes, "decision_log_upload_queue_bytes", c.UploadQueueBytes)
	return service.Run(ctx, c.Config, log, stdout)
}

// serveConfig is every setting of `arbiter serve`: what the service takes
// (package service), parsed and validated here, and what only the command
// line has.
type serveConfig struct {
	service.Config
	folders
	logMask, logFull           string // --decision-log-mask, --decision-log-full
	shadowForbid, shadowAdmins string // comma-separated
	insecureListen             bool
	logLevel                   string
	memoryLimit                byteSize
	gcPercent                  int
	set                        map[string]bool // the flags given, on the command line or in the environment
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
	// defaultShadowMinDecisions is the fewest judged decisions the default
	// promotion gate asks for.
	defaultShadowMinDecisions = 100
)

// registerServe adds serve's flags to fs, parsed into the config it
// returns.
func registerServe(fs *command) *serveConfig {
	c := &serveConfig{memoryLimit: defaultMemoryLimit}
	host, _ := os.Hostname()
	c.folders.register(fs, true)
	fs.StringVar(&c.BundleURL, "bundle-url", "", "serve the revision of this OPA bundle instead of the folders: http(s)://HOST/PATH, oci://HOST/REPO:TAG or oci+http://HOST/REPO:TAG")
	fs.StringVar(&c.BundleName, "bundle-name", policybundle.DefaultName, "the bundle's name in status, metrics and decision logs")
	fs.StringVar(&c.Polls.Keys.File, "bundle-verification-key-file", "", "PEM public key (or HMAC secret) bundles must be signed with; unsigned or tampered bundles are then refused")
	fs.StringVar(&c.Polls.Keys.ID, "bundle-verification-key-id", "", "id of the verification key, a signature's kid must name it (default: default, as OPA)")
	fs.StringVar(&c.Polls.Keys.Algorithm, "bundle-verification-key-alg", "RS256", "signature algorithm of the verification key")
	fs.DurationVar(&c.Polls.MinDelay, "bundle-poll-min-delay", 10*time.Second, "shortest wait between two bundle polls (whole seconds)")
	fs.DurationVar(&c.Polls.MaxDelay, "bundle-poll-max-delay", 20*time.Second, "longest wait between two bundle polls, and the cap of the retry backoff")
	fs.DurationVar(&c.Polls.LongPoll, "bundle-long-poll-timeout", 0, "ask an OPA-style bundle server to hold each poll this long (0: plain polling)")
	fs.Int64Var(&c.Polls.Limits.Bytes, "bundle-max-bytes", policybundle.DefaultLimits.Bytes, "largest bundle download (compressed); a larger one is refused as it arrives")
	fs.Int64Var(&c.Polls.Limits.UnpackedBytes, "bundle-max-unpacked-bytes", policybundle.DefaultLimits.UnpackedBytes, "most bytes a bundle may unpack to, counted before anything is kept")
	fs.IntVar(&c.Polls.Limits.Files, "bundle-max-files", policybundle.DefaultLimits.Files, "most files (tarball entries) in a bundle")
	fs.DurationVar(&c.Polls.DownloadTimeout, "bundle-download-timeout", policybundle.DefaultDownloadTimeout, "deadline of each bundle download, headers and body (after the long-poll wait); past it the download is cut off as stalled")
	fs.DurationVar(&c.Polls.StallTimeout, "bundle-download-stall-timeout", policybundle.DefaultStallTimeout, "a bundle download that receives less than 1 KiB in this long is cut off as stalled (its minimum rate)")
	fs.StringVar(&c.LogService, "decision-log-service", "", "upload decisions as OPA EventV1 gzip batches to this service (POST URL/logs)")
	fs.Int64Var(&c.LogMaxEvents, "decision-log-upload-max-events", logship.DefaultMaxEvents, "events that may wait for upload; more are dropped and counted")
	fs.Int64Var(&c.UploadQueueBytes, "decision-log-upload-queue-bytes", logship.DefaultQueueBytes, "bytes of events that may wait for upload, the batch being retried included (each sized as its decision-log record); more are dropped and counted")
	fs.DurationVar(&c.LogInterval, "decision-log-upload-interval", time.Second, "time between uploads while events trickle in")
	fs.DurationVar(&c.LogRetryMax, "decision-log-upload-max-retry-delay", 10*time.Second, "cap of the backoff between retries of a failed upload")
	fs.DurationVar(&c.UploadDeadline, "decision-log-upload-shutdown-timeout", 10*time.Second, "how long a stopping replica keeps trying to upload what is queued")
	fs.StringVar(&c.ReplicaID, "replica-id", host, "this replica's id, at most 512 bytes: the id label of its uploaded decisions and the replica of its stored ones")
	fs.StringVar(&c.ShadowPolicies, "shadow-policies", "", "run the revision of this policy folder in shadow beside the live one, from the start")
	fs.StringVar(&c.ShadowSchemas, "shadow-schemas", "", "schema folder of the shadow candidate (default: --schemas)")
	fs.StringVar(&c.ShadowTests, "shadow-tests", "", "test folder that gates the shadow candidate (default: --tests)")
	fs.StringVar(&c.ShadowBundleURL, "shadow-bundle-url", "", "run the revisions of this OPA bundle in shadow (as --bundle-url; verified with the --bundle-verification-* key, polled as --bundle-poll-*)")
	fs.Float64Var(&c.Sampling.Rate, "shadow-rate", shadow.DefaultRate, "fraction of live decisions the candidate decides too, in (0, 1]")
	fs.IntVar(&c.Sampling.Queue, "shadow-queue", shadow.DefaultQueue, "decisions that may wait for the candidate; more are dropped and counted")
	fs.Int64Var(&c.Sampling.QueueBytes, "shadow-queue-bytes", shadow.DefaultQueueBytes, "bytes of inputs that may wait for the candidate")
	fs.IntVar(&c.Sampling.Workers, "shadow-workers", shadow.DefaultWorkers, "candidate evaluations at once")
	fs.Float64Var(&c.Sampling.CPU, "shadow-cpu", shadow.DefaultCPU, "cores the candidate's evaluations may use on average (a token bucket of evaluation time)")
	fs.DurationVar(&c.Sampling.Timeout, "shadow-timeout", shadow.DefaultTimeout, "longest wall-clock time of one candidate decision, paused for live traffic and its CPU budget included; past it the decision is counted expired, not judged (the candidate's --eval-timeout counts only the time it runs)")
	fs.IntVar(&c.Sampling.Examples, "shadow-examples", shadow.DefaultExamples, "decision ids kept per decision and class in the impact report")
	fs.Uint64Var(&c.Sampling.MinDecisions, "shadow-min-decisions", defaultShadowMinDecisions, "promotion gate: fewest decisions the candidate must have judged")
	fs.StringVar(&c.shadowForbid, "shadow-forbid", "refuse_to_allow,candidate_error", "promotion gate: comma-separated classes of which one decision refuses a promotion")
	fs.StringVar(&c.shadowAdmins, "shadow-admins", "", "comma-separated callers (token file names or client certificate common names) that may load, clear and promote candidates; empty with --auth-token-file or --tls-client-ca-file: nobody may (without authentication: any caller)")
	fs.StringVar(&c.StoreURL, "decision-store", "", "also write every decision record (decisions, refused inputs, shadow outcomes, promotions) to this PostgreSQL database, postgres://USER:PASSWORD@HOST:PORT/DB, off the answer path; its schema arbiter_store is migrated on start")
	fs.DurationVar(&c.StoreRetention, "decision-store-retention", decisionstore.DefaultRetention, "drop the decision store's days older than this (whole daily partitions, checked on start and hourly); 0 keeps them all")
	fs.Int64Var(&c.StoreQueueBytes, "decision-store-queue-bytes", decisionstore.DefaultQueueBytes, "bytes of records that may wait for the decision store (while it is slow or away); past it records are dropped from the store and counted")
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8181", "listen address HOST:PORT")
	fs.StringVar(&c.DecisionLog, "decision-log", "var/decisions.log", "decision log file, - for stdout, '' to disable")
	fs.IntVar(&c.Records.MaxMegabytes, "decision-log-max-mb", decisionlog.DefaultMaxMegabytes, "rotate the decision log file at this many MiB; it must hold the largest record")
	fs.IntVar(&c.Records.MaxBackups, "decision-log-max-backups", decisionlog.DefaultMaxBackups, "rotated decision log files to keep (negative: all)")
	fs.Int64Var(&c.Records.QueueBytes, "decision-log-queue-bytes", decisionlog.DefaultQueueBytes, "bytes of records that may wait to be written; past it records are refused (see --decision-log-full)")
	fs.StringVar(&c.logMask, "decision-log-mask", "", "comma-separated JSON pointers into the input to mask in the decision log")
	fs.StringVar(&c.logFull, "decision-log-full", "drop", "when the decision log's queue is full: drop the record and answer, or refuse the decision (503 overloaded)")
	fs.Int64Var(&c.API.MaxBodyBytes, "max-body-bytes", server.DefaultMaxBodyBytes, "largest request body accepted")
	fs.Int64Var(&c.API.MaxInputValues, "max-input-values", server.DefaultMaxInputValues, "most JSON values in one input (body_too_large past it)")
	fs.Int64Var(&c.API.MaxInflightBytes, "max-inflight-bytes", server.DefaultMaxInflightBytes, "admission: body bytes of all requests in flight (503 overloaded past it)")
	fs.Int64Var(&c.API.MaxInflightValues, "max-inflight-values", server.DefaultMaxInflightValues, "admission: JSON values of all requests in flight (503 overloaded past it)")
	fs.IntVar(&c.MaxConnections, "max-connections", 0, "most open connections; at the cap the longest idle one is closed, else the sender furthest below --min-body-rate (0: half the file descriptor limit)")
	fs.Int64Var(&c.Engine.MaxFileBytes, "max-file-bytes", engine.DefaultMaxFileBytes, "largest policy, data, schema or test file read")
	fs.DurationVar(&c.Engine.EvalTimeout, "eval-timeout", engine.DefaultEvalTimeout, "deadline of one policy evaluation")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", server.DefaultRequestTimeout, "deadline of a whole decision request: reading the body, decoding, validation and evaluation (at most --read-timeout)")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", 30*time.Second, "deadline for reading one request, headers and body: a body trickled byte by byte is cut off")
	fs.DurationVar(&c.HeaderTimeout, "read-header-timeout", server.DefaultBodyGrace, "deadline for a request's headers, and the grace before its body must keep --min-body-rate")
	fs.Int64Var(&c.API.MinBodyRate, "min-body-rate", server.DefaultMinBodyRate, "bytes per second a request body must average after --read-header-timeout; a slower one is cut off")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", defaultIdleTimeout, "how long a keep-alive connection may stay idle")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful stop waits for requests in flight, and then again for the decision log to drain")
	fs.DurationVar(&c.ShutdownDelay, "shutdown-delay", 0, "after SIGTERM, keep answering this long with /health/ready not ready before the graceful stop begins: the time the load balancer takes to stop sending (a preStop delay in the process)")
	fs.DurationVar(&c.ReloadDebounce, "reload-debounce", 100*time.Millisecond, "quiet time after file events before a reload")
	fs.DurationVar(&c.Engine.ReloadTimeout, "reload-timeout", engine.DefaultReloadTimeout, "deadline of a whole reload: reading, compiling and the test gate")
	fs.DurationVar(&c.Engine.TestTimeout, "test-timeout", engine.DefaultTestTimeout, "deadline of each Rego test and fixture of the reload gate")
	fs.DurationVar(&c.DiffTimeout, "diff-timeout", defaultDiffTimeout, "deadline of one semantic diff (arbiter diff), run in the background after a revision goes live (against the one it replaced) and after a shadow candidate is gated (against the live one); 0 runs none")
	c.DiffMemory = defaultDiffMemory
	fs.BoolVar(&c.DiffGate, "diff-gate", false, "refuse a reload, bundle or shadow candidate unless the diff against the live revision proves that no decision newly allows an input (refuse_to_allow none; a found or an unknown refuses): the report its bundle carries (arbiter build --diff-against), else a diff run in the gate within --reload-timeout")
	fs.Var((*byteSize)(&c.DiffMemory), "diff-memory", "address space of the semantic diff's child process and of each SMT solver it starts (2GiB, 1500MiB; 0 for no bound; the child's Go runtime alone needs about 1GiB): past it the process ends and the diff's answers are unknown")
	fs.StringVar(&c.TokenFile, "auth-token-file", "", "file of bearer tokens, one per line (CALLER TOKEN or TOKEN)")
	fs.StringVar(&c.TLSCert, "tls-cert-file", "", "TLS certificate (PEM), reloaded when it changes")
	fs.StringVar(&c.TLSKey, "tls-key-file", "", "TLS private key (PEM), reloaded when it changes")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca-file", "", "CA bundle (PEM) that client certificates must chain to (mTLS)")
	fs.BoolVar(&c.insecureListen, "insecure-listen", false, "allow a non-loopback address without authentication")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.StateDir, "state-dir", "var/state", "where the last good revision's files are kept, served when the configured folders do not load at start ('' to disable)")
	fs.Var(&c.memoryLimit, "memory-limit", "Go memory limit (GOMEMLIMIT syntax: 1GiB, 800MiB; 0 for none); unset, 90% of the container's cgroup limit when it has one; the environment's GOMEMLIMIT wins when set")
	fs.IntVar(&c.gcPercent, "gc-percent", 100, "Go garbage collector target (GOGC); the environment's GOGC wins when set")
	fs.Float64Var(&c.SelfCheckRate, "selfcheck-rate", 0.01, "fraction of compiled decisions re-decided by topdown in the background (0 disables the self-check)")
	fs.BoolVar(&c.UI, "ui", true, "serve the pages for reliability engineers at /ui, behind the same authentication")
	fs.IntVar(&c.UIRecent, "ui-recent", 10000, "decisions the /ui pages keep in memory (the decision log has the rest)")
	fs.StringVar(&c.UITraceURL, "ui-trace-url", "", "a trace in your tracing UI, an http(s) URL with "+ui.TraceIDPlaceholder+" where the trace id goes (http://jaeger:16686/trace/"+ui.TraceIDPlaceholder+"): a decision's page links its trace id there ('' shows it as text)")
	fs.StringVar(&c.DebugAddr, "debug-addr", "", "loopback HOST:PORT serving Go's /debug/pprof/ profiles (off when empty)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", "HOST:PORT serving /metrics without authentication, for Prometheus when the API needs a token or a client certificate (off when empty)")
	fs.fromEnvAll() // every flag of serve: its variable sets it
	return c
}

// settle validates the config once its flags and variables are parsed,
// notes which were given, and fills in what the service takes of them.
func (c *serveConfig) settle(fs *command) error {
	if err := c.validate(fs); err != nil {
		return err
	}
	c.set = map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { c.set[f.Name] = true })
	c.Engine.Policies, c.Engine.Schemas, c.Engine.Tests = c.policies, c.schemas, c.tests
	c.DecisionLogMask, c.RefuseUnlogged, c.ShadowAdmins = splitList(c.logMask), c.logFull == "refuse", splitList(c.shadowAdmins)
	c.Version = buildVersion()
	return nil
}

// validate checks the flags, and parses --shadow-forbid.
func (c *serveConfig) validate(fs *command) (err error) {
	// In order: with two wrong, the message names the same one each run.
	for _, p := range []struct {
		name string
		ok   bool
	}{
		{"--max-body-bytes", c.API.MaxBodyBytes > 0}, {"--max-input-values", c.API.MaxInputValues > 0}, {"--max-inflight-bytes", c.API.MaxInflightBytes > 0},
		{"--max-inflight-values", c.API.MaxInflightValues > 0}, {"--max-file-bytes", c.Engine.MaxFileBytes > 0}, {"--decision-log-max-mb", c.Records.MaxMegabytes > 0},
		{"--decision-log-queue-bytes", c.Records.QueueBytes > 0}, {"--eval-timeout", c.Engine.EvalTimeout > 0}, {"--request-timeout", c.RequestTimeout > 0},
		{"--read-timeout", c.ReadTimeout > 0}, {"--read-header-timeout", c.HeaderTimeout > 0}, {"--min-body-rate", c.API.MinBodyRate > 0},
		{"--idle-timeout", c.IdleTimeout > 0}, {"--reload-timeout", c.Engine.ReloadTimeout > 0}, {"--test-timeout", c.Engine.TestTimeout > 0},
		{"--shadow-cpu", c.Sampling.CPU > 0}, {"--shadow-timeout", c.Sampling.Timeout > 0}, {"--decision-store-queue-bytes", c.StoreQueueBytes > 0},
	} {
		if !p.ok {
			return fmt.Errorf("%s must be positive", p.name)
		}
	}
	// The verification key and the size limits are every bundle's: the
	// live one's, the shadow's and the files POST /v1/shadow {"bundle"}
	// reads (without a URL too), so they are always checked. The polling
	// flags are only the polls': refused when nothing is polled.
	polled := c.BundleURL != "" || c.ShadowBundleURL != ""
	if !polled {
		var stray string
		fs.Visit(func(f *pflag.Flag) {
			if stray == "" && pollOnly(f.Name) {
				stray = f.Name
			}
		})
		if stray != "" {
			return fmt.Errorf("--%s needs --bundle-url or --shadow-bundle-url: no bundle is polled", stray)
		}
	}
	if _, err := c.Polls.Keys.VerificationConfig(); err != nil {
		return fmt.Errorf("--bundle-verification-key-file: %w", err)
	}
	if polled && (c.Polls.MinDelay < time.Second || c.Polls.MaxDelay < c.Polls.MinDelay) {
		return errors.New("--bundle-poll-min-delay must be at least 1s and --bundle-poll-max-delay at least as long")
	}
	if c.Polls.Limits.Bytes <= 0 || c.Polls.Limits.UnpackedBytes <= 0 || c.Polls.Limits.Files <= 0 || c.Polls.DownloadTimeout <= 0 || c.Polls.StallTimeout <= 0 {
		return errors.New("--bundle-max-bytes, --bundle-max-unpacked-bytes, --bundle-max-files, --bundle-download-timeout and --bundle-download-stall-timeout must be positive")
	}
	if len(c.ReplicaID) > decisionlog.MaxNameBytes {
		return fmt.Errorf("--replica-id is %d bytes long; a replica's id is a stored name, at most %d", len(c.ReplicaID), decisionlog.MaxNameBytes)
	}
	if c.LogService != "" && (c.LogMaxEvents <= 0 || c.UploadQueueBytes <= 0) {
		return errors.New("--decision-log-upload-max-events and --decision-log-upload-queue-bytes must be positive")
	}
	if c.ShadowForbid, err = forbidden(c.shadowForbid); err != nil {
		return err
	}
	switch {
	case !(c.Sampling.Rate > 0 && c.Sampling.Rate <= 1):
		return errors.New("--shadow-rate must be above 0 and at most 1")
	case c.Sampling.Queue <= 0 || c.Sampling.QueueBytes <= 0 || c.Sampling.Workers <= 0 || c.Sampling.Examples <= 0:
		return errors.New("--shadow-queue, --shadow-queue-bytes, --shadow-workers and --shadow-examples must be positive")
	case c.ShadowPolicies != "" && c.ShadowBundleURL != "":
		return errors.New("--shadow-policies and --shadow-bundle-url are two sources of one candidate: pass one")
	case c.StoreRetention < 0:
		return errors.New("--decision-store-retention must not be negative (0 keeps every day)")
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case !(c.SelfCheckRate >= 0 && c.SelfCheckRate <= 1):
		return errors.New("--selfcheck-rate must be between 0 and 1")
	case c.MaxConnections < 0:
		return errors.New("--max-connections must not be negative")
	case c.ShutdownDelay < 0:
		return errors.New("--shutdown-delay must not be negative")
	case c.DiffTimeout < 0:
		return errors.New("--diff-timeout must not be negative (0 runs no diff)")
	case c.DiffGate && c.DiffTimeout == 0:
		return errors.New("--diff-gate needs the diff: --diff-timeout 0 turns it off")
	case c.logFull != "drop" && c.logFull != "refuse":
		return fmt.Errorf("--decision-log-full must be drop or refuse, not %q", c.logFull)
	case c.DecisionLog != "" && c.DecisionLog != "-" && int64(c.Records.MaxMegabytes)<<20 < c.API.MaxBodyBytes+1<<20:
		return fmt.Errorf("--decision-log-max-mb %d cannot hold the record of a %d-byte input: raise it above %d", c.Records.MaxMegabytes, c.API.MaxBodyBytes, (c.API.MaxBodyBytes>>20)+1)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert-file and --tls-key-file go together")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return errors.New("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")
	case c.UITraceURL != "" && !isTraceURL(c.UITraceURL):
		return fmt.Errorf("--ui-trace-url %q must be an http or https URL with %s where the trace id goes", c.UITraceURL, ui.TraceIDPlaceholder)
	case c.DebugAddr != "" && !isLoopback(c.DebugAddr):
		return fmt.Errorf("--debug-addr %s must be a loopback address: profiles are not authenticated", c.DebugAddr)
	case !isLoopback(c.Addr) && c.TokenFile == "" && c.TLSClientCA == "" && !c.insecureListen:
		return fmt.Errorf("refusing to listen on non-loopback address %s without --auth-token-file or --tls-client-ca-file (pass --insecure-listen to override)", c.Addr)
	}
	return nil
}

// pollOnly says whether a bundle flag is one only a polled bundle uses
// (--bundle-url, --shadow-bundle-url): every --bundle-* flag but the URL,
// the name, the size limits and the verification key, so that a polling
// flag added later is refused without a URL too (fail closed).
func pollOnly(name string) bool {
	everyBundle := name == "bundle-url" || name == "bundle-name" ||
		strings.HasPrefix(name, "bundle-max-") || strings.HasPrefix(name, "bundle-verification-key-")
	return strings.HasPrefix(name, "bundle-") && !everyBundle
}

// forbidden parses --shadow-forbid: the promotion gate's classes.
func forbidden(list string) ([]shadow.Class, error) {
	out := []shadow.Class{}
	for _, f := range splitList(list) {
		c, ok := shadow.ParseClass(f)
		if !ok {
			return nil, fmt.Errorf("--shadow-forbid: %q is not a class (%v)", f, shadow.Classes)
		}
		out = append(out, c)
	}
	return out, nil
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
