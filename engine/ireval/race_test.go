//go:build race

package ireval

// raceDetector: the deterministic, single-goroutine differential suites
// skip under -race, where they cost five times as much and the detector
// has nothing to find; make test runs them again without it.
// TestProgramIsSafeForConcurrentUse is the one that needs the detector.
const raceDetector = true
