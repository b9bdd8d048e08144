package decisionlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// backupTimeFormat is the time in the name of a file the writer rotated
// away: lumberjack's PATH-without-ext-TIMESTAMP.ext.
const backupTimeFormat = "2006-01-02T15-04-05.000"

// Files returns the log file at path, then the backups the writer rotated
// it into, newest first.
func Files(path string) ([]string, error) {
	dir, name := filepath.Split(path)
	ext := filepath.Ext(name)
	prefix := strings.TrimSuffix(name, ext) + "-"
	entries, err := os.ReadDir(filepath.Clean(dir + "."))
	if err != nil {
		return nil, err
	}
	var backups []string
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(n, prefix) || !strings.HasSuffix(n, ext) || len(n) < len(prefix)+len(ext) {
			continue
		}
		if _, err := time.Parse(backupTimeFormat, n[len(prefix):len(n)-len(ext)]); err == nil {
			backups = append(backups, filepath.Join(dir, n))
		}
	}
	slices.Sort(backups)
	slices.Reverse(backups)
	return append([]string{path}, backups...), nil
}

// ReadFile calls fn for every record of the JSON lines file at path, in
// order, with its 1-based line number. Log corruption does not stop an
// audit: a line that is not a record is skipped, and each warning returned
// names one skipped line by file and line. A last line without its newline
// is what a crash leaves mid-write; it is read when it is a whole record and
// skipped as torn otherwise. Blank lines are ignored. An error from fn stops
// the reading and is returned as is.
func ReadFile(path string, fn func(lineNo int, rec Record) error) (warnings []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// ReadBytes, not a Scanner: one line holds a whole input, up to 16 MiB
	// and more once base64-encoded.
	r := bufio.NewReaderSize(f, 64<<10)
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return warnings, fmt.Errorf("%s:%d: %w", path, lineNo, err)
		}
		atEOF := err != nil
		if atEOF && len(line) == 0 {
			return warnings, nil
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			var rec Record
			if perr := json.Unmarshal(trimmed, &rec); perr != nil {
				if atEOF {
					warnings = append(warnings, fmt.Sprintf("%s:%d: torn last line skipped (%d bytes without a newline): %v", path, lineNo, len(line), perr))
				} else {
					warnings = append(warnings, fmt.Sprintf("%s:%d: line skipped, not a decision record: %v", path, lineNo, perr))
				}
			} else if ferr := fn(lineNo, rec); ferr != nil {
				return warnings, ferr
			}
		}
		if atEOF {
			return warnings, nil
		}
	}
}
