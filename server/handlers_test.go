package server

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
)

const (
	plainPath = "/v1/decisions/quota_check"
	dataPath  = "/v1/data/decisions/quota_check/decision"
)

func TestDecide(t *testing.T) {
	h := serveQuota(t, Config{})
	tests := []struct {
		name, path, body string
		status           int
		result           string      // when 200
		code             engine.Code // when an error
		violationAt      []string    // exactly these pointers, when set
	}{
		{name: "allowed", path: plainPath, body: `{"tenant":"t","used":9}`, status: 200, result: `{"allow":true,"reasons":[]}`},
		{name: "refused", path: plainPath, body: `{"tenant":"t","used":18446744073709551615,"suspended":true}`, status: 200, result: `{"allow":false,"reasons":["quota_exhausted","tenant_suspended"]}`},
		{name: "data api allowed", path: dataPath + "?pretty=true&metrics=true&provenance=true", body: `{"input":{"tenant":"t","used":9}}`, status: 200, result: `{"allow":true,"reasons":[]}`},
		{name: "duplicate key", path: plainPath, body: `{"tenant":"t","used":1,"used":99}`, status: 400, code: engine.CodeMalformedJSON},
		{name: "duplicate key inside input", path: dataPath, body: `{"input":{"tenant":"t","used":1,"used":99}}`, status: 400, code: engine.CodeMalformedJSON},
		{name: "trailing data", path: plainPath, body: `{"tenant":"t","used":1} {}`, status: 400, code: engine.CodeMalformedJSON},
		{name: "not JSON", path: plainPath, body: `tenant=t`, status: 400, code: engine.CodeMalformedJSON},
		{name: "array body", path: plainPath, body: `[1]`, status: 400, code: engine.CodeInputSchemaInvalid, violationAt: []string{""}},
		{name: "string body", path: plainPath, body: `"x"`, status: 400, code: engine.CodeInputSchemaInvalid, violationAt: []string{""}},
		{name: "data api without input", path: dataPath, body: `{"tenant":"t","used":1}`, status: 400, code: engine.CodeInputSchemaInvalid, violationAt: []string{""}},
		{name: "data api input not an object", path: dataPath, body: `{"input":[]}`, status: 400, code: engine.CodeInputSchemaInvalid, violationAt: []string{""}},
		{name: "above u64", path: plainPath, body: `{"tenant":"t","used":18446744073709551616}`, status: 400, code: engine.CodeInputSchemaInvalid, violationAt: []string{"/used"}},
		{name: "above u64 on data api", path: dataPath, body: `{"input":{"tenant":"t","used":18446744073709551616}}`, status: 400, code: engine.CodeInputSchemaInvalid, violationAt: []string{"/used"}},
		{name: "two violations", path: plainPath, body: `{"tenant":"","used":-1}`, status: 400, code: engine.CodeInputSchemaInvalid, violationAt: []string{"/tenant", "/used"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(t, "POST", tc.path, tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			id := r.header.Get(DecisionIDHeader)
			if len(id) != 36 {
				t.Errorf("%s = %q", DecisionIDHeader, id)
			}
			if tc.code != "" {
				doc := r.errorDoc(t)
				if doc.Code != tc.code {
					t.Fatalf("code %q, want %q: %s", doc.Code, tc.code, r.body)
				}
				if tc.violationAt != nil {
					var got []string
					for _, v := range doc.Violations {
						got = append(got, v.Path)
					}
					if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.violationAt) {
						t.Errorf("violations at %q, want %q", got, tc.violationAt)
					}
				}
				return
			}
			var env map[string]json.RawMessage
			if err := json.Unmarshal(r.body, &env); err != nil {
				t.Fatalf("%v: %s", err, r.body)
			}
			if !engine.SameJSON(env["result"], []byte(tc.result)) {
				t.Errorf("result %s, want %s", env["result"], tc.result)
			}
			var gotID string
			_ = json.Unmarshal(env["decision_id"], &gotID)
			if gotID != id {
				t.Errorf("body decision_id %q, header %q", gotID, id)
			}
			want := []string{"decision", "decision_id", "policy_revision", "result"}
			if tc.path != plainPath {
				want = []string{"decision_id", "result"} // exactly OPA's Data API answer
			}
			if keys := sortedKeys(env); keys != strings.Join(want, ",") {
				t.Errorf("envelope keys %s, want %s", keys, strings.Join(want, ","))
			}
		})
	}
}

