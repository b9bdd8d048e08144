package policybundle

import (
	"context"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
)

// Activator returns the function a Source hands each verified bundle to:
// the bundle is a candidate of the engine's one activation path, which
// swaps it in (returning the active Snapshot) or returns the gate's
// *engine.LoadError while the active revision keeps serving.
func Activator(eng *live.Engine) func(context.Context, *Revision) (*engine.Snapshot, error) {
	return func(ctx context.Context, rev *Revision) (*engine.Snapshot, error) {
		if _, err := eng.Activate(ctx, "bundle", rev.Source()); err != nil {
			return nil, err
		}
		return eng.Snapshot(), nil
	}
}

// Source is the revision as a source of the engine's candidates.
func (r *Revision) Source() live.Source { return live.Files("bundle "+r.Files.Origin, r.Files) }
