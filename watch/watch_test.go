package watch

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/arbiter-dev/arbiter/internal/wait"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWatchSeesEveryKindOfReplacement(t *testing.T) {
	root := t.TempDir()
	a := filepath.Join(root, "releases", "a")
	b := filepath.Join(root, "releases", "b")
	write(t, filepath.Join(a, "sub", "p.rego"), "1")
	write(t, filepath.Join(b, "sub", "p.rego"), "2")
	link := filepath.Join(root, "policies")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := Start(ctx, []string{link}, 20*time.Millisecond, func() { n.Add(1) }, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func()
	}{
		{"write in place", func() { write(t, filepath.Join(a, "sub", "p.rego"), "1b") }},
		{"write then rename over", func() {
			tmp := filepath.Join(a, "sub", ".p.rego.tmp")
			write(t, tmp, "1c")
			if err := os.Rename(tmp, filepath.Join(a, "sub", "p.rego")); err != nil {
				t.Fatal(err)
			}
		}},
		{"delete", func() { _ = os.Remove(filepath.Join(a, "sub", "p.rego")) }},
		{"new subfolder", func() { write(t, filepath.Join(a, "new", "q.rego"), "x") }},
		{"file in the new subfolder", func() { write(t, filepath.Join(a, "new", "q.rego"), "y") }},
		{"symlink flip", func() {
			tmp := filepath.Join(root, "policies.tmp")
			if err := os.Symlink(b, tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, link); err != nil {
				t.Fatal(err)
			}
		}},
		{"write in the new target", func() { write(t, filepath.Join(b, "sub", "p.rego"), "2b") }},
	}
	for _, s := range steps {
		before := n.Load()
		s.do()
		wait.Until(t, 5*time.Second, s.name, func() bool { return n.Load() > before })
	}
}

func TestWatchIgnoresSiblings(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "policies")
	write(t, filepath.Join(dir, "p.rego"), "1")
	// Which events count is relevant's decision, checked event by event: a
	// quiet period after a sibling's write could not prove that it was
	// ignored, only that no reload came soon enough to be seen.
	w := &Watcher{dirs: []string{dir}}
	for name, tc := range map[string]struct {
		ev   fsnotify.Event
		want bool
	}{
		"sibling file written":  {fsnotify.Event{Name: filepath.Join(root, "var.log"), Op: fsnotify.Write}, false},
		"sibling folder made":   {fsnotify.Event{Name: filepath.Join(root, "var"), Op: fsnotify.Create}, false},
		"own file written":      {fsnotify.Event{Name: filepath.Join(dir, "p.rego"), Op: fsnotify.Write}, true},
		"own nested file made":  {fsnotify.Event{Name: filepath.Join(dir, "decisions", "x", "data.json"), Op: fsnotify.Create}, true},
		"own folder renamed":    {fsnotify.Event{Name: dir, Op: fsnotify.Rename}, true},
		"own file chmod only":   {fsnotify.Event{Name: filepath.Join(dir, "p.rego"), Op: fsnotify.Chmod}, false},
		"name sharing a prefix": {fsnotify.Event{Name: dir + "-old", Op: fsnotify.Create}, false},
	} {
		if got := w.relevant(tc.ev); got != tc.want {
			t.Errorf("%s: relevant(%v) = %v, want %v", name, tc.ev, got, tc.want)
		}
	}
	// And through a running watcher, an own change is seen.
	var n atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := Start(ctx, []string{dir}, 20*time.Millisecond, func() { n.Add(1) }, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "p.rego"), "2")
	wait.Until(t, 5*time.Second, "own change", func() bool { return n.Load() >= 1 })
}