func sortedKeys[V any](m map[string]V) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	return strings.Join(keys, ",")
}

// TestEndpointsAgree sends each input to both decision endpoints: the
// answers must carry the same result, or the same error document.
func TestEndpointsAgree(t *testing.T) {
	h := serveQuota(t, Config{})
	inputs := map[string]string{
		"allowed":        `{"tenant":"t","used":0}`,
		"exhausted":      `{"tenant":"t","used":10}`,
		"both reasons":   `{"tenant":"t","used":18446744073709551615,"suspended":true}`,
		"suspended only": `{"tenant":"t","used":3,"suspended":true}`,
		"missing used":   `{"tenant":"t"}`,
		"unknown key":    `{"tenant":"t","used":1,"extra":{"deep":1}}`,
		"wrong types":    `{"tenant":1,"used":"1","suspended":"yes"}`,
		"not an object":  `42`,
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			for _, explain := range []string{"", "?explain=true"} {
				plain := h.do(t, "POST", plainPath+explain, in)
				data := h.do(t, "POST", dataPath+explain, `{"input":`+in+`}`)
				if plain.status != data.status {
					t.Fatalf("status %d vs %d: %s / %s", plain.status, data.status, plain.body, data.body)
				}
				if plain.status != 200 {
					if p, d := plain.errorDoc(t), data.errorDoc(t); fmt.Sprint(p) != fmt.Sprint(d) {
						t.Errorf("errors differ:\n  plain %+v\n  data  %+v", p, d)
					}
					continue
				}
				var p, d struct {
					Result      json.RawMessage
					Explanation json.RawMessage
				}
				if err := json.Unmarshal(plain.body, &p); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(data.body, &d); err != nil {
					t.Fatal(err)
				}
				if !engine.SameJSON(p.Result, d.Result) || string(p.Explanation) != string(d.Explanation) {
					t.Errorf("answers differ:\n  plain %s\n  data  %s", plain.body, data.body)
				}
			}
		})
	}
}

func TestExplain(t *testing.T) {
	h := serveQuota(t, Config{})
	for _, path := range []string{plainPath, dataPath} {
		body := `{"tenant":"t","used":10}`
		if path == dataPath {
			body = `{"input":` + body + `}`
		}
		t.Run(path, func(t *testing.T) {
			var without map[string]json.RawMessage
			if err := json.Unmarshal(h.do(t, "POST", path, body).body, &without); err != nil {
				t.Fatal(err)
			}
			if _, ok := without["explanation"]; ok {
				t.Errorf("explanation without ?explain: %s", without["explanation"])
			}
			r := h.do(t, "POST", path+"?explain=true", body)
			var with struct {
				Explanation []engine.RuleOutcome `json:"explanation"`
			}
			if err := json.Unmarshal(r.body, &with); err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, o := range with.Explanation {
				if o.Title == "" {
					t.Errorf("rule %s has no title", o.Reason)
				}
				got[o.Reason] = o.Fired
			}
			if len(got) != 2 || !got["quota_exhausted"] || got["tenant_suspended"] {
				t.Errorf("explanation %s", r.body)
			}
		})
	}
}

func TestMediaType(t *testing.T) {
	h := serveQuota(t, Config{})
	tests := []struct {
		name, contentType string
		status            int
	}{
		{"json", "application/json", 200},
		{"json with charset", "application/json; charset=utf-8", 200},
		{"json with upper-case charset", "Application/JSON; charset=UTF-8", 200},
		{"missing", "", 200},
		{"text", "text/plain", 415},
		{"form", "application/x-www-form-urlencoded", 415},
		{"json in latin-1", "application/json; charset=iso-8859-1", 415},
		{"garbage", ";;;", 415},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{plainPath, dataPath} {
				body := `{"tenant":"t","used":1}`
				if path == dataPath {
					body = `{"input":` + body + `}`
				}
				r := h.do(t, "POST", path, body, "Content-Type", tc.contentType)
				if r.status != tc.status {
					t.Fatalf("%s: status %d, want %d: %s", path, r.status, tc.status, r.body)
				}
				if tc.status == 415 && r.errorDoc(t).Code != engine.CodeUnsupportedMediaType {
					t.Errorf("%s: %s", path, r.body)
				}
			}
		})
	}
}

