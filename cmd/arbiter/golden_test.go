package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/arbiter-dev/arbiter/internal/golden"
)

// TestEvalExplainGolden: what `arbiter eval --explain` prints for the quota
// test decision, an error document included, as JSON and as text (the
// result, and only the rules that fired with their evidence), as
// testdata/golden/eval_explain.golden records it (decision ids, the revision
// and the temporary folder masked). After an intended change:
// go test ./cmd/arbiter/ -run TestEvalExplainGolden -update
func TestEvalExplainGolden(t *testing.T) {
	t.Parallel()
	quota := copyQuota(t)
	args := []string{"--decision", quotaDecision, "--input", "-", "--explain", "--policies", filepath.Join(quota, "policies"), "--schemas", filepath.Join(quota, "schemas")}
	var out bytes.Buffer
	for _, format := range []string{"json", "text"} {
		for _, in := range []string{`{"tenant": "t", "used": 10, "suspended": true}`, `{"tenant": "t", "used": 1}`, `{"tenant": "t", "used": -1}`} {
			stdout, stderr, code := runCLI(t, []byte(in), append([]string{"eval", "--format", format}, args...)...)
			stdout = textRevision.ReplaceAllString(stdout, "(revision <revision>, decision <id>)")
			fmt.Fprintf(&out, "### arbiter eval --explain --format %s <<< %s\nexit %d\n%s\n", format, in, code, golden.Mask([]byte(stdout), quota))
			if stderr != "" && code == 0 {
				t.Errorf("%s: stderr %s", in, stderr)
			}
		}
	}
	golden.Check(t, "testdata/golden/eval_explain.golden", out.Bytes())
}

// textRevision is the revision and decision id in eval's text format.
var textRevision = regexp.MustCompile(`\(revision [0-9a-f]+, decision [0-9a-f-]+\)`)

// TestCheckCompiledGolden: `arbiter check` says, per decision, whether it
// runs compiled (engine/ireval) or on topdown and why, as
// testdata/golden/check_compiled.golden records it. The quota test decision
// compiles; a copy of it named quota_traced, whose one extra rule calls
// trace (a builtin the compiled evaluator leaves to topdown), does not.
// After an intended change: go test ./cmd/arbiter/ -run TestCheckCompiledGolden -update
func TestCheckCompiledGolden(t *testing.T) {
	t.Parallel()
	const traced = "quota_traced"
	quota := copyQuota(t)
	policy, err := os.ReadFile(filepath.Join(quota, "policies", "decisions", quotaDecision, "policy.rego"))
	if err != nil {
		t.Fatal(err)
	}
	policy = bytes.ReplaceAll(policy, []byte(quotaDecision), []byte(traced))
	policy = append(policy, "\nfailures contains [3, \"traced\"] if trace(input.tenant)\n"...)
	for _, dir := range []string{"policies/decisions/" + traced, "schemas/" + traced} {
		if err := os.MkdirAll(filepath.Join(quota, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(quota, "policies", "decisions", traced), "policy.rego", policy)
	for _, f := range []string{"policies/decisions/%s/data.json", "schemas/%s/input.json", "schemas/%s/result.json"} {
		b, err := os.ReadFile(filepath.Join(quota, fmt.Sprintf(f, quotaDecision)))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, quota, fmt.Sprintf(f, traced), b)
	}
	stdout, stderr, code := runCLI(t, nil, append([]string{"check"}, folderArgs(quota)...)...)
	if code != 0 {
		t.Fatalf("arbiter check: exit %d\n%s%s", code, stdout, stderr)
	}
	golden.Check(t, "testdata/golden/check_compiled.golden", golden.Mask([]byte(stdout), quota))
}
