package engine

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The repository's own policies, schemas and tests.
var repo = Config{Policies: "../policies", Schemas: "../schemas"}

const repoTests = "../policy_test"

// repoFixtures are the fixtures of policy_test/.
func repoFixtures(t testing.TB) []Fixture {
	t.Helper()
	fixtures, err := LoadFixtures(repoTests)
	if err != nil {
		t.Fatal(err)
	}
	return fixtures
}

// TestRepositoryFixtures runs every fixture of policy_test/ through the full
// Decide path, one subtest each, and the Rego tests through OPA's tester.
func TestRepositoryFixtures(t *testing.T) {
	s := mustLoad(t, repo)
	fixtures := repoFixtures(t)
	perDecision := map[string]int{}
	for _, fx := range fixtures {
		perDecision[fx.Decision]++
		t.Run(fx.Decision+"/"+fx.Name, func(t *testing.T) {
			if r := s.RunFixture(context.Background(), fx); !r.Pass {
				t.Errorf("%s: %s", fx.File, r.Message)
			}
		})
	}
	for _, name := range s.Names() {
		if perDecision[name] < 10 {
			t.Errorf("decision %s has %d fixtures; every decision needs its rules covered", name, perDecision[name])
		}
	}
	rep, err := RunTests(context.Background(), repo, TestOptions{Tests: repoTests, Coverage: true})
	if err != nil {
		t.Fatal(err)
	}
	rego := 0
	for _, r := range rep.Results {
		if r.Kind == "rego" {
			rego++
		}
	}
	if _, fail, _ := rep.Counts(); fail > 0 {
		t.Errorf("policy tests failed: %v", rep.Problems())
	}
	if rego < 30 {
		t.Errorf("%d Rego tests ran, want at least 30", rego)
	}
	if rep.Coverage == nil || rep.Coverage.Percent < 95 {
		t.Errorf("policy coverage %+v, want at least 95%%", rep.Coverage)
	}
}

// TestSharedExamples decides the worked examples of the design folder, when
// the checkout has it beside it (CI does).
func TestSharedExamples(t *testing.T) {
	dir := "../../shared/examples"
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) == 0 {
		t.Skip("no ../shared/examples beside this checkout")
	}
	s := mustLoad(t, repo)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var ex struct {
				Decision string `json:"decision"`
				Fixture
			}
			if err := json.Unmarshal(b, &ex); err != nil {
				t.Fatal(err)
			}
			ex.Fixture.Decision = ex.Decision
			if r := s.RunFixture(context.Background(), ex.Fixture); !r.Pass {
				t.Error(r.Message)
			}
		})
	}
}

// TestFieldDiff: a failing fixture shows the members that differ, one a
// line, in the fixture's key order, then the members only the result has.
func TestFieldDiff(t *testing.T) {
	for _, tc := range []struct {
		name, want, got, diff string
	}{
		{"one member, fixture order", `{"b": 1, "a": [1, 2], "c": null}`, `{"a": [1], "c": null, "b": 1}`,
			"  /a: want [1,2], got [1] (missing 2)\n"},
		{"reordered", `{"a": [1, 2]}`, `{"a": [2, 1, 3]}`,
			"  /a: want [1,2], got [2,1,3] (extra 3)\n"},
		{"same elements", `{"a": [1, 2]}`, `{"a": [2, 1]}`,
			"  /a: want [1,2], got [2,1] (the same elements, in another order or number)\n"},
		{"several, in the fixture's order", `{"z": true, "a": "x"}`, `{"a": "y", "z": false}`,
			"  /z: want true, got false\n  /a: want \"x\", got \"y\"\n"},
		{"missing and extra", `{"a/b": 1}`, `{"c": 2}`,
			"  /a~1b: want 1, got no member\n  /c: want no member, got 2\n"},
		{"not objects", `[1]`, `{"a": 1}`,
			"  want [1]\n  got  {\"a\":1}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FieldDiff([]byte(tc.want), []byte(tc.got)); got != tc.diff {
				t.Errorf("FieldDiff:\n%s\nwant:\n%s", got, tc.diff)
			}
		})
	}
}
