package policybundle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// bundleServer serves one bundle at a time with an ETag, answering 304 to a
// matching If-None-Match, as nginx does for a static file.
type bundleServer struct {
	mu        sync.Mutex
	raw       []byte
	etag      string
	inm       []string // If-None-Match of each request
	notModded int
}

func (b *bundleServer) publish(raw []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sum := sha256.Sum256(raw)
	b.raw, b.etag = raw, `"`+hex.EncodeToString(sum[:8])+`"`
}

func (b *bundleServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inm = append(b.inm, r.Header.Get("If-None-Match"))
	if b.raw == nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("ETag", b.etag)
	if r.Header.Get("If-None-Match") == b.etag {
		b.notModded++
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	_, _ = w.Write(b.raw)
}

// failingBundle is the repository's revision plus a Rego test that fails,
// signed by key a: it verifies, and the gate must refuse it.
func failingBundle(t *testing.T, revision string) []byte {
	t.Helper()
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "policy_test"), os.DirFS(repo.Tests)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "policy_test", "gate_test.rego"), []byte("package gate_test\n\ntest_refuses if false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := repo
	o.Tests, o.Revision, o.SkipGate = filepath.Join(root, "policy_test"), revision, true
	o.SigningKey = filepath.Join(keyDir(t), "a-private.pem")
	raw, _, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// A replica's source polls with If-None-Match, activates a signed revision,
// and refuses one that fails its tests, a tampered one and an unsigned one
// while the last good revision keeps serving; the status says why.
func TestSourcePollsVerifiesAndGates(t *testing.T) {
	ctx := context.Background()
	srv := &bundleServer{}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	eng, err := live.New(ctx, engine.Config{EvalTimeout: slowEval}, live.Pushed())
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(SourceConfig{URL: hs.URL + "/bundles/arbiter.tar.gz", Keys: verifier(t, "a"), MinDelay: time.Second, MaxDelay: time.Second}, Activator(eng))
	if err != nil {
		t.Fatal(err)
	}
	good := buildSigned(t, "r1", "a")
	srv.publish(good)
	src.Start(ctx)
	defer src.Stop(ctx)
	revision := func() string {
		if s := eng.Snapshot(); s != nil {
			return s.Revision
		}
		return ""
	}
	wait.Until(t, 30*time.Second, "r1 active", func() bool { return revision() == "r1" })
	st := src.Status()
	if st.ActiveRevision != "r1" || st.ETag == "" || st.ContentHash == "" || !st.Signed || st.LastSuccessfulActivation.IsZero() {
		t.Fatalf("status after activation: %+v", st)
	}
	wait.Until(t, 30*time.Second, "a conditional poll answered 304", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.notModded > 0
	})

	// Each refusal is counted in the metric docs/RELIABILITY.md and
	// docs/FLEET.md name for it: the downloader verifies signatures, so
	// an unsigned or tampered bundle is a failed request, not a load.
	steps := []struct {
		name   string
		raw    []byte
		count  func(Counts) uint64
		metric string
		kind   FailureKind // what Failure says the poll failed on
	}{
		{"failing its tests", failingBundle(t, "r2"), func(c Counts) uint64 { return c.GateFailed }, `arbiter_bundle_loads_total{result="refused_gate"}`, FailedGate},
		{"tampered", rewrite(t, buildSigned(t, "r3", "a"), func(f map[string][]byte) {
			p := firstFile(t, f, "decisions/*/data.json")
			f[p] = withMember(t, f[p])
		}), func(c Counts) uint64 { return c.DownloadFailed }, `arbiter_bundle_requests_total{result="failed"}`, FailedSignature},
		{"unsigned", buildSigned(t, "r4", ""), func(c Counts) uint64 { return c.DownloadFailed }, `arbiter_bundle_requests_total{result="failed"}`, FailedSignature},
	}
	for _, step := range steps {
		before := step.count(src.Counts())
		srv.publish(step.raw)
		wait.Until(t, 30*time.Second, step.name+" refused", func() bool { return step.count(src.Counts()) > before })
		if got := counterValue(t, Collector(src), step.metric); got < 1 {
			t.Errorf("%s: %s is %v", step.name, step.metric, got)
		}
		if got := counterValue(t, Collector(src), `arbiter_bundle_loads_total{result="refused_read"}`); got != 0 {
			t.Errorf("%s: refused_read is %v; signatures are checked by the download", step.name, got)
		}
		st := src.Status()
		if revision() != "r1" || st.ActiveRevision != "r1" || st.Code != "bundle_error" || st.Message == "" {
			t.Fatalf("%s: serving %q, status %+v", step.name, revision(), st)
		}
		if f := src.Failure(); f.Kind != step.kind || f.Err == nil {
			t.Errorf("%s: Failure() = %v %v, want kind %v", step.name, f.Kind, f.Err, step.kind)
		}
		if step.name == "failing its tests" && len(st.Errors) == 0 {
			t.Fatalf("%s: the status lists no problem", step.name)
		}
		t.Logf("%s: %s", step.name, st.Message)
	}
	srv.publish(buildSigned(t, "r5", "a"))
	wait.Until(t, 30*time.Second, "r5 active", func() bool { return revision() == "r5" })
	if st := src.Status(); st.Code != "" || st.ActiveRevision != "r5" {
		t.Fatalf("status after recovery: %+v", st)
	}
	if f := src.Failure(); f.Kind != NoFailure || f.Err != nil {
		t.Errorf("Failure() after recovery = %v %v, want none", f.Kind, f.Err)
	}
}

