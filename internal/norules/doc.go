// Package norules holds TestGoNamesNoRule, the check behind "Go never names
// a rule": no Go file of the repository names a reason code, outcome or
// other snake_case string of the policies, a decision, or a fixture case, so
// that a rule edit never needs a Go edit. It has no code of its own.
package norules
