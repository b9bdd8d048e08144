// Package server answers Arbiter's HTTP API over an engine: routes, request
// limits, authentication, error documents, decision logging and metrics.
package server

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/defaults"
)

// Engine is what the server needs from the decision engine.
type Engine interface {
	Decide(ctx context.Context, name string, body []byte, opts engine.Options) (*engine.Decision, error)
	Snapshot() *engine.Snapshot
	Has(name string) bool // whether the active Snapshot serves name
	Reload(ctx context.Context, trigger string) live.ReloadStatus
	LastReload() live.ReloadStatus
	ReloadInProgress() (live.ReloadProgress, bool)
	// ReloadHistory is the most recent reload attempts, newest first.
	ReloadHistory() []live.ReloadStatus
}

// Diffs are the semantic diffs a server shows (package diff's Runner).
type Diffs interface {
	Live() (diff.Status, bool)
	Shadow() (diff.Status, bool)
}

// DecisionLog receives one record per answered decision request: decisions
// and errors on the decision endpoints alike. Log must not block for long,
// reports whether it took the record, and owns rec's byte slices (the
// server hands over copies).
type DecisionLog interface {
	Log(rec decisionlog.Record) bool
}

// DefaultMaxBodyBytes is the request body limit when Config leaves it zero:
// the Runner's own bound on runner-state.json.
const DefaultMaxBodyBytes = 16 << 20

// DefaultMinBodyRate and DefaultBodyGrace are the body pace when Config
// leaves them zero: generous for any link a Runner sits on, and a body
// trickled a byte every few seconds holds its connection 5 s, not 30.
const (
	DefaultMinBodyRate = 4 << 10
	DefaultBodyGrace   = 5 * time.Second
)

// DefaultRequestTimeout bounds a whole decision request when Config leaves
// RequestTimeout zero.
const DefaultRequestTimeout = 30 * time.Second

// Config is everything New needs; cmd fills it from flags and environment.
// The zero value of each limit means its default.
type Config struct {
	MaxBodyBytes int64 // request body limit; 0 means DefaultMaxBodyBytes
	// MaxInputValues caps the JSON values of one body, counted by the
	// engine's pass over it (body_too_large past it); the engine enforces
	// the same cap exactly.
	MaxInputValues int64
	// MaxInflightBytes and MaxInflightValues are the admission budgets:
	// the body bytes and JSON values of every request being read or
	// decided. A request that would take either past its budget is
	// answered overloaded (503, Retry-After).
	MaxInflightBytes, MaxInflightValues int64
	// RequestTimeout bounds a decision request from its start: reading the
	// body, decoding, validation and evaluation. It also bounds reading the
	// body of every other request.
	RequestTimeout time.Duration
	// MinBodyRate (bytes per second) is the least a request body must
	// average once BodyGrace has passed since the request began; a slower
	// one is cut off at its read deadline (conns.go).
	MinBodyRate int64
	BodyGrace   time.Duration
	// RefuseUnlogged answers overloaded instead of a decision whose record
	// the decision log refused (its queue is full); by default the decision
	// is answered and the record counted as dropped.
	RefuseUnlogged bool
	Tokens         []Token // accepted bearer tokens; empty turns token auth off
	Logger         *slog.Logger
	DecisionLog    DecisionLog          // may be nil
	Registry       *prometheus.Registry // metrics are registered here; nil means a fresh one
	// ReloadCounts, when set, is exported as arbiter_reloads_total{result}.
	ReloadCounts func() (ok, failed uint64)
	// BundleStatus, when set, is the bundles member of /v1/status (OPA's
	// bundle status, by bundle name).
	BundleStatus func() any
	// StoreStatus, when set, is the store member of /v1/status: how far
	// behind the decision store is (nil: no store).
	StoreStatus func() any
	// BundleStuck, when set, says why the bundle's polls are stuck: then
	// /health?bundles is not ready either.
	BundleStuck func() error
	// Unloaded, when set, says why no revision is live yet (a bundle that
	// cannot be fetched or verified, naming the flag to look at): the
	// reason /health/ready gives until one is.
	Unloaded func() error
	// Version is the running binary's version: /v1/status's version and
	// arbiter_build_info{version}.
	Version string
	// Tracer, when set, traces each decision request with a span of its
	// own (tracing.go) under the request's context; nil turns it off.
	Tracer trace.Tracer
	// Memory, when set, is the memory member of /v1/status: the memory
	// limit and the budgets fitted inside it, with where each came from.
	Memory any
	// Dropping, when set, says why the decision sinks are dropping records
	// (nil when they are not): then /health/ready is not ready.
	Dropping func() error
	// Stopping, when set, is closed as the server begins to stop: from
	// then on /health/ready answers not ready while decisions are still
	// answered, so that the load balancer stops sending before the
	// listener closes.
	Stopping <-chan struct{}
	// Shadow, when set, runs a candidate revision in shadow (shadow.go).
	Shadow *ShadowConfig
	// Diffs, when set, are the semantic diffs of the live revision against
	// the one it replaced (in /v1/status) and of the shadow candidate
	// against the live revision (in GET /v1/shadow).
	Diffs Diffs
	// UI, when set, serves the pages under /ui (package server/ui): behind
	// the same authentication, with the login page and the stylesheet open.
	UI http.Handler
	// ClientCerts says callers are authenticated by verified TLS client
	// certificates (mTLS). With Tokens, it marks the API as authenticated,
	// which closes the shadow routes that change what runs unless
	// ShadowConfig.Admins names who may.
	ClientCerts bool
}

