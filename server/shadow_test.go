package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/internal/testsignal"
	"github.com/arbiter-dev/arbiter/shadow"
)

// The shadow tests use a decision that exists only in tests
// (shadow/testdata/access): its result schema says which outcome allows.
const (
	accessPath = "/v1/decisions/access_check"
	accessData = "policies/decisions/access_check/data.json"
)

func accessDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "access")
	if err := os.CopyFS(dir, os.DirFS("../shadow/testdata/access")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func folderConfig(dir string) engine.Config {
	return engine.Config{Policies: filepath.Join(dir, "policies"), Schemas: filepath.Join(dir, "schemas"), Tests: filepath.Join(dir, "tests")}
}

// serveShadow serves the folder dir with a shadow whose candidates are
// judged by the live engine (with evalTimeout), as cmd does.
func serveShadow(t *testing.T, dir string, cfg Config, scfg shadow.Config, evalTimeout time.Duration, admins ...string) (*harness, *live.Engine, *shadow.Shadow) {
	t.Helper()
	ecfg := folderConfig(dir)
	ecfg.EvalTimeout = evalTimeout
	eng, err := live.New(context.Background(), ecfg)
	if err != nil {
		t.Fatal(err)
	}
	sh := shadow.New(scfg)
	t.Cleanup(func() { _ = sh.Close(context.Background()) })
	cfg.Shadow = &ShadowConfig{
		Shadow: sh,
		Engine: eng,
		Gate:   shadow.Gate{MinDecisions: 1, Forbidden: shadow.DefaultForbidden},
		Admins: admins,
	}
	return serve(t, cfg, eng), eng, sh
}

func loadBody(dir string) string {
	b, _ := json.Marshal(ShadowSource{Policies: filepath.Join(dir, "policies"), Schemas: filepath.Join(dir, "schemas"), Tests: filepath.Join(dir, "tests")})
	return string(b)
}

func decodeJSON(t *testing.T, r response, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
}

// waitJudged polls GET /v1/shadow until the report counts n decisions.
func waitJudged(t *testing.T, h *harness, n uint64, header ...string) shadowDoc {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var doc shadowDoc
		decodeJSON(t, h.do(t, "GET", "/v1/shadow", "", header...), &doc)
		if doc.Report != nil && doc.Report.Total >= n {
			return doc
		}
		if time.Now().After(deadline) {
			t.Fatalf("the candidate judged %+v of %d decisions within a minute", doc.Report, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loosenedWithLog is a live access_check folder, a candidate that allows
// one more request (the limit 10 edited to 11), and a decision log.
func loosenedWithLog(t *testing.T) (live, cand, logPath string, dlog *decisionlog.Logger) {
	t.Helper()
	live, cand = accessDir(t), accessDir(t)
	testfiles.Edit(t, filepath.Join(cand, accessData), `"limit": 10`, `"limit": 11`)
	logPath = filepath.Join(t.TempDir(), "decisions.log")
	dlog, err := decisionlog.Open(decisionlog.Options{Path: logPath})
	if err != nil {
		t.Fatal(err)
	}
	return live, cand, logPath, dlog
}

// Edit, shadow, read the impact, promote, through the API: a candidate
// that allows one more case is reported refuse_to_allow with that
// decision's id, in GET /v1/shadow and on the decision's own log record;
// the gate refuses it; only a forced promotion by an admin makes it live,
// and the log records who promoted what, refused attempt included.
func TestShadowThroughTheAPI(t *testing.T) {
	live, cand, logPath, dlog := loosenedWithLog(t)
	tokens := []Token{{Caller: "sre", Secret: []byte("sre-secret")}, {Caller: "host", Secret: []byte("host-secret")}}
	h, _, _ := serveShadow(t, live, Config{DecisionLog: dlog, Tokens: tokens}, shadow.Config{Rate: 1, CPU: 8}, 0, "sre")
	sre := []string{"Authorization", "Bearer sre-secret"}
	host := []string{"Authorization", "Bearer host-secret"}

	if r := h.do(t, "POST", "/v1/shadow", loadBody(cand), host...); r.status != http.StatusForbidden || r.errorDoc(t).Code != CodeForbidden {
		t.Fatalf("a caller that is not an admin loaded a candidate: %d %s", r.status, r.body)
	}
	r := h.do(t, "POST", "/v1/shadow", loadBody(cand), sre...)
	var loaded struct {
		OK        bool         `json:"ok"`
		Candidate candidateDoc `json:"candidate"`
	}
	decodeJSON(t, r, &loaded)
	if r.status != http.StatusOK || !loaded.OK || loaded.Candidate.LoadedBy != "sre" {
		t.Fatalf("loading the candidate: %d %s", r.status, r.body)
	}
	candRev := loaded.Candidate.Revision

	bodies := []string{`{"tenant":"a","used":3}`, `{"tenant":"b","used":10}`, `{"tenant":"c","used":50}`, `{"tenant":"d","used":-1}`}
	ids := make([]string, len(bodies))
	for i, b := range bodies {
		r := h.do(t, "POST", accessPath, b, host...)
		ids[i] = r.header.Get(DecisionIDHeader)
		if ids[i] == "" {
			t.Fatalf("%s: %d %s", b, r.status, r.body)
		}
	}
	doc := waitJudged(t, h, uint64(len(bodies)), host...)
	rep := doc.Report
	if rep.Classes[0].Class != shadow.RefuseToAllow || rep.Count(shadow.RefuseToAllow) != 1 || strings.Join(rep.Examples(shadow.RefuseToAllow), ",") != ids[1] {
		t.Fatalf("report %+v, want refuse_to_allow first, once, with %s", rep.Classes, ids[1])
	}
	if doc.Promotable || len(doc.Refusals) == 0 || !strings.Contains(doc.Refusals[0], ids[1]) {
		t.Errorf("promotable %v, refusals %q", doc.Promotable, doc.Refusals)
	}

	r = h.do(t, "POST", "/v1/shadow/promote", `{}`, sre...)
	var refused struct {
		Error     engine.DocumentBody `json:"error"`
		Promotion shadow.Promotion    `json:"promotion"`
	}
	decodeJSON(t, r, &refused)
	if r.status != http.StatusConflict || refused.Error.Code != CodePromotionRefused || refused.Promotion.Promoted || len(refused.Promotion.Refusals) != 1 {
		t.Fatalf("promotion of a candidate that allows more: %d %s", r.status, r.body)
	}
	var st statusDoc
	decodeJSON(t, h.do(t, "GET", "/v1/status", "", host...), &st)
	if st.Revision == candRev {
		t.Fatal("a refused candidate went live")
	}
	if r := h.do(t, "POST", "/v1/shadow/promote", `{"force":true}`, host...); r.status != http.StatusForbidden {
		t.Fatalf("a caller that is not an admin promoted: %d %s", r.status, r.body)
	}
	r = h.do(t, "POST", "/v1/shadow/promote", `{"force":true,"revision":"`+candRev+`"}`, sre...)
	if r.status != http.StatusOK {
		t.Fatalf("forced promotion: %d %s", r.status, r.body)
	}
	decodeJSON(t, h.do(t, "GET", "/v1/status", "", host...), &st)
	decodeJSON(t, h.do(t, "GET", "/v1/shadow", "", host...), &doc)
	if st.Revision != candRev || doc.Candidate != nil || doc.Promotion == nil || doc.Promotion.Revision != candRev || doc.Promotion.By != "sre" {
		t.Fatalf("after promotion: live %s, shadow %+v", st.Revision, doc)
	}
	if r := h.do(t, "POST", accessPath, bodies[1], host...); !strings.Contains(string(r.body), `"admit"`) {
		t.Errorf("the promoted revision does not answer: %s", r.body)
	}

	if err := dlog.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var promotions []shadow.Promotion
	shadowed := map[string]*decisionlog.Shadow{}
	decisions := map[string]int{}
	if _, err := decisionlog.ReadFile(logPath, func(_ int, rec decisionlog.Record) error {
		if rec.Promotion != nil {
			var p shadow.Promotion
			if err := json.Unmarshal(rec.Promotion, &p); err != nil {
				t.Fatal(err)
			}
			if rec.Caller != "sre" {
				t.Errorf("promotion record by %q", rec.Caller)
			}
			promotions = append(promotions, p)
		}
		switch {
		case rec.IsDecision():
			decisions[rec.DecisionID]++
		case rec.IsShadowOutcome():
			// Its own record, after its decision's, which the log did not
			// hold back for it.
			if decisions[rec.DecisionID] != 1 || shadowed[rec.DecisionID] != nil {
				t.Errorf("the outcome of %s logged before its decision, or twice", rec.DecisionID)
			}
			shadowed[rec.DecisionID] = rec.Shadow
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if sh := shadowed[ids[1]]; sh == nil || sh.Class != string(shadow.RefuseToAllow) || sh.Revision != candRev || !strings.Contains(string(sh.Result), `"admit"`) {
		t.Errorf("the shadow outcome of %s is %+v", ids[1], sh)
	}
	for _, id := range ids {
		if decisions[id] != 1 {
			t.Errorf("decision %s logged %d times, want once", id, decisions[id])
		}
	}
	for _, id := range []string{ids[0], ids[2], ids[3]} {
		if sh := shadowed[id]; sh == nil || sh.Class != string(shadow.Same) {
			t.Errorf("the shadow outcome of %s is %+v", id, sh)
		}
	}
	if len(promotions) != 2 || promotions[0].Promoted || !promotions[1].Promoted || !promotions[1].Forced || promotions[1].Revision != candRev ||
		promotions[1].By != "sre" || promotions[1].Report.Count(shadow.RefuseToAllow) != 1 {
		t.Errorf("promotion records %+v", promotions)
	}
}

// The body of POST /v1/shadow/promote may make the operator's gate
// stricter, never looser: a body that empties the forbidden classes or
// asks for no decisions still meets the operator's gate (here, the
// candidate allows one more case: refuse_to_allow), and is refused; one
// that asks for more decisions than were judged is refused too. Only
// "force" promotes, and the record says forced.
func TestPromoteBodyCannotLoosenTheGate(t *testing.T) {
	live := accessDir(t)
	cand := accessDir(t)
	testfiles.Edit(t, filepath.Join(cand, accessData), `"limit": 10`, `"limit": 11`)
	h, eng, _ := serveShadow(t, live, Config{}, shadow.Config{Rate: 1, CPU: 8}, 0)
	if r := h.do(t, "POST", "/v1/shadow", loadBody(cand)); r.status != http.StatusOK {
		t.Fatalf("loading: %d %s", r.status, r.body)
	}
	for _, b := range []string{`{"tenant":"a","used":3}`, `{"tenant":"b","used":10}`} {
		h.do(t, "POST", accessPath, b)
	}
	waitJudged(t, h, 2)
	before := eng.Snapshot().Revision
	for _, tc := range []struct {
		body       string
		min        uint64
		forbidden  []shadow.Class
		firstCause string
	}{
		{`{"forbid":[],"min_decisions":0}`, 1, shadow.DefaultForbidden, "refuse_to_allow"},
		{`{"forbid":["same"]}`, 1, append(slices.Clone(shadow.DefaultForbidden), shadow.Same), "refuse_to_allow"},
		{`{"min_decisions":0,"forbid":["error_changed"],"force":false}`, 1, append(slices.Clone(shadow.DefaultForbidden), shadow.ErrorChanged), "refuse_to_allow"},
		{`{"min_decisions":3,"forbid":["refuse_to_allow"]}`, 3, shadow.DefaultForbidden, "judged 2 of 3 decisions the gate requires"},
	} {
		r := h.do(t, "POST", "/v1/shadow/promote", tc.body)
		var refused struct {
			Error     engine.DocumentBody `json:"error"`
			Promotion shadow.Promotion    `json:"promotion"`
		}
		decodeJSON(t, r, &refused)
		if r.status != http.StatusConflict || refused.Error.Code != CodePromotionRefused || refused.Promotion.Promoted || eng.Snapshot().Revision != before {
			t.Fatalf("%s: %d %s", tc.body, r.status, r.body)
		}
		if g := refused.Promotion.Gate; g.MinDecisions != tc.min || !slices.Equal(g.Forbidden, tc.forbidden) {
			t.Errorf("%s: the gate applied was %+v, want min %d forbidding %v", tc.body, g, tc.min, tc.forbidden)
		}
		if len(refused.Promotion.Refusals) == 0 || !strings.Contains(refused.Promotion.Refusals[0], tc.firstCause) {
			t.Errorf("%s: refusals %q, want first %q", tc.body, refused.Promotion.Refusals, tc.firstCause)
		}
	}
	if r := h.do(t, "POST", "/v1/shadow/promote", `{"bogus":1}`); r.status != http.StatusBadRequest {
		t.Errorf("an unknown member: %d %s", r.status, r.body)
	}
	if r := h.do(t, "POST", "/v1/shadow/promote", `{"forbid":["nonsense"]}`); r.status != http.StatusBadRequest {
		t.Errorf("an unknown class: %d %s", r.status, r.body)
	}
	// A candidate is folders or a bundle file, not both, not neither; and
	// a server with no bundle reader (ShadowConfig.Bundle) reads none.
	for _, body := range []string{`{}`, `{"policies":"/p","bundle":"/b.tar.gz"}`, `{"bundle":"/b.tar.gz","tests":"/t"}`, `{"bundle":"/b.tar.gz"}`} {
		if r := h.do(t, "POST", "/v1/shadow", body); r.status != http.StatusBadRequest || r.errorDoc(t).Code != CodeBadRequest {
			t.Errorf("POST /v1/shadow %s: %d %s, want 400 bad_request", body, r.status, r.body)
		}
	}
	r := h.do(t, "POST", "/v1/shadow/promote", `{"force":true}`)
	var ok struct {
		Promotion shadow.Promotion `json:"promotion"`
	}
	decodeJSON(t, r, &ok)
	if r.status != http.StatusOK || !ok.Promotion.Promoted || !ok.Promotion.Forced || eng.Snapshot().Revision == before {
		t.Fatalf("forced promotion: %d %s", r.status, r.body)
	}
}

// --shadow-admins left empty fails closed once the API is authenticated:
// with bearer tokens or with client certificates, an authenticated caller
// (host preparation's token) may neither load a candidate, clear it nor
// promote it, and the refusal names --shadow-admins; GET /v1/shadow stays
// readable. Without authentication (loopback development) the routes stay
// open, and a named admin may change what runs.
func TestShadowAdminsFailClosedUnderAuthentication(t *testing.T) {
	cand := accessDir(t)
	tokens := []Token{{Caller: "host", Secret: []byte("host-secret")}, {Caller: "sre", Secret: []byte("sre-secret")}}
	bearer := func(secret string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+secret) }
	}
	cert := func(cn string) func(*http.Request) {
		return func(r *http.Request) { r.TLS = verified(cn) }
	}
	for _, tc := range []struct {
		name   string
		cfg    Config
		admins []string
		as     func(*http.Request)
		open   bool
	}{
		{"tokens, no admins", Config{Tokens: tokens}, nil, bearer("host-secret"), false},
		{"client certificates, no admins", Config{ClientCerts: true}, nil, cert("host-prep.internal"), false},
		{"a verified certificate, no admins", Config{}, nil, cert("host-prep.internal"), false},
		{"tokens, another admin", Config{Tokens: tokens}, []string{"sre"}, bearer("host-secret"), false},
		{"tokens, the admin", Config{Tokens: tokens}, []string{"sre"}, bearer("sre-secret"), true},
		{"client certificates, the admin", Config{ClientCerts: true}, []string{"sre"}, cert("sre"), true},
		{"no authentication, no admins", Config{}, nil, func(*http.Request) {}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, eng, sh := serveShadow(t, accessDir(t), tc.cfg, shadow.Config{Rate: 1, CPU: 8}, 0, tc.admins...)
			call := func(method, path, body string) response {
				req := httptest.NewRequest(method, path, strings.NewReader(body))
				tc.as(req)
				w := httptest.NewRecorder()
				h.srv.Config.Handler.ServeHTTP(w, req)
				return response{status: w.Code, header: w.Header(), body: w.Body.Bytes(), path: path}
			}
			if r := call("GET", "/v1/shadow", ""); r.status != http.StatusOK {
				t.Fatalf("GET /v1/shadow: %d %s", r.status, r.body)
			}
			sh.Set(&shadow.Candidate{Snapshot: eng.Snapshot(), Origin: "test", LoadedAt: time.Now()})
			for _, rt := range []struct{ method, path, body string }{
				{"POST", "/v1/shadow", loadBody(cand)},
				{"POST", "/v1/shadow/promote", `{"force":true}`},
				{"DELETE", "/v1/shadow", ""},
			} {
				r := call(rt.method, rt.path, rt.body)
				if !tc.open {
					if e := r.errorDoc(t); r.status != http.StatusForbidden || e.Code != CodeForbidden || !strings.Contains(e.Message, "--shadow-admins") {
						t.Errorf("%s %s: %d %s", rt.method, rt.path, r.status, r.body)
					}
					continue
				}
				if r.status != http.StatusOK {
					t.Errorf("%s %s: %d %s", rt.method, rt.path, r.status, r.body)
				}
				if rt.method == "POST" && rt.path == "/v1/shadow" {
					// The promotion below is of a known candidate.
					sh.Set(&shadow.Candidate{Snapshot: eng.Snapshot(), Origin: "test", LoadedAt: time.Now()})
				}
			}
			if c := sh.Candidate(); !tc.open && (c == nil || c.Origin != "test") {
				t.Errorf("a refused caller changed the candidate: %+v", c)
			}
		})
	}
}

// A candidate that only changes the error string its refusals carry is
// promoted by the default gate.
func TestShadowPromotesAnErrorStringChange(t *testing.T) {
	live := accessDir(t)
	cand := accessDir(t)
	testfiles.Edit(t, filepath.Join(cand, accessData), `"access_denied"`, `"access_refused"`)
	cases := filepath.Join(cand, "tests/fixtures/access_check/cases.json")
	testfiles.Edit(t, cases, `"access_denied"`, `"access_refused"`)
	testfiles.Edit(t, cases, `"access_denied"`, `"access_refused"`)
	h, eng, _ := serveShadow(t, live, Config{}, shadow.Config{Rate: 1, CPU: 8}, 0)
	if r := h.do(t, "POST", "/v1/shadow", loadBody(cand)); r.status != http.StatusOK {
		t.Fatalf("loading: %d %s", r.status, r.body)
	}
	for _, b := range []string{`{"tenant":"a","used":3}`, `{"tenant":"b","used":10}`, `{"tenant":"c","used":1,"suspended":true}`} {
		h.do(t, "POST", accessPath, b)
	}
	doc := waitJudged(t, h, 3)
	if doc.Report.Count(shadow.ErrorChanged) != 2 || doc.Report.Count(shadow.Same) != 1 || !doc.Promotable {
		t.Fatalf("report %+v, promotable %v %q", doc.Report.Classes, doc.Promotable, doc.Refusals)
	}
	before := eng.Snapshot().Revision
	r := h.do(t, "POST", "/v1/shadow/promote", `{"min_decisions":3}`)
	var ok struct {
		Promotion shadow.Promotion `json:"promotion"`
	}
	decodeJSON(t, r, &ok)
	if r.status != http.StatusOK || !ok.Promotion.Promoted || ok.Promotion.Forced || ok.Promotion.From != before || eng.Snapshot().Revision == before {
		t.Fatalf("promotion: %d %s", r.status, r.body)
	}
	if !strings.Contains(string(h.do(t, "POST", accessPath, `{"tenant":"b","used":10}`).body), `"access_refused"`) {
		t.Error("the promoted revision does not answer")
	}
}

// The looping candidate, over HTTP: while the candidate is in its
// loop (signalled by the policy itself; its deadline is an hour away) and
// the queue behind it is full, decision requests are answered, every one,
// and the candidate is still running when they are. No record waits for
// the candidate: the decision it loops on is written while the loop still
// runs, and no candidate answer follows it.
func TestLoopingCandidateNeverDelaysHTTPAnswers(t *testing.T) {
	live := accessDir(t)
	cand := accessDir(t)
	testfiles.Edit(t, filepath.Join(cand, "policies/decisions/access_check/policy.rego"), "reasons := [", testsignal.Loop("loop")+"reasons := [")
	logPath := filepath.Join(t.TempDir(), "decisions.log")
	dlog, err := decisionlog.Open(decisionlog.Options{Path: logPath})
	if err != nil {
		t.Fatal(err)
	}
	h, _, sh := serveShadow(t, live, Config{DecisionLog: dlog}, shadow.Config{Rate: 1, Queue: 2, Workers: 1, CPU: 8}, time.Hour)
	if r := h.do(t, "POST", "/v1/shadow", loadBody(cand)); r.status != http.StatusOK {
		t.Fatalf("loading: %d %s", r.status, r.body)
	}
	started := testsignal.On(t, "loop")
	post := func(body string) (string, error) {
		resp, err := h.srv.Client().Post(h.srv.URL+accessPath, "application/json", strings.NewReader(body))
		if err != nil {
			return "", err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", &engine.Error{Code: "status", Message: resp.Status}
		}
		return resp.Header.Get(DecisionIDHeader), nil
	}
	loopAnswer := make(chan string, 1)
	go func() {
		id, _ := post(`{"tenant":"loop","used":1}`)
		loopAnswer <- id
	}()
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the candidate never reached its loop")
	}
	var loopID string
	select {
	case loopID = <-loopAnswer:
	case <-time.After(time.Minute):
		t.Fatal("the request the candidate loops on was not answered")
	}
	const n = 30
	answered := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := post(`{"tenant":"t","used":` + string(rune('0'+i%10)) + `}`); err != nil {
				answered <- err
				return
			}
		}
		answered <- nil
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("decision requests waited for the looping candidate")
	}
	if st := sh.Stats(); st.InFlight != 1 || st.Dropped != n-2 {
		t.Fatalf("stats %+v: want the loop in flight and %d dropped", st, n-2)
	}
	for deadline := time.Now().Add(time.Minute); dlog.Written() < n+1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records written while the candidate loops: the log holds some back for it", dlog.Written(), n+1)
		}
	}
	if st := sh.Stats(); st.InFlight != 1 {
		t.Fatalf("stats %+v: the loop ended before its record was seen written", st)
	}
	if err := sh.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := dlog.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	found := 0
	if _, err := decisionlog.ReadFile(logPath, func(_ int, rec decisionlog.Record) error {
		if rec.IsDecision() {
			found++
		}
		if rec.DecisionID == loopID && rec.Shadow != nil {
			t.Errorf("the looping decision's record carries %+v", rec.Shadow)
		}
		return nil
	}); err != nil || found != n+1 {
		t.Fatalf("%d records (%v), want %d", found, err, n+1)
	}
}

