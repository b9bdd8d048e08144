// Package ireval evaluates a decision's query compiled from OPA's IR, the
// plan OPA's planner makes for its Wasm target (v1/compile with target
// "plan", v1/ir), instead of interpreting the Rego with topdown.
//
// Compile turns each statement of a plan into a Go closure over
// ast.Values, once, at load time. Values stay ast.Values and builtins are
// OPA's own implementations (topdown.GetBuiltin), so numbers are exact
// (big integers past the u64 limit), sets and objects iterate in topdown's
// sorted order, and a builtin behaves exactly as under topdown. The
// evaluator follows OPA's Wasm target where the IR leaves room: locals are
// per function frame, functions of (input, data) alone are memoized per
// evaluation and afresh inside `with`, an undefined statement leaves its
// block, a break leaves as many blocks as its index says.
//
// Supported: every statement kind of v1/ir (except NopStmt, which the
// planner never emits, and which is a no-op anyway), every deterministic
// builtin topdown implements. Refused by Compile, with *Unsupported, so
// that the decision stays on topdown: non-deterministic builtins (clock,
// randomness, network, runtime), print and trace, a function the planner
// could only plan as calling itself, a break or return that leaves the
// construct the planner made it for, and any plan shape this code does not
// expect.
//
// What topdown does that a plan does not, and how the engine stays exact:
//
//   - topdown stops at the first body of a complete rule with a constant
//     value (early exit) and skips rules its index rules out; the plan
//     evaluates them all. A builtin error in such a body is an error in the
//     plan and none in topdown: Eval reports it, and the engine asks topdown
//     whenever a compiled evaluation ends without a value (error or
//     undefined). Only a defined compiled result is ever answered.
//   - topdown evaluates an indexed comprehension for every element at once,
//     which can raise an error the plan never meets; the engine refuses to
//     compile a decision that reaches one (engine/compiled.go).
//   - base and virtual documents overlapping at one key, `with` on a
//     non-object: left to topdown (an internal error, then the fallback).
//
// The deadline: Eval checks the clock and the context every 64 steps
// (function calls, loop iterations, builtin calls), and hands builtins a
// topdown.Cancel on the same clock, so a runaway plan stops at its
// deadline without a timer or a goroutine per evaluation.
//
// InputProjection derives from the plan what an evaluation can observe of
// its input, so that the input path builds only that (see Projection).
package ireval