type server struct {
	cfg     Config
	eng     Engine
	log     *slog.Logger
	auth    *authenticator
	metrics *metrics
	adm     *admission
	started time.Time
}

// New returns the HTTP handler of the API. Its metrics are registered in
// cfg.Registry, which must not already hold them (New panics otherwise, as
// prometheus.MustRegister does).
func New(cfg Config, eng Engine) http.Handler { return newServer(cfg, eng).routes() }

// newServer fills in cfg's defaults and makes the server.
func newServer(cfg Config, eng Engine) *server {
	defaults.Set(&cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	defaults.Set(&cfg.MaxInputValues, DefaultMaxInputValues)
	defaults.Set(&cfg.MaxInflightBytes, DefaultMaxInflightBytes)
	defaults.Set(&cfg.MaxInflightValues, DefaultMaxInflightValues)
	defaults.Set(&cfg.RequestTimeout, DefaultRequestTimeout)
	defaults.Set(&cfg.MinBodyRate, DefaultMinBodyRate)
	defaults.Set(&cfg.BodyGrace, DefaultBodyGrace)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.Registry = cmp.Or(cfg.Registry, prometheus.NewRegistry())
	s := &server{
		cfg:     cfg,
		eng:     eng,
		log:     cfg.Logger,
		auth:    newAuthenticator(cfg.Tokens),
		adm:     &admission{bytes: budget{max: cfg.MaxInflightBytes}, values: budget{max: cfg.MaxInflightValues}},
		started: time.Now(),
	}
	s.metrics = newMetrics(cfg.Registry, eng, cfg, s.adm)
	return s
}

// routes is the server's HTTP API.
func (s *server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(s.paceBodies, s.recoverer)
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		writeError(w, &engine.Error{Code: CodeNotFound, Message: "no such route"}, isDataAPI(req), "")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Allow", strings.Join(allowedMethods(r, req), ", "))
		writeError(w, &engine.Error{Code: CodeMethodNotAllowed, Message: "method " + req.Method + " is not allowed here"}, isDataAPI(req), "")
	})

	r.Get("/health", s.health)
	r.Head("/health", s.health)
	r.Get("/health/live", s.live)
	r.Head("/health/live", s.live)
	r.Get("/health/ready", s.ready)
	r.Head("/health/ready", s.ready)
	r.Group(func(r chi.Router) {
		r.Use(s.authenticate)
		r.Post("/v1/decisions/{name}", s.decide(false))
		r.Post("/v1/data/decisions/{name}/decision", s.decide(true))
		r.Get("/v1/decisions", s.listDecisions)
		r.Get("/v1/status", s.status)
		r.Post("/v1/reload", s.reload)
		r.Get("/v1/reloads", s.reloads)
		s.shadowRoutes(r)
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))
	})
	if s.cfg.UI != nil {
		s.mountUI(r, s.cfg.UI)
	}
	return r
}

// allowedMethods lists the methods routed for the request's path, for the
// Allow header of a 405 (chi only computes it for its own default handler).
func allowedMethods(mux chi.Routes, r *http.Request) []string {
	path := cmp.Or(r.URL.RawPath, r.URL.Path)
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if mux.Match(chi.NewRouteContext(), m, path) {
			out = append(out, m)
		}
	}
	return out
}

// recoverer turns a panic into a policy_error document. Handlers write
// their answer in one call, so a panic almost always comes before any byte
// was sent; if one comes after, the connection is aborted rather than
// finishing a half answer that a client could mistake for a whole one.
func (s *server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &trackingWriter{ResponseWriter: w}
		defer func() {
			rec := recover()
			if rec == nil {
				return
			}
			if rec == http.ErrAbortHandler {
				panic(rec)
			}
			s.log.Error("panic while serving a request", "method", r.Method, "path", r.URL.Path, "panic", rec, "stack", string(debug.Stack()))
			if tw.wrote {
				panic(http.ErrAbortHandler)
			}
			writeError(w, &engine.Error{Code: engine.CodePolicyError, Message: "internal error"}, false, "")
		}()
		next.ServeHTTP(tw, r)
	})
}

// trackingWriter records whether a response was started.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (t *trackingWriter) WriteHeader(code int) {
	t.wrote = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
