// Package engine is a revision of the policies: what it is built from and
// what it decides. It holds two roles:
//
//   - the compiler: a revision's files (folders or a bundle's FileSet) read
//     with bounds, parsed, compiled, type-checked against the schemas and
//     planned to closures (engine/ireval) into an immutable Snapshot, with
//     the tests and fixtures gate of Load and the static checks of Check;
//   - the runtime: one decision on one Snapshot (Snapshot.Decide): the input
//     boundary (engine/input), the compiled program, topdown where it cannot
//     decide, the result check, the reasons and, on request, the evidence.
//
// The files follow the roles: the runtime's (runtimeFiles in
// layers_test.go, which holds this) use nothing declared in the
// compiler's, which build its Snapshots.
//
// Which revision is live, and how a candidate becomes live (sources, the
// gate's checks, activation, promotion, reloads and their history, the last
// good copy), is package engine/live. A Snapshot knows nothing of it.
package engine
