package decisionlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenAfterTornLastLine: a crash can leave the log ending mid-line. The
// next Logger rotates that file away (it becomes a backup, torn line and
// all) and starts a new one, so that no record is glued to the torn one and
// no file starts with a blank line. Files lists both, newest first.
func TestOpenAfterTornLastLine(t *testing.T) {
	for name, existing := range map[string]string{
		"torn":  `{"decision_id":"old","decision":"quota_check"}` + "\n" + `{"decision_id":"torn","deci`,
		"whole": `{"decision_id":"old","decision":"quota_check"}` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "d.log")
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
			entries, _ := os.ReadDir(dir)
			files, err := Files(path) // the current file, then the backup
			if err != nil || len(files) != len(entries) {
				t.Fatalf("Files: %q, %v; the folder holds %d files", files, err, len(entries))
			}
			var ids, warnings []string
			for _, f := range files {
				w, err := ReadFile(f, func(_ int, r Record) error {
					ids = append(ids, r.DecisionID)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				warnings = append(warnings, w...)
			}
			want := "old,new-1,new-2"
			if name == "torn" {
				want = "new-1,new-2,old"
			}
			if strings.Join(ids, ",") != want {
				t.Errorf("records %v, want %s", ids, want)
			}
			data, _ := os.ReadFile(path)
			wantFiles, wantWarnings, wantStart := 1, 0, `{"decision_id":"old"`
			if name == "torn" {
				wantFiles, wantWarnings, wantStart = 2, 1, `{"decision_id":"new-1"`
			}
			if len(entries) != wantFiles || len(warnings) != wantWarnings || !strings.HasPrefix(string(data), wantStart) {
				t.Errorf("%d files, warnings %v, current file starts %.30q", len(entries), warnings, data)
			}
		})
	}
}
