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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveDebug serves Go's profiles (chi's middleware.Profiler: /debug/pprof/
// and /debug/vars) on a separate loopback listener, so that an operator can
// profile a live process without exposing them on the API.
func serveDebug(ctx context.Context, addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--debug-addr: %w", err)
	}
	r := chi.NewRouter()
	r.Mount("/debug", middleware.Profiler())
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Info("serving profiles", "addr", ln.Addr().String())
	return nil
}

// serveMetrics serves reg at /metrics on a listener of its own, without
// authentication, for Prometheus when the API requires a token or a
// client certificate: the metrics carry counts and revisions, no input.
// It stops with ctx.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	r := chi.NewRouter()
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return nil
}
