package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// Authentication against the real binary: bearer tokens, mTLS with a
// generated CA, secrets kept out of every log, and the refusal to listen
// beyond loopback without authentication.

// readDecisionLog returns the records of a decision log, failing on any problem.
func readDecisionLog(t *testing.T, path string) []decisionlog.Record {
	t.Helper()
	var recs []decisionlog.Record
	warnings, err := decisionlog.ReadFile(path, func(_ int, rec decisionlog.Record) error {
		recs = append(recs, rec)
		return nil
	})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("reading %s: %v %v", path, err, warnings)
	}
	return recs
}

// noSecrets fails when any secret appears in any of the texts.
func noSecrets(t *testing.T, texts map[string]string, secrets ...string) {
	t.Helper()
	for name, text := range texts {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("the secret %q appears in the %s", s, name)
			}
		}
	}
}

func TestBearerTokens(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	const (
		secret     = "s3cret-host-prep-7c1f0e"
		bareSecret = "s3cret-bare-token-92ab44"
		wrongToken = "s3cret-wrong-token-d00d"
	)
	args, logPath := quickArgs(t)
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte("# callers\nhost-preparation "+secret+"\n"+bareSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, append(args, "--auth-token-file", tokenFile, "--log-level", "debug")...)
	client := &http.Client{Timeout: 10 * time.Second}
	fx := decidedFixture(t)

	tests := []struct {
		name, method, path, auth string
		status                   int
		challenge                string // WWW-Authenticate on a 401
	}{
		{name: "health needs no token", method: "GET", path: "/health", status: 200},
		{name: "liveness needs no token", method: "GET", path: "/health/live", status: 200},
		{name: "readiness needs no token", method: "GET", path: "/health/ready", status: 200},
		{name: "metrics without a token", method: "GET", path: "/metrics", status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "missing token", method: "POST", path: "/v1/decisions/" + fx.Decision, status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "wrong token", method: "POST", path: "/v1/decisions/" + fx.Decision, auth: "Bearer " + wrongToken, status: 401, challenge: `Bearer realm="arbiter", error="invalid_token"`},
		{name: "token as a basic credential", method: "POST", path: "/v1/decisions/" + fx.Decision, auth: "Basic " + secret, status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "right token", method: "POST", path: "/v1/decisions/" + fx.Decision, auth: "Bearer " + secret, status: 200},
		{name: "bare token, data api", method: "POST", path: "/v1/data/decisions/" + fx.Decision + "/decision", auth: "Bearer " + bareSecret, status: 200},
		{name: "status without a token", method: "GET", path: "/v1/status", status: 401, challenge: `Bearer realm="arbiter"`},
		{name: "status with a token", method: "GET", path: "/v1/status", auth: "Bearer " + bareSecret, status: 200},
	}
	decisions := 0
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.method == "POST" {
				b := string(fx.Input)
				if strings.Contains(tc.path, "/v1/data/") {
					b = `{"input":` + b + `}`
				}
				body = strings.NewReader(b)
			}
			req, err := http.NewRequest(tc.method, srv.url+tc.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			switch {
			case tc.status == 401:
				var doc engine.Document
				if err := json.Unmarshal(b, &doc); err != nil || doc.Error.Code != engine.CodeUnauthorized || doc.Error.Message == "" {
					t.Errorf("not the contract's unauthorized document: %s", b)
				}
				if got := resp.Header.Get("WWW-Authenticate"); got != tc.challenge {
					t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
				}
			case tc.method == "POST":
				decisions++
				var env struct {
					Result json.RawMessage `json:"result"`
				}
				if err := json.Unmarshal(b, &env); err != nil {
					t.Fatal(err)
				}
				if msg := engine.CheckOutcome(fx, &engine.Decision{Result: env.Result}, nil); msg != "" {
					t.Error(msg)
				}
			case tc.path == "/health" && string(b) != `{"status":"ok"}`:
				t.Errorf("health: %s", b)
			}
		})
	}
	srv.stop(t)

	// Only authenticated decisions are logged, each with its caller.
	recs := readDecisionLog(t, logPath)
	if len(recs) != decisions {
		t.Errorf("%d decision log records, want %d (401s are not decisions)", len(recs), decisions)
	}
	callers := map[string]bool{}
	for _, r := range recs {
		callers[r.Caller] = true
	}
	if !callers["host-preparation"] || len(callers) != 2 {
		t.Errorf("callers %v, want host-preparation and the bare token's token-xxxxxxxx", callers)
	}
	logText, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	noSecrets(t, map[string]string{"server log": srv.stderr.String(), "decision log": string(logText)}, secret, bareSecret, wrongToken)
}

