package live

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/arbiter-dev/arbiter/engine"
)

// A Source yields candidate revisions: the configured folders, a bundle's
// files, the last good copy, a candidate in shadow (Engine.Judge) and a
// promotion. Each candidate goes through the one gate (gate.go) and, to go
// live, the one activation path (Engine.Activate). The interface is sealed:
// a revision reaches the engine only as a Snapshot the gate built.
type Source interface {
	// Origin says where the revisions come from, in status and history.
	Origin() string
	// candidate builds the source's current revision with cfg's limits.
	candidate(ctx context.Context, cfg engine.Config) (*engine.Snapshot, error)
}

// Folders is the source of a policy, a schema and a test folder (tests ""
// gates on compiling alone); each candidate reads them again.
func Folders(policies, schemas, tests string) Source {
	return loader{fmt.Sprintf("folders %s, %s, tests %s", policies, schemas, orNone(tests)), func(ctx context.Context, cfg engine.Config) (*engine.Snapshot, error) {
		cfg.Policies, cfg.Schemas, cfg.Tests = policies, schemas, tests
		return engine.Load(ctx, cfg)
	}}
}

// Files is the source of a revision held in memory (a bundle's), named
// origin.
func Files(origin string, fs engine.FileSet) Source {
	return loader{origin, func(ctx context.Context, cfg engine.Config) (*engine.Snapshot, error) {
		return engine.LoadFiles(ctx, fs, cfg)
	}}
}

// LastGood is the source of the last good copy saved below dir
// (Snapshot.SaveTo), and whether there is one to fall back to. When cfg
// gates on tests, only a copy that passed the gate when it was saved
// qualifies: a revision served with the gate off never stands in for a
// gated one. The copy's own tests gate it again.
func LastGood(dir string, cfg engine.Config) (Source, bool) {
	cur, gated, ok := engine.SavedCopy(dir)
	if !ok || cfg.Tests != "" && !gated {
		return nil, false
	}
	if cfg.Tests != "" {
		cfg.Tests = filepath.Join(cur, "tests")
	}
	src := Folders(filepath.Join(cur, "policies"), filepath.Join(cur, "schemas"), cfg.Tests).(loader)
	src.origin = "the last good copy saved in " + dir
	return src, true
}

// loader is a source that builds a new Snapshot for each candidate.
type loader struct {
	origin string
	load   func(context.Context, engine.Config) (*engine.Snapshot, error)
}

func (l loader) Origin() string { return l.origin }

func (l loader) candidate(ctx context.Context, cfg engine.Config) (*engine.Snapshot, error) {
	snap, err := l.load(ctx, cfg)
	if snap != nil {
		snap.Origin = l.origin
	}
	return snap, err
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
