package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var decisionIDRE = regexp.MustCompile(`decision [0-9a-f]{8}-[0-9a-f]{4}-`)

// TestLocalCommandsTextShowsTheirJSON: the commands that work on files show
// in their text every value their --format json has (textHasJSON), as the
// client commands do against a server (TestClientCommandsGolden): eval
// explained (a refusal and an allowance), test -v, and replay. A decision
// id is fresh each run: the text names one, the JSON another.
func TestLocalCommandsTextShowsTheirJSON(t *testing.T) {
	t.Parallel()
	log := writeQuotaLog(t, quotaTraffic)
	limit5 := quotaCopy(t, `{"limit": 5}`)
	repo := func(p string) string { return filepath.Join("..", "..", p) }
	folders := []string{"--policies", repo("policies"), "--schemas", repo("schemas")}
	quota := []string{"--policies", quotaPolicies, "--schemas", quotaSchemas}
	for _, tc := range []struct {
		args  []string
		stdin string
	}{
		{append([]string{"eval", "--decision", quotaDecision, "--input", "-", "--explain"}, quota...), `{"tenant": "t", "used": 10, "suspended": true}`},
		{append([]string{"eval", "--decision", quotaDecision, "--input", "-", "--explain"}, quota...), `{"tenant": "t", "used": 1}`},
		{append([]string{"test", "-v", "--tests", repo("policy_test"), "--run", "attempt"}, folders...), ""},
		{[]string{"replay", "--log", log, "--policies", limit5, "--schemas", quotaSchemas}, ""},
	} {
		args := tc.args
		text, _, code := runCLI(t, []byte(tc.stdin), append(args, "--format", "text")...)
		js, stderr, jcode := runCLI(t, []byte(tc.stdin), append(args, "--format", "json")...)
		var doc any
		if err := json.Unmarshal([]byte(js), &doc); err != nil || code != jcode {
			t.Fatalf("arbiter %s: text exit %d, json exit %d, %v\n%s%s", strings.Join(args, " "), code, jcode, err, js, stderr)
		}
		if m, ok := doc.(map[string]any); ok && m["decision_id"] != nil {
			if !decisionIDRE.MatchString(text) {
				t.Errorf("arbiter %s: the text names no decision id:\n%s", args[0], text)
			}
			delete(m, "decision_id")
		}
		textHasJSON(t, args[0], text, "", doc)
	}
}