// testCA is a throw-away certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial int64 = 1

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a leaf certificate for cn: a server certificate for 127.0.0.1,
// or a client certificate.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tlsClient trusts ca and presents the given client certificate, if any.
func tlsClient(t *testing.T, ca *testCA, certPEM, keyPEM []byte) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
		// Present it whatever CAs the server asks for: Go's client would
		// otherwise keep a certificate from another CA to itself, and the
		// server would never see it.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func TestMutualTLS(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	dir := t.TempDir()
	ca := newCA(t, "arbiter test CA")
	rogue := newCA(t, "rogue CA")
	serverCert, serverKey := ca.issue(t, "arbiter", true)
	clientCert, clientKey := ca.issue(t, "host-preparation", false)
	rogueCert, rogueKey := rogue.issue(t, "host-preparation", false)

	args, logPath := quickArgs(t)
	srv := startServer(t, append(args,
		"--tls-cert-file", writeFile(t, dir, "server.pem", serverCert),
		"--tls-key-file", writeFile(t, dir, "server-key.pem", serverKey),
		"--tls-client-ca-file", writeFile(t, dir, "ca.pem", ca.pem),
		"--log-level", "debug")...)
	url := strings.Replace(srv.url, "http://", "https://", 1)
	fx := decidedFixture(t)

	// A certificate from the right CA is accepted, and its common name is
	// the caller the decision log records.
	good := tlsClient(t, ca, clientCert, clientKey)
	for i := 0; i < 2; i++ {
		if a := decideFixture(t, good, url, fx); a.status != http.StatusOK {
			t.Fatalf("client certificate from the right CA: %d %s", a.status, a.body)
		}
	}
	if resp, err := good.Get(url + "/health"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("health over mTLS: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// Authenticated by certificate and no --shadow-admins: nobody may
	// change the candidate.
	if a := post(t, good, url+"/v1/shadow/promote", []byte(`{"force":true}`)); a.status != http.StatusForbidden || !strings.Contains(string(a.body), "--shadow-admins") {
		t.Errorf("promotion over mTLS without --shadow-admins: %d %s", a.status, a.body)
	}

	refusals := []struct {
		name   string
		client *http.Client
		reason string // in the server's log of the failed handshake
	}{
		{"client certificate from another CA", tlsClient(t, ca, rogueCert, rogueKey), "certificate signed by unknown authority"},
		{"no client certificate", tlsClient(t, ca, nil, nil), "didn't provide a certificate"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			// Count this case's own reason: a retry of the previous case can
			// log one more handshake error after that case has finished.
			before := strings.Count(srv.stderr.String(), tc.reason)
			_, _, err := tryFixture(tc.client, url, fx)
			if err == nil {
				t.Fatal("the request went through")
			}
			t.Logf("client: %v", err)
			// Refused at the handshake: the server reports a failed TLS
			// handshake, and no request reached the handler (checked in the
			// decision log below).
			wait.Until(t, 5*time.Second, "the server to log the failed handshake with "+tc.reason, func() bool {
				return strings.Count(srv.stderr.String(), tc.reason) > before
			})
			// With TLS 1.2 the handshake itself fails on the client too.
			cfg := tc.client.Transport.(*http.Transport).TLSClientConfig.Clone()
			cfg.MaxVersion = tls.VersionTLS12
			conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), cfg)
			if err == nil {
				conn.Close()
				t.Fatal("TLS 1.2 handshake succeeded")
			}
			var alert tls.AlertError
			if !errors.As(err, &alert) && !strings.Contains(err.Error(), "tls:") {
				t.Errorf("handshake error %v is not a TLS alert", err)
			}
		})
	}

	// Plain HTTP to the TLS port is no way around it either.
	if a, _, err := tryFixture(&http.Client{Timeout: 5 * time.Second}, srv.url, fx); err == nil && a.status == http.StatusOK {
		t.Errorf("plain HTTP was decided: %s", a.body)
	}

	srv.stop(t)
	recs := readDecisionLog(t, logPath)
	if len(recs) != 2 {
		t.Fatalf("%d decision log records, want the 2 decisions made over mTLS", len(recs))
	}
	for _, r := range recs {
		if r.Caller != "host-preparation" || r.Error != nil {
			t.Errorf("record %s: caller %q, error %v", r.DecisionID, r.Caller, r.Error)
		}
	}
}

// runServe runs `arbiter serve` that is expected to refuse to start. It
// returns the exit code and stderr; a server that starts listening instead
// is killed at once and reported with listened=true.
func runServe(t *testing.T, env []string, args ...string) (code int, stderr string, listened bool) {
	t.Helper()
	base := []string{"serve", "--state-dir", t.TempDir()}
	if !containsArg(args, "--decision-log") { // not the working directory's, which others use at once
		base = append(base, "--decision-log", filepath.Join(t.TempDir(), "decisions.log"))
	}
	cmd := exec.Command(binPath, append(base, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out := &testfiles.Buffer{}
	cmd.Stderr = out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case err := <-done:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode(), out.String(), false
			}
			if err != nil {
				t.Fatal(err)
			}
			return 0, out.String(), false
		case <-time.After(20 * time.Millisecond):
			if listening.MatchString(out.String()) {
				_ = cmd.Process.Kill()
				<-done
				return 0, out.String(), true
			}
		case <-deadline:
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("arbiter serve %q neither exited nor listened: %s", args, out.String())
			return 0, "", false
		}
	}
}

