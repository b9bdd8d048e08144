package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveSide starts the side listeners, each stopping with ctx: Go's
// profiles (chi's middleware.Profiler: /debug/pprof/ and /debug/vars) on a
// loopback listener, so that an operator can profile a live process without
// exposing them on the API; and the metrics at /metrics without
// authentication, for Prometheus when the API requires a token or a client
// certificate: the metrics carry counts and revisions, no input.
func (a *assembly) serveSide(ctx context.Context) error {
	if a.c.debugAddr != "" {
		r := chi.NewRouter()
		r.Mount("/debug", middleware.Profiler())
		if err := serveAside(ctx, "--debug-addr", a.c.debugAddr, &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}, "serving profiles", a.log); err != nil {
			return err
		}
	}
	if a.c.metricsAddr != "" {
		r := chi.NewRouter()
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
		return serveAside(ctx, "--metrics-addr", a.c.metricsAddr, srv, "serving metrics", a.log)
	}
	return nil
}

// serveAside serves srv on a listener of its own at the address of flag,
// until ctx ends, and says so in the log line said.
func serveAside(ctx context.Context, flag, addr string, srv *http.Server, said string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	go func() { _ = srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	log.Info(said, "addr", ln.Addr().String())
	return nil
}
