package server

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/arbiter-dev/arbiter/decisionlog"
)

// Span attributes of a decision: the decision id under OPA's name, so that
// a trace backend finds Arbiter's decisions as it finds OPA's.
const (
	attrDecisionID = "opa.decision_id"
	attrDecision   = "arbiter.decision"
	attrRevision   = "arbiter.policy_revision"
	attrOutcome    = "arbiter.outcome"
	attrErrorCode  = "arbiter.error_code"
)

// startSpan starts the span of one decision request under the caller's
// (the HTTP server's span, which continues a W3C traceparent), or nothing
// when tracing is off (Config.Tracer nil): then it costs nothing.
func (s *server) startSpan(ctx context.Context, q *query) context.Context {
	if s.cfg.Tracer == nil {
		return ctx
	}
	ctx, q.span = s.cfg.Tracer.Start(ctx, "decision", trace.WithSpanKind(trace.SpanKindInternal))
	return ctx
}

// endSpan ends q's span with what became of the decision, and puts the
// span's trace and span ids in its record, as OPA fills an event's.
// outcome is the decision's outcome, or "error" with code.
func (s *server) endSpan(q *query, rec *decisionlog.Record, outcome, code string) {
	if q.span == nil {
		return
	}
	sc := q.span.SpanContext()
	rec.TraceID, rec.SpanID = sc.TraceID().String(), sc.SpanID().String()
	attrs := []attribute.KeyValue{
		attribute.String(attrDecisionID, rec.DecisionID),
		attribute.String(attrDecision, s.metrics.label(q.name)), // a name the revision serves, or a fixed word
		attribute.String(attrRevision, rec.Revision),
		attribute.String(attrOutcome, outcome),
	}
	if code != "" {
		attrs = append(attrs, attribute.String(attrErrorCode, code))
		q.span.SetStatus(codes.Error, code)
	}
	q.span.SetAttributes(attrs...)
	q.span.End()
}
