package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// otlpReceiver is an OTLP/HTTP trace receiver written with the official
// protocol packages: it decodes each ExportTraceServiceRequest as a
// collector does and keeps its spans.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a POST of protobuf to /v1/traces", http.StatusBadRequest)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// span is the received span with attribute key equal to value, or nil.
func (o *otlpReceiver) span(key, value string) *tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.spans {
		if attr(s, key) == value {
			return s
		}
	}
	return nil
}

func (o *otlpReceiver) byID(id []byte) *tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.spans {
		if bytes.Equal(s.SpanId, id) {
			return s
		}
	}
	return nil
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// The real binary, configured only by the standard OTEL_ variables,
// exports to a real OTLP/HTTP receiver: a decision request that carries a
// W3C traceparent is traced in the caller's trace (the HTTP server span a
// child of the caller's, the decision span a child of it), the decision
// span carries OPA's opa.decision_id and the decision, revision and
// outcome, and the decision record names the same trace and span.
// Start-up names the endpoint, its password redacted.
func TestTracesReachAnOTLPReceiver(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	recv := &otlpReceiver{}
	hs := httptest.NewServer(recv)
	defer hs.Close()
	args, logPath := quickArgs(t)
	const secret = "s3cret-otlp"
	endpoint := strings.Replace(hs.URL, "http://", "http://arbiter:"+secret+"@", 1)
	srv := startServerWith(t, func(c *exec.Cmd) {
		c.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_TRACES_EXPORTER=", "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=arbiter-under-test")
	}, args...)
	wantLine := "msg=tracing exporter=otlp otlp_protocol=http/protobuf otlp_endpoint=" + strings.Replace(hs.URL, "http://", "http://arbiter:xxxxx@", 1) + "/v1/traces\n"
	if out := srv.stderr.String(); !strings.Contains(out, wantLine) || strings.Contains(out, secret) {
		t.Errorf("start-up does not say %q, or shows the password:\n%s", wantLine, out)
	}
	fx := decidedFixture(t)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	client := &http.Client{Timeout: 10 * time.Second}
	a := decideFixture(t, client, srv.url, fx, "traceparent", "00-"+traceID+"-"+parentID+"-01")

	var span *tracepb.Span
	wait.Until(t, 30*time.Second, "the decision's span at the receiver", func() bool {
		span = recv.span("opa.decision_id", a.id)
		return span != nil
	})
	if got := hex.EncodeToString(span.TraceId); got != traceID {
		t.Errorf("the decision's span is in trace %s, want the caller's %s", got, traceID)
	}
	if attr(span, "arbiter.decision") != fx.Decision || attr(span, "arbiter.policy_revision") == "" || attr(span, "arbiter.outcome") == "" {
		t.Errorf("the decision's span lacks its decision, revision or outcome: %v", span.Attributes)
	}
	var http *tracepb.Span
	wait.Until(t, 30*time.Second, "the HTTP server span at the receiver", func() bool {
		http = recv.byID(span.ParentSpanId)
		return http != nil
	})
	if http.Kind != tracepb.Span_SPAN_KIND_SERVER || hex.EncodeToString(http.ParentSpanId) != parentID {
		t.Errorf("the decision span's parent is a %v span under %x, want the server span under the caller's %s", http.Kind, http.ParentSpanId, parentID)
	}

	srv.stop(t)
	for _, rec := range readDecisionLog(t, logPath) {
		if rec.DecisionID == a.id {
			if rec.TraceID != traceID || rec.SpanID != hex.EncodeToString(span.SpanId) {
				t.Errorf("the record names trace %s span %s, want %s %x", rec.TraceID, rec.SpanID, traceID, span.SpanId)
			}
			return
		}
	}
	t.Errorf("decision %s is not in the log", a.id)
}

// Without an exporter nothing is traced, and start-up says so; yet a
// caller's W3C traceparent names its trace in the decision record (no span:
// the server started none), so that the caller's trace finds its decision.
// A traceparent the W3C format does not admit is ignored: the request is
// answered as any other, and its record names no trace.
func TestCallerTraceWithoutExporter(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	args, logPath := quickArgs(t)
	srv := startServerWith(t, func(c *exec.Cmd) {
		c.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_TRACES_EXPORTER=")
	}, args...)
	if !strings.Contains(srv.stderr.String(), "msg=tracing exporter=off") {
		t.Errorf("start-up does not say that tracing is off:\n%s", srv.stderr.String())
	}
	fx := decidedFixture(t)
	client := &http.Client{Timeout: 10 * time.Second}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	traced := decideFixture(t, client, srv.url, fx, "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	malformed := decideFixture(t, client, srv.url, fx, "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01-<b>")
	if traced.status != http.StatusOK || malformed.status != http.StatusOK {
		t.Fatalf("answered %d and %d, want 200 to both: %s", traced.status, malformed.status, malformed.body)
	}
	srv.stop(t)
	want := map[string]string{traced.id: traceID, malformed.id: ""}
	for _, rec := range readDecisionLog(t, logPath) {
		trace, ok := want[rec.DecisionID]
		if !ok {
			continue
		}
		delete(want, rec.DecisionID)
		if rec.TraceID != trace || rec.SpanID != "" {
			t.Errorf("record %s names trace %q span %q, want trace %q and no span", rec.DecisionID, rec.TraceID, rec.SpanID, trace)
		}
	}
	if len(want) > 0 {
		t.Errorf("decisions not in the log: %v", want)
	}
}

// stdoutSpan is a span as OpenTelemetry's stdout exporter writes it.
type stdoutSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

// OTEL_TRACES_EXPORTER=console, the SDK's standard value, prints each span
// as a JSON line on stderr, and start-up says so: the decision's span is
// there, in the caller's trace, and the record names it. An exporter the
// server does not have is said and ignored.
func TestConsoleTraces(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	args, logPath := quickArgs(t)
	srv := startServerWith(t, func(c *exec.Cmd) {
		c.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=console,zipkin", "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_BSP_SCHEDULE_DELAY=50")
	}, args...)
	if out := srv.stderr.String(); !strings.Contains(out, `msg=tracing exporter="console (stderr)"`) || !strings.Contains(out, "ignored=zipkin") {
		t.Errorf("start-up does not say that spans go to stderr, or that zipkin is ignored:\n%s", out)
	}
	fx := decidedFixture(t)
	client := &http.Client{Timeout: 10 * time.Second}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	a := decideFixture(t, client, srv.url, fx, "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")

	var span *stdoutSpan
	wait.Until(t, 30*time.Second, "the decision's span on stderr", func() bool {
		for _, line := range strings.Split(srv.stderr.String(), "\n") {
			var s stdoutSpan
			if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &s) != nil {
				continue
			}
			for _, kv := range s.Attributes {
				if kv.Key == "opa.decision_id" && kv.Value.Value == a.id {
					span = &s
					return true
				}
			}
		}
		return false
	})
	if span.SpanContext.TraceID != traceID {
		t.Errorf("the decision's span is in trace %s, want the caller's %s", span.SpanContext.TraceID, traceID)
	}
	srv.stop(t)
	for _, rec := range readDecisionLog(t, logPath) {
		if rec.DecisionID == a.id {
			if rec.TraceID != traceID || rec.SpanID != span.SpanContext.SpanID {
				t.Errorf("the record names trace %s span %s, want %s %s", rec.TraceID, rec.SpanID, traceID, span.SpanContext.SpanID)
			}
			return
		}
	}
	t.Errorf("decision %s is not in the log", a.id)
}
