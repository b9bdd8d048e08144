// Package defaults is the one way an option's zero means its default.
package defaults

import "cmp"

// Positive is v, or def when v is not above the zero value: a number or a
// duration that is zero or negative (unset, and a negative value too, mean
// the default), an empty string.
func Positive[T cmp.Ordered](v, def T) T {
	var zero T
	if v > zero {
		return v
	}
	return def
}

// Set sets *v to Positive(*v, def): an option filled in where it is kept.
func Set[T cmp.Ordered](v *T, def T) { *v = Positive(*v, def) }
