package decisionlog

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// refuser is a destination that refuses the records whose id is in bad for
// their content, naming the record (at) or not, and fails the first
// outages sends as if it were away.
type refuser struct {
	mu      sync.Mutex
	bad     map[string]bool
	at      bool
	outages int
	sent    []string
	refused []string
}

func (r *refuser) Encode(rec Record) (string, int, error) { return rec.DecisionID, 1, nil }
func (r *refuser) Idle() time.Duration                    { return time.Hour }

func (r *refuser) Send(_ context.Context, batch []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outages > 0 {
		r.outages--
		return errors.New("away")
	}
	for i, id := range batch {
		if r.bad[id] {
			if !r.at {
				i = -1
			}
			return &Refusal{Index: i, Drop: true, Reason: "rejected", Err: errors.New("refused " + id)}
		}
	}
	r.sent = append(r.sent, batch...)
	return nil
}

func (r *refuser) Refused(id string, _ error) {
	r.mu.Lock()
	r.refused = append(r.refused, id)
	r.mu.Unlock()
}

// TestBatcherDropsOnlyTheRefusedRecord: a refusal costs only the record it
// is about, whether the destination names it (dropped at once) or not (the
// batch halved until it is alone); every other record is sent once, in
// order, after an outage too; the counts add up.
func TestBatcherDropsOnlyTheRefusedRecord(t *testing.T) {
	for _, named := range []bool{true, false} {
		w := &refuser{bad: map[string]bool{"r3": true, "r6": true}, at: named, outages: 2}
		b := NewBatcher[string](BatchConfig{Name: "test", BatchRecords: 8, Linger: time.Hour, MaxRetryDelay: time.Millisecond,
			After: func(time.Duration) <-chan time.Time { return time.After(0) }})
		b.Start(w)
		var want []string
		for i := range 10 {
			id := "r" + string(rune('0'+i))
			b.Put(Record{DecisionID: id})
			if !w.bad[id] {
				want = append(want, id)
			}
		}
		if n := b.Close(context.Background()); n != 0 {
			t.Fatalf("named %v: %d unsent at close", named, n)
		}
		st := b.Stats()
		if !slices.Equal(w.sent, want) || !slices.Equal(w.refused, []string{"r3", "r6"}) {
			t.Errorf("named %v: sent %v, refused %v; want %v and [r3 r6]", named, w.sent, w.refused, want)
		}
		if st.Sent != 8 || b.Dropped("rejected") != 2 || st.Queued != 0 || st.QueuedBytes != 0 || st.LastError != "" {
			t.Errorf("named %v: stats %+v, %d rejected; want 8 sent, 2 rejected, nothing queued or failing", named, st, b.Dropped("rejected"))
		}
	}
}

// stalled refuses r1 by its index and fails every other send until
// released.
type stalled struct {
	mu       sync.Mutex
	released bool
}

func (s *stalled) Encode(rec Record) (string, int, error) { return rec.DecisionID, 1, nil }
func (s *stalled) Idle() time.Duration                    { return time.Hour }
func (s *stalled) Refused(string, error)                  {}

func (s *stalled) Send(_ context.Context, batch []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(batch, "r1"); i >= 0 {
		return &Refusal{Index: i, Drop: true, Reason: "rejected", Err: errors.New("refused r1")}
	}
	if !s.released {
		return errors.New("away")
	}
	return nil
}

// TestBatcherQueuedLeavesWithTheRefused: a record dropped for a refusal is
// no longer counted as queued while the rest of its batch is retried
// through an outage.
func TestBatcherQueuedLeavesWithTheRefused(t *testing.T) {
	w := &stalled{}
	b := NewBatcher[string](BatchConfig{Name: "test", BatchRecords: 4, Linger: time.Hour, MaxRetryDelay: time.Millisecond,
		After: func(time.Duration) <-chan time.Time { return time.After(time.Millisecond) }})
	for _, id := range []string{"r0", "r1", "r2", "r3"} {
		b.Put(Record{DecisionID: id})
	}
	b.Start(w) // one batch of the four: the first send fails by its index
	deadline := time.Now().Add(10 * time.Second)
	for b.Dropped("rejected") == 0 || b.Stats().SendsFailed == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal and retry: %+v", b.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if st := b.Stats(); st.Queued != 3 {
		t.Errorf("during the outage: %d queued, want the 3 not refused", st.Queued)
	}
	w.mu.Lock()
	w.released = true
	w.mu.Unlock()
	if n := b.Close(context.Background()); n != 0 {
		t.Fatalf("%d unsent at close", n)
	}
	if st := b.Stats(); st.Sent != 3 || st.Queued != 0 {
		t.Errorf("after close: %+v; want 3 sent, none queued", st)
	}
}

// flood is a destination whose every Encode queues one more record, so
// that the Batcher's queue is never empty when it looks: the flood of a
// busy replica, without a race.
type flood struct {
	b     *Batcher[string]
	stop  atomic.Bool
	sends chan int
}

func (f *flood) Encode(rec Record) (string, int, error) {
	if !f.stop.Load() {
		f.b.Put(Record{DecisionID: "r"})
	}
	return rec.DecisionID, 1, nil
}
func (f *flood) Idle() time.Duration   { return time.Hour }
func (f *flood) Refused(string, error) {}
func (f *flood) Send(_ context.Context, batch []string) error {
	f.sends <- len(batch)
	return nil
}

// TestBatcherSendsOnTimeWhileRecordsKeepComing: a batch without a count
// or byte bound goes out when its linger is over even though the queue is
// never empty: it is not starved (a hang fails it, not a threshold; the
// FlushDelay bound itself follows from the linger, unmeasured).
func TestBatcherSendsOnTimeWhileRecordsKeepComing(t *testing.T) {
	b := NewBatcher[string](BatchConfig{Name: "test", Linger: time.Millisecond})
	f := &flood{b: b, sends: make(chan int, 1000)}
	b.Put(Record{DecisionID: "r"})
	b.Start(f)
	for i := range 3 {
		select {
		case n := <-f.sends:
			if i > 0 && n < 2 {
				t.Errorf("send %d carried %d records: the flood should fill a batch while it lingers", i, n)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("send %d: none in 10 s while records kept coming (linger 1ms)", i)
		}
	}
	f.stop.Store(true)
	go func() {
		for range f.sends { // the sends of what is still queued
		}
	}()
	b.Close(context.Background())
	close(f.sends)
}
