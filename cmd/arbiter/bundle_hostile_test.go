package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/wait"
	"github.com/arbiter-dev/arbiter/policybundle"
)

// origin publishes one tarball both at /bundles/arbiter.tar.gz (with an
// ETag) and as the layer of policies/arbiter:live in an OCI registry. Its
// body can be held: "stall" sends the headers and then nothing, "trickle"
// sends 2 KiB every 100 ms and never ends.
type origin struct {
	mu    sync.Mutex
	layer []byte
	hold  string
	done  chan struct{}
}

func newOrigin(t *testing.T) (*origin, string) {
	o := &origin{done: make(chan struct{})}
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(o.done) }) // runs first: held bodies end
	return o, strings.TrimPrefix(srv.URL, "http://")
}

func (o *origin) publish(layer []byte, hold string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.layer, o.hold = layer, hold
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	layer, hold := o.layer, o.hold
	o.mu.Unlock()
	config := []byte("{}")
	manifest := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",`+
		`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":%d},`+
		`"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":%q,"size":%d}]}`,
		digest(config), len(config), digest(layer), len(layer))
	const repo = "/v2/policies/arbiter/"
	switch p := r.URL.Path; {
	case p == "/bundles/arbiter.tar.gz":
		etag := `"` + digest(layer) + `"`
		if hold == "" && r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
	case strings.HasPrefix(p, repo+"manifests/"):
		w.Header().Set("Content-Length", strconv.Itoa(len(manifest))) // HEAD too
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Docker-Content-Digest", digest(manifest))
		_, _ = w.Write(manifest)
		return
	case p == repo+"blobs/"+digest(config):
		_, _ = w.Write(config)
		return
	case p == repo+"blobs/"+digest(layer):
	default:
		http.NotFound(w, r)
		return
	}
	if hold == "" {
		_, _ = w.Write(layer)
		return
	}
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-o.done:
			return
		case <-tick.C:
			if hold == "trickle" {
				_, _ = w.Write(make([]byte, 2<<10))
				w.(http.Flusher).Flush()
			}
		}
	}
}

// bomb is a gzip tarball of files of size zeros, led by first when it is
// not nil; gzip members concatenated, so that the zeros are compressed once
// (and once per test binary: compressing 63 MiB under -race is slow), and
// the tar headers are stored, not compressed.
func bomb(t *testing.T, files, size int, first []byte) []byte {
	t.Helper()
	stored, _ := gzip.NewWriterLevel(io.Discard, gzip.NoCompression) // one compressor for every member: 20000 would cost minutes under -race
	member := func(level int, write func(io.Writer)) []byte {
		var b bytes.Buffer
		zw := stored
		if level != gzip.NoCompression {
			zw, _ = gzip.NewWriterLevel(&b, level)
		}
		zw.Reset(&b)
		write(zw)
		_ = zw.Close()
		return b.Bytes()
	}
	header := func(name string, size int) []byte {
		return member(gzip.NoCompression, func(w io.Writer) {
			tw := tar.NewWriter(w)
			_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg})
			_ = tw.Flush() // the header only: the content follows in the next member
		})
	}
	zeros, ok := zeroMembers.Load(size)
	if !ok {
		zeros, _ = zeroMembers.LoadOrStore(size, member(gzip.BestSpeed, func(w io.Writer) { _, _ = w.Write(make([]byte, size)) }))
	}
	var out bytes.Buffer
	if first != nil {
		out.Write(header("/.signatures.json", len(first)))
		out.Write(member(gzip.NoCompression, func(w io.Writer) { _, _ = w.Write(first); _, _ = w.Write(make([]byte, (512-len(first)%512)%512)) }))
	}
	for i := range files {
		out.Write(header(fmt.Sprintf("/bomb/%d.rego", i), size))
		out.Write(zeros.([]byte))
	}
	out.Write(member(gzip.NoCompression, func(w io.Writer) { _, _ = w.Write(make([]byte, 1024)) })) // tar's end
	return out.Bytes()
}

// zeroMembers holds, by size, a gzip member of that many zeros.
var zeroMembers sync.Map

// replica serves the bundle of src (scheme http or oci+http), signed with
// the key pair in keys. Its bundle settings go in the environment, as a
// deployment sets them.
type replica struct {
	*proc
	fx engine.Fixture
}

