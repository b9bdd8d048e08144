package decisionlog

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/internal/testfiles"
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
			l, err := Open(Options{Path: path, Logger: testLogger(&testfiles.Buffer{})})
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

// lineGenerator streams head, then n bytes of 'x', then tail, without
// holding them.
type lineGenerator struct {
	head, tail string
	n          int64
	off        int64
}

func (g *lineGenerator) Read(p []byte) (int, error) {
	total := int64(len(g.head)) + g.n + int64(len(g.tail))
	if g.off >= total {
		return 0, io.EOF
	}
	i := 0
	for ; i < len(p) && g.off < total; i, g.off = i+1, g.off+1 {
		switch {
		case g.off < int64(len(g.head)):
			p[i] = g.head[g.off]
		case g.off < int64(len(g.head))+g.n:
			p[i] = 'x'
		default:
			p[i] = g.tail[g.off-int64(len(g.head))-g.n]
		}
	}
	return i, nil
}

// TestLineLongerThanTheWriterWritesIsTorn: a line longer than the largest
// record the writer writes is discarded while it is read (the reader's
// allocations stay far below its size), reported as one torn line, and the
// records after it are read. Before, a 300 MB line without a newline was
// held whole (636 MiB peak).
func TestLineLongerThanTheWriterWritesIsTorn(t *testing.T) {
	const bound, huge = 1 << 20, 24 << 20 // held whole, the line alone would pass the 8 MiB below
	good := func(id string) string { return fmt.Sprintf(`{"decision_id":%q,"decision":"d"}`, id) + "\n" }
	for _, tc := range []struct{ name, tail, wantIDs string }{
		{"records after it", `"}}` + "\n" + good("after-1") + good("after-2"), "before,after-1,after-2"},
		{"last line without newline", `"}}`, "before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gen := &lineGenerator{head: good("before") + `{"decision_id":"huge","input":{"pad":"`, n: huge, tail: tc.tail}
			var ids []string
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			warnings, err := readRecords(gen, "gen.log", bound, func(_ int, r Record) error {
				ids = append(ids, r.DecisionID)
				return nil
			})
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
				t.Errorf("reading a %d-byte line allocated %d bytes; the bound is %d", huge, alloc, bound)
			}
			if got := strings.Join(ids, ","); got != tc.wantIDs {
				t.Errorf("records %s, want %s", got, tc.wantIDs)
			}
			if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "gen.log:2: torn line skipped") {
				t.Errorf("warnings %q, want one torn line at gen.log:2", warnings)
			}
		})
	}
	if got, want := MaxLineBytes(0), int64(DefaultMaxMegabytes)<<20; got != want {
		t.Errorf("ReadFile's bound %d, want the default rotation size %d", got, want)
	}
}
