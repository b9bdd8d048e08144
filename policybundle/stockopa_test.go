package policybundle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
)

func opaBin(t *testing.T) string {
	bin := os.Getenv("OPA_BIN")
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("OPA_BIN is not set: run through `make test`")
		}
		t.Skip("OPA_BIN not set (make test sets it to the stock opa binary)")
	}
	return bin
}

// Stock `opa run --server --bundle` verifies an `arbiter build` bundle's
// signature with the same key, loads it, and answers every valid fixture
// as the fixture wants (stock OPA does no schema validation, so only
// fixtures that want a result are asked); `opa test --bundle` passes the
// bundle's own tests; and stock OPA refuses the tampered bundle too.
func TestStockOPAServesTheBundle(t *testing.T) {
	bin := opaBin(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "bundle.tar.gz")
	raw := buildSigned(t, "r1", "a")
	if err := os.WriteFile(good, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(keyDir(t), "a-public.pem")

	if out, err := exec.Command(bin, "test", "--bundle", good).CombinedOutput(); err != nil {
		t.Fatalf("opa test --bundle: %v\n%s", err, out)
	}

	tampered := filepath.Join(dir, "tampered.tar.gz")
	if err := os.WriteFile(tampered, rewrite(t, raw, func(files map[string][]byte) {
		p := firstFile(t, files, "decisions/*/data.json")
		files[p] = withMember(t, files[p])
	}), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "run", "--server", "--addr", "127.0.0.1:0", "--bundle", tampered,
		"--verification-key", pub, "--verification-key-id", "ops").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "digest mismatch") {
		t.Fatalf("stock opa with the tampered bundle: %v\n%s", err, out)
	}

	addr := freeAddr(t)
	cmd := exec.Command(bin, "run", "--server", "--addr", addr, "--bundle", good, "--verification-key", pub, "--verification-key-id", "ops", "--log-level", "error")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/health?bundles")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stock opa never became healthy: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	fixtures, err := engine.LoadFixtures(repo.Tests)
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	for _, fx := range fixtures {
		if fx.WantResult == nil {
			continue
		}
		body := fmt.Appendf(nil, `{"input": %s}`, fx.Input)
		resp, err := http.Post(base+"/v1/data/decisions/"+fx.Decision+"/decision", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Result json.RawMessage `json:"result"`
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if err != nil || !engine.SameJSON(doc.Result, fx.WantResult) {
			t.Errorf("%s/%s: stock opa answered %s (%v), want %s", fx.Decision, fx.Name, doc.Result, err, fx.WantResult)
		}
		asked++
	}
	if asked < 100 {
		t.Fatalf("asked %d fixtures, expected the repository's valid fixtures (100+)", asked)
	}
	t.Logf("stock opa answers %d fixtures from the bundle as they want", asked)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
