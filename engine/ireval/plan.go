package ireval

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/compile"
	"github.com/open-policy-agent/opa/v1/ir"
)

// Plan runs OPA's planner (v1/compile with target "plan", the front end of
// OPA's Wasm target) over modules and returns the IR with one plan per
// entrypoint. An entrypoint is a slash-separated path below data, as
// `opa build -e` takes it: "decisions/x/decision" plans the query
// `result = data.decisions.x.decision`.
//
// The modules are the parsed modules a Snapshot compiles; the planner
// compiles its own copy of them with caps, so the plan can never use a
// builtin the capabilities refuse. Print statements are erased, as in
// topdown without a print hook.
func Plan(ctx context.Context, modules map[string]*ast.Module, caps *ast.Capabilities, entrypoints ...string) (*ir.Policy, error) {
	b := &bundle.Bundle{Data: map[string]any{}}
	b.SetRegoVersion(ast.RegoV1)
	b.Manifest.Init()
	for _, name := range slices.Sorted(maps.Keys(modules)) {
		// Raw stays nil: the bundle formats it from the parsed module.
		b.Modules = append(b.Modules, bundle.ModuleFile{URL: name, Path: name, Parsed: modules[name]})
	}
	c := compile.New().
		WithTarget(compile.TargetPlan).
		WithBundle(b).
		WithCapabilities(caps).
		WithRegoVersion(ast.RegoV1).
		WithPruneUnused(true).
		WithEntrypoints(entrypoints...)
	if err := c.Build(ctx); err != nil {
		return nil, fmt.Errorf("planning: %w", err)
	}
	out := c.Bundle()
	if len(out.PlanModules) != 1 {
		return nil, fmt.Errorf("planning: %d plan files, want 1", len(out.PlanModules))
	}
	var policy ir.Policy
	if err := json.Unmarshal(out.PlanModules[0].Raw, &policy); err != nil {
		return nil, fmt.Errorf("reading the plan: %w", err)
	}
	return &policy, nil
}
