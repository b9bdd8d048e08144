package server

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/engine"
)

func TestAuth(t *testing.T) {
	h := serveQuota(t, Config{Tokens: []Token{
		{Caller: "host-prep", Secret: []byte("first-secret")},
		{Caller: "ops", Secret: []byte("second-secret")},
	}})
	body := `{"tenant":"t","used":1}`
	tests := []struct {
		name, method, path, auth string
		status                   int
		challenge                string // WWW-Authenticate, on 401
		caller                   string // logged caller, on a decision
	}{
		{name: "health is open", method: "GET", path: "/health", status: 200},
		{name: "missing", method: "POST", path: plainPath, status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "wrong", method: "POST", path: plainPath, auth: "Bearer nope", status: 401, challenge: `Bearer realm="arbiter", error="invalid_token"`},
		{name: "prefix of a token", method: "POST", path: plainPath, auth: "Bearer first", status: 401, challenge: `Bearer realm="arbiter", error="invalid_token"`},
		{name: "empty bearer", method: "POST", path: plainPath, auth: "Bearer ", status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "basic scheme", method: "POST", path: plainPath, auth: "Basic Zmlyc3Qtc2VjcmV0", status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "bare token", method: "POST", path: plainPath, auth: "first-secret", status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "first token", method: "POST", path: plainPath, auth: "Bearer first-secret", status: 200, caller: "host-prep"},
		{name: "second token, lower-case scheme", method: "POST", path: dataPath, auth: "bearer second-secret", status: 200, caller: "ops"},
		{name: "data api needs a token", method: "POST", path: dataPath, status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "status needs a token", method: "GET", path: "/v1/status", status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "listing needs a token", method: "GET", path: "/v1/decisions", status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "metrics need a token", method: "GET", path: "/metrics", status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "reload needs a token", method: "POST", path: "/v1/reload", status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "metrics with a token", method: "GET", path: "/metrics", auth: "Bearer second-secret", status: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := ""
			if tc.method == "POST" && tc.path != "/v1/reload" {
				b = body
				if tc.path == dataPath {
					b = `{"input":` + body + `}`
				}
			}
			before := len(h.log.records())
			r := h.do(t, tc.method, tc.path, b, "Authorization", tc.auth)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			recs := h.log.records()[before:]
			if tc.status == 401 {
				if r.errorDoc(t).Code != engine.CodeUnauthorized {
					t.Errorf("%s", r.body)
				}
				if got := r.header.Get("WWW-Authenticate"); got != tc.challenge {
					t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
				}
				if len(recs) != 0 {
					t.Errorf("an unauthenticated request was logged as a decision: %+v", recs)
				}
			}
			if tc.caller != "" && (len(recs) != 1 || recs[0].Caller != tc.caller) {
				t.Errorf("want one record by %q, got %+v", tc.caller, recs)
			}
		})
	}
}

// TestClientCertificateCaller: without token auth, the common name of a
// verified client certificate identifies the caller.
func TestClientCertificateCaller(t *testing.T) {
	log := &fakeLog{}
	eng := quotaEngine(t, quotaDir(t))
	tests := []struct {
		name   string
		tokens []Token
		state  *tls.ConnectionState
		auth   string
		caller string
	}{
		{name: "verified certificate", state: verified("host-prep.internal"), caller: "host-prep.internal"},
		{name: "unverified certificate", state: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "mallory"}}}}, caller: ""},
		{name: "plain HTTP", caller: ""},
		{name: "token wins", tokens: []Token{{Caller: "tok", Secret: []byte("s")}}, state: verified("cert"), auth: "Bearer s", caller: "tok"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			handler := New(Config{DecisionLog: log, Tokens: tc.tokens}, eng)
			req := httptest.NewRequest("POST", plainPath, strings.NewReader(`{"tenant":"t","used":1}`))
			req.TLS = tc.state
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			before := len(log.records())
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, req)
			if w.Code != 200 {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			recs := log.records()[before:]
			if len(recs) != 1 || recs[0].Caller != tc.caller {
				t.Errorf("want one record by %q, got %+v", tc.caller, recs)
			}
		})
	}
}

func verified(cn string) *tls.ConnectionState {
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
}

func TestParseTokenFile(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		want    []Token
		wantErr string
	}{
		{
			name: "callers, comments and blank lines",
			file: "# tokens for arbiter\n\nhost-prep   aaaa1111\n  # indented comment\nops\tbbbb2222\r\n",
			want: []Token{{"host-prep", []byte("aaaa1111")}, {"ops", []byte("bbbb2222")}},
		},
		{
			name: "bare token gets a derived caller",
			file: "s3cret\n",
			// sha256("s3cret") starts with 1ec1c26b
			want: []Token{{"token-1ec1c26b", []byte("s3cret")}},
		},
		{name: "empty file", file: "", wantErr: "no token"},
		{name: "only comments", file: "# nothing\n\n", wantErr: "no token"},
		{name: "duplicate token", file: "a tok\nb other\nc tok\n", wantErr: "line 3: duplicate token (first on line 1)"},
		{name: "duplicate bare token", file: "tok\ntok\n", wantErr: "line 2: duplicate token"},
		{name: "three fields", file: "a b c\n", wantErr: "line 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTokenFile([]byte(tc.file))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "tok ") || strings.Contains(err.Error(), "other") {
					t.Errorf("error reveals a token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d tokens, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i].Caller != tc.want[i].Caller || string(got[i].Secret) != string(tc.want[i].Secret) {
					t.Errorf("token %d: %q/%q, want %q/%q", i, got[i].Caller, got[i].Secret, tc.want[i].Caller, tc.want[i].Secret)
				}
			}
		})
	}
}

func TestMatchNeverAcceptsEmpty(t *testing.T) {
	a := newAuthenticator([]Token{{Caller: "empty", Secret: nil}, {Caller: "x", Secret: []byte("x")}})
	if c, ok := a.match(""); ok {
		t.Errorf("empty token matched %q", c)
	}
	if c, ok := a.match("x"); !ok || c != "x" {
		t.Errorf("match(x) = %q %v", c, ok)
	}
}
