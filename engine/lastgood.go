package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Saved folders of a last good Snapshot, below a state folder:
//
//	DIR/current -> DIR/<revision>            (a symlink, flipped atomically)
//	DIR/<revision>/{policies,schemas,tests}/ (the bytes the Snapshot was built from)
const currentLink = "current"

// SaveTo writes the exact bytes this Snapshot was built from below dir and
// points dir/current at them, so that a process restarted while the
// configured folders are broken can serve the last good revision. Older
// copies but the previous one are removed.
func (s *Snapshot) SaveTo(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	final := filepath.Join(dir, s.Revision)
	if _, err := os.Stat(final); err != nil {
		tmp, err := os.MkdirTemp(dir, ".saving-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		for folder, files := range map[string][]sourceFile{"policies": s.policySrc, "schemas": s.schemaSrc, "tests": s.testSrc} {
			if err := os.MkdirAll(filepath.Join(tmp, folder), 0o750); err != nil {
				return err
			}
			for _, f := range files {
				p := filepath.Join(tmp, folder, filepath.FromSlash(f.rel))
				if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
					return err
				}
				if err := os.WriteFile(p, f.data, 0o640); err != nil {
					return err
				}
			}
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
	type saved struct {
		name string
		mod  time.Time
	}
	var old []saved
	for _, e := range entries {
		if !e.IsDir() || e.Name() == keep || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		old = append(old, saved{e.Name(), info.ModTime()})
	}
	sort.Slice(old, func(i, j int) bool { return old[i].mod.After(old[j].mod) })
	for i, o := range old {
		if i >= 1 {
			if err := os.RemoveAll(filepath.Join(dir, o.name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// SavedConfig returns cfg with its folders pointed at the last good copy
// saved below dir, and whether there is one.
func SavedConfig(dir string, cfg Config) (Config, bool) {
	cur := filepath.Join(dir, currentLink)
	if _, err := os.Stat(filepath.Join(cur, "policies")); err != nil {
		return cfg, false
	}
	cfg.Policies = filepath.Join(cur, "policies")
	cfg.Schemas = filepath.Join(cur, "schemas")
	if cfg.Tests != "" {
		cfg.Tests = filepath.Join(cur, "tests")
	}
	return cfg, true
}

// NewOrFallback is New, except that when cfg does not load and fallback
// does, the Engine serves fallback's Snapshot: the start is reported as a
// failed reload naming cfg's problems, and every later reload reads cfg, so
// fixing the configured folders activates them.
func NewOrFallback(ctx context.Context, cfg, fallback Config) (*Engine, error) {
	e, err := New(ctx, cfg)
	if err == nil {
		return e, nil
	}
	snap, ferr := Load(ctx, fallback)
	if ferr != nil {
		return nil, err
	}
	e = &Engine{cfg: cfg}
	e.current.Store(snap)
	e.setLast(ReloadStatus{At: time.Now().UTC(), Trigger: "start", Revision: snap.Revision, Problems: append(problemsOf(err),
		Problem{File: fallback.Policies, Message: fmt.Sprintf("serving the last good revision %s saved here until the configured folders load", snap.Revision)})})
	e.reloadsFailed.Add(1)
	return e, nil
}
