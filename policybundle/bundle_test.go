package policybundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
)

// slowEval is the evaluation deadline of the gates these tests run: under
// -race on a shared machine a fixture can take longer than the default 2s.
const slowEval = 30 * time.Second

var repo = BuildOptions{Policies: "../policies", Schemas: "../schemas", Tests: "../policy_test"}

// keysDir is the folder testKeys wrote, removed by TestMain.
var keysDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if keysDir != "" {
		os.RemoveAll(keysDir)
	}
	os.Exit(code)
}

// testKeys writes an RSA key pair once per process: private.pem, public.pem.
var testKeys = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "policybundle-keys-")
	if err != nil {
		return "", err
	}
	keysDir = dir
	for _, name := range []string{"a", "b"} {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return "", err
		}
		pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, name+"-private.pem"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), 0o600); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, name+"-public.pem"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
})

func keyDir(t testing.TB) string {
	t.Helper()
	dir, err := testKeys()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// buildSigned builds the repository's revision without its gate (the
// tests that need the gate run it themselves): a gate under -race costs
// seconds, and these tests are about reading and verifying.
func buildSigned(t testing.TB, revision, key string) []byte {
	t.Helper()
	o := repo
	o.Revision, o.SkipGate = revision, true
	if key != "" {
		o.SigningKey = filepath.Join(keyDir(t), key+"-private.pem")
	}
	raw, _, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func verifier(t testing.TB, key string) Keys {
	return Keys{File: filepath.Join(keyDir(t), key+"-public.pem"), ID: "ops"}
}

// rewrite returns the tarball raw with edit applied to its files.
func rewrite(t testing.TB, raw []byte, edit func(files map[string][]byte)) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[strings.TrimPrefix(h.Name, "/")] = b
	}
	edit(files)
	out, err := writeTarball(files)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A bundle built from the repository reads back, verified, into the same
// revision the folders hold: same content hash, same gate passed.
func TestBuildReadRoundTrip(t *testing.T) {
	ctx := context.Background()
	o := repo
	o.Revision, o.SigningKey, o.EvalTimeout = "r1", filepath.Join(keyDir(t), "a-private.pem"), slowEval
	raw, _, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	vc, err := verifier(t, "a").VerificationConfig()
	if err != nil {
		t.Fatal(err)
	}
	rev, err := Read(raw, vc, "arbiter")
	if err != nil {
		t.Fatal(err)
	}
	if !rev.Signed || rev.Manifest.Revision != "r1" {
		t.Fatalf("signed %t revision %q", rev.Signed, rev.Manifest.Revision)
	}
	snap, err := engine.LoadFiles(ctx, rev.Files, engine.Config{EvalTimeout: slowEval})
	if err != nil {
		t.Fatal(err)
	}
	folders, err := engine.Load(ctx, engine.Config{Policies: repo.Policies, Schemas: repo.Schemas, Tests: repo.Tests})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Revision != "r1" || snap.Hash != folders.Revision || rev.ContentHash() != folders.Revision {
		t.Fatalf("revision %q hash %q manifest hash %q, want r1 and %q", snap.Revision, snap.Hash, rev.ContentHash(), folders.Revision)
	}
	// Reproducible: the same folders and key give the same bytes.
	if again, _, err := Build(ctx, o); err != nil || !bytes.Equal(again, raw) {
		t.Error("two builds of the same folders differ")
	}
}

// With a key configured, only a bundle signed by it and unchanged since is
// read; without one, an unsigned bundle is read and a signed one refused
// (as OPA does).
func TestReadVerifies(t *testing.T) {
	signed := buildSigned(t, "r1", "a")
	unsigned := buildSigned(t, "r1", "")
	otherKey := buildSigned(t, "r1", "b")
	tamper := func(pattern string, f func([]byte) []byte) []byte {
		return rewrite(t, signed, func(files map[string][]byte) {
			p := firstFile(t, files, pattern)
			files[p] = f(files[p])
		})
	}
	cases := []struct {
		name string
		raw  []byte
		keys Keys
		want string // "" reads
	}{
		{"signed, right key", signed, verifier(t, "a"), ""},
		{"unsigned, no key", unsigned, Keys{}, ""},
		{"unsigned, key", unsigned, verifier(t, "a"), "missing .signatures.json"},
		{"signed by another key", otherKey, verifier(t, "a"), "verification error"},
		{"signed, no key", signed, Keys{}, "verification key not provided"},
		{"a schema edited", tamper("schemas/*/input.json", func(b []byte) []byte { return withMember(t, b) }), verifier(t, "a"), "digest mismatch"},
		{"a policy edited", tamper("decisions/*/policy.rego", func(b []byte) []byte { return append(b, "\n"...) }), verifier(t, "a"), "digest mismatch"},
		{"a data value edited", tamper("decisions/*/data.json", func(b []byte) []byte { return withMember(t, b) }), verifier(t, "a"), "digest mismatch"},
		{"the manifest revision edited", tamper(".manifest", func(b []byte) []byte { return bytes.Replace(b, []byte(`"r1"`), []byte(`"r9"`), 1) }), verifier(t, "a"), "digest mismatch"},
		{"a file added", rewrite(t, signed, func(files map[string][]byte) {
			files["decisions/extra/policy.rego"] = []byte("package decisions.extra\n")
		}), verifier(t, "a"), "not included in bundle signature"},
		{"a fixture file removed", rewrite(t, signed, func(files map[string][]byte) {
			delete(files, firstFile(t, files, "fixtures/*/data.json"))
		}), verifier(t, "a"), "not found in the target bundle"},
		{"a wasm module, unsigned", rewrite(t, unsigned, func(files map[string][]byte) { files["policy.wasm"] = []byte{0} }), Keys{}, "not a file of an Arbiter bundle"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vc, err := c.keys.VerificationConfig()
			if err != nil {
				t.Fatal(err)
			}
			_, err = Read(c.raw, vc, "arbiter")
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want a refusal mentioning %q", err, c.want)
			}
		})
	}
}

// The builder refuses a folder layout that would not come back the same.
func TestBuildRefusesAmbiguousLayout(t *testing.T) {
	cases := []struct {
		name, folder, file, body, want string
	}{
		{"a test module in the policies", "policies", "lib/helper_test.rego", "package lib_test\n", "another kind of file"},
		{"a data file not named data.json", "policies", "lib/extra.json", "{}", "rename it"},
		{"a helper module among the tests", "policy_test", "helper.rego", "package helper\n", "*_test.rego"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range []string{"policies", "schemas", "policy_test"} {
				if err := os.CopyFS(filepath.Join(root, d), os.DirFS(filepath.Join("..", d))); err != nil {
					t.Fatal(err)
				}
			}
			p := filepath.Join(root, c.folder, c.file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(c.body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err := Build(context.Background(), BuildOptions{Policies: filepath.Join(root, "policies"), Schemas: filepath.Join(root, "schemas"), Tests: filepath.Join(root, "policy_test")})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a refusal mentioning %q", err, c.want)
			}
		})
	}
}
