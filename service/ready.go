package service

import (
	"fmt"
	"sync"
	"time"
)

// readyDropWindow is how long /health/ready stays not ready after the
// decision sinks last dropped a record: long enough for a probe period or
// two to see it, short enough that a replica that caught up takes traffic
// again soon.
const readyDropWindow = 10 * time.Second

// dropWatch says whether decision records were dropped recently: the
// readiness half of "the decision sinks are not dropping". total is every
// record dropped so far (the file's and the upload's counters, which only
// grow); a probe that sees it grow marks the time.
type dropWatch struct {
	total  func() uint64
	window time.Duration
	now    func() time.Time

	mu     sync.Mutex
	seen   uint64
	grewAt time.Time
}

// dropping is nil unless total grew within the window.
func (d *dropWatch) dropping() error {
	n, now := d.total(), d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if n > d.seen {
		d.seen, d.grewAt = n, now
	}
	if d.grewAt.IsZero() || now.Sub(d.grewAt) >= d.window {
		return nil
	}
	return fmt.Errorf("decision records were dropped within the last %s (%d in all): the decision log or its upload cannot keep up", d.window, d.seen)
}
