package engine

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRunIDPointer(t *testing.T) {
	mark := map[string]any{"type": "string", RunIDKeyword: true}
	for _, tc := range []struct {
		name   string
		schema string
		want   []string
	}{
		{"a top-level property", `{"properties": {"a": {"type": "string"}, "id": MARK}}`, []string{"id"}},
		{"nested", `{"properties": {"x": {"properties": {"y": MARK}}}}`, []string{"x", "y"}},
		{"through a $ref", `{"properties": {"r": {"$ref": "#/definitions/r"}}, "definitions": {"r": {"properties": {"id": MARK}}}}`, []string{"r", "id"}},
		{"through $defs, a member with a slash", `{"properties": {"a/b": {"$ref": "#/$defs/r"}}, "$defs": {"r": {"properties": {"id": MARK}}}}`, []string{"a/b", "id"}},
		{"none marked", `{"properties": {"id": {"type": "string"}}}`, nil},
		{"marked false", `{"properties": {"id": {"type": "string", "x-arbiter-run-id": false}}}`, nil},
		{"the root itself is no run id", `{"x-arbiter-run-id": true, "properties": {}}`, nil},
		{"a $ref cycle", `{"properties": {"r": {"$ref": "#/definitions/r"}}, "definitions": {"r": {"properties": {"again": {"$ref": "#/definitions/r"}}}}}`, nil},
		{"two marked: the first by name", `{"properties": {"b": MARK, "a": MARK}}`, []string{"a"}},
		{"a remote $ref is not followed", `{"properties": {"r": {"$ref": "https://example.com/s.json"}}}`, nil},
		{"not an object", `[]`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := json.Marshal(mark)
			var schema any
			if err := json.Unmarshal([]byte(strings.ReplaceAll(tc.schema, "MARK", string(m))), &schema); err != nil {
				t.Fatal(err)
			}
			got, ok := RunIDPointer(schema)
			if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
				t.Errorf("RunIDPointer = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

// TestRunIDIsCheckedAtLoad: the gate refuses a run id mark that is not a
// boolean, on a property that is not a string, or on two properties; a
// good one is the Snapshot's RunID.
func TestRunIDIsCheckedAtLoad(t *testing.T) {
	const input = "schemas/quota_check/input.json"
	edit := func(t *testing.T, pairs ...string) Config {
		root := copyTree(t, quota)
		for i := 0; i < len(pairs); i += 2 {
			editFile(t, filepath.Join(root, input), pairs[i], pairs[i+1])
		}
		return quotaConfig(root)
	}
	const tenant, used = `"tenant": {"type": "string", "minLength": 1}`, `"used": {"type": "integer",`
	for _, tc := range []struct {
		name  string
		pairs []string
		want  string
	}{
		{"not a boolean", []string{tenant, `"tenant": {"type": "string", "minLength": 1, "x-arbiter-run-id": "yes"}`}, "x-arbiter-run-id at /tenant must be true or false"},
		{"not a string", []string{used, `"used": {"x-arbiter-run-id": true, "type": "integer",`}, "x-arbiter-run-id marks /used, which is not a string"},
		{"two marked", []string{tenant, `"tenant": {"type": "string", "minLength": 1, "x-arbiter-run-id": true}`,
			`"suspended": {"type": "boolean"}`, `"suspended": {"type": "boolean"}, "other": {"type": "string", "x-arbiter-run-id": true}`},
			"x-arbiter-run-id marks 2 properties (/other, /tenant)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probs := fmt.Sprint(loadProblems(t, edit(t, tc.pairs...)))
			if !strings.Contains(probs, tc.want) || !strings.Contains(probs, "input.json") {
				t.Errorf("problems %s, want one in input.json saying %q", probs, tc.want)
			}
		})
	}
	s := mustLoad(t, edit(t, tenant, `"tenant": {"type": "string", "minLength": 1, "x-arbiter-run-id": true}`))
	if got, ok := s.RunID("quota_check"); !ok || !slices.Equal(got, []string{"tenant"}) {
		t.Errorf("RunID = %q, %v; want [tenant]", got, ok)
	}
	if got, ok := mustLoad(t, quotaConfig(copyTree(t, quota))).RunID("quota_check"); ok {
		t.Errorf("RunID of a schema with no mark = %q, want none", got)
	}
}
