// Package live is the lifecycle of revisions: which Snapshot of package
// engine is live, and the one way another one becomes live.
//
// Every source (Folders, a bundle's Files, LastGood, a candidate in shadow
// judged by Engine.Judge, a Promote) yields candidates; one gate (gate.go)
// builds each off the request path within the reload deadline, with the
// tests and fixtures of engine.Load, then runs the GateChecks against the
// live revision; one path (Engine.Activate, activate.go) swaps a candidate
// that passed in atomically, records the outcome (status, history,
// counts; engine.go) and calls the OnActivate hooks. Source is sealed and the live
// pointer unexported: nothing else can make a revision live.
package live
