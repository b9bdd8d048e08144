// Package service assembles, runs and stops the parts of `arbiter serve`
// from a plain Config: the engine and its sources (the folders and their
// watcher, a bundle, the last good copy), the fleet's bundle polls and
// upload, shadow, the decision-record pipeline and its sinks (the file, the
// upload, the decision store, the pages' ring), the HTTP server, its side
// listeners and the traces. The command line that fills the Config is
// cmd/arbiter's.
package service

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/policybundle"
	"github.com/arbiter-dev/arbiter/server"
	"github.com/arbiter-dev/arbiter/shadow"
)

// Config is every setting of `arbiter serve`, as its flags give it, each
// field under the flag's name; the messages of a start that fails name the
// flag too.
type Config struct {
	// What the flags set of the engine's (its Policies, Schemas and Tests
	// are the folders), the API server's (its Memory is /v1/status' memory
	// member), the decision log's and the shadow's own configurations; the
	// rest of each is filled in at the start.
	Engine   engine.Config
	API      server.Config
	Records  decisionlog.Options
	Sampling shadow.Config
	// Polls is how a bundle is polled, verified and bounded: the live
	// one's and the shadow's.
	Polls policybundle.SourceConfig

	Addr            string
	DecisionLog     string   // a file, - for stdout, "" for none
	DecisionLogMask []string // JSON pointers
	RefuseUnlogged  bool     // --decision-log-full refuse
	MaxConnections  int      // 0: half the file descriptor limit
	RequestTimeout  time.Duration
	ReadTimeout     time.Duration
	HeaderTimeout   time.Duration // --read-header-timeout
	IdleTimeout     time.Duration
	ShutdownTimeout time.Duration
	ShutdownDelay   time.Duration
	ReloadDebounce  time.Duration
	DiffTimeout     time.Duration // 0 runs no diff
	DiffMemory      int64
	DiffGate        bool
	TokenFile       string // --auth-token-file
	TLSCert         string // --tls-cert-file
	TLSKey          string // --tls-key-file
	TLSClientCA     string // --tls-client-ca-file
	DebugAddr       string
	MetricsAddr     string
	StateDir        string
	SelfCheckRate   float64
	UI              bool // serve the /ui pages (ui.go)
	UIRecent        int
	UITraceURL      string
	Version         string // this binary's: /v1/status, the upload's labels, the traces

	// A replica of a fleet (fleet.go).
	BundleURL        string
	BundleName       string
	LogService       string        // --decision-log-service
	LogMaxEvents     int64         // --decision-log-upload-max-events
	UploadQueueBytes int64         // --decision-log-upload-queue-bytes
	LogInterval      time.Duration // --decision-log-upload-interval
	LogRetryMax      time.Duration // --decision-log-upload-max-retry-delay
	UploadDeadline   time.Duration // --decision-log-upload-shutdown-timeout
	ReplicaID        string

	// A candidate in shadow (shadow.go).
	ShadowPolicies, ShadowSchemas, ShadowTests, ShadowBundleURL string
	ShadowForbid                                                []shadow.Class
	ShadowAdmins                                                []string

	// The decision store (store.go).
	StoreURL        string // --decision-store
	StoreRetention  time.Duration
	StoreQueueBytes int64
}

// Exit statuses of Run.
const (
	ExitOK       = 0
	ExitError    = 1
	ExitUnlogged = 3 // stopped, but decision records were not written
)

// Run serves until ctx ends, and returns the exit status: ExitUnlogged when
// it stopped but decision records were not written, ExitError when it
// could not start or the server failed. The parts and their order are in
// assembly.go.
func Run(ctx context.Context, c Config, log *slog.Logger, stdout io.Writer) int {
	code, err := run(ctx, &c, log, stdout)
	if err != nil {
		log.Error("arbiter serve stopped", "err", err)
		return ExitError
	}
	return code
}

func run(ctx context.Context, c *Config, log *slog.Logger, stdout io.Writer) (int, error) {
	a := &assembly{c: c, log: log}
	defer a.close()
	if err := a.assemble(ctx, stdout); err != nil {
		a.unwind()
		return ExitError, err
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	defer a.watchReloads(runCtx)()
	if err := a.serveSide(runCtx); err != nil {
		stopRun() // the side listener that started closes
		a.unwind()
		return ExitError, err
	}
	a.run(runCtx)
	a.waitForStop(ctx)
	stopRun()
	code := a.stop()
	serveErr := a.group.Wait()
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
func newEngine(ctx context.Context, c *Config, ecfg engine.Config, log *slog.Logger, opts ...live.Option) (*live.Engine, error) {
	if c.BundleURL != "" {
		return live.New(ctx, ecfg, append(opts, live.Pushed())...)
	}
	if c.StateDir == "" {
		return live.New(ctx, ecfg, opts...)
	}
	opts = append(opts, live.OnActivate(func(s *engine.Snapshot) {
		if err := s.SaveTo(c.StateDir); err != nil {
			log.Warn("could not save the last good revision", "dir", c.StateDir, "err", err)
		}
	}))
	if saved, ok := live.LastGood(c.StateDir, ecfg); ok {
		opts = append(opts, live.Fallback(saved))
	}
	return live.New(ctx, ecfg, opts...)
}

// connectionCap is --max-connections, or half of the file descriptor limit:
// the other half stays for policy files, the decision log and reloads.
func (c *Config) connectionCap() int {
	if c.MaxConnections > 0 {
		return c.MaxConnections
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