func startReplica(t *testing.T, root, keys, src string, env ...string) *replica {
	t.Helper()
	s := startServerWith(t, func(c *exec.Cmd) {
		c.Env = append(os.Environ(), append([]string{"ARBITER_BUNDLE_URL=" + src,
			"ARBITER_BUNDLE_VERIFICATION_KEY_FILE=" + filepath.Join(keys, "public.pem"),
			"ARBITER_BUNDLE_POLL_MIN_DELAY=1s", "ARBITER_BUNDLE_POLL_MAX_DELAY=1s"}, env...)...)
	}, folderArgs(root)...)
	fixtures, err := engine.LoadFixtures(filepath.Join(root, "policy_test"))
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{proc: s}
	for _, f := range fixtures {
		if f.WantResult != nil {
			r.fx = f
			break
		}
	}
	return r
}

func (r *replica) bundleStatus(t *testing.T) map[string]any {
	_, st := getJSON(t, r.url+"/v1/status")
	b, _ := st["bundles"].(map[string]any)["arbiter"].(map[string]any)
	return b
}

func (r *replica) metrics(t *testing.T) string {
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	return string(m)
}

// serves checks that the replica answers from revision.
func (r *replica) serves(t *testing.T, revision string) {
	t.Helper()
	a := post(t, http.DefaultClient, r.url+"/v1/decisions/"+r.fx.Decision, r.fx.RequestBody())
	var env struct {
		Revision string          `json:"policy_revision"`
		Result   json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(a.body, &env); err != nil || a.status != http.StatusOK || env.Revision != revision || !engine.SameJSON(env.Result, r.fx.WantResult) {
		t.Fatalf("want a decision from %s: %d %s", revision, a.status, a.body)
	}
}

func buildBundle(t *testing.T, root, keys, revision string) []byte {
	t.Helper()
	raw, _, err := policybundle.Build(context.Background(), policybundle.BuildOptions{
		Policies: filepath.Join(root, "policies"), Schemas: filepath.Join(root, "schemas"), Tests: filepath.Join(root, "policy_test"),
		Revision: revision, SigningKey: filepath.Join(keys, "private.pem"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// servingGood starts a replica of a repository copy polling a new origin
// over scheme (http or oci+http), and waits until it serves the bundle
// "good-1" the origin publishes first.
func servingGood(t *testing.T, keys, scheme string, env []string) (string, *origin, *replica) {
	t.Helper()
	root := copyRepo(t)
	o, host := newOrigin(t)
	src := "http://" + host + "/bundles/arbiter.tar.gz"
	if scheme == "oci+http" {
		src = "oci+http://" + host + "/policies/arbiter:live"
	}
	o.publish(buildBundle(t, root, keys, "good-1"), "")
	r := startReplica(t, root, keys, src, env...)
	wait.Until(t, 60*time.Second, "the good revision", func() bool { return r.bundleStatus(t)["active_revision"] == "good-1" })
	return root, o, r
}

// A bundle that unpacks to 1.5 GB from 1.5 MB, published over HTTP or OCI,
// is refused while it downloads: the replica's peak memory stays far below
// the bomb, it keeps serving its revision, and its status says why.
// Unsigned, it is refused at the unpacked limit (or at the file count);
// signed by another key, at its signature, before the first zero; and any
// bundle over --bundle-max-bytes as it arrives.
func TestBundleBombIsRefusedWhileItDownloads(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	const budget = 512 << 20 // peak RSS; the bomb is 1.5 GiB unpacked
	keys, other := t.TempDir(), t.TempDir()
	writeKeyPair(t, keys)
	attacker, _ := writeKeyPair(t, other)
	forged, err := bundle.GenerateSignedToken([]bundle.FileInfo{{Name: "bomb/0.rego", Hash: strings.Repeat("0", 64), Algorithm: "SHA-256"}},
		bundle.NewSigningConfig(attacker, "RS256", ""), "")
	if err != nil {
		t.Fatal(err)
	}
	sigs, _ := json.Marshal(bundle.SignaturesConfig{Signatures: []string{forged}})
	const size = 63 << 20 // under OPA's limit of one file, a multiple of tar's 512-byte block
	unsigned := bomb(t, 24, size, nil)
	for _, c := range []struct {
		name, scheme string
		bomb         []byte
		env          []string
		want         string
	}{
		{"unsigned over http", "http", unsigned, nil, "bundle refused while unpacking: more than 134217728 bytes unpacked"},
		{"unsigned over oci", "oci+http", unsigned, nil, "bundle refused while unpacking: more than 134217728 bytes unpacked"},
		{"many empty files over http", "http", bomb(t, 20000, 0, nil), nil, "bundle refused while unpacking: more than 10000 files"},
		{"signed by another key over oci", "oci+http", bomb(t, 24, size, sigs), nil, "bundle signature"},
		{"over --bundle-max-bytes", "http", unsigned, []string{"ARBITER_BUNDLE_MAX_BYTES=1048576"}, "larger than 1048576 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each case has its own replica and origin; they wait, mostly
			_, o, r := servingGood(t, keys, c.scheme, c.env)

			o.publish(c.bomb, "")
			wait.Until(t, 60*time.Second, "the bomb's poll to end", func() bool { return r.bundleStatus(t)["message"] != nil })
			peak := peakRSS(t, r.cmd.Process.Pid)
			if peak > budget {
				t.Fatalf("peak RSS %d MiB, budget %d MiB", peak>>20, budget>>20)
			}
			t.Logf("peak RSS %d MiB", peak>>20)
			if msg, _ := r.bundleStatus(t)["message"].(string); !strings.Contains(msg, c.want) {
				t.Fatalf("status message %q, want %q", msg, c.want)
			}
			r.serves(t, "good-1")
			if m := r.metrics(t); !strings.Contains(m, `arbiter_bundle_requests_total{bundle="arbiter",result="failed"}`) ||
				strings.Contains(m, `arbiter_bundle_requests_total{bundle="arbiter",result="failed"} 0`) {
				t.Fatal("the refusal is not counted as a failed request")
			}
		})
	}
}

// A bundle server that sends its headers and then stalls, or trickles a
// body that never ends, is cut off: status, a metric and a log line say the
// download stalled, /health?bundles turns not ready once the polls have
// stalled for longer than three polls may take, the replica keeps serving
// its revision, and the next bundle published is fetched and served.
func TestStalledBundleServerIsCutOff(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	keys := t.TempDir()
	writeKeyPair(t, keys)
	// Each case sets the other bound far off, so that the one it proves
	// cuts the download.
	minRate := []string{"ARBITER_BUNDLE_DOWNLOAD_TIMEOUT=10s", "ARBITER_BUNDLE_DOWNLOAD_STALL_TIMEOUT=1s"}
	deadline := []string{"ARBITER_BUNDLE_DOWNLOAD_TIMEOUT=2s", "ARBITER_BUNDLE_DOWNLOAD_STALL_TIMEOUT=10s"}
	for _, c := range []struct {
		name, scheme, hold string
		env                []string
		want               string
	}{
		{"stalled over http", "http", "stall", minRate, "fewer than 1024 bytes in 1s"},
		{"stalled over oci", "oci+http", "stall", minRate, "fewer than 1024 bytes in 1s"},
		{"endless over http", "http", "trickle", deadline, "not complete within 2s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each case has its own replica and origin; they wait, mostly
			root, o, r := servingGood(t, keys, c.scheme, c.env)

			fix := buildBundle(t, root, keys, "fix-2")
			o.publish(fix, c.hold)
			wait.Until(t, 60*time.Second, "the stall in status", func() bool {
				msg, _ := r.bundleStatus(t)["message"].(string)
				return strings.Contains(msg, "bundle download stalled") && strings.Contains(msg, c.want)
			})
			if m := r.metrics(t); !strings.Contains(m, `arbiter_bundle_requests_total{bundle="arbiter",result="stalled"}`) ||
				strings.Contains(m, `arbiter_bundle_requests_total{bundle="arbiter",result="stalled"} 0`) {
				t.Fatal("the stall is not counted")
			}
			if !strings.Contains(r.stderr.String(), "bundle download stalled and was cut off") {
				t.Fatal("no log line for the stall")
			}
			wait.Until(t, 60*time.Second, "/health?bundles not ready", func() bool {
				code, doc := getJSON(t, r.url+"/health?bundles")
				e, _ := doc["error"].(map[string]any)
				msg, _ := e["message"].(string)
				return code == http.StatusServiceUnavailable && strings.Contains(msg, "no poll has completed")
			})
			if code, doc := getJSON(t, r.url+"/health/ready"); code != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(doc), "no poll has completed") {
				t.Errorf("/health/ready with the polls stalled: %d %v, want 503 naming the stall", code, doc)
			}
			if code, _ := getJSON(t, r.url+"/health/live"); code != http.StatusOK {
				t.Errorf("/health/live with the polls stalled: %d, want 200", code)
			}
			r.serves(t, "good-1")

			o.publish(fix, "")
			wait.Until(t, 60*time.Second, "the fix", func() bool { return r.bundleStatus(t)["active_revision"] == "fix-2" })
			wait.Until(t, 60*time.Second, "/health?bundles ready", func() bool { code, _ := getJSON(t, r.url+"/health?bundles"); return code == http.StatusOK })
			if code, doc := getJSON(t, r.url+"/health/ready"); code != http.StatusOK {
				t.Errorf("/health/ready once the polls complete again: %d %v", code, doc)
			}
			r.serves(t, "fix-2")
		})
	}
}
