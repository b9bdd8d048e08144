package decisionlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ReadLog calls fn for every record of the log a Logger keeps at path: the
// file, then the backups it rotated it into, newest file first (Files),
// each file in order. A file removed meanwhile (rotated away) is skipped,
// and so are the lines ReadFile skips. An error from fn stops the reading
// and is returned as is.
func ReadLog(path string, fn func(rec Record) error) error {
	files, err := Files(path)
	if err != nil {
		return err
	}
	for _, f := range files {
		_, err := ReadFile(f, func(_ int, rec Record) error { return fn(rec) })
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// ReadTail calls fn for every record of the last maxBytes of the file at
// path (the whole file when it is smaller), in order; the line the cut
// falls in is skipped, and so are the lines ReadFile skips.
func ReadTail(path string, maxBytes int64, fn func(rec Record) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	var r io.Reader = f
	if off := st.Size() - maxBytes; off > 0 {
		// From the byte before the cut, through the first newline: the rest
		// of the line the cut falls in (nothing when it falls at a line's
		// start), discarded as it is read.
		br := bufio.NewReaderSize(io.NewSectionReader(f, off-1, maxBytes+1), 64<<10)
		for err = bufio.ErrBufferFull; errors.Is(err, bufio.ErrBufferFull); {
			_, err = br.ReadSlice('\n')
		}
		r = br
	}
	_, err = readRecords(r, path, MaxLineBytes(0), func(_ int, rec Record) error { return fn(rec) })
	return err
}

// ReadFile calls fn for every record of the JSON lines file at path, in
// order, with its 1-based line number. Log corruption does not stop an
// audit: a line that is not a record is skipped, and each warning returned
// names one skipped line by file and line. A last line without its newline
// is what a crash leaves mid-write; it is read when it is a whole record and
// skipped as torn otherwise. A line longer than the largest record a Logger
// writes (MaxLineBytes at the default rotation size) is torn too: it is
// discarded as it is read, never held. Blank lines are ignored. An error
// from fn stops the reading and is returned as is.
func ReadFile(path string, fn func(lineNo int, rec Record) error) (warnings []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readRecords(f, path, MaxLineBytes(0), fn)
}

// readRecords is ReadFile on r, named name in warnings, with lines bounded
// to maxLine bytes (newline included).
func readRecords(r io.Reader, name string, maxLine int64, fn func(lineNo int, rec Record) error) (warnings []string, err error) {
	// ReadSlice, not a Scanner: one line holds a whole input, up to 16 MiB
	// and more once base64-encoded; a longer one than maxLine is counted,
	// not kept.
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for lineNo := 1; ; lineNo++ {
		line = line[:0]
		var long int64 // bytes of an over-long line, discarded
		var err error
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			if long == 0 && int64(len(line)+len(chunk)) <= maxLine {
				line = append(line, chunk...)
			} else {
				long += int64(len(line) + len(chunk))
				line = line[:0]
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return warnings, fmt.Errorf("%s:%d: %w", name, lineNo, err)
		}
		atEOF := err != nil
		if atEOF && len(line) == 0 && long == 0 {
			return warnings, nil
		}
		if long > 0 {
			warnings = append(warnings, fmt.Sprintf("%s:%d: torn line skipped: %d bytes, longer than the largest record the log writes (%d)", name, lineNo, long, maxLine))
		} else if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			var rec Record
			if perr := json.Unmarshal(trimmed, &rec); perr != nil {
				if atEOF {
					warnings = append(warnings, fmt.Sprintf("%s:%d: torn last line skipped (%d bytes without a newline): %v", name, lineNo, len(line), perr))
				} else {
					warnings = append(warnings, fmt.Sprintf("%s:%d: line skipped, not a decision record: %v", name, lineNo, perr))
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
