package policybundle

import (
	"context"

	"github.com/arbiter-dev/arbiter/engine"
)

// Activator returns the function a Source hands each verified bundle to:
// it builds the candidate through the engine's gate (cfg's EvalTimeout)
// and swaps it in (returning the active Snapshot), or returns the gate's *engine.LoadError while the active
// revision keeps serving.
func Activator(eng *engine.Engine, cfg engine.Config) func(context.Context, *Revision) (*engine.Snapshot, error) {
	return func(ctx context.Context, rev *Revision) (*engine.Snapshot, error) {
		st := eng.ReloadWith(ctx, "bundle", func(ctx context.Context) (*engine.Snapshot, error) {
			return engine.LoadFiles(ctx, rev.Files, cfg)
		})
		if !st.OK {
			return nil, &engine.LoadError{Problems: st.Problems}
		}
		return eng.Snapshot(), nil
	}
}
