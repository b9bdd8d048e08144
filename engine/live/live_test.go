package live

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

// quota is engine's small test revision: one decision, its schemas, tests
// and fixtures.
const quota = "../testdata/quota"

var (
	copyTree = testfiles.CopyTree
	editFile = testfiles.Edit
)

func quotaConfig(root string) engine.Config {
	return engine.Config{Policies: filepath.Join(root, "policies"), Schemas: filepath.Join(root, "schemas")}
}

// mustLoad builds cfg's revision without a gate of an Engine.
func mustLoad(t testing.TB, cfg engine.Config) *engine.Snapshot {
	t.Helper()
	s, err := engine.Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
