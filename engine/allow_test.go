package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

const quotaResult = "schemas/quota_check/result.json"

// withAllow is the quota decision with its result schema's outcome
// keyword line followed by an x-arbiter-allow member holding list.
func withAllow(t *testing.T, list string) Config {
	t.Helper()
	root := copyTree(t, quota)
	editFile(t, filepath.Join(root, quotaResult), `"x-arbiter-outcome": "allow",`,
		`"x-arbiter-outcome": "allow", "`+AllowKeyword+`": `+list+`,`)
	return quotaConfig(root)
}

func TestAllowKeywordIsCheckedAtLoad(t *testing.T) {
	for _, tc := range []struct {
		name, list, want string
	}{
		{"not an array", `true`, "must be an array"},
		{"a value the member cannot hold", `["yes"]`, `lists "yes", which the outcome member "allow" cannot hold`},
		{"a number", `[1]`, "only strings and booleans"},
		{"an object", `[{"a": 1}]`, "only strings and booleans"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probs := fmt.Sprint(loadProblems(t, withAllow(t, tc.list)))
			if !strings.Contains(probs, tc.want) || !strings.Contains(probs, "result.json") {
				t.Errorf("problems %s, want one in result.json saying %q", probs, tc.want)
			}
		})
	}
	t.Run("outcome member not declared", func(t *testing.T) {
		cfg := withAllow(t, `[true]`)
		editFile(t, filepath.Join(cfg.Schemas, "quota_check", "result.json"), `"x-arbiter-outcome": "allow"`, `"x-arbiter-outcome": "verdict"`)
		probs := fmt.Sprint(loadProblems(t, cfg))
		if !strings.Contains(probs, `needs the outcome member "verdict" declared under properties`) {
			t.Errorf("problems %s", probs)
		}
	})
}

func TestVerdictAllows(t *testing.T) {
	s := mustLoad(t, withAllow(t, `[true]`))
	v, ok := s.Verdict("quota_check")
	if !ok || !v.Declared || v.OutcomeKey != "allow" {
		t.Fatalf("verdict %+v %v", v, ok)
	}
	for _, tc := range []struct {
		body          string
		allowed, want bool
	}{
		{`{"tenant":"t","used":1}`, true, true},
		{`{"tenant":"t","used":1,"suspended":true}`, false, true},
	} {
		d, err := s.Decide(context.Background(), "quota_check", []byte(tc.body), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got, known := v.Allows(d.Result); got != tc.allowed || known != tc.want {
			t.Errorf("%s: Allows(%s) = %v, %v", tc.body, d.Result, got, known)
		}
	}
	for _, result := range []string{`{"allow":"true"}`, `{"allow":[true]}`, `{}`, `[]`, `not json`} {
		if got, known := v.Allows([]byte(result)); got || !known {
			t.Errorf("Allows(%s) = %v, %v; want a refusal", result, got, known)
		}
	}

	plain := mustLoad(t, quotaConfig(quota))
	v, _ = plain.Verdict("quota_check")
	if got, known := v.Allows([]byte(`{"allow":true,"reasons":[]}`)); got || known {
		t.Errorf("without %s: Allows = %v, %v; want unknown", AllowKeyword, got, known)
	}
	if _, ok := plain.Verdict("nope"); ok {
		t.Error("a verdict for a decision that does not exist")
	}
}
