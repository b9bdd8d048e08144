package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
)

// runCLI runs the built binary and returns stdout, stderr and exit code.
func runCLI(t *testing.T, stdin []byte, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestEvalExitCodes: eval prints the envelope and exits 0 for a decision
// (allowed or refused), prints the error document and exits 2 for bad
// input, and exits 1 for anything else; every shared example and a sample
// of the fixtures (each decision, each wanted error) give their wanted
// outcome through the binary.
func TestEvalExitCodes(t *testing.T) {
	t.Parallel()
	root := copyRepo(t)
	fixtures, err := engine.LoadFixtures(filepath.Join(root, "policy_test"))
	if err != nil {
		t.Fatal(err)
	}
	// Shared examples, when the checkout has them beside it.
	examples, _ := filepath.Glob(filepath.Join("..", "..", "..", "shared", "examples", "*.json"))
	for _, f := range examples {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var ex struct {
			Decision string `json:"decision"`
			engine.Fixture
		}
		if err := json.Unmarshal(b, &ex); err != nil {
			t.Fatal(err)
		}
		ex.Fixture.Decision, ex.Fixture.Name = ex.Decision, filepath.Base(f)
		fixtures = append(fixtures, ex.Fixture)
	}
	args := []string{"--policies", filepath.Join(root, "policies"), "--schemas", filepath.Join(root, "schemas")}
	var checked atomic.Int64
	t.Run("fixtures", func(t *testing.T) { // each eval is a process: they run at once
		kinds := map[string]bool{}
		for i, fx := range fixtures {
			// Every example; for each decision, the first fixture that wants
			// each error code and the first that wants none; and every
			// sixteenth fixture (TestServeEndToEnd decides them all through
			// the binary, over HTTP).
			kind := fx.Decision
			if fx.WantError != nil {
				kind += "/" + string(fx.WantError.Code)
			}
			if first := !kinds[kind]; !first && i%16 != 0 && !strings.HasSuffix(fx.Name, ".json") {
				continue
			}
			kinds[kind] = true
			t.Run(fx.Name, func(t *testing.T) {
				t.Parallel()
				out, stderr, code := runCLI(t, fx.RequestBody(), append([]string{"eval", "--decision", fx.Decision, "--input", "-"}, args...)...)
				var d *engine.Decision
				var derr error
				if fx.WantError != nil {
					want := 1
					if fx.WantError.Code == engine.CodeMalformedJSON || fx.WantError.Code == engine.CodeInputSchemaInvalid {
						want = 2
					}
					if code != want {
						t.Fatalf("exit %d, want %d (%s)", code, want, stderr)
					}
					var doc engine.Document
					if err := json.Unmarshal([]byte(out), &doc); err != nil {
						t.Fatalf("stdout is not an error document: %s", out)
					}
					derr = &engine.Error{Code: doc.Error.Code, Violations: doc.Error.Violations}
				} else {
					if code != 0 {
						t.Fatalf("exit %d, want 0 (%s)", code, stderr)
					}
					d = &engine.Decision{}
					if err := json.Unmarshal([]byte(out), d); err != nil || d.ID == "" || d.Name != fx.Decision || d.Revision == "" {
						t.Fatalf("envelope %s (%v)", out, err)
					}
				}
				if msg := engine.CheckOutcome(fx, d, derr); msg != "" {
					t.Fatal(msg)
				}
				checked.Add(1)
			})
		}
	})
	if checked.Load() < 20 {
		t.Errorf("only %d fixtures went through arbiter eval", checked.Load())
	}

	// Anything else is exit 1 (explanations: golden_test.go).
	quota := copyQuota(t)
	in := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(in, []byte(`{"tenant": "t", "used": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	policies, schemas := filepath.Join(quota, "policies"), filepath.Join(quota, "schemas")
	for name, a := range map[string][]string{
		"unknown decision": {"eval", "--decision", "nope", "--input", in, "--policies", policies, "--schemas", schemas},
		"missing input":    {"eval", "--decision", quotaDecision, "--input", filepath.Join(quota, "missing.json"), "--policies", policies, "--schemas", schemas},
		"no flags":         {"eval"},
		"broken policies":  {"eval", "--decision", quotaDecision, "--input", in, "--policies", schemas, "--schemas", schemas},
	} {
		if _, _, code := runCLI(t, nil, a...); code != 1 {
			t.Errorf("%s: exit %d, want 1", name, code)
		}
	}
}

// TestCheckAndTestCommands: check and test pass on the repository and name
// file and line of what breaks them.
func TestCheckAndTestCommands(t *testing.T) {
	t.Parallel()
	root := copyRepo(t)
	args := folderArgs(root)
	if out, stderr, code := runCLI(t, nil, append([]string{"check"}, args...)...); code != 0 {
		t.Fatalf("check: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code := runCLI(t, nil, append([]string{"test", "--coverage", "--threshold", "95"}, args...)...)
	if code != 0 || !strings.Contains(out, "summary: ") || !strings.Contains(out, " 0 failed") {
		t.Fatalf("test: exit %d\n%s%s", code, out, stderr)
	}
	// The rest on the test decision, whose rules the test may name.
	quota := copyQuota(t)
	args = folderArgs(quota)
	out, _, code = runCLI(t, nil, append([]string{"test", "--format", "json", "--run", "exhausted"}, args...)...)
	var rep engine.TestReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Results) == 0 {
		t.Fatalf("test --format json --run: exit %d\n%s", code, out)
	}
	for _, r := range rep.Results {
		if !strings.Contains(r.Name, "exhausted") {
			t.Errorf("--run exhausted selected %s", r.Name)
		}
	}

	// Break a policy (misspelt field) and a fixture (a wrong want_result).
	policy := filepath.Join(quota, "policies", "decisions", quotaDecision, "policy.rego")
	editFile(t, policy, "input.used >=", "input.usd >=")
	out, _, code = runCLI(t, nil, append([]string{"check"}, args...)...)
	if code != 1 || !strings.Contains(out, "policy.rego:") || !strings.Contains(out, "undefined ref: input.usd") {
		t.Errorf("check on a misspelt field: exit %d\n%s", code, out)
	}
	editFile(t, policy, "input.usd >=", "input.used >=")
	data := filepath.Join(quota, "policies", "decisions", quotaDecision, "data.json")
	editFile(t, data, `"limit": 10`, `"limit": 9`)
	out, _, code = runCLI(t, nil, append([]string{"test"}, args...)...)
	if code != 1 || !strings.Contains(out, "FAIL  fixture "+quotaDecision+"/") || !strings.Contains(out, "cases.json") {
		t.Errorf("test after a data edit the fixtures contradict: exit %d\n%s", code, out)
	}

	if out, _, code := runCLI(t, nil, "version"); code != 0 || !strings.HasPrefix(out, "arbiter ") || !strings.Contains(out, "opa 1.22.4") {
		t.Errorf("version: exit %d %q", code, out)
	}
}

// TestBenchCommand: bench decides the input repeatedly and reports per
// decision figures; an input that gives an error is refused up front.
func TestBenchCommand(t *testing.T) {
	t.Parallel()
	quota := copyQuota(t)
	args := []string{"--policies", filepath.Join(quota, "policies"), "--schemas", filepath.Join(quota, "schemas")}
	in := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(in, []byte(`{"tenant": "t", "used": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runCLI(t, nil, append([]string{"bench", "--decision", quotaDecision, "--input", in, "--duration", "200ms", "--format", "json"}, args...)...)
	var res struct {
		Decisions   int   `json:"decisions"`
		NsPerOp     int64 `json:"ns_per_op"`
		AllocsPerOp int64 `json:"allocs_per_op"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Decisions < 1 || res.NsPerOp <= 0 || res.AllocsPerOp <= 0 {
		t.Fatalf("bench: exit %d, %s%s", code, out, stderr)
	}
	if out, _, code := runCLI(t, []byte(`{"x": 1}`), append([]string{"bench", "--decision", quotaDecision, "--input", "-"}, args...)...); code != 2 || !strings.Contains(out, "input_schema_invalid") {
		t.Errorf("bench on an invalid input: exit %d, %s", code, out)
	}
}

// testStamp is the version TestMain stamps the binary it builds with.
const testStamp = "v0.0.0-stamped-by-test-3f2a"

// A binary built as the Makefile and the Dockerfile build it, with
// -ldflags "-X main.version=..." (make build's, or the one TestMain
// builds), names that version in `arbiter version`, in /v1/status and in
// arbiter_build_info.
func TestStampedVersion(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	if stamp == "" {
		t.Fatal("ARBITER_BIN is set without ARBITER_VERSION, the version it was stamped with")
	}
	out, err := exec.Command(binPath, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "arbiter "+stamp+" (opa ") {
		t.Fatalf("arbiter version: %q %v, want the stamped %s", out, err, stamp)
	}
	args, _ := quickArgs(t)
	srv := startServer(t, args...)
	client := &http.Client{Timeout: 10 * time.Second}
	if v := status(t, client, srv.url)["version"]; v != stamp {
		t.Errorf("/v1/status version %v, want %s", v, stamp)
	}
	resp, err := client.Get(srv.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `arbiter_build_info{version="` + stamp + `"} 1`; !strings.Contains(string(b), want) {
		t.Errorf("/metrics lacks %s", want)
	}
	srv.stop(t)
}
