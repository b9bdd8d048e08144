package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/golden"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

// Golden files of what callers read: every error code's answer, the
// explanations and the decision listing, all on the quota test decision
// (engine/testdata/quota), so that no golden depends on the repository's
// rules. After an intended change: go test ./server/ -run Golden -update.

// goldenAnswer writes one answer as the golden files hold it: the request,
// the status, the headers a caller acts on, and the body.
func goldenAnswer(out *bytes.Buffer, title, method, path string, r response, dir string) {
	fmt.Fprintf(out, "### %s: %s %s\n%d\n", title, method, path, r.status)
	for _, h := range []string{"Allow", "Content-Type", "Retry-After", "Www-Authenticate", DecisionIDHeader} {
		if v := r.header.Get(h); v != "" {
			fmt.Fprintf(out, "%s: %s\n", h, golden.Mask([]byte(v), dir))
		}
	}
	out.Write(golden.Mask(r.body, dir))
	out.WriteString("\n\n")
}

// quotaEdited serves a copy of the quota decision with one edit of its
// policy, and an evaluation deadline.
func quotaEdited(t *testing.T, old, new string, timeout time.Duration) *harness {
	t.Helper()
	dir := quotaDir(t)
	testfiles.Edit(t, filepath.Join(dir, "policies", "decisions", "quota_check", "policy.rego"), old, new)
	eng, err := live.New(context.Background(), engine.Config{Policies: filepath.Join(dir, "policies"), Schemas: filepath.Join(dir, "schemas"), EvalTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, Config{}, eng)
}

// TestErrorDocumentsGolden: the answer to each error code, as
// testdata/golden/errors.golden records it.
func TestErrorDocumentsGolden(t *testing.T) {
	quota := serveQuota(t, Config{})
	small := serveQuota(t, Config{MaxBodyBytes: 64})
	authed := serveQuota(t, Config{Tokens: []Token{{Caller: "c", Secret: []byte("s3cret")}}})
	notReady := serve(t, Config{}, &fakeEngine{})
	badResult := quotaEdited(t, `{"allow": count(reasons) == 0,`, `{"allow": "yes",`, 0)
	runaway := quotaEdited(t, "reasons := [",
		"failures contains [3, \"runaway\"] if {\n\tinput.tenant == \"bomb\"\n\tcount({[i, j] | some i in numbers.range(1, 100000); some j in numbers.range(1, 100000)}) == 0\n}\n\nreasons := [", 50*time.Millisecond)
	logFull := serveQuota(t, Config{DecisionLog: &refusingLog{}, RefuseUnlogged: true})
	cut := serveQuota(t, Config{RequestTimeout: 100 * time.Millisecond})
	shadowed, shadowOnly, withCandidate := shadowGoldenServers(t) // shadow_test.go
	tests := []struct {
		code, method, path, body string
		h                        *harness
		header                   []string
		extra                    string // a member beside the error document
	}{
		{"malformed_json", "POST", plainPath, `{"tenant":"t","used":1,"used":2}`, quota, nil, ""},
		{"malformed_json", "POST", dataPath, `{"input":{"tenant":"t"} x`, quota, nil, ""},
		{"input_schema_invalid", "POST", plainPath, `{"used":-1,"extra":true,"suspended":"yes"}`, quota, nil, ""},
		{"input_schema_invalid", "POST", dataPath, `{"inputs":{}}`, quota, nil, ""},
		{"unknown_decision", "POST", "/v1/decisions/nope", `{}`, quota, nil, ""},
		{"not_found", "GET", "/v1/nope", "", quota, nil, ""},
		{"method_not_allowed", "GET", plainPath, "", quota, nil, ""},
		{"body_too_large", "POST", plainPath, `{"tenant":"` + strings.Repeat("t", 100) + `","used":1}`, small, nil, ""},
		{"unsupported_media_type", "POST", plainPath, `{"tenant":"t","used":1}`, quota, []string{"Content-Type", "text/plain"}, ""},
		{"unsupported_media_type", "POST", dataPath, `{"input":{"tenant":"t","used":1}}`, quota, []string{"Content-Encoding", "gzip"}, ""},
		{"overloaded", "POST", plainPath, `{"tenant":"t","used":1}`, logFull, nil, ""},
		{"unauthorized", "POST", plainPath, `{"tenant":"t","used":1}`, authed, nil, ""},
		{"unauthorized", "POST", plainPath, `{"tenant":"t","used":1}`, authed, []string{"Authorization", "Bearer wrong"}, ""},
		{"not_ready", "POST", plainPath, `{"tenant":"t","used":1}`, notReady, nil, ""},
		{"policy_error", "POST", plainPath, `{"tenant":"t","used":1}`, badResult, nil, ""},
		{"policy_timeout", "POST", plainPath, `{"tenant":"bomb","used":1}`, runaway, nil, ""},
		{"bad_request", "POST", "/v1/shadow", `{"policies": 1}`, shadowed, nil, ""},
		{"forbidden", "POST", "/v1/shadow/promote", `{}`, shadowOnly, nil, ""},
		{"candidate_refused", "POST", "/v1/shadow", `{"policies": "testdata/nope"}`, shadowed, nil, "problems"},
		{"no_candidate", "POST", "/v1/shadow/promote", `{}`, shadowed, nil, ""},
		{"promotion_refused", "POST", "/v1/shadow/promote", `{"revision": "0123456789abcdef"}`, withCandidate, nil, ""},
	}
	var out bytes.Buffer
	seen := map[engine.Code]bool{}
	for _, tc := range tests {
		r := tc.h.do(t, tc.method, tc.path, tc.body, tc.header...)
		doc := r
		if tc.extra != "" {
			doc = withoutMember(t, r, tc.extra)
		}
		if code := doc.errorDoc(t).Code; string(code) != tc.code {
			t.Errorf("%s %s: code %s, want %s", tc.method, tc.path, code, tc.code)
		}
		seen[engine.Code(tc.code)] = true
		goldenAnswer(&out, tc.code, tc.method, tc.path, r, "")
	}
	// A body that stops coming: the client closes its side mid-body.
	conn := rawRequest(t, cut, plainPath, 100, `{"tenant":"t",`)
	_ = conn.(*net.TCPConn).CloseWrite()
	status, header, body := readResponse(t, conn)
	r := response{status: status, header: header, body: body, path: plainPath}
	if code := r.errorDoc(t).Code; code != CodeRequestTimeout {
		t.Errorf("a cut-off body: code %s, want request_timeout", code)
	}
	seen[CodeRequestTimeout] = true
	goldenAnswer(&out, string(CodeRequestTimeout), "POST", plainPath+" (body cut off)", r, "")
	// Every code of the status table has its answer in the golden file.
	for code := range statusOf {
		if !seen[code] {
			t.Errorf("no golden answer for the code %s", code)
		}
	}
	golden.Check(t, "testdata/golden/errors.golden", out.Bytes())
}

// TestExplanationsGolden: ?explain=true on both paths and GET
// /v1/decisions, as testdata/golden/explain.golden records them.
func TestExplanationsGolden(t *testing.T) {
	dir := quotaDir(t)
	h := serve(t, Config{}, quotaEngine(t, dir))
	var out bytes.Buffer
	for _, in := range []string{`{"tenant":"t","used":10}`, `{"tenant":"t","used":1,"suspended":true}`, `{"tenant":"t","used":1}`} {
		for _, path := range []string{plainPath, dataPath} {
			body := in
			if path == dataPath {
				body = `{"input":` + in + `}`
			}
			r := h.do(t, "POST", path+"?explain=true", body)
			if r.status != http.StatusOK {
				t.Fatalf("%s %s: %d %s", path, body, r.status, r.body)
			}
			goldenAnswer(&out, body, "POST", path+"?explain=true", r, dir)
		}
	}
	r := h.do(t, "GET", "/v1/decisions", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/decisions: %d %s", r.status, r.body)
	}
	goldenAnswer(&out, "the decisions", "GET", "/v1/decisions", r, dir)
	golden.Check(t, "testdata/golden/explain.golden", out.Bytes())
}