// shadowGoldenServers serve the quota decision with a shadow: one without a
// candidate, one whose shadow routes only admins may change, and one with
// the live revision itself in shadow.
func shadowGoldenServers(t *testing.T) (shadowed, adminsOnly, withCandidate *harness) {
	shadowed, _, _ = serveShadow(t, quotaDir(t), Config{}, shadow.Config{}, 0)
	adminsOnly, _, _ = serveShadow(t, quotaDir(t), Config{}, shadow.Config{}, 0, "sre")
	withCandidate, eng, sh := serveShadow(t, quotaDir(t), Config{}, shadow.Config{}, 0)
	sh.Set(&shadow.Candidate{Snapshot: eng.Snapshot(), Origin: "test", LoadedAt: time.Now()})
	return shadowed, adminsOnly, withCandidate
}

// withoutMember returns r with the member name of its JSON body removed,
// so that the error document beside it can be decoded strictly.
func withoutMember(t *testing.T, r response, name string) response {
	t.Helper()
	var doc map[string]json.RawMessage
	decodeJSON(t, r, &doc)
	if _, ok := doc[name]; !ok {
		t.Fatalf("no member %q: %s", name, r.body)
	}
	delete(doc, name)
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	r.body = b
	return r
}

// Issue 18, over HTTP: the candidate's worker held (a live decision in
// flight, as the flood's own would), the queue fills and the request the
// candidate allows more is dropped with the flood. GET /v1/shadow states
// the decisions judged and dropped and is not promotable; a promotion
// judges the dropped ones from the decision log first, and the 409 names
// the request at the limit as refuse_to_allow; the live revision stays.
func TestFloodedCandidateIsRefusedThroughTheAPI(t *testing.T) {
	live, cand, logPath, dlog := loosenedWithLog(t)
	const queue, flood = 2, 6
	h, _, sh := serveShadow(t, live, Config{DecisionLog: dlog}, shadow.Config{Rate: 1, Queue: queue, Workers: 1, CPU: 8, DecisionLog: logPath}, 0)
	r := h.do(t, "POST", "/v1/shadow", loadBody(cand))
	var loaded struct {
		Candidate candidateDoc `json:"candidate"`
	}
	decodeJSON(t, r, &loaded)

	sh.LiveStart()
	within := `{"tenant":"a","used":3}`
	h.do(t, "POST", accessPath, within)
	for deadline := time.Now().Add(time.Minute); sh.Stats().Paused != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker never paused: %+v", sh.Stats())
		}
	}
	for range queue {
		h.do(t, "POST", accessPath, within)
	}
	atLimit := h.do(t, "POST", accessPath, `{"tenant":"b","used":10}`).header.Get(DecisionIDHeader)
	for range flood - 1 {
		h.do(t, "POST", accessPath, within)
	}
	sh.LiveEnd()
	doc := waitJudged(t, h, queue+1)
	if doc.Report.Dropped != flood || doc.Report.LaterJudged != 0 || doc.Promotable || doc.Report.Count(shadow.RefuseToAllow) != 0 {
		t.Fatalf("flooded: report %+v, promotable %v %q", doc.Report, doc.Promotable, doc.Refusals)
	}
	for deadline := time.Now().Add(time.Minute); dlog.Written() < queue+1+flood; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the decision log wrote %d records", dlog.Written())
		}
	}

	r = h.do(t, "POST", "/v1/shadow/promote", `{}`)
	var refused struct {
		Promotion shadow.Promotion `json:"promotion"`
	}
	decodeJSON(t, r, &refused)
	rep := refused.Promotion.Report
	if r.status != http.StatusConflict || rep.Total != queue+1+flood || rep.Dropped != flood || rep.LaterJudged != flood ||
		!strings.Contains(refused.Promotion.Refusals[0], string(shadow.RefuseToAllow)) || !strings.Contains(refused.Promotion.Refusals[0], atLimit) {
		t.Fatalf("promotion of the flooded candidate: %d %s", r.status, r.body)
	}
	var st statusDoc
	decodeJSON(t, h.do(t, "GET", "/v1/status", ""), &st)
	if st.Revision == loaded.Candidate.Revision {
		t.Fatal("the flooded candidate went live")
	}
}

