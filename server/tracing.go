package server

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/arbiter-dev/arbiter/decisionlog"
)

// startSpan starts the span of one decision request under the caller's
// (the HTTP server's span, which continues a W3C traceparent). When tracing
// is off (Config.Tracer nil) it starts nothing and only reads the caller's
// traceparent, so that the record still names the caller's trace.
func (s *server) startSpan(ctx context.Context, q *query) context.Context {
	if s.cfg.Tracer == nil {
		q.caller = callerTrace(q.r.Header)
		return ctx
	}
	ctx, q.span = s.cfg.Tracer.Start(ctx, "decision", trace.WithSpanKind(trace.SpanKindInternal))
	return ctx
}

// endSpan ends q's span with what became of the decision, and puts the
// span's trace and span ids in its record, as OPA fills an event's.
// outcome is the decision's outcome, or "error" with code. Without a span,
// the record names the caller's trace, if it sent one, and no span: none
// of this server's exists.
func (s *server) endSpan(q *query, rec *decisionlog.Record, outcome, code string) {
	if q.span == nil {
		if q.caller.IsValid() {
			rec.TraceID = q.caller.TraceID().String()
		}
		return
	}
	sc := q.span.SpanContext()
	rec.TraceID, rec.SpanID = sc.TraceID().String(), sc.SpanID().String()
	attrs := []attribute.KeyValue{
		// The decision id under OPA's name, so that a trace backend finds
		// Arbiter's decisions as it finds OPA's.
		attribute.String("opa.decision_id", rec.DecisionID),
		attribute.String("arbiter.decision", s.metrics.label(q.name)), // a name the revision serves, or a fixed word
		attribute.String("arbiter.policy_revision", rec.Revision),
		attribute.String("arbiter.outcome", outcome),
	}
	if code != "" {
		attrs = append(attrs, attribute.String("arbiter.error_code", code))
		q.span.SetStatus(codes.Error, code)
	}
	q.span.SetAttributes(attrs...)
	q.span.End()
}

// maxTraceparent bounds the traceparent header read: version 00's is 55
// bytes, and a later version's may only add fields to it. A longer one is
// ignored unread.
const maxTraceparent = 512

// callerTrace is the W3C trace context of the caller's traceparent header,
// or the zero (invalid) one when it has none or a malformed one: a request
// is never refused for it. Only traceparent is read; tracestate, which
// names no trace, is left unparsed.
func callerTrace(h http.Header) trace.SpanContext {
	tp := h.Get(traceparentHeader)
	if tp == "" || len(tp) > maxTraceparent {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{traceparentHeader: tp})
	return trace.SpanContextFromContext(ctx)
}

const traceparentHeader = "traceparent"
