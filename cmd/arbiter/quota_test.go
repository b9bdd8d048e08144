package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The test decision of engine/testdata/quota: tests that need a policy to
// edit, break or explain use it, so that they never name a rule of the
// repository's own policies (a rule edit needs no Go edit).
const (
	quotaRoot     = "../../engine/testdata/quota"
	quotaDecision = "quota_check"
	// quotaAllow is in the quota policy; quotaAllowBroken is a syntax error.
	quotaAllow       = `{"allow": count(reasons) == 0,`
	quotaAllowBroken = `{"allow": count(reasons)) == 0,`
)

// copyQuota copies the quota decision into a temporary folder laid out as
// the repository is (policies/, schemas/, policy_test/) and returns it.
func copyQuota(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for dst, src := range map[string]string{"policies": "policies", "schemas": "schemas", "policy_test": "tests"} {
		if err := os.CopyFS(filepath.Join(root, dst), os.DirFS(filepath.Join(quotaRoot, src))); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// addQuota adds the quota decision to a copy of the repository made by
// copyRepo: its policy, data, schemas, Rego test and fixtures.
func addQuota(t *testing.T, root string) {
	t.Helper()
	for _, dir := range []struct{ dst, src string }{
		{"policies/decisions/" + quotaDecision, "policies/decisions/" + quotaDecision},
		{"schemas/" + quotaDecision, "schemas/" + quotaDecision},
		{"policy_test/fixtures/" + quotaDecision, "tests/fixtures/" + quotaDecision},
	} {
		if err := os.CopyFS(filepath.Join(root, dir.dst), os.DirFS(filepath.Join(quotaRoot, dir.src))); err != nil {
			t.Fatal(err)
		}
	}
	test, err := os.ReadFile(filepath.Join(quotaRoot, "tests", quotaDecision+"_test.rego"))
	if err == nil {
		err = os.WriteFile(filepath.Join(root, "policy_test", quotaDecision+"_test.rego"), test, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}