func TestSplitURL(t *testing.T) {
	cases := []struct {
		in, service, path string
		oci               bool
		bad               bool
	}{
		{"http://127.0.0.1:8080/b/arbiter.tar.gz", "http://127.0.0.1:8080", "/b/arbiter.tar.gz", false, false},
		{"https://bundles.example/x.tar.gz?v=1", "https://bundles.example", "/x.tar.gz?v=1", false, false},
		{"oci://registry.example/policies/arbiter:prod", "https://registry.example", "registry.example/policies/arbiter:prod", true, false},
		{"oci+http://127.0.0.1:5000/arbiter:r1", "http://127.0.0.1:5000", "127.0.0.1:5000/arbiter:r1", true, false},
		{"oci://registry.example/arbiter", "", "", false, true},
		{"https://user:secret@bundles.example/x", "", "", false, true},
		{"ftp://host/x", "", "", false, true},
	}
	for _, c := range cases {
		s, p, oci, err := splitURL(c.in)
		if (err != nil) != c.bad || s != c.service || p != c.path || oci != c.oci {
			t.Errorf("%s: got %q %q %v %v", c.in, s, p, oci, err)
		}
	}
}

// counterValue is the value of the counter metric, name{label="value"},
// among what c collects, whatever its other labels.
func counterValue(t *testing.T, c prometheus.Collector, metric string) float64 {
	t.Helper()
	name, label, _ := strings.Cut(strings.TrimSuffix(metric, "}"), "{")
	for k, v := range testfiles.Counters(t, c) {
		kn, labels, _ := strings.Cut(strings.TrimSuffix(k, "}"), "{")
		if kn == name && slices.Contains(strings.Split(labels, ","), label) {
			return v
		}
	}
	t.Fatalf("no %s", metric)
	return 0
}

// TestStopOfASourceNeverStarted: a start that fails before the polls
// begin still stops every part, this Source too; its Stop must return
// (OPA's downloader, never started, would wait for its loop forever).
func TestStopOfASourceNeverStarted(t *testing.T) {
	eng, err := live.New(context.Background(), engine.Config{EvalTimeout: slowEval}, live.Pushed())
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(SourceConfig{URL: "http://127.0.0.1:9/bundle.tar.gz", MinDelay: time.Second, MaxDelay: time.Second}, Activator(eng))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait.Within(t, "Stop of a Source never started", func() { src.Stop(ctx) })
}
