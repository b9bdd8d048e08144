package decisionlog

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestAppendRecordMatchesEncodingJSON: the hand-written line is byte for byte
// what encoding/json (HTML escaping off) writes for the same record.
func TestAppendRecordMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 2, 17, 41, 42, 123456789, time.UTC)
	for name, rec := range map[string]Record{
		"decision": {DecisionID: "d1", Time: at, Decision: "some_decision", Revision: "abc", Path: "/v1/decisions/some_decision",
			Input: json.RawMessage(`{"a":[1,2],"n":18446744073709551615}`), Result: json.RawMessage(`{"allow":true}`), DurationNS: 412000, Caller: "host-preparation"},
		"error": {DecisionID: "d2", Time: at, Decision: "x", Path: "/v1/data/decisions/x/decision", BodyBase64: "e30=",
			Error: &RecordError{Code: "malformed_json", Message: `invalid JSON at byte 3: duplicate object key "a" <&>`}, DurationNS: 7},
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
