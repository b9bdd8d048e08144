package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracing is OpenTelemetry tracing, configured as every OpenTelemetry SDK
// is, by the standard environment variables: on when an OTLP endpoint is
// set (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// or OTEL_TRACES_EXPORTER is otlp; off otherwise, and then nothing is
// wrapped or started. The exporter, its protocol (http/protobuf by
// default, or grpc), headers, timeout and TLS, the sampler
// (OTEL_TRACES_SAMPLER), the batch (OTEL_BSP_*) and the resource
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) are read by the SDK.
type tracing struct {
	tp *sdktrace.TracerProvider // nil: off
}

// traceFlushTimeout bounds exporting the last spans at a stop: the grace
// period's margin over the stop's other budgets covers it.
const traceFlushTimeout = 5 * time.Second

// tracingEnabled reports whether the environment asks for traces.
func tracingEnabled() bool {
	if e := os.Getenv("OTEL_TRACES_EXPORTER"); e != "" {
		return strings.EqualFold(strings.TrimSpace(e), "otlp")
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

func newTracing(ctx context.Context) (*tracing, error) {
	if !tracingEnabled() {
		return &tracing{}, nil
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdktrace.SpanExporter
	var err error
	switch proto {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("the OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(semconv.ServiceName("arbiter"), semconv.ServiceVersion(buildVersion())))
	if err != nil {
		return nil, err
	}
	if fromEnv, err := resource.New(ctx, resource.WithFromEnv()); err == nil { // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		res, _ = resource.Merge(res, fromEnv)
	}
	return &tracing{tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}, nil
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
	if t.tp == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}
