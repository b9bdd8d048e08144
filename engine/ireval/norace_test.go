//go:build !race

package ireval

const raceDetector = false
