package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/arbiter-dev/arbiter/internal/golden"
)

// TestEvalExplainGolden: what `arbiter eval --explain` prints for the quota
// test decision, an error document included, as
// testdata/golden/eval_explain.golden records it (decision ids, the revision
// and the temporary folder masked). After an intended change:
// go test ./cmd/arbiter/ -run TestEvalExplainGolden -update
func TestEvalExplainGolden(t *testing.T) {
	quota := copyQuota(t)
	args := []string{"--decision", quotaDecision, "--input", "-", "--explain", "--policies", filepath.Join(quota, "policies"), "--schemas", filepath.Join(quota, "schemas")}
	var out bytes.Buffer
	for _, in := range []string{`{"tenant": "t", "used": 10, "suspended": true}`, `{"tenant": "t", "used": 1}`, `{"tenant": "t", "used": -1}`} {
		stdout, stderr, code := runCLI(t, []byte(in), append([]string{"eval"}, args...)...)
		fmt.Fprintf(&out, "### arbiter eval --explain <<< %s\nexit %d\n%s\n", in, code, golden.Mask([]byte(stdout), quota))
		if stderr != "" && code == 0 {
			t.Errorf("%s: stderr %s", in, stderr)
		}
	}
	golden.Check(t, "testdata/golden/eval_explain.golden", out.Bytes())
}
