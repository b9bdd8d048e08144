package engine

import (
	"slices"
	"testing"
)

// TestStaleWords: a re-recorded fixture's name or note is named when it
// repeats a word that only the old result's strings held. The results here
// are invented (no rule of the policies is named in Go).
func TestStaleWords(t *testing.T) {
	const (
		open   = `{"verdict": "gate_open", "why": ["within_quota"], "wait": 30}`
		closed = `{"verdict": "gate_closed", "why": ["quota_spent"], "wait": null}`
	)
	for _, tc := range []struct {
		name, text, want, got string
		stale                 []string
	}{
		{"the old code in the name", "case_within_quota", open, closed, []string{"within"}},
		{"the old code's words in prose", "the Gate is OPEN, within its quota", open, closed, []string{"open", "within"}},
		{"a word both results hold is not stale", "quota and gate", open, closed, nil},
		{"a word only the new result holds is not stale", "the gate is closed, quota spent", open, closed, nil},
		{"nested strings count", "deep value", `{"a": {"b": [["deep_value"]]}}`, `{"a": {"b": [["other"]]}}`, []string{"deep", "value"}},
		{"member names are not strings of the result", "verdict why", open, `{}`, nil},
		{"numbers and booleans are not words", "wait 30 true", `{"wait": 30, "ok": true}`, `{"wait": null, "ok": false}`, nil},
		{"camelCase splits", "gateOpen", open, closed, []string{"open"}},
		{"words shorter than minStaleWord are prose", "not the run", `{"v": "not_run_done"}`, `{"v": "x"}`, nil},
		{"each word once, sorted", "within open within_open", open, closed, []string{"open", "within"}},
		{"a result that is not JSON has no words", "gate open", `{`, closed, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := staleWords(tc.text, []byte(tc.want), []byte(tc.got)); !slices.Equal(got, tc.stale) {
				t.Errorf("staleWords(%q) = %q, want %q", tc.text, got, tc.stale)
			}
		})
	}
}
