package decisionlog

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/util"

	"github.com/arbiter-dev/arbiter/internal/queue"
)

// DropShutdown is why a Batcher drops what is still unsent when its Close
// runs out of time.
const DropShutdown = "shutdown"

// Batcher is the one skeleton of the pipeline's sinks whose destination
// can stall (the log file, file.go; the decision-log upload, package
// logship; the decision store, package decisionstore): Put queues a record
// in a bounded queue and never blocks; one goroutine takes the records in
// order, encodes them into batches bounded by count and bytes, and sends
// each batch until it is accepted, retrying with OPA's backoff and reading
// nothing new meanwhile, so that the queue bounds what waits. A batch
// refused for its content (Refusal) is split until the record at fault is
// alone, and only that one is dropped. Every record not sent is counted by
// reason; Close sends what is queued until its deadline. (The file's Send
// never fails: a write that fails is not retried, and the file counts what
// it lost itself, with Drop.)
type Batcher[T any] struct {
	cfg   BatchConfig
	w     BatchWriter[T]
	queue *queue.Queue[pendingRecord]
	done  chan struct{}
	ctx   context.Context // cancelled by Close at its deadline
	abort context.CancelFunc

	sent, sendsOK, sendsFailed atomic.Uint64
	lastOK                     atomic.Int64 // unix nanoseconds
	inFlight                   atomic.Int64 // records of the batch being built, sent or retried: each leaves it sent or dropped
	oldest                     atomic.Int64 // unix nanoseconds its oldest record was queued (0: none)
	lastErr                    atomic.Pointer[string]
	closing                    atomic.Bool

	// The loop's: when the last send ended, and the outage it is in
	// (failingSince zero: none) with the records of batches retried since.
	lastSend     time.Time
	failingSince time.Time
	retried      int
}

// BatchConfig configures a Batcher; each sink fills it from its own.
type BatchConfig struct {
	// Name leads the Batcher's recovery line: "decision-log uploads",
	// "decision store writes"; Unit names what it sends in its lines:
	// "events", "records". Full and Failed are the messages of its
	// warnings, a record the queue cannot take and a send retried: each
	// sink keeps the lines it logged before it shared the skeleton
	// (default: Name + ": queue full, " + Unit + " dropped", and Name +
	// " failed; retrying").
	Name, Unit, Full, Failed string
	// Queue bounds the records waiting, the batch being sent or retried
	// included (its bytes are held until the batch is done), each sized
	// by Record.QueueSize.
	Queue queue.Limits
	// BatchRecords and BatchBytes bound one batch (BatchBytes by the sizes
	// Encode gives; 0: no bound). A record larger than BatchBytes goes
	// alone.
	BatchRecords, BatchBytes int
	// Linger is how long a batch that is not full waits for more records
	// after the previous send: a send costs round trips (or a system
	// call) whatever its size.
	Linger time.Duration
	// MaxRetryDelay caps the backoff between retries of a failed send.
	MaxRetryDelay time.Duration
	Logger        *slog.Logger
	// Redact is a send error as the logs and Stats may show it (default
	// its message).
	Redact func(error) string
	// After is the backoff's wait (tests; nil is time.After).
	After func(time.Duration) <-chan time.Time
}

// BatchWriter is what a sink adds to the skeleton.
type BatchWriter[T any] interface {
	// Encode turns a record into what Send sends, and its size against
	// BatchBytes. An error drops the record, counted under the error's
	// Refusal reason (or "unencodable").
	Encode(rec Record) (T, int, error)
	// Send sends batch; an error is retried with backoff unless it is (or
	// wraps) a *Refusal.
	Send(ctx context.Context, batch []T) error
	// Refused is told of each record dropped for a Refusal, or by Encode.
	Refused(item T, err error)
	// Idle runs between batches and while the loop waits (a sink's
	// maintenance); it returns how long until it wants to run again.
	Idle() time.Duration
}

// Refusal is a Send error about the batch's content, which sending it again
// would not change: Index names the record at fault (-1: unknown, and the
// batch is split in halves until it is alone). A record alone is dropped
// as Reason when Drop, and retried with backoff otherwise (the
// destination's fault after all).
type Refusal struct {
	Index  int
	Drop   bool
	Reason string
	Err    error
}

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

// pendingRecord is a queued record, what it costs in the queue, and when
// it was queued (unix nanoseconds).
type pendingRecord struct {
	rec      Record
	size, at int64
}

