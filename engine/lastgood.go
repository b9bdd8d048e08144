package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Saved folders of a last good Snapshot, below a state folder:
//
//	DIR/current -> DIR/<revision>            (a symlink, flipped atomically)
//	DIR/<revision>/{policies,schemas,tests}/ (the bytes the Snapshot was built from)
//	DIR/<revision>/saved.json                (whether it passed the test gate)
const (
	currentLink = "current"
	savedMeta   = "saved.json"
)

// savedInfo is what a saved copy records about itself.
type savedInfo struct {
	Revision string    `json:"revision"`
	Gated    bool      `json:"gated"`
	SavedAt  time.Time `json:"saved_at"`
}

func readSavedInfo(dir string) (savedInfo, bool) {
	var info savedInfo
	b, err := os.ReadFile(filepath.Join(dir, savedMeta))
	if err != nil || json.Unmarshal(b, &info) != nil {
		return savedInfo{}, false
	}
	return info, true
}

// WriteFolders writes the exact bytes this Snapshot was built from below
// dir, as the folders engine.Load reads: dir/policies, dir/schemas and
// dir/tests (its test files and fixtures).
func (s *Snapshot) WriteFolders(dir string) error {
	for folder, files := range map[string][]sourceFile{"policies": s.policySrc, "schemas": s.schemaSrc, "tests": s.testSrc} {
		if err := os.MkdirAll(filepath.Join(dir, folder), 0o750); err != nil {
			return err
		}
		for _, f := range files {
			p := filepath.Join(dir, folder, filepath.FromSlash(f.rel))
			if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
				return err
			}
			if err := os.WriteFile(p, f.data, 0o640); err != nil {
				return err
			}
		}
	}
	return nil
}

// SaveTo writes the exact bytes this Snapshot was built from below dir,
// with whether it passed the test gate, and points dir/current at them, so
// that a process restarted while the configured folders are broken can
// serve the last good revision. Older copies but the previous one are
// removed.
func (s *Snapshot) SaveTo(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	final := filepath.Join(dir, s.Revision)
	if info, ok := readSavedInfo(final); !ok || info.Revision != s.Revision || info.Gated != s.Gated {
		tmp, err := os.MkdirTemp(dir, ".saving-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := s.WriteFolders(tmp); err != nil {
			return err
		}
		meta, _ := json.Marshal(savedInfo{Revision: s.Revision, Gated: s.Gated, SavedAt: time.Now().UTC()})
		if err := os.WriteFile(filepath.Join(tmp, savedMeta), meta, 0o640); err != nil {
			return err
		}
		// A copy saved before (without its record, or with another gate
		// outcome) is replaced; current may point at it for a moment, and
		// a start in that moment finds no saved copy rather than a wrong one.
		if err := os.RemoveAll(final); err != nil {
			return err
		}
		if err := os.Rename(tmp, final); err != nil {
			return err
		}
	}
	link := filepath.Join(dir, ".current-"+s.Revision)
	_ = os.Remove(link)
	if err := os.Symlink(s.Revision, link); err != nil {
		return err
	}
	if err := os.Rename(link, filepath.Join(dir, currentLink)); err != nil {
		return err
	}
	return pruneSaved(dir, s.Revision)
}

// pruneSaved keeps the current copy and the newest other one.
func pruneSaved(dir, keep string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var old []os.FileInfo
	for _, e := range entries {
		if info, err := e.Info(); err == nil && e.IsDir() && e.Name() != keep && !strings.HasPrefix(e.Name(), ".") {
			old = append(old, info)
		}
	}
	slices.SortFunc(old, func(a, b os.FileInfo) int { return b.ModTime().Compare(a.ModTime()) })
	for _, o := range old[min(1, len(old)):] {
		if err := os.RemoveAll(filepath.Join(dir, o.Name())); err != nil {
			return err
		}
	}
	return nil
}

// SavedCopy returns the folder of the copy SaveTo last made current below
// dir (its policies, schemas and tests folders), whether it passed the test
// gate when it was saved, and whether there is one.
func SavedCopy(dir string) (folder string, gated, ok bool) {
	cur := filepath.Join(dir, currentLink)
	info, ok := readSavedInfo(cur)
	return cur, info.Gated, ok
}
