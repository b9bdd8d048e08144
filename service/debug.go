package service

import (
	"context"
	"fmt"
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
