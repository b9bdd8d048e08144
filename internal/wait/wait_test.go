package wait

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestForSeesWhatAnotherGoroutineDoes(t *testing.T) {
	var done atomic.Bool
	go done.Store(true)
	if _, ok := For(time.Minute, done.Load); !ok {
		t.Fatal("For did not see the store")
	}
}

// A condition that never holds is asked until the limit has passed, and
// once more after it; then For says it did not hold.
func TestForGivesUpAfterTheLimit(t *testing.T) {
	var last time.Duration
	start := time.Now()
	took, ok := For(50*time.Millisecond, func() bool { last = time.Since(start); return false })
	if ok || took <= 50*time.Millisecond || last <= 50*time.Millisecond {
		t.Fatalf("For: %s, %v, last asked at %s; want false, asked after the limit", took, ok, last)
	}
}