// NewBatcher is a Batcher with an empty queue; Start starts its loop, and
// Close stops it.
func NewBatcher[T any](cfg BatchConfig) *Batcher[T] {
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.Redact == nil {
		cfg.Redact = func(err error) string { return err.Error() }
	}
	cfg.Unit = cmp.Or(cfg.Unit, "records")
	cfg.Full = cmp.Or(cfg.Full, cfg.Name+": queue full, "+cfg.Unit+" dropped")
	cfg.Failed = cmp.Or(cfg.Failed, cfg.Name+" failed; retrying")
	if cfg.After == nil {
		cfg.After = time.After
	}
	cfg.Queue.HoldBytes = true // the batch being retried is memory too
	b := &Batcher[T]{cfg: cfg, queue: queue.New[pendingRecord](cfg.Queue), done: make(chan struct{})}
	b.ctx, b.abort = context.WithCancel(context.Background())
	return b
}

// Start starts the loop that sends with w: a sink calls it once, when w
// (which usually holds the Batcher) is complete.
func (b *Batcher[T]) Start(w BatchWriter[T]) {
	b.w = w
	go b.loop()
}

// Put queues rec; it never blocks. A record the queue cannot take is
// dropped and counted (queue.Full), with a warning at powers of two.
func (b *Batcher[T]) Put(rec Record) {
	size := rec.QueueSize()
	if ok, _ := b.queue.Put(pendingRecord{rec, size, time.Now().UnixNano()}, size); !ok {
		if n := b.queue.Dropped(queue.Full); n&(n-1) == 0 {
			b.cfg.Logger.Warn(b.cfg.Full, "dropped", n, "queue_bytes", b.queue.Limits().Bytes)
		}
	}
}

// Reserve takes room for a record of size bytes that is on its way
// (queue.Reserve): the file's, so that Log knows at once whether its
// record will be written. The caller puts the record with PutReserved, or
// gives the room back with Release, and counts a refusal itself (Drop).
func (b *Batcher[T]) Reserve(size int64) (bool, string) { return b.queue.Reserve(size) }

// PutReserved queues rec, for which size bytes were reserved.
func (b *Batcher[T]) PutReserved(rec Record, size int64) {
	b.queue.PutReserved(pendingRecord{rec, size, time.Now().UnixNano()}, size)
}

// Release gives back room reserved for a record that will not come.
func (b *Batcher[T]) Release(size int64) { b.queue.Done(size) }

// Drop counts n records lost for reason outside the skeleton.
func (b *Batcher[T]) Drop(reason string, n uint64) { b.queue.Drop(reason, n) }

// Close sends what is queued, retrying until ctx ends; it returns how many
// records were still unsent then (dropped as DropShutdown).
func (b *Batcher[T]) Close(ctx context.Context) uint64 {
	b.closing.Store(true)
	b.queue.Close()
	select {
	case <-b.done:
	case <-ctx.Done():
		b.abort()
		<-b.done
	}
	b.abort()
	return b.queue.Dropped(DropShutdown)
}

// Ctx is cancelled when Close runs out of time: a Send's requests use it.
func (b *Batcher[T]) Ctx() context.Context { return b.ctx }

// loop fills a batch from the queue, in order, and sends it when it is
// full, when its linger is over, or when the Batcher closes.
func (b *Batcher[T]) loop() {
	defer close(b.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		recs  []pendingRecord
		batch []T
		size  int
		held  int64 // the queue's bytes of the records in batch
	)
	send := func() {
		if len(batch) > 0 {
			b.send(batch) // sent or counted as dropped when it returns
			b.queue.Done(held)
			clear(batch)
			batch, size, held = batch[:0], 0, 0
			b.oldest.Store(0)
			b.lastSend = time.Now()
		}
	}
	add := func(p pendingRecord) {
		item, n, err := b.w.Encode(p.rec)
		if err != nil {
			b.queue.Done(p.size)
			b.refuse(item, err)
			return
		}
		if b.cfg.BatchBytes > 0 && size+n > b.cfg.BatchBytes && len(batch) > 0 {
			send()
		}
		if len(batch) == 0 {
			b.oldest.Store(p.at)
		}
		batch = append(batch, item)
		b.inFlight.Add(1)
		held += p.size
		size += n
		if b.cfg.BatchRecords > 0 && len(batch) >= b.cfg.BatchRecords {
			send()
		}
	}
	for {
		wait := b.w.Idle()
		var closed bool
		room := 0 // all
		if b.cfg.BatchRecords > 0 {
			room = b.cfg.BatchRecords - len(batch)
		}
		recs, closed = b.queue.Take(recs[:0], room)
		for _, p := range recs {
			add(p)
		}
		clear(recs) // drop the inputs before waiting
		linger := time.Until(b.lastSend.Add(b.cfg.Linger))
		switch {
		case len(batch) > 0 && (closed || b.closing.Load() || linger <= 0):
			send() // on time, even while records keep coming
			continue
		case len(recs) > 0:
			continue // more may have come meanwhile
		case closed:
			return
		case len(batch) > 0:
			wait = min(wait, linger)
		}
		timer.Reset(wait) // one timer for the loop's life: the file's waits come a record at a time
		select {
		case <-b.queue.Ready():
		case <-timer.C:
		}
	}
}

