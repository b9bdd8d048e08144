package service

import (
	"slices"
	"testing"
)

// OTEL_TRACES_EXPORTER is read as the SDK reads it: a comma-separated
// list, case and spaces aside; unset, an OTLP endpoint means otlp; a name
// the server does not have is ignored and returned, to be said.
func TestTraceExporters(t *testing.T) {
	tests := []struct {
		name, exporter, endpoint string
		want, unknown            []string
	}{
		{name: "nothing set"},
		{name: "an endpoint", endpoint: "http://collector:4318", want: []string{"otlp"}},
		{name: "console", exporter: "console", want: []string{"console"}},
		{name: "console wins over an endpoint", exporter: "console", endpoint: "http://collector:4318", want: []string{"console"}},
		{name: "none with an endpoint", exporter: "none", endpoint: "http://collector:4318"},
		{name: "a list", exporter: " OTLP , console,otlp", want: []string{"otlp", "console"}},
		{name: "none in a list", exporter: "none,console", want: []string{"console"}},
		{name: "unknown", exporter: "zipkin", endpoint: "http://collector:4318", unknown: []string{"zipkin"}},
		{name: "unknown beside a known one", exporter: "console,zipkin", want: []string{"console"}, unknown: []string{"zipkin"}},
		{name: "empty member", exporter: "console,", want: []string{"console"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_EXPORTER", tc.exporter)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
			got, unknown := traceExporters()
			if !slices.Equal(got, tc.want) || !slices.Equal(unknown, tc.unknown) {
				t.Errorf("got %q, unknown %q; want %q, %q", got, unknown, tc.want, tc.unknown)
			}
		})
	}
}

// The start-up line names the OTLP endpoint as the SDK reads the variables,
// its secrets never shown.
func TestOTLPEndpointShown(t *testing.T) {
	tests := []struct{ name, base, traces, proto, want string }{
		{name: "the SDK's default", proto: "http/protobuf", want: "localhost:4318/v1/traces (the SDK's default)"},
		{name: "the SDK's default, grpc", proto: "grpc", want: "localhost:4317 (the SDK's default)"},
		{name: "a base URL gains the traces' path", base: "http://collector:4318/otel/", proto: "http/protobuf", want: "http://collector:4318/otel/v1/traces"},
		{name: "a base URL, grpc", base: "http://collector:4317", proto: "grpc", want: "http://collector:4317"},
		{name: "the traces' URL as it is", base: "http://other:4318", traces: "https://collector:4318/custom", proto: "http/protobuf", want: "https://collector:4318/custom"},
		{name: "secrets redacted", base: "https://user:pa55@collector:4318?token=t0ken", proto: "http/protobuf", want: "https://user:xxxxx@collector:4318/v1/traces?token=xxxxx"},
		{name: "not a URL", base: "pa55 word", proto: "http/protobuf", want: "(a string that is not a URL)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.base)
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", tc.traces)
			if got := otlpEndpoint(tc.proto); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
