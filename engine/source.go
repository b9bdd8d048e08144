package engine

import (
	"context"
	"fmt"
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
	candidate(ctx context.Context, cfg Config) (*Snapshot, error)
}

// Folders is the source of a policy, a schema and a test folder (tests ""
// gates on compiling alone); each candidate reads them again.
func Folders(policies, schemas, tests string) Source {
	return folders{policies: policies, schemas: schemas, tests: tests,
		origin: fmt.Sprintf("folders %s, %s, tests %s", policies, schemas, orNone(tests))}
}

type folders struct{ policies, schemas, tests, origin string }

func (f folders) Origin() string { return f.origin }

func (f folders) candidate(ctx context.Context, cfg Config) (*Snapshot, error) {
	cfg.Policies, cfg.Schemas, cfg.Tests = f.policies, f.schemas, f.tests
	snap, err := Load(ctx, cfg)
	if snap != nil {
		snap.Origin = f.origin
	}
	return snap, err
}

// Files is the source of a revision held in memory (a bundle's), named
// origin.
func Files(origin string, fs FileSet) Source { return files{origin, fs} }

type files struct {
	origin string
	fs     FileSet
}

func (f files) Origin() string { return f.origin }

func (f files) candidate(ctx context.Context, cfg Config) (*Snapshot, error) {
	snap, err := LoadFiles(ctx, f.fs, cfg)
	if snap != nil {
		snap.Origin = f.origin
	}
	return snap, err
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
