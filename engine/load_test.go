package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

const quota = "testdata/quota"

// copyTree copies src into a fresh temporary folder and returns it.
var copyTree = testfiles.CopyTree

func quotaConfig(root string) Config {
	return Config{Policies: filepath.Join(root, "policies"), Schemas: filepath.Join(root, "schemas")}
}

// editFile replaces old by new in a file, failing when old is absent.
var editFile = testfiles.Edit

func mustLoad(t testing.TB, cfg Config) *Snapshot {
	t.Helper()
	s, err := Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func loadProblems(t *testing.T, cfg Config) []Problem {
	t.Helper()
	_, err := Load(context.Background(), cfg)
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("Load succeeded or failed without a LoadError: %v", err)
	}
	return le.Problems
}

func TestLoadRefusesBrokenPolicies(t *testing.T) {
	policy := filepath.Join("policies", "decisions", "quota_check", "policy.rego")
	tests := []struct {
		name     string
		edit     func(t *testing.T, root string)
		wantLine int // 0: any
		want     []string
	}{
		{
			name: "misspelt input field is a type error at its line",
			edit: func(t *testing.T, root string) {
				editFile(t, filepath.Join(root, policy), "input.used >=", "input.usd >=")
			},
			wantLine: 12,
			want:     []string{"policy.rego", "undefined ref: input.usd"},
		},
		{
			name: "http.send is refused naming builtin and file",
			edit: func(t *testing.T, root string) {
				editFile(t, filepath.Join(root, policy), "reasons :=", "probe := http.send({\"method\": \"GET\", \"url\": \"http://127.0.0.1:1/\"})\n\nreasons :=")
			},
			wantLine: 19,
			want:     []string{"policy.rego", "builtin http.send is refused"},
		},
		{
			name: "opa.runtime is refused",
			edit: func(t *testing.T, root string) {
				editFile(t, filepath.Join(root, policy), "reasons :=", "env := opa.runtime().env\n\nreasons :=")
			},
			want: []string{"builtin opa.runtime is refused"},
		},
		{
			name: "net.lookup_ip_addr is refused",
			edit: func(t *testing.T, root string) {
				editFile(t, filepath.Join(root, policy), "reasons :=", "ips := net.lookup_ip_addr(\"example.com\")\n\nreasons :=")
			},
			want: []string{"builtin net.lookup_ip_addr is refused"},
		},
		{
			name: "time.now_ns is refused",
			edit: func(t *testing.T, root string) {
				editFile(t, filepath.Join(root, policy), "reasons :=", "now := time.now_ns()\n\nreasons :=")
			},
			want: []string{"builtin time.now_ns is refused"},
		},
		{
			name: "syntax error",
			edit: func(t *testing.T, root string) {
				editFile(t, filepath.Join(root, policy), "reasons :=", "reasons := [")
			},
			wantLine: 21,
			want:     []string{"policy.rego", "rego_parse_error"},
		},
		{
			name: "missing result schema",
			edit: func(t *testing.T, root string) {
				if err := os.Remove(filepath.Join(root, "schemas", "quota_check", "result.json")); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"needs schemas quota_check/input.json and quota_check/result.json"},
		},
		{
			name: "package without input schema annotation",
			edit: func(t *testing.T, root string) {
				editFile(t, filepath.Join(root, policy), "# schemas:\n#   - input: schema.quota_check.input\n", "")
			},
			want: []string{"must declare `schemas: [{input: schema.quota_check.input}]`"},
		},
		{
			name: "data file that is not JSON",
			edit: func(t *testing.T, root string) {
				editFile(t, filepath.Join(root, "policies", "decisions", "quota_check", "data.json"), `{"limit": 10}`, `{"limit": 10,}`)
			},
			want: []string{"data.json", "invalid JSON"},
		},
		{
			name: "unused variable under strict mode",
			edit: func(t *testing.T, root string) {
				editFile(t, filepath.Join(root, policy), "if input.suspended == true", "if {\n\tx := 1\n\tinput.suspended == true\n}")
			},
			want: []string{"rego_compile_error", "assigned var x unused"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := copyTree(t, quota)
			tt.edit(t, root)
			probs := loadProblems(t, quotaConfig(root))
			var all []string
			for _, p := range probs {
				all = append(all, p.String())
			}
			joined := strings.Join(all, "\n")
			for _, w := range tt.want {
				if !strings.Contains(joined, w) {
					t.Errorf("problems do not mention %q:\n%s", w, joined)
				}
			}
			if tt.wantLine > 0 {
				found := false
				for _, p := range probs {
					found = found || p.Line == tt.wantLine
				}
				if !found {
					t.Errorf("no problem at line %d:\n%s", tt.wantLine, joined)
				}
			}
		})
	}
}

func TestRefusedBuiltinsCoverOutsideWorld(t *testing.T) {
	refused := map[string]bool{}
	for _, n := range RefusedBuiltins() {
		refused[n] = true
	}
	for _, n := range []string{"http.send", "net.lookup_ip_addr", "opa.runtime", "time.now_ns", "rand.intn", "uuid.rfc4122"} {
		if !refused[n] {
			t.Errorf("%s is not refused", n)
		}
	}
	for _, n := range []string{"count", "sort", "object.union", "regex.match", "json.marshal"} {
		if refused[n] {
			t.Errorf("pure builtin %s is refused", n)
		}
	}
}

