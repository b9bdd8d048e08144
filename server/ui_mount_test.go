package server

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/internal/wait"
	"github.com/arbiter-dev/arbiter/server/ui"
	"github.com/prometheus/client_golang/prometheus"
)

// TestUIAuthentication: the pages sit behind the API's own
// authentication. A browser without a token is sent to the login page; the
// login cookie is the bearer token, checked by the same code, and only
// under /ui; a wrong one goes back to the login page. The login page and
// the static files are open; a token in the Authorization header works as
// on the API.
func TestUIAuthentication(t *testing.T) {
	eng := quotaEngine(t, quotaDir(t))
	pages := ui.New(ui.Config{Recent: ui.NewRing(ui.RingConfig{}), Decider: eng, Login: true})
	h := serve(t, Config{Tokens: []Token{{Caller: "engineer", Secret: []byte("ui-secret")}}, UI: pages}, eng)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	cookie := func(v string) string { return ui.TokenCookie + "=" + v }
	tests := []struct {
		name, method, path, header, value string
		status                            int
		location                          string // on a redirect, its prefix
	}{
		{name: "no token: to the login page", method: "GET", path: "/ui/decisions", status: 303, location: "/ui/login?next="},
		{name: "the login page is open", method: "GET", path: "/ui/login", status: 200},
		{name: "the stylesheet is open", method: "GET", path: "/ui/static/ui.css", status: 200},
		{name: "the cookie's token", method: "GET", path: "/ui/decisions", header: "Cookie", value: cookie("ui-secret"), status: 200},
		{name: "a wrong cookie: back to the login page", method: "GET", path: "/ui/policy", header: "Cookie", value: cookie("nope"), status: 303, location: "/ui/login?next="},
		{name: "a bearer token", method: "GET", path: "/ui/policy", header: "Authorization", value: "Bearer ui-secret", status: 200},
		{name: "a wrong bearer token", method: "GET", path: "/ui/policy", header: "Authorization", value: "Bearer nope", status: 303, location: "/ui/login?next="},
		{name: "the cookie is not a token for the API", method: "GET", path: "/v1/status", header: "Cookie", value: cookie("ui-secret"), status: 401},
		{name: "nor for a path that only starts like the pages", method: "GET", path: "/uix", header: "Cookie", value: cookie("ui-secret"), status: 404},
		{name: "a what-if needs the token too", method: "POST", path: "/ui/whatif", status: 303, location: "/ui/login?next="},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, h.srv.URL+tc.path, strings.NewReader(""))
			if tc.header != "" {
				req.Header.Set(tc.header, tc.value)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %.300s", resp.StatusCode, tc.status, body)
			}
			if loc := resp.Header.Get("Location"); !strings.HasPrefix(loc, tc.location) {
				t.Errorf("Location %q, want %q...", loc, tc.location)
			}
			if tc.status == 303 && strings.Contains(string(body), "unauthorized") {
				t.Errorf("the redirect carries the API's error document: %s", body)
			}
		})
	}
}

// TestWhatIfFormsTakeTheAdmissionBudget: a what-if form is held to the
// API's budgets: while a decision request holds the bytes in flight, a form
// is answered 503 overloaded like a request would be, and decided once the
// budget is back.
func TestWhatIfFormsTakeTheAdmissionBudget(t *testing.T) {
	eng := quotaEngine(t, quotaDir(t))
	pages := ui.New(ui.Config{Recent: ui.NewRing(ui.RingConfig{}), Decider: eng})
	reg := prometheus.NewRegistry()
	h := serve(t, Config{UI: pages, MaxInflightBytes: 8 << 10, Registry: reg}, eng)
	form := url.Values{"decision": {"quota_check"}, "input": {`{"tenant":"t","used":1}`}}.Encode()
	post := func() *http.Response {
		t.Helper()
		resp, err := http.Post(h.srv.URL+"/ui/whatif", "application/x-www-form-urlencoded", strings.NewReader(form))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}

	conn := rawRequest(t, h, plainPath, 8<<10, `{"tenant":"t",`)
	wait.Until(t, 30*time.Second, "the request holds its budget", func() bool { return inflight(t, reg, "arbiter_inflight_bytes") >= 8<<10 })
	if resp := post(); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("what-if while the budget is held: %d Retry-After %q, want 503 with Retry-After 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	conn.Close()
	wait.Until(t, 30*time.Second, "the budget is given back", func() bool { return inflight(t, reg, "arbiter_inflight_bytes") == 0 })
	if resp := post(); resp.StatusCode != http.StatusOK {
		t.Fatalf("what-if after the budget is back: %d, want 200", resp.StatusCode)
	}
	if n := inflight(t, reg, "arbiter_inflight_bytes"); n != 0 {
		t.Errorf("the what-if kept %v bytes of the budget", n)
	}
}

// TestLoginFormIsBounded: the login form is open to anyone, so it is read
// within its small bound; a larger body is refused (413) and sets no
// cookie, where Go's form parser alone would read 10 MB.
func TestLoginFormIsBounded(t *testing.T) {
	eng := quotaEngine(t, quotaDir(t))
	pages := ui.New(ui.Config{Recent: ui.NewRing(ui.RingConfig{}), Decider: eng, Login: true})
	h := serve(t, Config{Tokens: []Token{{Caller: "engineer", Secret: []byte("ui-secret")}}, UI: pages}, eng)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		name   string
		form   string
		status int
	}{
		{"a token", "token=ui-secret", http.StatusSeeOther},
		{"a megabyte", "token=ui-secret&pad=" + strings.Repeat("x", 1<<20), http.StatusRequestEntityTooLarge},
	} {
		resp, err := client.Post(h.srv.URL+"/ui/login", "application/x-www-form-urlencoded", strings.NewReader(tc.form))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
		if set := resp.Header.Get("Set-Cookie") != ""; set != (tc.status == http.StatusSeeOther) {
			t.Errorf("%s: Set-Cookie %q", tc.name, resp.Header.Get("Set-Cookie"))
		}
	}
}
