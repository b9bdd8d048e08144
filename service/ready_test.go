package service

import (
	"testing"
	"time"
)

// dropWatch: not ready from the probe that sees the drop counters grow
// until the window has passed without growth.
func TestDropWatch(t *testing.T) {
	var total uint64
	now := time.Unix(1_000_000, 0)
	d := &dropWatch{window: 10 * time.Second, total: func() uint64 { return total }, now: func() time.Time { return now }}
	for i, step := range []struct {
		drops   uint64
		advance time.Duration
		ready   bool
	}{
		{0, 0, true},                // nothing dropped
		{3, 0, false},               // drops seen now
		{3, 9 * time.Second, false}, // within the window
		{3, time.Second, true},      // the window passed without more
		{4, time.Hour, false},       // one more, however late
		{4, 10 * time.Second, true}, // and the window passes again
		{4, 24 * time.Hour, true},   // quiet stays ready
	} {
		total, now = step.drops, now.Add(step.advance)
		if err := d.dropping(); (err == nil) != step.ready {
			t.Errorf("step %d (drops %d): dropping() = %v, want ready %v", i, step.drops, err, step.ready)
		}
	}
}
