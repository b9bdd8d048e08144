package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"

	"github.com/arbiter-dev/arbiter/decisionlog"
)

// LogFile reads the decision log that the server writes: its tail fills the
// ring when the process starts, and a decision the ring no longer holds
// (or holds without its input) is looked up in it.
type LogFile struct {
	Path string
}

// maxTailBytes bounds what Preload reads from the end of the log.
const maxTailBytes = 64 << 20

// Preload adds to ring the last records of the log (at most n, read from at
// most the last 64 MiB of the current file), oldest first. Lines that are
// not records are skipped, as replay skips them.
func (l LogFile) Preload(ring *Ring, n int) (int, error) {
	lines, err := tailLines(l.Path, n, maxTailBytes)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	added := 0
	for _, line := range lines {
		var rec decisionlog.Record
		if json.Unmarshal(line, &rec) != nil || rec.DecisionID == "" || !rec.IsDecision() {
			continue
		}
		ring.Add(rec)
		added++
	}
	return added, nil
}

// tailLines returns the last n complete lines of the file at path, reading
// backwards at most max bytes.
func tailLines(path string, n, max int) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	const chunk = 1 << 20
	var buf []byte
	off := size
	for off > 0 && len(buf) < max && bytes.Count(buf, []byte{'\n'}) <= n {
		step := int64(chunk)
		if off < step {
			step = off
		}
		off -= step
		b := make([]byte, step)
		if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
			return nil, err
		}
		buf = append(b, buf...)
	}
	// Drop a torn last line (no newline yet) and, unless the whole file was
	// read, the partial first line.
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		buf = buf[:i+1]
	} else {
		return nil, nil
	}
	if off > 0 {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		}
	}
	var lines [][]byte
	for _, line := range bytes.Split(buf, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) > 0 {
			lines = append(lines, line)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, nil
}

var errFound = errors.New("found")

// Lookup finds the record of a decision id in the log and the backups the
// writer rotated it into (named by the writer's own code), newest first.
func (l LogFile) Lookup(id string) (decisionlog.Record, bool, error) {
	if l.Path == "" || l.Path == "-" {
		return decisionlog.Record{}, false, nil
	}
	var found decisionlog.Record
	err := decisionlog.ReadLog(l.Path, func(rec decisionlog.Record) error {
		if rec.DecisionID == id && rec.IsDecision() {
			found = rec
			return errFound
		}
		return nil
	})
	switch {
	case errors.Is(err, errFound):
		return found, true, nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return decisionlog.Record{}, false, err
	}
	return decisionlog.Record{}, false, nil
}
