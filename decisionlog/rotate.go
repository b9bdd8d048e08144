package decisionlog

import (
	"cmp"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// backupTimeFormat is the time in the name of a file the writer rotated
// away, PATH-without-ext-TIMESTAMP.ext: the names lumberjack gives its
// backups, so that files written before this writer replaced it are still
// read and pruned.
const backupTimeFormat = "2006-01-02T15-04-05.000"

// rotatingFile is the log file: appended to, and rotated into a backup when
// a write would take it past max bytes, keeping the newest backups. It
// replaces lumberjack, which names a backup by the millisecond and renames
// over an existing one: two rotations in one millisecond (records near the
// rotation size, which the sandbox chooses) lost the first backup's records
// (natefinch/lumberjack#34, left as is there). Here a backup's name is later
// than every other backup's (backupName). One process writes a path; it is
// not safe for concurrent use.
type rotatingFile struct {
	path    string
	max     int64
	backups int              // how many backups to keep; 0 keeps all
	now     func() time.Time // the time in a backup's name
	f       *os.File
	size    int64
}

// openRotating opens the file at path for appending, creating its folder
// (0750) and the file (0640) when missing.
func openRotating(path string, max int64, backups int, now func() time.Time) (*rotatingFile, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	r := &rotatingFile{path: path, max: max, backups: backups, now: now}
	return r, r.open(os.O_APPEND)
}

func (r *rotatingFile) open(flag int) error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|flag, 0o640)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return err
	}
	r.f, r.size = f, st.Size()
	return nil
}

// Write appends p, rotating first when the file holds something and p
// would take it past max. Callers write whole lines, so that no record is
// split between files.
func (r *rotatingFile) Write(p []byte) (int, error) { return r.writeParts(p) }

// writeParts appends parts, which together are whole lines, as Write
// appends their concatenation: a rotation comes before them all, never
// between two.
func (r *rotatingFile) writeParts(parts ...[]byte) (int, error) {
	if r.f == nil { // a failed rotation: try again
		if err := r.Rotate(); err != nil {
			return 0, err
		}
	}
	total := int64(0)
	for _, p := range parts {
		total += int64(len(p))
	}
	if r.size > 0 && r.size+total > r.max {
		if err := r.Rotate(); err != nil {
			return 0, err
		}
	}
	written := 0
	for _, p := range parts {
		n, err := r.f.Write(p)
		r.size += int64(n)
		written += n
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// Rotate syncs and closes the file, renames it to the next backup's name
// (an empty file is not kept), opens a new one and removes the backups past
// the number to keep.
func (r *rotatingFile) Rotate() error {
	if err := r.Close(); err != nil {
		return err
	}
	if st, err := os.Stat(r.path); err == nil && st.Size() > 0 {
		name, err := r.backupName()
		if err != nil {
			return err
		}
		if err := os.Rename(r.path, name); err != nil {
			return err
		}
	}
	if err := r.open(os.O_TRUNC); err != nil {
		return err
	}
	if r.backups > 0 {
		files, err := Files(r.path)
		if err != nil {
			return err
		}
		for _, old := range files[min(len(files), 1+r.backups):] {
			if err := os.Remove(old); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// backupName is the name of the next backup: for now, or for a millisecond
// after the newest backup's when now is not later (a clock stood still or
// stepped back), so that names never repeat and sort in rotation order,
// the order Files and the pruning read them in.
func (r *rotatingFile) backupName() (string, error) {
	files, err := Files(r.path)
	if err != nil {
		return "", err
	}
	t := r.now().UTC().Truncate(time.Millisecond)
	if len(files) > 1 {
		if newest, ok := backupTime(r.path, files[1]); ok && !t.After(newest) {
			t = newest.Add(time.Millisecond)
		}
	}
	ext := filepath.Ext(r.path)
	return strings.TrimSuffix(r.path, ext) + "-" + t.Format(backupTimeFormat) + ext, nil
}

// backupTime is the time in the name of a backup of the log at path.
func backupTime(path, backup string) (time.Time, bool) {
	log, t, ok := logOf(backup)
	return t, ok && filepath.Base(log) == filepath.Base(path)
}

// Close syncs and closes the file; it is a no-op when it is closed.
func (r *rotatingFile) Close() error {
	if r.f == nil {
		return nil
	}
	f := r.f
	r.f = nil
	return cmp.Or(f.Sync(), f.Close()) // closed whether the sync failed or not
}

// Files returns the log file at path, then the backups the writer rotated
// it into, newest first.
func Files(path string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	var backups []string
	for _, e := range entries {
		if _, ok := backupTime(path, e.Name()); ok && e.Type().IsRegular() {
			backups = append(backups, filepath.Join(filepath.Dir(path), e.Name()))
		}
	}
	slices.Sort(backups)
	slices.Reverse(backups)
	return append([]string{path}, backups...), nil
}

// FilesIn lists the decision logs in dir by the writer's naming, oldest
// first: for each log (a regular file whose name is not a backup's and
// does not start with a dot, as the lock file's does), its backups oldest
// first, then the log; a backup whose log is gone is still listed. One
// reading of the folder.
func FilesIn(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	logs := map[string][]string{} // log -> itself (when present) after its backups, once sorted
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		log, _, ok := logOf(p)
		if !ok {
			log = p
		}
		logs[log] = append(logs[log], p)
	}
	var out []string
	for _, log := range slices.Sorted(maps.Keys(logs)) {
		files := logs[log]
		// A backup's name is the log's stem, "-" and a time: they sort
		// oldest first, and before the log itself ("-" < ".").
		slices.SortFunc(files, func(a, b string) int {
			switch {
			case a == log:
				return 1
			case b == log:
				return -1
			}
			return strings.Compare(a, b)
		})
		out = append(out, files...)
	}
	return out, nil
}

// logOf is the log file that the writer rotated backup from, and the time
// in its name, when backup is named as a backup (LOG-without-ext + "-" +
// time + ext).
func logOf(backup string) (string, time.Time, bool) {
	n := filepath.Base(backup)
	for _, ext := range []string{filepath.Ext(n), ""} {
		stem := strings.TrimSuffix(n, ext)
		i := len(stem) - len(backupTimeFormat) - 1
		if i <= 0 || stem[i] != '-' {
			continue
		}
		if t, err := time.Parse(backupTimeFormat, stem[i+1:]); err == nil {
			return filepath.Join(filepath.Dir(backup), stem[:i]+ext), t, true
		}
	}
	return "", time.Time{}, false
}
