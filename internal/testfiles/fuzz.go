package testfiles

import (
	"flag"
	"testing"
)

// FuzzSeeds is the seed corpus a fuzz target adds: all of seeds when they
// run as unit tests (go test without -fuzz), and an even spread of at most
// n of them when the target is being fuzzed. Go's fuzzer first runs every
// seed to gather its baseline coverage, which with hundreds of fixture
// seeds under coverage instrumentation would take a short fuzz run's whole
// budget before it mutated anything.
func FuzzSeeds[T any](f *testing.F, seeds []T, n int) []T {
	f.Helper()
	if fl := flag.Lookup("test.fuzz"); fl == nil || fl.Value.String() == "" || len(seeds) <= n { // not fuzzed, or few
		return seeds
	}
	out := make([]T, 0, n)
	for i := range n {
		out = append(out, seeds[i*len(seeds)/n])
	}
	return out
}