// send sends batch until it is accepted, or until Close's deadline (then
// what is unsent is dropped as DropShutdown). The first send accepted
// after failures logs the recovery: how long sends failed, and how many
// records were retried.
func (b *Batcher[T]) send(batch []T) bool {
	for retry := 0; ; retry++ {
		if b.ctx.Err() != nil {
			b.queue.Drop(DropShutdown, uint64(len(batch)))
			b.inFlight.Add(-int64(len(batch)))
			return false
		}
		err := b.w.Send(b.ctx, batch)
		if err == nil {
			b.sendsOK.Add(1)
			b.sent.Add(uint64(len(batch)))
			b.inFlight.Add(-int64(len(batch)))
			b.lastOK.Store(time.Now().UnixNano())
			b.lastErr.Store(nil)
			if retry > 0 {
				b.retried += len(batch)
			}
			if !b.failingSince.IsZero() {
				b.cfg.Logger.Info(b.cfg.Name+" recovered", "retried_"+b.cfg.Unit, b.retried, "outage", time.Since(b.failingSince).Round(time.Millisecond))
				b.failingSince, b.retried = time.Time{}, 0
			}
			return true
		}
		b.sendsFailed.Add(1)
		// A refusal is the content's fault: it is no outage, and the
		// destination is not failing for it.
		if r := (*Refusal)(nil); errors.As(err, &r) && b.ctx.Err() == nil {
			switch {
			case r.Index >= 0 && r.Index < len(batch):
				b.refuse(batch[r.Index], err)
				b.inFlight.Add(-1) // no longer queued, whatever the others' fate
				if batch = append(batch[:r.Index:r.Index], batch[r.Index+1:]...); len(batch) == 0 {
					return true
				}
				retry = -1 // the others at once
				continue
			case len(batch) > 1:
				half := len(batch) / 2
				if !b.send(batch[:half]) { // Close's deadline: the rest is dropped too
					b.queue.Drop(DropShutdown, uint64(len(batch)-half))
					b.inFlight.Add(-int64(len(batch) - half))
					return false
				}
				return b.send(batch[half:])
			case r.Drop:
				b.refuse(batch[0], err)
				b.inFlight.Add(-1)
				return true
			}
		}
		if b.failingSince.IsZero() {
			b.failingSince = time.Now()
		}
		b.Failed(err)
		delay := util.DefaultBackoff(float64(100*time.Millisecond), float64(b.cfg.MaxRetryDelay), retry)
		if retry == 0 || retry%10 == 0 {
			b.cfg.Logger.Warn(b.cfg.Failed, b.cfg.Unit, len(batch), "retry", retry, "next_in", delay, "err", b.cfg.Redact(err))
		}
		select {
		case <-b.cfg.After(delay):
		case <-b.ctx.Done():
		}
	}
}

// refuse drops item for err, counted under its Refusal's reason.
func (b *Batcher[T]) refuse(item T, err error) {
	reason := "unencodable"
	if r := (*Refusal)(nil); errors.As(err, &r) && r.Reason != "" {
		reason = r.Reason
	}
	b.queue.Drop(reason, 1)
	b.w.Refused(item, err)
}

// Failed records err as what is failing now (Stats' LastError), for an
// attempt outside Send too (a sink's maintenance); OK clears it.
func (b *Batcher[T]) Failed(err error) {
	msg := b.cfg.Redact(err)
	b.lastErr.Store(&msg)
}

// OK says the destination answers again.
func (b *Batcher[T]) OK() { b.lastErr.Store(nil) }

// BatchStats are a Batcher's totals.
type BatchStats struct {
	Sent                 uint64
	SendsOK, SendsFailed uint64
	// Queued is every record not sent yet: in the queue, and in the batch
	// being built, sent or retried; QueuedBytes what they cost against
	// the queue's bound.
	Queued      int
	QueuedBytes int64
	Limits      queue.Limits
	LastOK      time.Time // zero: none yet
	// Lag is how long the oldest record not sent yet has waited.
	Lag       time.Duration
	LastError string // of the attempt failing now, "" when the last one succeeded
}

// Stats returns the totals so far; after Close they are final.
func (b *Batcher[T]) Stats() BatchStats {
	st := BatchStats{Sent: b.sent.Load(), SendsOK: b.sendsOK.Load(), SendsFailed: b.sendsFailed.Load(),
		Queued: b.queue.Len() + int(b.inFlight.Load()), QueuedBytes: b.queue.Bytes(), Limits: b.queue.Limits()}
	if n := b.lastOK.Load(); n != 0 {
		st.LastOK = time.Unix(0, n).UTC()
	}
	if at := b.oldest.Load(); at != 0 {
		st.Lag = max(0, time.Since(time.Unix(0, at)))
	}
	if e := b.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	return st
}

// Dropped is the records dropped for reason so far.
func (b *Batcher[T]) Dropped(reason string) uint64 { return b.queue.Dropped(reason) }