// allowingQuota is quotaDir with its result schema saying that allow:
// true allows: the diff answers it in milliseconds, proving or finding.
func allowingQuota(t *testing.T) string {
	t.Helper()
	dir := quotaDir(t)
	testfiles.Edit(t, filepath.Join(dir, "schemas", "quota_check", "result.json"), `"x-arbiter-outcome": "allow",`, `"x-arbiter-outcome": "allow", "x-arbiter-allow": [true],`)
	return dir
}

// waitDiff polls GET /v1/shadow until the diff of the candidate has
// answered.
func waitDiff(t *testing.T, h *harness) shadowDoc {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var doc shadowDoc
		decodeJSON(t, h.do(t, "GET", "/v1/shadow", ""), &doc)
		if doc.Diff != nil && doc.Diff.State != diff.StateQueued && doc.Diff.State != diff.StateRunning {
			return doc
		}
		if time.Now().After(deadline) {
			t.Fatalf("the diff of the candidate did not answer within a minute: %+v", doc.Diff)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func evidenceOf(ev []shadow.Evidence) string {
	var out []string
	for _, e := range ev {
		out = append(out, fmt.Sprintf("%s=%s(%d of %d)", e.Class, e.Evidence, e.Count, e.Shadowed+e.Replayed))
	}
	return strings.Join(out, " ")
}

// The diff reaches the promotion gate through the API: a candidate that
// raises a limit is refused on the diff's example with no decision judged
// (the operator's gate asks for none), GET /v1/shadow and the refusal
// state the evidence per class, a decision judged in a class outranks the
// diff's answer, a forced promotion goes live and its record in the
// decision log holds the evidence, and /v1/status then shows the diff of
// the live revision against the one it replaced.
func TestPromotionOnTheDiffsEvidence(t *testing.T) {
	liveDir, cand := allowingQuota(t), allowingQuota(t)
	testfiles.Edit(t, filepath.Join(cand, "policies", "decisions", "quota_check", "data.json"), `"limit": 10`, `"limit": 11`)
	logPath := filepath.Join(t.TempDir(), "decisions.log")
	dlog, err := decisionlog.Open(decisionlog.Options{Path: logPath})
	if err != nil {
		t.Fatal(err)
	}
	runner := diff.NewRunner(time.Minute, nil, nil)
	t.Cleanup(runner.Close)
	eng, err := live.New(context.Background(), folderConfig(liveDir), live.OnActivate(runner.Activated))
	if err != nil {
		t.Fatal(err)
	}
	sh := shadow.New(shadow.Config{Rate: 1, CPU: 8, Prover: runner})
	t.Cleanup(func() { _ = sh.Close(context.Background()) })
	h := serve(t, Config{DecisionLog: dlog, Diffs: runner, Shadow: &ShadowConfig{Shadow: sh, Engine: eng, Gate: shadow.Gate{Forbidden: shadow.DefaultForbidden}}}, eng)
	liveRev := eng.Snapshot().Revision

	if r := h.do(t, "POST", "/v1/shadow", loadBody(cand)); r.status != http.StatusOK {
		t.Fatalf("loading: %d %s", r.status, r.body)
	}
	doc := waitDiff(t, h)
	if got, want := evidenceOf(doc.Evidence), "refuse_to_allow=found(0 of 0) candidate_error=proved(0 of 0) allow_to_refuse=proved(0 of 0) reasons_changed=found(0 of 0)"; got != want {
		t.Errorf("evidence with no decision judged: %s, want %s", got, want)
	}
	if doc.Diff.State != diff.StateDone || doc.Diff.Old != liveRev || doc.Diff.New != doc.Candidate.Revision || doc.Promotable {
		t.Errorf("GET /v1/shadow: diff %+v, promotable %v", doc.Diff, doc.Promotable)
	}
	r := h.do(t, "POST", "/v1/shadow/promote", `{}`)
	var refused struct {
		Error     engine.DocumentBody `json:"error"`
		Promotion shadow.Promotion    `json:"promotion"`
	}
	decodeJSON(t, r, &refused)
	if r.status != http.StatusConflict || refused.Error.Code != CodePromotionRefused || refused.Promotion.Report.Total != 0 ||
		!strings.Contains(refused.Error.Message, "the diff against the live revision found an input") || evidenceOf(refused.Promotion.Evidence) != evidenceOf(doc.Evidence) {
		t.Fatalf("promoting a found loosening with no traffic: %d %s", r.status, r.body)
	}

	for _, b := range []string{`{"tenant":"a","used":3}`, `{"tenant":"b","used":10}`} {
		h.do(t, "POST", "/v1/decisions/quota_check", b)
	}
	doc = waitJudged(t, h, 2)
	if got, want := evidenceOf(doc.Evidence), "refuse_to_allow=shadowed(1 of 2) candidate_error=proved(0 of 2) allow_to_refuse=proved(0 of 2) reasons_changed=found(0 of 2)"; got != want {
		t.Errorf("evidence with two decisions judged: %s, want %s", got, want)
	}

	r = h.do(t, "POST", "/v1/shadow/promote", `{"force":true}`)
	var promoted struct {
		Promotion shadow.Promotion `json:"promotion"`
	}
	decodeJSON(t, r, &promoted)
	if r.status != http.StatusOK || !promoted.Promotion.Forced || eng.Snapshot().Revision != doc.Candidate.Revision {
		t.Fatalf("forced promotion: %d %s", r.status, r.body)
	}
	var st statusDoc
	decodeJSON(t, h.do(t, "GET", "/v1/status", ""), &st)
	if st.Diff == nil || st.Diff.Old != liveRev || st.Diff.New != st.Revision || st.Diff.State != diff.StateDone ||
		st.Diff.Report.Proof(shadow.RefuseToAllow).Verdict != shadow.VerdictFound {
		t.Errorf("/v1/status after the promotion: diff %+v, want the candidate's against %s, refuse_to_allow found", st.Diff, liveRev)
	}

	if err := dlog.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var records []shadow.Promotion
	if _, err := decisionlog.ReadFile(logPath, func(_ int, rec decisionlog.Record) error {
		if rec.Promotion != nil {
			var p shadow.Promotion
			if err := json.Unmarshal(rec.Promotion, &p); err != nil {
				return err
			}
			records = append(records, p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(records) != 2 || records[0].Promoted || !records[1].Forced || evidenceOf(records[1].Evidence) != evidenceOf(doc.Evidence) {
		t.Errorf("promotion records %+v, want the refused one and the forced one, with the evidence", records)
	}
}

// TestShadowCandidateStaysInItsFolder: POST /v1/shadow reads a candidate's
// files inside its folders only. A link that leaves its folder (to a
// secret, to /proc/self/environ) refuses the candidate with a problem
// naming the link and nothing of what it points at; a file that does not
// parse is named with its line, never quoted; a link that stays inside the
// folder (a ConfigMap's ..data/) is read.
func TestShadowCandidateStaysInItsFolder(t *testing.T) {
	const secret = "ARBITER_SECRET=hunter2\nDB_PASSWORD=sw0rdfish\n"
	outside := filepath.Join(t.TempDir(), "environ")
	if err := os.WriteFile(outside, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join("policies", "decisions", "access_check", "data.json")
	link := func(target string) func(t *testing.T, cand string) {
		return func(t *testing.T, cand string) {
			if err := os.Symlink(target, filepath.Join(cand, "policies", "leak.json")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		edit    func(t *testing.T, cand string)
		refused string // the file the problem names; "" when the candidate loads
		line    int
		says    string
	}{
		{"a data file linked out of its folder", link(outside), "policies/leak.json", 0, "leaves its folder"},
		{"a link to the process's environment", link("/proc/self/environ"), "policies/leak.json", 0, "leaves its folder"},
		{"a schema linked out of its folder", func(t *testing.T, cand string) {
			p := filepath.Join(cand, "schemas", "access_check", "input.json")
			if err := os.Remove(p); err != nil || os.Symlink(outside, p) != nil {
				t.Fatal("linking the schema")
			}
		}, "schemas/access_check/input.json", 0, "leaves its folder"},
		{"a file in the folder that does not parse", func(t *testing.T, cand string) {
			if err := os.WriteFile(filepath.Join(cand, "policies", "broken.json"), []byte("\n"+secret), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "policies/broken.json", 2, "invalid JSON at column 1: unexpected character"},
		{"a policy file that does not parse", func(t *testing.T, cand string) {
			if err := os.WriteFile(filepath.Join(cand, "policies", "broken.rego"), []byte("package leak\n\nDB_PASSWORD=/etc/sw0rdfish\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "policies/broken.rego", 3, "rego_parse_error: the file does not parse"},
		{"a link that stays in its folder, as a ConfigMap's", func(t *testing.T, cand string) {
			p := filepath.Join(cand, data)
			dir := filepath.Join(cand, "policies", "..data")
			if err := os.Mkdir(dir, 0o755); err != nil || os.Rename(p, filepath.Join(dir, "data.json")) != nil {
				t.Fatal("moving data.json")
			}
			if err := os.Symlink(filepath.Join("..", "..", "..data", "data.json"), p); err != nil {
				t.Fatal(err)
			}
		}, "", 0, ""},
		{"an absolute link that stays in its folder", func(t *testing.T, cand string) {
			p := filepath.Join(cand, data)
			moved := filepath.Join(cand, "policies", ".limits.json")
			if err := os.Rename(p, moved); err != nil || os.Symlink(moved, p) != nil {
				t.Fatal("linking data.json")
			}
		}, "", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _, _ := serveShadow(t, accessDir(t), Config{}, shadow.Config{Rate: 1, CPU: 8}, 0)
			cand := accessDir(t)
			tc.edit(t, cand)
			r := h.do(t, "POST", "/v1/shadow", loadBody(cand))
			if tc.refused == "" {
				if r.status != http.StatusOK {
					t.Fatalf("%d %s", r.status, r.body)
				}
				return
			}
			var refused struct {
				Error    engine.DocumentBody `json:"error"`
				Problems []engine.Problem    `json:"problems"`
			}
			decodeJSON(t, r, &refused)
			if r.status != http.StatusUnprocessableEntity || refused.Error.Code != CodeCandidateRefused {
				t.Fatalf("%d %s, want 422 candidate_refused", r.status, r.body)
			}
			named := slices.ContainsFunc(refused.Problems, func(p engine.Problem) bool {
				return p.File == filepath.Join(cand, tc.refused) && p.Line == tc.line && strings.Contains(p.Message, tc.says)
			})
			if !named {
				t.Errorf("no problem names %s at line %d saying %q: %s", tc.refused, tc.line, tc.says, r.body)
			}
			for _, quoted := range []string{"hunter2", "sw0rdfish", "ARBITER", "PASSWORD", "'A'", "unexpected character '"} {
				if strings.Contains(string(r.body), quoted) {
					t.Errorf("the answer quotes the file (%q): %s", quoted, r.body)
				}
			}
		})
	}
}
