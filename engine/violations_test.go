package engine

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestViolationsAreBounded: a small body with a million failing leaves is
// answered quickly with at most MaxViolations (+1 summary) violations.
func TestViolationsAreBounded(t *testing.T) {
	s := mustLoad(t, repo)
	fixtures, err := LoadFixtures(repoTests)
	if err != nil {
		t.Fatal(err)
	}
	base := string(fixtureInputFor(t, fixtures, "bootstrap_restart", "interrupted_bootstrap_unprepared_unrecorded__resumed"))
	empty := strings.TrimSuffix(strings.Repeat("{},", 200000), ",")
	for _, wrapped := range []bool{false, true} {
		body := strings.Replace(base, `"outbox": []`, `"outbox": [`+empty+`]`, 1)
		if body == base {
			t.Fatal("fixture has no empty outbox to replace")
		}
		if wrapped {
			body = `{"input":` + body + `}`
		}
		start := time.Now()
		_, err := s.Decide(context.Background(), "bootstrap_restart", []byte(body), Options{Wrapped: wrapped})
		took := time.Since(start)
		e := AsError(err)
		if e.Code != CodeInputSchemaInvalid || len(e.Violations) != MaxViolations+1 {
			t.Fatalf("got %s with %d violations", e.Code, len(e.Violations))
		}
		if last := e.Violations[MaxViolations]; last.Path != "" || !strings.Contains(last.Message, "more violations not listed") {
			t.Errorf("last violation = %+v", last)
		}
		if e.Violations[0].Path != "/runnerState/outbox/0/byteSize" {
			t.Errorf("first violation at %q", e.Violations[0].Path)
		}
		t.Logf("wrapped=%v: %d KB body rejected in %s", wrapped, len(body)>>10, took)
	}
}

func fixtureInputFor(t *testing.T, fixtures []Fixture, decision, name string) []byte {
	for _, fx := range fixtures {
		if fx.Decision == decision && fx.Name == name {
			return fx.Input
		}
	}
	t.Fatalf("no fixture %s/%s", decision, name)
	return nil
}
