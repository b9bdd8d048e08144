package server

import (
	"strings"
	"testing"
)

// Without a tracer, a decision's record names the trace of the caller's
// W3C traceparent and no span (none of the server's exists); a traceparent
// the W3C format does not admit names nothing and changes no answer.
func TestCallerTraceWithoutTracing(t *testing.T) {
	h := serveQuota(t, Config{})
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	tests := []struct {
		name, traceparent, wantTrace string
		status                       int
		body                         string
	}{
		{name: "sampled", traceparent: "00-" + trace + "-00f067aa0ba902b7-01", wantTrace: trace, status: 200},
		{name: "not sampled", traceparent: "00-" + trace + "-00f067aa0ba902b7-00", wantTrace: trace, status: 200},
		{name: "a later version with a field more", traceparent: "01-" + trace + "-00f067aa0ba902b7-01-extra", wantTrace: trace, status: 200},
		{name: "an error is traced too", traceparent: "00-" + trace + "-00f067aa0ba902b7-01", wantTrace: trace, status: 400, body: `{"tenant":`},
		{name: "none", status: 200},
		{name: "upper-case hex", traceparent: "00-" + strings.ToUpper(trace) + "-00f067aa0ba902b7-01", status: 200},
		{name: "zero trace id", traceparent: "00-" + strings.Repeat("0", 32) + "-00f067aa0ba902b7-01", status: 200},
		{name: "zero span id", traceparent: "00-" + trace + "-" + strings.Repeat("0", 16) + "-01", status: 200},
		{name: "version ff", traceparent: "ff-" + trace + "-00f067aa0ba902b7-01", status: 200},
		{name: "version 00 with a field more", traceparent: "00-" + trace + "-00f067aa0ba902b7-01-extra", status: 200},
		{name: "short trace id", traceparent: "00-" + trace[:31] + "-00f067aa0ba902b7-01", status: 200},
		{name: "not hex", traceparent: "00-" + strings.Repeat("g", 32) + "-00f067aa0ba902b7-01", status: 200},
		{name: "markup", traceparent: `00-<script>alert(1)</script>-00f067aa0ba902b7-01`, status: 200},
		{name: "a valid one past the bound", traceparent: "01-" + trace + "-00f067aa0ba902b7-01-" + strings.Repeat("x", 600), status: 200},
		{name: "long garbage", traceparent: strings.Repeat("00-", 20000), status: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body
			if body == "" {
				body = `{"tenant":"t","used":1}`
			}
			r := h.do(t, "POST", plainPath, body, "traceparent", tc.traceparent)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			id := r.header.Get(DecisionIDHeader)
			for _, rec := range h.log.records() {
				if rec.DecisionID != id {
					continue
				}
				if rec.TraceID != tc.wantTrace || rec.SpanID != "" {
					t.Errorf("the record names trace %q span %q, want trace %q and no span", rec.TraceID, rec.SpanID, tc.wantTrace)
				}
				return
			}
			t.Fatalf("no record of decision %s", id)
		})
	}
}
