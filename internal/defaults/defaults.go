// Package defaults is the one way an option's zero means its default.
package defaults

import "cmp"

// Set sets *v to def when *v is not above the zero value: a number or a
// duration that is zero or negative, an empty string.
func Set[T cmp.Ordered](v *T, def T) {
	var zero T
	if *v <= zero {
		*v = def
	}
}
