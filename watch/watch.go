// Package watch turns file-system events on a set of folders into debounced
// change notifications. It survives the ways editors and deploy tools
// replace files: write in place, write-then-rename, delete-and-recreate, and
// a folder that is a symlink flipped to a new target.
package watch

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watcher watches folders until its context ends.
type Watcher struct {
	dirs     []string
	debounce time.Duration
	onChange func()
	log      *slog.Logger
	fsw      *fsnotify.Watcher
}

// Start watches dirs and calls onChange (from one goroutine, never
// concurrently) once events have been quiet for debounce. It returns once
// the first watches are in place.
func Start(ctx context.Context, dirs []string, debounce time.Duration, onChange func(), log *slog.Logger) (*Watcher, error) {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &Watcher{dirs: dirs, debounce: debounce, onChange: onChange, log: log, fsw: fsw}
	w.rewatch()
	go w.loop(ctx)
	return w, nil
}

func (w *Watcher) loop(ctx context.Context) {
	defer w.fsw.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if !w.relevant(ev) {
				continue
			}
			pending = true
			timer.Reset(w.debounce)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			// An overflow loses events: treat it as a change so nothing is missed.
			w.log.Warn("file watch error; reloading to be safe", "err", err)
			pending = true
			timer.Reset(w.debounce)
		case <-timer.C:
			if !pending {
				continue
			}
			pending = false
			// Folders may have been created, removed or re-pointed: watch anew.
			w.rewatch()
			w.onChange()
		}
	}
}

// relevant drops events in a watched parent folder that do not concern one
// of our folders (the parent is watched only to see a folder replaced).
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	dir := filepath.Dir(ev.Name)
	for _, d := range w.dirs {
		clean := filepath.Clean(d)
		if ev.Name == clean || hasPrefixDir(ev.Name, clean) {
			return true
		}
		if real, err := filepath.EvalSymlinks(d); err == nil && hasPrefixDir(ev.Name, real) {
			return true
		}
	}
	// Not a sibling of one of our folders.
	return !slices.ContainsFunc(w.dirs, func(d string) bool { return dir == filepath.Dir(filepath.Clean(d)) })
}

func hasPrefixDir(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !filepath.IsAbs(rel) && (len(rel) < 3 || rel[:3] != "../")
}

// rewatch replaces every watch: the parent of each folder (to see the folder
// itself renamed or its symlink flipped) and every folder below its target.
func (w *Watcher) rewatch() {
	want := map[string]bool{}
	for _, d := range w.dirs {
		want[filepath.Dir(filepath.Clean(d))] = true
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			continue // missing for now: the parent watch sees it come back
		}
		_ = filepath.WalkDir(real, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				want[p] = true
			}
			return nil
		})
	}
	// fsnotify drops the watch of a deleted folder by itself, so its own
	// list, not ours, says what is watched.
	watched := map[string]bool{}
	for _, p := range w.fsw.WatchList() {
		watched[p] = true
		if !want[p] {
			_ = w.fsw.Remove(p)
		}
	}
	for p := range want {
		if watched[p] {
			continue
		}
		if err := w.fsw.Add(p); err != nil && !os.IsNotExist(err) {
			w.log.Warn("cannot watch folder", "path", p, "err", err)
		}
	}
}
