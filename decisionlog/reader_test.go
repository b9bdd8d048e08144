package decisionlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFile(t *testing.T) {
	good := func(id string) string {
		return fmt.Sprintf(`{"decision_id":%q,"time":"2025-01-02T03:04:05Z","decision":"quota_check","path":"/v1/decisions/quota_check","input":{"tenant":"t","used":1},"duration_ns":1}`, id)
	}
	long := `{"decision_id":"long","time":"2025-01-02T03:04:05Z","decision":"d","path":"/","input":{"pad":"` + strings.Repeat("x", 1<<20) + `"},"duration_ns":1}`
	tests := []struct {
		name     string
		content  string
		wantIDs  string // id@line, in order
		warnings []string
	}{
		{"clean", good("a") + "\n" + good("b") + "\n", "a@1 b@2", nil},
		{"torn last line", good("a") + "\n" + good("b") + "\n" + good("c")[:40], "a@1 b@2", []string{":3: torn last line"}},
		{"whole last line without newline", good("a") + "\n" + good("b"), "a@1 b@2", nil},
		{"corrupt middle line", good("a") + "\n{\"decision_id\": garbage\n" + good("c") + "\n", "a@1 c@3", []string{":2: line skipped"}},
		{"not an object", "42\n" + good("b") + "\n", "b@2", []string{":1: line skipped"}},
		{"blank lines ignored", "\n" + good("a") + "\n\n", "a@2", nil},
		{"line longer than 64 KiB", long + "\n" + good("b") + "\n", "long@1 b@2", nil},
		{"empty file", "", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log.jsonl")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			var got []string
			warnings, err := ReadFile(path, func(n int, r Record) error {
				got = append(got, fmt.Sprintf("%s@%d", r.DecisionID, n))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, " ") != tc.wantIDs {
				t.Errorf("records %q, want %q", strings.Join(got, " "), tc.wantIDs)
			}
			if len(warnings) != len(tc.warnings) {
				t.Fatalf("warnings %q, want %d", warnings, len(tc.warnings))
			}
			for i, w := range tc.warnings {
				if !strings.HasPrefix(warnings[i], path) || !strings.Contains(warnings[i], w) {
					t.Errorf("warning %q, want it to name %s and contain %q", warnings[i], path, w)
				}
			}
		})
	}
}

func TestReadFileErrors(t *testing.T) {
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing"), func(int, Record) error { return nil }); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
	path := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(path, []byte("{\"decision_id\":\"a\"}\n{\"decision_id\":\"b\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	calls := 0
	_, err := ReadFile(path, func(int, Record) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("err %v after %d calls, want the callback's error after 1", err, calls)
	}
}

// TestReadTail: the records of a file's last bytes, in order, the line the
// cut falls in skipped whatever its length; the whole file when it is
// smaller than the bound.
func TestReadTail(t *testing.T) {
	line := func(id string, pad int) string {
		return fmt.Sprintf(`{"decision_id":%q,"time":"2025-01-02T03:04:05Z","decision":"d","path":"/","input":{"pad":%q},"duration_ns":1}`+"\n", id, strings.Repeat("x", pad))
	}
	tail := line("c", 10) + line("d", 10)
	content := line("a", 10) + line("b", 200<<10) + tail
	path := filepath.Join(t.TempDir(), "decisions.log")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		max  int64
		want string
	}{
		{int64(len(tail)), "c d"},           // the cut falls at the start of c
		{int64(len(tail) - 1), "d"},         // the cut falls in c
		{int64(len(tail) + 1), "c d"},       // the cut falls on b's newline
		{int64(len(tail) + 100<<10), "c d"}, // the cut falls in b, longer than the reader's buffer
		{int64(len(content)), "a b c d"},
		{1 << 30, "a b c d"},
	} {
		var got []string
		if err := ReadTail(path, tc.max, func(rec Record) error {
			got = append(got, rec.DecisionID)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("last %d bytes: %v, want %s", tc.max, got, tc.want)
		}
	}
}
