package decisionlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestAppendRecordMatchesEncodingJSON: the hand-written line is byte for byte
// what encoding/json (HTML escaping off) writes for the same record.
func TestAppendRecordMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 2, 17, 41, 42, 123456789, time.UTC)
	for name, rec := range map[string]Record{
		"decision": {DecisionID: "d1", Time: at, Decision: "some_decision", Revision: "abc", Path: "/v1/decisions/some_decision",
			Input: json.RawMessage(`{"a":[1,2],"n":18446744073709551615}`), Result: json.RawMessage(`{"allow":true}`), DurationNS: 412000, Caller: "host-preparation",
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7"},
		"error": {DecisionID: "d2", Time: at, Decision: "x", Path: "/v1/data/decisions/x/decision", BodyBase64: "e30=",
			Error: &RecordError{Code: "malformed_json", Message: `invalid JSON at byte 3: duplicate object key "a" <&>`}, DurationNS: 7},
		"shadowed": {DecisionID: "d3", Time: at, Decision: "x", Path: "/v1/decisions/x", Input: json.RawMessage(`{}`), Result: json.RawMessage(`{"o":"no"}`),
			Shadow: &Shadow{Revision: "cand", Class: "refuse_to_allow", Result: json.RawMessage(`{"o":"yes"}`), DurationNS: 9}},
		"shadow error": {DecisionID: "d4", Time: at, Decision: "x", Path: "/v1/decisions/x", Result: json.RawMessage(`{}`),
			Shadow: &Shadow{Revision: "cand", Class: "candidate_error", Error: &RecordError{Code: "policy_timeout", Message: "<slow>"}}},
		"violations": {DecisionID: "d6", Time: at, Decision: "x", Path: "/v1/decisions/x", Input: json.RawMessage(`{"n":-1}`),
			Error: &RecordError{Code: "input_schema_invalid", Message: "input does not match the schema", Violations: []Violation{{"/n", "minimum: got -1, want 0 <&>"}, {"", "missing property"}}}},
		"promotion":   {DecisionID: "d5", Time: at, Path: "/v1/shadow/promote", Caller: "sre", Promotion: json.RawMessage(`{"policy_revision":"cand","promoted":true}`)},
		"odd strings": {DecisionID: "\u2028\x01\"\\", Time: at.In(time.FixedZone("x", 3600)), Decision: "é😀", Path: "/", Caller: "a\tb"},
	} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(rec); err != nil {
			t.Fatal(err)
		}
		if got := appendRecord(nil, rec); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s:\n got  %s want %s", name, got, want.Bytes())
		}
	}
}

// TestSummary: the outcome and reasons the pages and the decision store
// read from a record, by the conventions alone.
func TestSummary(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		rec       Record
		outcome   string
		reasons   []string
	}{
		{"default key, string", "", Record{Result: json.RawMessage(`{"outcome":"o1","reasons":["r1","r2"]}`)}, "o1", []string{"r1", "r2"}},
		{"named key, boolean", "k", Record{Result: json.RawMessage(`{"k":false,"outcome":"not this"}`)}, "false", nil},
		{"key of another type", "k", Record{Result: json.RawMessage(`{"k":3,"reasons":["r"]}`)}, "", []string{"r"}},
		{"not an object", "", Record{Result: json.RawMessage(`[1]`)}, "", nil},
		{"no result", "", Record{}, "", nil},
		{"error", "", Record{Result: json.RawMessage(`{"outcome":"o1"}`), Error: &RecordError{Code: "c"}}, OutcomeError, nil},
		{"shadow outcome: the candidate's result", "k", Record{Shadow: &Shadow{Result: json.RawMessage(`{"k":"o2","reasons":["r3"]}`)}}, "o2", []string{"r3"}},
		{"shadow outcome: the candidate's error", "", Record{Shadow: &Shadow{Error: &RecordError{Code: "c"}}}, OutcomeError, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outcome, reasons := tc.rec.Summary(tc.key)
			if outcome != tc.outcome || strings.Join(reasons, "|") != strings.Join(tc.reasons, "|") {
				t.Errorf("Summary(%q) = %q, %q; want %q, %q", tc.key, outcome, reasons, tc.outcome, tc.reasons)
			}
		})
	}
}

// TestBoundName: a name past MaxNameBytes is cut between whole UTF-8
// sequences, with a marker saying its length, MaxNameBytes in all; a
// shorter one is kept as it is.
func TestBoundName(t *testing.T) {
	for _, name := range []string{"d1", strings.Repeat("a", MaxNameBytes), strings.Repeat("é", 3000), strings.Repeat("x", 1<<16)} {
		got := BoundName(name)
		if len(name) <= MaxNameBytes {
			if got != name {
				t.Errorf("BoundName(%d bytes) = %q; want it as it is", len(name), got)
			}
			continue
		}
		start, marker, _ := strings.Cut(got, "...")
		if len(got) > MaxNameBytes || !utf8.ValidString(got) || !strings.HasPrefix(name, start) || marker != fmt.Sprintf("[truncated from %d bytes]", len(name)) {
			t.Errorf("BoundName(%d bytes) = %d bytes %q; want at most %d, valid UTF-8, the name's start and its length", len(name), len(got), got, MaxNameBytes)
		}
	}
}
