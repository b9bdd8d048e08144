package service

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/arbiter-dev/arbiter/internal/redact"
)

// tracing is OpenTelemetry tracing, configured as every OpenTelemetry SDK
// is, by the standard environment variables. OTEL_TRACES_EXPORTER names
// the exporters (a comma-separated list): otlp, console (spans as JSON
// lines on stderr, OpenTelemetry's stdout exporter) or none. Unset, it is
// otlp when an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and off otherwise: then nothing is
// wrapped or started (the server still records a caller's traceparent,
// server/tracing.go). The OTLP exporter's protocol (http/protobuf by
// default, or grpc), headers, timeout and TLS, the sampler
// (OTEL_TRACES_SAMPLER), the batch (OTEL_BSP_*) and the resource
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) are read by the SDK. So
// the OTEL_* variables are read here, beside the SDK that reads the rest of
// them, not with the flags in cmd/arbiter.
type tracing struct {
	tp *sdktrace.TracerProvider // nil: off
}

// traceFlushTimeout bounds exporting the last spans at a stop: the grace
// period's margin over the stop's other budgets covers it.
const traceFlushTimeout = 5 * time.Second

// traceExporters are the exporters the environment asks for, in the order
// named (none: off), and the names it gives that this server does not
// have: as the OpenTelemetry specification asks of a value it does not
// recognise, those are said and ignored, and tracing, which is not on the
// answer path, never stops the server.
func traceExporters() (exporters, unknown []string) {
	v := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if v == "" {
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
			return []string{"otlp"}, nil
		}
		return nil, nil
	}
	for _, e := range strings.Split(v, ",") {
		switch e = strings.ToLower(strings.TrimSpace(e)); e {
		case "", "none":
		case "otlp", "console":
			if !slices.Contains(exporters, e) {
				exporters = append(exporters, e)
			}
		default:
			unknown = append(unknown, e)
		}
	}
	return exporters, unknown
}

// otlpEndpoint is where the OTLP exporter sends, as the SDK reads the
// variables, with its secrets redacted: for the start-up line only.
func otlpEndpoint(proto string) string {
	if e := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); e != "" {
		return redact.URL(e) // used as it is
	}
	e := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	switch {
	case e == "" && proto == "grpc":
		return "localhost:4317 (the SDK's default)"
	case e == "":
		return "localhost:4318/v1/traces (the SDK's default)"
	case proto == "grpc":
		return redact.URL(e)
	}
	// The base URL of every signal: the SDK adds the traces' path.
	if u, err := url.Parse(e); err == nil && u.Scheme != "" {
		u.Path = path.Join(u.Path, "/v1/traces")
		return redact.URL(u.String())
	}
	return redact.URL(e)
}

// newTracing builds what the environment asks for, and says in one line
// where the traces go.
func newTracing(ctx context.Context, version string, log *slog.Logger) (*tracing, error) {
	exporters, unknown := traceExporters()
	if len(unknown) > 0 {
		log.Warn("tracing: OTEL_TRACES_EXPORTER names exporters this server does not have (it has otlp, console, none); they are ignored",
			"ignored", strings.Join(unknown, ","))
	}
	var err error
	if len(exporters) == 0 {
		log.Info("tracing", "exporter", "off", "note", "OTEL_TRACES_EXPORTER=console or otlp turns it on; a caller's traceparent still names its trace in the decision record")
		return &tracing{}, nil
	}
	var opts []sdktrace.TracerProviderOption
	shown := slices.Clone(exporters)
	var attrs []any
	for i, name := range exporters {
		var exp sdktrace.SpanExporter
		switch name {
		case "otlp":
			// The exporter's protocol, as the SDK chooses it.
			proto := cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf")
			switch proto {
			case "http/protobuf":
				exp, err = otlptracehttp.New(ctx)
			case "grpc":
				exp, err = otlptracegrpc.New(ctx)
			default:
				return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", proto)
			}
			if err != nil {
				return nil, fmt.Errorf("the OTLP trace exporter: %w", err)
			}
			attrs = append(attrs, "otlp_protocol", proto, "otlp_endpoint", otlpEndpoint(proto))
		case "console":
			// Batched as the OTLP exporter is: a request never waits for
			// stderr, and the batch's queue bounds what waits.
			if exp, err = stdouttrace.New(stdouttrace.WithWriter(os.Stderr)); err != nil {
				return nil, fmt.Errorf("the console trace exporter: %w", err)
			}
			shown[i] = "console (stderr)"
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(semconv.ServiceName("arbiter"), semconv.ServiceVersion(version)))
	if err != nil {
		return nil, err
	}
	if fromEnv, err := resource.New(ctx, resource.WithFromEnv()); err == nil { // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		res, _ = resource.Merge(res, fromEnv)
	}
	log.Info("tracing", append([]any{"exporter", strings.Join(shown, ", ")}, attrs...)...)
	return &tracing{tp: sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)}, nil
}

// tracer is the decisions' tracer (nil when off: server.Config.Tracer).
func (t *tracing) tracer() trace.Tracer {
	if t.tp == nil {
		return nil
	}
	return t.tp.Tracer("github.com/arbiter-dev/arbiter/server")
}

// handler wraps h with otelhttp: a server span per request that continues
// the caller's W3C traceparent. Probes and scrapes are not traced.
func (t *tracing) handler(h http.Handler) http.Handler {
	if t.tp == nil {
		return h
	}
	return otelhttp.NewHandler(h, "arbiter",
		otelhttp.WithTracerProvider(t.tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
		otelhttp.WithFilter(func(r *http.Request) bool {
			return r.URL.Path != "/metrics" && r.URL.Path != "/health" && !strings.HasPrefix(r.URL.Path, "/health/")
		}))
}

// shutdown exports the spans still batched, within ctx.
func (t *tracing) shutdown(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}
