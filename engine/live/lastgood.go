package live

import (
	"path/filepath"

	"github.com/arbiter-dev/arbiter/engine"
)

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