// loopbackURL turns the address the server logged (0.0.0.0:PORT, [::]:PORT)
// into a loopback URL: the tests never send traffic anywhere else.
func loopbackURL(t *testing.T, logged string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(logged, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return "http://127.0.0.1:" + port
}

func TestNonLoopbackNeedsAuthentication(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	root := copyRepo(t)
	folders := append(folderArgs(root), "--tests", "", "--decision-log", "")
	refused := []struct {
		name string
		env  []string
		args []string
	}{
		{name: "0.0.0.0", args: []string{"--addr", "0.0.0.0:0"}},
		{name: "every interface", args: []string{"--addr", ":0"}},
		{name: "IPv6 any", args: []string{"--addr", "[::]:0"}},
		{name: "from the environment", env: []string{"ARBITER_ADDR=0.0.0.0:0"}},
		{name: "TLS without client certificates is not authentication", args: []string{"--addr", "0.0.0.0:0", "--tls-cert-file", "x.pem", "--tls-key-file", "x-key.pem"}},
	}
	for _, tc := range refused {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			code, stderr, listened := runServe(t, tc.env, append(append([]string{}, folders...), tc.args...)...)
			if listened || code == 0 {
				t.Fatalf("started (listened %v, exit %d), want a refusal: %s", listened, code, stderr)
			}
			if !strings.Contains(stderr, "refusing to listen on non-loopback address") || !strings.Contains(stderr, "--insecure-listen") {
				t.Errorf("exit %d without the refusal message: %s", code, stderr)
			}
		})
	}

	fx := decidedFixture(t)
	client := &http.Client{Timeout: 10 * time.Second}
	t.Run("starts with --insecure-listen", func(t *testing.T) {
		srv := startServer(t, append(append([]string{}, folders...), "--addr", "0.0.0.0:0", "--insecure-listen")...)
		url := loopbackURL(t, srv.url)
		if a := decideFixture(t, client, url, fx); a.status != http.StatusOK {
			t.Fatalf("%d %s", a.status, a.body)
		}
		if !strings.Contains(srv.stderr.String(), "auth_tokens=0") {
			t.Errorf("the server does not say it runs without authentication: %s", srv.stderr.String())
		}
	})
	t.Run("starts with a token file", func(t *testing.T) {
		const secret = "s3cret-wide-open-4411"
		tokenFile := writeFile(t, t.TempDir(), "tokens", []byte("host-preparation "+secret+"\n"))
		srv := startServer(t, append(append([]string{}, folders...), "--addr", "0.0.0.0:0", "--auth-token-file", tokenFile)...)
		url := loopbackURL(t, srv.url)
		if a, _, err := tryFixture(client, url, fx); err != nil || a.status != http.StatusUnauthorized {
			t.Fatalf("without the token: %v %d %s", err, a.status, a.body)
		}
		if a := decideFixture(t, client, url, fx, "Authorization", "Bearer "+secret); a.status != http.StatusOK {
			t.Fatalf("with the token: %d %s", a.status, a.body)
		}
		if resp, err := client.Get(url + "/health"); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("health: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		noSecrets(t, map[string]string{"server log": srv.stderr.String()}, secret)
	})
}

var servingMetrics = regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)

// With authentication on, /metrics on the API answers 401, and the
// --metrics-addr listener serves the same metrics without a token: what
// Prometheus scrapes (docs/OPERATING.md).
func TestMetricsListenerWithoutAuth(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	args, _ := quickArgs(t)
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte("scraper-is-not-a-caller s3cret-metrics-5e1d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, append(args, "--auth-token-file", tokenFile, "--metrics-addr", "127.0.0.1:0")...)
	m := servingMetrics.FindStringSubmatch(srv.stderr.String())
	if m == nil {
		t.Fatalf("no metrics listener logged:\n%s", srv.stderr.String())
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(srv.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/metrics on the API without a token: %d, want 401", resp.StatusCode)
	}
	resp, err = client.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "\narbiter_") || !strings.Contains(string(b), "\ngo_gc_gomemlimit_bytes ") {
		t.Fatalf("/metrics on --metrics-addr: %d, want 200 with arbiter's and Go's metrics:\n%.500s", resp.StatusCode, b)
	}
	if resp, err := client.Get("http://" + m[1] + "/v1/status"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("the metrics listener serves more than /metrics: %v %v", resp, err)
	}
	srv.stop(t)
}