// TestDecisionAddedWithFilesOnly proves that a decision the Go code has never
// heard of is served, explained and tested from its files alone.
func TestDecisionAddedWithFilesOnly(t *testing.T) {
	s := mustLoad(t, quotaConfig(quota))
	if got := s.Names(); len(got) != 1 || got[0] != "quota_check" {
		t.Fatalf("decisions = %v", got)
	}
	d, err := s.Decide(context.Background(), "quota_check", []byte(`{"tenant":"t","used":10,"suspended":true}`), Options{Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	if !SameJSON(d.Result, []byte(`{"allow":false,"reasons":["quota_exhausted","tenant_suspended"]}`)) {
		t.Errorf("result = %s", d.Result)
	}
	if d.Outcome != "false" {
		// x-arbiter-outcome names "allow", a boolean.
		t.Errorf("outcome = %q, want \"false\"", d.Outcome)
	}
	if len(d.Explanation) != 2 || d.Explanation[0].Title != "Quota exhausted" || !d.Explanation[0].Fired || !d.Explanation[1].Fired {
		t.Errorf("explanation = %+v", d.Explanation)
	}
	info := s.Decisions()
	if len(info) != 1 || info[0].Title != "Quota check" || len(info[0].Rules) != 2 || info[0].Path != "/v1/data/decisions/quota_check/decision" {
		t.Errorf("decisions info = %+v", info)
	}
	rep, err := RunTests(context.Background(), quotaConfig(quota), TestOptions{Tests: filepath.Join(quota, "tests"), Coverage: true})
	if err != nil {
		t.Fatal(err)
	}
	pass, fail, _ := rep.Counts()
	if fail != 0 || pass != 7 {
		t.Errorf("tests: %d passed, %d failed: %v", pass, fail, rep.Problems())
	}
	if rep.Coverage == nil || rep.Coverage.Percent < 100 {
		t.Errorf("coverage = %+v", rep.Coverage)
	}
}

func TestRevisionIsContentHash(t *testing.T) {
	a := mustLoad(t, quotaConfig(quota))
	root := copyTree(t, quota)
	b := mustLoad(t, quotaConfig(root))
	if a.Revision != b.Revision {
		t.Errorf("same content, revisions %s and %s", a.Revision, b.Revision)
	}
	editFile(t, filepath.Join(root, "policies", "decisions", "quota_check", "data.json"), "10", "11")
	if c := mustLoad(t, quotaConfig(root)); c.Revision == a.Revision {
		t.Error("a data edit did not change the revision")
	}
	// Editor leftovers are not part of a policy.
	if err := os.WriteFile(filepath.Join(root, "policies", ".#policy.rego"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustLoad(t, quotaConfig(root))
}

func TestLoadGateRefusesFailingTests(t *testing.T) {
	root := copyTree(t, quota)
	cfg := quotaConfig(root)
	cfg.Tests = filepath.Join(root, "tests")
	mustLoad(t, cfg)
	// A data edit that the fixtures contradict must not load.
	editFile(t, filepath.Join(root, "policies", "decisions", "quota_check", "data.json"), "10", "9")
	probs := loadProblems(t, cfg)
	joined := ""
	for _, p := range probs {
		joined += p.String() + "\n"
	}
	for _, w := range []string{"test_fixtures_all_pass", "fixture quota_check/below_limit", "quota_check_test.rego"} {
		if !strings.Contains(joined, w) {
			t.Errorf("problems do not name %q:\n%s", w, joined)
		}
	}
}

func TestSymlinkedFolder(t *testing.T) {
	root := copyTree(t, quota)
	link := filepath.Join(t.TempDir(), "current")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	s := mustLoad(t, quotaConfig(link))
	if s.Revision != mustLoad(t, quotaConfig(quota)).Revision {
		t.Error("a folder reached through a symlink loads differently")
	}
}

func TestCheckFindsFormattingAndFixtureProblems(t *testing.T) {
	root := copyTree(t, quota)
	if probs, _ := Check(context.Background(), quotaConfig(root), filepath.Join(root, "tests")); len(probs) != 0 {
		t.Fatalf("clean tree has problems: %v", probs)
	}
	editFile(t, filepath.Join(root, "policies", "decisions", "quota_check", "policy.rego"), "reasons := [", "reasons   := [")
	editFile(t, filepath.Join(root, "tests", "fixtures", "quota_check", "cases.json"), `"used": 9}`, `"used": -9}`)
	probs, _ := Check(context.Background(), quotaConfig(root), filepath.Join(root, "tests"))
	joined := ""
	for _, p := range probs {
		joined += p.String() + "\n"
	}
	for _, w := range []string{"policy.rego:19: not formatted", "fixture below_limit: wants a result, but its input is rejected (input_schema_invalid)"} {
		if !strings.Contains(joined, w) {
			t.Errorf("check output lacks %q:\n%s", w, joined)
		}
	}
}
