package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// TestBundleURLSecretsAreRedacted: a bundle URL signed in its query (a
// presigned S3 URL's X-Amz-Signature, a ?token=) serves the live revision
// and, from --shadow-bundle-url, the candidate that is then promoted. Its
// query values appear nowhere the URL is shown: /v1/status (the bundle's
// url, the error of a poll that failed once the server is gone, the
// promoted revision's origin), /v1/shadow and /v1/reloads, the metrics,
// the pages, the log lines (Arbiter's and OPA's downloader's) and the
// decision log's promotion record. Each shows the URL with every query
// value replaced by xxxxx, scheme, host, path and keys readable.
func TestBundleURLSecretsAreRedacted(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	keys := t.TempDir()
	writeKeyPair(t, keys)
	root := copyRepo(t)
	o := &origin{done: make(chan struct{})}
	srv := httptest.NewServer(o)
	defer srv.Close()
	defer close(o.done)
	const secret1, secret2 = "AKIA-SIGNATURE-d00d", "tok-f00d"
	src := srv.URL + "/bundles/arbiter.tar.gz?X-Amz-Signature=" + secret1 + "&token=" + secret2
	shown := strings.TrimPrefix(srv.URL, "http://") + "/bundles/arbiter.tar.gz?X-Amz-Signature=xxxxx&token=xxxxx"
	o.publish(buildBundle(t, root, keys, "good-1"), "")
	decisionLog := filepath.Join(t.TempDir(), "decisions.log")
	r := startReplica(t, root, keys, src, "ARBITER_SHADOW_BUNDLE_URL="+src, "ARBITER_DECISION_LOG="+decisionLog)
	wait.Until(t, 60*time.Second, "the bundle to serve and the candidate to be in shadow", func() bool {
		return r.bundleStatus(t)["active_revision"] == "good-1" && strings.Contains(get(t, r.url+"/v1/shadow"), `"candidate":{`)
	})
	if a := post(t, http.DefaultClient, r.url+"/v1/shadow/promote", []byte(`{"force":true}`)); a.status != http.StatusOK {
		t.Fatalf("promote: %d %s", a.status, a.body)
	}
	srv.CloseClientConnections()
	srv.Listener.Close() // the next polls fail: their errors quote the URL
	wait.Until(t, 60*time.Second, "a poll to fail", func() bool { return r.bundleStatus(t)["message"] != nil })

	shows := map[string]string{
		"/v1/status": get(t, r.url+"/v1/status"), "/v1/shadow": get(t, r.url+"/v1/shadow"), "/v1/reloads": get(t, r.url+"/v1/reloads"),
		"/metrics": r.metrics(t), "/ui/policy": get(t, r.url+"/ui/policy"), "/ui/shadow": get(t, r.url+"/ui/shadow"),
		"the log": r.stderr.String(),
	}
	if b, err := os.ReadFile(decisionLog); err == nil {
		shows["the decision log"] = string(b)
	}
	for where, text := range shows {
		for _, s := range []string{secret1, secret2} {
			if i := strings.Index(text, s); i >= 0 {
				t.Errorf("%s shows the secret %s: ...%s...", where, s, text[max(0, i-120):i+len(s)])
			}
		}
	}
	if st := r.bundleStatus(t); st["url"] != "http://"+shown || !strings.Contains(st["message"].(string), shown) || !strings.Contains(shows["the log"], shown) {
		t.Errorf("the status and log do not show the URL readable as %s: %v", shown, st)
	}
}

// get returns the body of a GET, whatever its status.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
