package decisionlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenAfterTornLastLine: a crash can leave the log ending mid-line. The
// next Logger on that file must end the torn line before its first record,
// or that record is glued to it and lost too.
func TestOpenAfterTornLastLine(t *testing.T) {
	for name, existing := range map[string]string{
		"torn":  `{"decision_id":"old","decision":"quota_check"}` + "\n" + `{"decision_id":"torn","deci`,
		"whole": `{"decision_id":"old","decision":"quota_check"}` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.log")
			if err := os.WriteFile(path, []byte(existing), 0o640); err != nil {
				t.Fatal(err)
			}
			l, err := Open(Options{Path: path, Logger: testLogger(&lockedBuffer{})})
			if err != nil {
				t.Fatal(err)
			}
			l.Log(rec("new-1"))
			l.Log(rec("new-2"))
			closeLog(t, l)
			var ids []string
			warnings, err := ReadFile(path, func(_ int, r Record) error {
				ids = append(ids, r.DecisionID)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(ids, ",") != "old,new-1,new-2" {
				t.Errorf("records %v, want old,new-1,new-2", ids)
			}
			wantWarnings := 0
			if name == "torn" {
				wantWarnings = 1
			}
			if len(warnings) != wantWarnings {
				t.Errorf("warnings %v, want %d", warnings, wantWarnings)
			}
		})
	}
}