// unsized hides the length of a body, so that the client sends it chunked.
type unsized struct{ io.Reader }

func TestBodyLimit(t *testing.T) {
	const limit = 64
	h := serveQuota(t, Config{MaxBodyBytes: limit})
	pad := func(n int) string { // a valid input of exactly n bytes
		s := `{"tenant":"t","used":1}`
		return s[:len(s)-1] + strings.Repeat(" ", n-len(s)) + "}"
	}
	tests := []struct {
		name    string
		body    string
		chunked bool
		status  int
	}{
		{"at the limit", pad(limit), false, 200},
		{"at the limit, chunked", pad(limit), true, 200},
		{"over by one", pad(limit + 1), false, 413},
		{"over by one, chunked", pad(limit + 1), true, 413},
		{"far over, chunked", pad(100 * limit), true, 413},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				body = unsized{body}
			}
			req, err := http.NewRequest("POST", h.srv.URL+plainPath, body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.chunked {
				req.ContentLength = -1
			}
			r := h.send(t, req)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if tc.status == 413 && r.errorDoc(t).Code != engine.CodeBodyTooLarge {
				t.Errorf("%s", r.body)
			}
			// A body cut off at the limit is not what the caller sent: it
			// is not logged as the input.
			recs := h.log.records()
			if last := recs[len(recs)-1]; tc.status == 413 && (last.Input != nil || last.BodyBase64 != "") {
				t.Errorf("a truncated body was logged: %q %q", last.Input, last.BodyBase64)
			}
		})
	}
}

// TestBodyLimitNotRead declares a body larger than the limit and never sends
// it: the answer must come from the Content-Length alone.
func TestBodyLimitNotRead(t *testing.T) {
	h := serveQuota(t, Config{MaxBodyBytes: 1024})
	conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n", plainPath)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
	if recs := h.log.records(); len(recs) != 1 || recs[0].Error.Code != "body_too_large" || recs[0].Input != nil || recs[0].BodyBase64 != "" {
		t.Errorf("records %+v", recs)
	}
}

// TestErrorsSayWhatToDo: an unknown decision's error lists the decisions
// there are (read from the revision, on both paths), and a missing or
// wrong token's names the variable the arbiter commands send it from.
func TestErrorsSayWhatToDo(t *testing.T) {
	h := serveQuota(t, Config{MaxBodyBytes: 1024, Tokens: []Token{{Caller: "host-prep", Secret: []byte("tok")}}})
	names := h.eng.Snapshot().Names()
	if len(names) == 0 {
		t.Fatal("the test revision has no decision")
	}
	for _, path := range []string{"/v1/decisions/nope", "/v1/data/decisions/nope/decision"} {
		r := h.do(t, "POST", path, `{}`, "Authorization", "Bearer tok")
		e := r.errorDoc(t)
		if r.status != 404 || e.Code != engine.CodeUnknownDecision {
			t.Fatalf("%s: %d %s, want 404 unknown_decision", path, r.status, e.Code)
		}
		for _, n := range names {
			if !strings.Contains(e.Message, n) {
				t.Errorf("%s: %q does not name the decision %s", path, e.Message, n)
			}
		}
	}
	for _, header := range [][]string{nil, {"Authorization", "Bearer wrong"}} {
		r := h.do(t, "POST", plainPath, `{}`, header...)
		if e := r.errorDoc(t); r.status != 401 || !strings.Contains(e.Message, "ARBITER_TOKEN") {
			t.Errorf("token %v: %d %q, want 401 naming ARBITER_TOKEN", header, r.status, e.Message)
		}
	}
	if got := knownDecisions(make([]string, maxListedDecisions+3)); !strings.HasSuffix(got, " and 3 more") {
		t.Errorf("%d decisions listed as %q, want the first %d and a count", maxListedDecisions+3, got, maxListedDecisions)
	}
}

