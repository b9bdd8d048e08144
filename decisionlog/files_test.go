package decisionlog

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestFilesInFollowsTheWritersNames: a folder's logs are found by the names
// the writer gives its backups (backupName), each log's backups oldest
// first and then the log, a backup whose log is gone included, the lock
// file and other dot files left out.
func TestFilesInFollowsTheWritersNames(t *testing.T) {
	dir := t.TempDir()
	at := func(name string, min int) string {
		ext := filepath.Ext(name)
		return name[:len(name)-len(ext)] + "-" + time.Date(2026, 12, 2, 17, min, 0, 0, time.UTC).Format(backupTimeFormat) + ext
	}
	names := []string{"decisions.log", at("decisions.log", 2), at("decisions.log", 1), ".decisions.log.lock",
		at("gone.log", 5), "other", at("other", 3)}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := FilesIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range []string{at("decisions.log", 1), at("decisions.log", 2), "decisions.log", at("gone.log", 5), at("other", 3), "other"} {
		want = append(want, filepath.Join(dir, n))
	}
	if !slices.Equal(got, want) {
		t.Errorf("FilesIn:\n got %q\nwant %q", got, want)
	}
}
