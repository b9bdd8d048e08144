package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/wait"
	"github.com/arbiter-dev/arbiter/policybundle"
	"github.com/arbiter-dev/arbiter/replay"
	"github.com/arbiter-dev/arbiter/shadow"
)

// copyAccess copies the shadow tests' decision (shadow/testdata/access: it
// exists only in tests, and its result schema says which outcome allows).
func copyAccess(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../../shadow/testdata/access")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// replaceAll replaces every old by new in root/rel, failing when old is
// absent.
func replaceAll(t *testing.T, root, rel, old, new string) {
	t.Helper()
	path := filepath.Join(root, rel)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s does not contain %q", path, old)
	}
	if err := os.WriteFile(path, bytes.ReplaceAll(b, []byte(old), []byte(new)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mixedCandidate is an edit of the access decision whose changes fall in
// every class: the limit raised by one (refuse_to_allow), the error string
// changed (error_changed), the input schema's upper bound lowered
// (candidate_error) and its lower bound loosened (refuse_to_allow: an input
// the live revision rejected is allowed), and tenant "z" suspended
// (allow_to_refuse, and reasons_changed where it was refused already).
func mixedCandidate(t *testing.T) string {
	cand := copyAccess(t)
	replaceAll(t, cand, "policies/decisions/access_check/data.json", `{"limit": 10, "denied_error": "access_denied"}`, `{"limit": 11, "denied_error": "access_refused"}`)
	replaceAll(t, cand, "tests/fixtures/access_check/cases.json", `"access_denied"`, `"access_refused"`)
	replaceAll(t, cand, "schemas/access_check/input.json", `"minimum": 0, "maximum": 18446744073709551615`, `"minimum": -5, "maximum": 1000000`)
	replaceAll(t, cand, "policies/decisions/access_check/policy.rego", `failures contains [2, "tenant_suspended"] if input.suspended == true`,
		"failures contains [2, \"tenant_suspended\"] if input.suspended == true\n\nfailures contains [2, \"tenant_suspended\"] if input.tenant == \"z\"")
	return cand
}

func accessArgs(root string) []string {
	return []string{"--policies", filepath.Join(root, "policies"), "--schemas", filepath.Join(root, "schemas"), "--tests", filepath.Join(root, "tests")}
}

// TestReplayClassifiesAsLiveShadow: the real binary shadows a candidate
// on live traffic, its decision log rotates, and `arbiter replay` over the
// log's folder (every rotated file) with the candidate's folders puts
// every decision the live shadow judged in the class the live shadow put
// it in (as the decision's own log record carries it), and prints the same
// report as GET /v1/shadow.
func TestReplayClassifiesAsLiveShadow(t *testing.T) {
	t.Parallel()
	live, cand := copyAccess(t), mixedCandidate(t)
	logDir := t.TempDir()
	s := startServer(t, append(accessArgs(live),
		"--decision-log", filepath.Join(logDir, "decisions.log"), "--decision-log-max-mb", "2", "--max-body-bytes", "65536",
		"--shadow-policies", filepath.Join(cand, "policies"), "--shadow-schemas", filepath.Join(cand, "schemas"), "--shadow-tests", filepath.Join(cand, "tests"),
		"--shadow-queue", "4096", "--shadow-queue-bytes", "67108864", "--shadow-cpu", "4")...)
	client := &http.Client{Timeout: time.Minute}

	// About 2.4 MiB of records: the log rotates at 2 MiB.
	pad := strings.Repeat("p", 3000)
	bodies := []string{
		`{"tenant":"` + pad + `","used":3}`, `{"tenant":"` + pad + `","used":10}`, `{"tenant":"` + pad + `","used":50}`,
		`{"tenant":"` + pad + `","used":1,"suspended":true}`, `{"tenant":"` + pad + `","used":18446744073709551615}`,
		`{"tenant":"` + pad + `","used":-1}`, `{"tenant":"z","used":1}`, `{"tenant":"z","used":50}`,
	}
	const n = 800
	for i := range n {
		path, body := "/v1/decisions/access_check", bodies[i%len(bodies)]
		if i%3 == 0 { // OPA's Data API path: the body is {"input": ...}
			path, body = "/v1/data/decisions/access_check/decision", `{"input":`+body+`}`
		}
		if a := post(t, client, s.url+path, []byte(body)); a.id == "" {
			t.Fatalf("request %d: %d %s", i, a.status, a.body)
		}
	}
	var doc struct {
		Candidate *struct {
			Revision string `json:"policy_revision"`
		} `json:"candidate"`
		Stats  shadow.Stats   `json:"stats"`
		Report *shadow.Report `json:"report"`
	}
	wait.Until(t, 2*time.Minute, "the candidate to judge every sampled decision", func() bool {
		resp, err := client.Get(s.url + "/v1/shadow")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		st := doc.Stats
		return st.Sampled == n && doc.Report != nil && doc.Report.Total+st.Dropped+st.Abandoned+st.Unjudged == n
	})
	s.stop(t)

	files, err := replay.Files([]string{logDir})
	if err != nil || len(files) < 2 {
		t.Fatalf("log files %v (%v): the log did not rotate", files, err)
	}
	liveClass := map[string]shadow.Class{}
	for _, f := range files {
		if _, err := decisionlog.ReadFile(f, func(_ int, rec decisionlog.Record) error {
			if rec.Shadow != nil {
				liveClass[rec.DecisionID] = shadow.Class(rec.Shadow.Class)
				if rec.Shadow.Revision != doc.Candidate.Revision {
					t.Errorf("%s: shadow revision %s", rec.DecisionID, rec.Shadow.Revision)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if uint64(len(liveClass)) != doc.Report.Total {
		t.Fatalf("%d records carry a shadow outcome, the live report counts %d", len(liveClass), doc.Report.Total)
	}

	// The log as an operand, the flags after it (the documented form).
	cmd := exec.Command(binPath, "replay", logDir, "--format", "json", "--examples", "1000",
		"--policies", filepath.Join(cand, "policies"), "--schemas", filepath.Join(cand, "schemas"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); cmd.ProcessState.ExitCode() != exitError {
		t.Fatalf("replay: %v, want exit 1 (changes)\n%s", err, stderr.String())
	}
	var rep replay.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	offline := map[string]shadow.Class{}
	for _, ch := range rep.Changed {
		offline[ch.DecisionID] = ch.Class
	}
	for id, want := range liveClass {
		got, ok := offline[id]
		if !ok {
			got = shadow.Same
		}
		if got != want {
			t.Errorf("%s: replay %s, live shadow %s", id, got, want)
		}
	}
	for _, c := range shadow.Classes {
		if doc.Report.Count(c) == 0 {
			t.Errorf("the traffic has no %s: the comparison does not cover it", c)
		}
		if doc.Stats.Dropped == 0 && rep.Impact.Count(c) != doc.Report.Count(c) {
			t.Errorf("%s: replay counts %d, the live shadow %d", c, rep.Impact.Count(c), doc.Report.Count(c))
		}
	}
	if len(rep.Changed) == 0 || rep.Changed[0].Class != shadow.RefuseToAllow || rep.Impact.Classes[0].Class != shadow.RefuseToAllow {
		t.Errorf("refuse_to_allow is not first in the replay report")
	}

	// The text report: the changes, refuse_to_allow first, then the
	// classified report.
	out, errOut, code := runCLI(t, nil, "replay", "--log", logDir, "--policies", filepath.Join(cand, "policies"), "--schemas", filepath.Join(cand, "schemas"))
	if code != exitError {
		t.Fatalf("replay: exit %d\n%s", code, errOut)
	}
	first := strings.SplitN(out, "\n", 2)[0]
	if !strings.HasPrefix(first, "changed ") || !strings.Contains(first, ": refuse_to_allow: ") {
		t.Errorf("first line %q, want a refuse_to_allow change", first)
	}
	impact := out[strings.Index(out, "impact of revision "):]
	lines := strings.Split(impact, "\n")
	if len(lines) < 3 || !strings.HasPrefix(strings.TrimSpace(lines[1]), "refuse_to_allow") {
		t.Errorf("impact report:\n%s", impact)
	}
}

// metricLine reports whether the server's /metrics has a line starting with
// prefix whose value is not 0.
func metricLine(t *testing.T, url, prefix string) bool {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, prefix) && !strings.HasSuffix(line, " 0") {
			return true
		}
	}
	return false
}

// --shadow-bundle-url: each verified bundle published there goes through
// the gate and becomes the candidate (an unsigned one is refused and
// changes nothing); its impact is judged on live traffic, a body that
// tries to loosen the gate is refused, and a forced promotion makes it
// live under its manifest revision.
func TestShadowFromBundle(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	live := copyAccess(t)
	cand := copyAccess(t)
	replaceAll(t, cand, "policies/decisions/access_check/data.json", `"limit": 10`, `"limit": 11`)
	private, public := writeKeyPair(t, t.TempDir())
	bundles := &staticBundle{}
	bs := httptest.NewServer(bundles)
	defer bs.Close()
	s := startServer(t, append(accessArgs(live), "--shadow-bundle-url", bs.URL+"/shadow.tar.gz",
		"--bundle-verification-key-file", public, "--bundle-poll-min-delay", "1s", "--bundle-poll-max-delay", "1s")...)

	build := func(signingKey string) []byte {
		raw, _, err := policybundle.Build(context.Background(), policybundle.BuildOptions{
			Policies: filepath.Join(cand, "policies"), Schemas: filepath.Join(cand, "schemas"), Tests: filepath.Join(cand, "tests"),
			Revision: "candidate-1", SigningKey: signingKey,
		})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	bundles.set(build(""))
	wait.Until(t, time.Minute, "the unsigned bundle to be refused", func() bool {
		return metricLine(t, s.url, `arbiter_bundle_requests_total{bundle="shadow",result="failed"} `)
	})
	if _, doc := getJSON(t, s.url+"/v1/shadow"); doc["candidate"] != nil {
		t.Fatalf("an unsigned bundle became the candidate: %v", doc)
	}
	bundles.set(build(private))
	wait.Until(t, time.Minute, "the signed bundle in shadow", func() bool {
		_, doc := getJSON(t, s.url+"/v1/shadow")
		c, _ := doc["candidate"].(map[string]any)
		return c != nil && c["policy_revision"] == "candidate-1" && strings.HasPrefix(c["origin"].(string), "bundle ")
	})

	atLimit := post(t, http.DefaultClient, s.url+"/v1/decisions/access_check", []byte(`{"tenant":"t","used":10}`))
	post(t, http.DefaultClient, s.url+"/v1/decisions/access_check", []byte(`{"tenant":"t","used":3}`))
	var doc struct {
		Report *shadow.Report `json:"report"`
	}
	wait.Until(t, time.Minute, "both decisions judged", func() bool {
		resp, err := http.Get(s.url + "/v1/shadow")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&doc) == nil && doc.Report != nil && doc.Report.Total == 2
	})
	if ex := doc.Report.Examples(shadow.RefuseToAllow); len(ex) != 1 || ex[0] != atLimit.id {
		t.Fatalf("refuse_to_allow %v, want %s", ex, atLimit.id)
	}
	if a := post(t, http.DefaultClient, s.url+"/v1/shadow/promote", []byte(`{"revision":"candidate-1","min_decisions":2,"forbid":[]}`)); a.status != http.StatusConflict {
		t.Fatalf("a body emptying the forbidden classes promoted a refuse_to_allow candidate: %d %s", a.status, a.body)
	}
	a := post(t, http.DefaultClient, s.url+"/v1/shadow/promote", []byte(`{"revision":"candidate-1","force":true}`))
	if a.status != http.StatusOK {
		t.Fatalf("promotion: %d %s", a.status, a.body)
	}
	if _, st := getJSON(t, s.url+"/v1/status"); st["policy_revision"] != "candidate-1" {
		t.Fatalf("live after promotion: %v", st["policy_revision"])
	}
}

// TestShadowBundleFileIsVerifiedWithoutAURL: a server of folders, polling
// no bundle, still verifies the bundle files POST /v1/shadow {"bundle"}
// loads with its --bundle-verification-key-file: an unsigned bundle is
// refused, a signed one becomes the candidate.
func TestShadowBundleFileIsVerifiedWithoutAURL(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	live := copyAccess(t)
	private, public := writeKeyPair(t, t.TempDir())
	s := startServer(t, append(accessArgs(live), "--bundle-verification-key-file", public)...)
	dir := t.TempDir()
	for i, key := range []string{"", private} {
		raw, _, err := policybundle.Build(context.Background(), policybundle.BuildOptions{
			Policies: filepath.Join(live, "policies"), Schemas: filepath.Join(live, "schemas"), Tests: filepath.Join(live, "tests"),
			Revision: fmt.Sprintf("file-%d", i), SigningKey: key,
		})
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, fmt.Sprintf("b%d.tar.gz", i))
		if err := os.WriteFile(file, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(map[string]string{"bundle": file})
		a := post(t, http.DefaultClient, s.url+"/v1/shadow", body)
		_, doc := getJSON(t, s.url+"/v1/shadow")
		c, _ := doc["candidate"].(map[string]any)
		switch signed := key != ""; {
		case !signed && (a.status == http.StatusOK || c != nil):
			t.Fatalf("an unsigned bundle file was loaded into shadow: %d %s, candidate %v", a.status, a.body, c)
		case signed && (a.status != http.StatusOK || c == nil || c["policy_revision"] != "file-1"):
			t.Fatalf("the signed bundle file: %d %s, candidate %v", a.status, a.body, c)
		}
	}
}

// With --auth-token-file and no --shadow-admins, the real binary fails
// closed: host preparation's token, good for decisions, may not load a
// folder as the candidate (nor promote or clear it), and the refusal
// names --shadow-admins; the impact report stays readable. (With client
// certificates: TestMutualTLS.)
func TestShadowAdminsDefaultIsClosedWithTokens(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	live := copyAccess(t)
	cand := copyAccess(t)
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte("host-preparation host-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, append(accessArgs(live), "--auth-token-file", tokenFile)...)
	do := func(method, path, body string) (int, []byte) {
		req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer host-secret")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	load, _ := json.Marshal(map[string]string{"policies": filepath.Join(cand, "policies")})
	for _, rt := range []struct{ method, path, body string }{
		{"POST", "/v1/shadow", string(load)},
		{"POST", "/v1/shadow/promote", `{"force":true}`},
		{"DELETE", "/v1/shadow", ""},
	} {
		status, body := do(rt.method, rt.path, rt.body)
		if status != http.StatusForbidden || !strings.Contains(string(body), `"forbidden"`) || !strings.Contains(string(body), "--shadow-admins") {
			t.Errorf("%s %s with the host's token: %d %s", rt.method, rt.path, status, body)
		}
	}
	if status, body := do("GET", "/v1/shadow", ""); status != http.StatusOK || !strings.Contains(string(body), `"candidate":null`) {
		t.Errorf("GET /v1/shadow: %d %s", status, body)
	}
}