func TestDecisionLog(t *testing.T) {
	h := serveQuota(t, Config{MaxBodyBytes: 1024, Tokens: []Token{{Caller: "host-prep", Secret: []byte("tok")}}})
	rev := h.eng.Snapshot().Revision
	auth := []string{"Authorization", "Bearer tok"}
	tests := []struct {
		name, path, body string
		input            string // want Input, compact; "" for none
		base64           string // want BodyBase64
		result           string // want Result
		code             string // want Error.Code
		decision         string
	}{
		{name: "decision", path: plainPath, body: `{"tenant":"t", "used":10}`, input: `{"tenant":"t", "used":10}`, result: `{"allow":false,"reasons":["quota_exhausted"]}`, decision: "quota_check"},
		{name: "data api decision logs the input member", path: dataPath, body: `{"input": {"tenant":"t","used":1} }`, input: `{"tenant":"t","used":1}`, result: `{"allow":true,"reasons":[]}`, decision: "quota_check"},
		{name: "schema violation", path: plainPath, body: `{"tenant":"t"}`, input: `{"tenant":"t"}`, code: "input_schema_invalid", decision: "quota_check"},
		{name: "duplicate key is kept as received", path: plainPath, body: `{"used":1,"used":2}`, input: `{"used":1,"used":2}`, code: "malformed_json", decision: "quota_check"},
		{name: "not JSON is kept in base64", path: plainPath, body: "\xff{oops", base64: base64.StdEncoding.EncodeToString([]byte("\xff{oops")), code: "malformed_json", decision: "quota_check"},
		{name: "unknown decision: answered before the body is read", path: "/v1/decisions/nope", body: `{}`, code: "unknown_decision", decision: "nope"},
		{name: "too large", path: plainPath, body: `{"tenant":"` + strings.Repeat("x", 2000) + `"}`, code: "body_too_large", decision: "quota_check"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(h.log.records())
			sent := time.Now()
			r := h.do(t, "POST", tc.path, tc.body, auth...)
			answered := time.Now()
			recs := h.log.records()[before:]
			if len(recs) != 1 {
				t.Fatalf("%d records for one request", len(recs))
			}
			rec := recs[0]
			if rec.DecisionID != r.header.Get(DecisionIDHeader) || rec.DecisionID == "" {
				t.Errorf("decision_id %q, header %q", rec.DecisionID, r.header.Get(DecisionIDHeader))
			}
			if rec.Decision != tc.decision || rec.Path != tc.path || rec.Caller != "host-prep" || rec.Revision != rev {
				t.Errorf("decision %q path %q caller %q revision %q", rec.Decision, rec.Path, rec.Caller, rec.Revision)
			}
			// The record's time and duration lie within the request's.
			if rec.Time.Before(sent) || rec.Time.After(answered) {
				t.Errorf("time %v, want between %v and %v", rec.Time, sent, answered)
			}
			if rec.DurationNS <= 0 || rec.DurationNS > answered.Sub(sent).Nanoseconds() {
				t.Errorf("duration %dns, want above 0 and at most the request's %s", rec.DurationNS, answered.Sub(sent))
			}
			if string(rec.Input) != tc.input || rec.BodyBase64 != tc.base64 {
				t.Errorf("input %q base64 %q", rec.Input, rec.BodyBase64)
			}
			if tc.code == "" {
				if rec.Error != nil || !engine.SameJSON(rec.Result, []byte(tc.result)) {
					t.Errorf("error %+v result %s", rec.Error, rec.Result)
				}
			} else if rec.Error == nil || rec.Error.Code != tc.code || rec.Error.Message == "" || rec.Result != nil {
				t.Errorf("error %+v result %s", rec.Error, rec.Result)
			}
		})
	}

	// Bodies are read into pooled buffers: a record must not change when
	// later requests reuse them.
	recs := h.log.records()
	for range 20 {
		h.do(t, "POST", plainPath, `{"tenant":"zzzzzzzzzzzzzzzzzzzzzzzzz","used":0}`, auth...)
	}
	for i, tc := range tests {
		if string(recs[i].Input) != tc.input {
			t.Errorf("%s: logged input changed to %q after later requests", tc.name, recs[i].Input)
		}
	}

	// Requests stopped before the decision endpoint are not decision records.
	before := len(h.log.records())
	h.do(t, "POST", plainPath, `{}`)                    // no token
	h.do(t, "GET", plainPath, "", auth...)              // wrong method
	h.do(t, "GET", "/v1/status", "", auth...)           // not a decision
	h.do(t, "POST", "/v1/decisions/a/b", `{}`, auth...) // no route
	if n := len(h.log.records()) - before; n != 0 {
		t.Errorf("%d records for requests that are not decisions", n)
	}
}
