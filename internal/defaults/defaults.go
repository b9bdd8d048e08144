// Package defaults fills in the numbers a configuration leaves unset.
package defaults

// Positive is v, or def when v is not above zero: unset, and a negative
// value too, mean the default.
func Positive[T ~int | ~int64 | ~float64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
