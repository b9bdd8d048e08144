// Package decisionlog is the decision-record pipeline: every answered
// decision's record is queued once (a bounded queue, off the request path),
// masked once, and handed in batches to its sinks: the JSON Lines file
// (file.go), the decision-log upload (package logship), the pages' ring
// (server/ui). The pipeline never waits for a sink: each one that can
// stall (the file, the upload) has its own bounded queue and counts what
// it drops, so a slow sink costs only its own records. Reader.go reads
// what the file sink wrote, for replay, the pages and shadow.
package decisionlog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/arbiter-dev/arbiter/internal/queue"
)

// Defaults of Options.
const (
	// 64 MiB is seconds of traffic at thousands of typical decisions a
	// second, and four of the largest inputs: the memory a stalled disk or
	// reader may pin before records are refused.
	DefaultQueueBytes   = 64 << 20
	DefaultMaxMegabytes = 100
	DefaultMaxBackups   = 5
)

// recordOverhead is what a record costs in the queue beyond its input,
// result and body fields: its strings and the line's punctuation.
const recordOverhead = 512

// Sink receives the records of the pipeline, masked, in the order they were
// logged, in batches, on the pipeline's one goroutine; it must not keep
// recs (the slice) after Write returns, only the Records. Write must not
// block: a sink whose destination can stall (a network service, a
// database) puts the batch on its own bounded queue (internal/queue) and
// counts what it drops, by reason, as the file does (file.go).
type Sink interface {
	Write(recs []Record)
}

// Options configure a Logger. The zero value of each field means its default.
type Options struct {
	// Path is the log file, "-" for Stdout (then there is no rotation), or
	// "" for no file (Sinks only).
	Path string
	// Stdout is written when Path is "-"; nil means os.Stdout.
	Stdout io.Writer
	// Sinks receive every record beside the file.
	Sinks []Sink
	// QueueBytes bounds the records waiting to be written to the file, by
	// size, from Log on: a record that would take the file's queue past it
	// is not written, and counted (a record larger than the bound alone is
	// taken when the queue is empty). The pipeline's own queue, of records
	// waiting to be masked (it never waits for a sink, so it is short), has
	// the same bound: a stalled disk pins at most this much.
	QueueBytes int64
	// Refuse is --decision-log-full refuse: a record the file's queue
	// cannot take reaches no sink, and Log returns false so that its
	// decision is not answered. Otherwise (drop) it still reaches the other
	// sinks.
	Refuse bool
	// MaxMegabytes rotates the file before a write would take it past this
	// many MiB; 0 means 100. It must hold the largest
	// record: a record larger than the file may be is not written, and
	// counted.
	MaxMegabytes int
	// MaxBackups is how many rotated files (PATH-without-ext-TIMESTAMP.ext)
	// are kept; 0 means 5, a negative value keeps them all.
	MaxBackups int
	// Mask lists JSON pointers into the input whose values every sink
	// receives as MaskedValue, each named in the record's masked list;
	// pointers that name nothing in an input are ignored. On the OPA Data
	// API path (a Record.Path under /v1/data/), where a failed request logs
	// its {"input": ...} body as received, each pointer applies under
	// /input too. With a mask, a body that is not JSON is not logged at
	// all (it cannot be masked) and the record's erased list says so.
	Mask []string
	// Logger receives the log's own warnings (refusals, write failures);
	// nil means slog.Default().
	Logger *slog.Logger

	sink io.Writer        // tests: replaces the file or Stdout
	now  func() time.Time // tests: the clock of the warnings' rate limit
}

// Logger is the pipeline: Log queues a record and returns at once, and one
// background goroutine masks each record and hands it to the sinks, the
// file's queue included. Every record is accounted for in the file: it is
// written, or counted as refused (the file's or the pipeline's queue was
// full, or the log closed), failed (its write failed) or unwritten at
// Close.
type Logger struct {
	log    *slog.Logger
	now    func() time.Time
	masker *recordMasker
	queue  *queue.Queue[queued]
	file   *fileSink // nil: no file
	sinks  []Sink    // beside the file
	refuse bool
	done   chan struct{} // closed when every record is written or counted

	accepted, written, abandoned atomic.Uint64
	lastWarn                     atomic.Int64 // unix nanoseconds of the last refusal warning
	closeErr                     error        // read after done
}

// queued is a record on its way, its size as Log counted it, and whether
// the file's queue holds room for it.
type queued struct {
	rec  Record
	size int64
	file bool
}

// Open starts a Logger writing to opts.Path (file.go) and opts.Sinks.
func Open(opts Options) (*Logger, error) {
	if opts.Path == "" && len(opts.Sinks) == 0 {
		return nil, errors.New("decision log: no path (use - for stdout) and no sink")
	}
	l := &Logger{log: cmp.Or(opts.Logger, slog.Default()), now: opts.now, sinks: opts.Sinks, refuse: opts.Refuse, done: make(chan struct{})}
	if l.now == nil {
		l.now = time.Now
	}
	lim := queue.Limits{Bytes: opts.QueueBytes}.Or(queue.Limits{Bytes: DefaultQueueBytes})
	l.queue = queue.New[queued](lim)
	var err error
	if l.masker, err = newRecordMasker(opts.Mask); err != nil {
		return nil, fmt.Errorf("decision log: %w", err)
	}
	if opts.Path != "" {
		if l.file, err = openFile(opts, l, lim); err != nil {
			return nil, fmt.Errorf("decision log: %w", err)
		}
	}
	go l.run()
	return l, nil
}

// QueueSize is what rec costs in a queue of records (the pipeline's, the
// file's, the decision store's): its input, result and bodies, and
// room for the rest.
func (rec *Record) QueueSize() int64 {
	return int64(len(rec.Input)+len(rec.Result)+len(rec.BodyBase64)+len(rec.BodyPrefix)+len(rec.Promotion)) + recordOverhead
}

// Log queues rec and returns at once, true when it was queued for the file
// (without a file: for the sinks). rec's slices are kept, not copied: the
// caller must not modify them afterwards. Whether the file's queue takes
// rec is decided here, by reserving its room, so that with Refuse no
// decision is answered without its record queued; a record it cannot take
// is counted once, and (without Refuse) still handed to the other sinks.
// A record the pipeline's queue refuses, or one logged after Close,
// reaches no sink and is counted once. rec's names are bounded here
// (BoundName), before they are counted or queued.
func (l *Logger) Log(rec Record) bool {
	// Once, as the pipeline takes it: every sink gets the same names.
	rec.Decision, rec.Path, rec.Caller = BoundName(rec.Decision), BoundName(rec.Path), BoundName(rec.Caller)
	q := queued{rec: rec, size: rec.QueueSize(), file: l.file != nil}
	why := ""
	if q.file {
		q.file, why = l.file.b.Reserve(q.size)
	}
	if why == "" || !l.refuse {
		if ok, pwhy := l.queue.Put(q, q.size); !ok {
			if q.file {
				l.file.b.Release(q.size)
			}
			l.warnRefused(pwhy)
			return false
		}
	}
	if why != "" { // refuse: it reaches no sink; drop: the others have it
		l.file.b.Drop(why, 1)
		l.warnRefused(why)
		return false
	}
	l.accepted.Add(1)
	return true
}

// warnRefused warns that records were refused, at most once a second.
func (l *Logger) warnRefused(why string) {
	msg := "decision log queue is full: records refused"
	if why == queue.Closed {
		msg = "decision log is closed: records refused"
	}
	now := l.now().UnixNano()
	last := l.lastWarn.Load()
	if (last == 0 || now-last >= int64(time.Second)) && l.lastWarn.CompareAndSwap(last, now) {
		l.log.Warn(msg, "refused_total", l.refused(), "queue_bytes", l.queue.Limits().Bytes)
	}
}

// refused counts the records the file (or, without one, the sinks) never
// queued: each is counted by the one queue that refused it.
func (l *Logger) refused() uint64 { return l.dropped(queue.Full) + l.dropped(queue.Closed) }

func (l *Logger) failed() uint64 { return l.dropped(dropFailed) }

// dropped is the records the pipeline's queue and the file's dropped for
// why (the pipeline's drops only those it refuses: full, closed).
func (l *Logger) dropped(why string) uint64 {
	n := l.queue.Dropped(why)
	if l.file != nil {
		n += l.file.b.Dropped(why)
	}
	return n
}

// Dropped is the number of records that were not written so far: refused,
// failed, and (after a Close that ran out of time) still queued. It only
// grows, as a counter metric must.
func (l *Logger) Dropped() uint64 {
	var n uint64
	for _, r := range l.droppedByReason() {
		n += r.n
	}
	return n
}

// Written is the number of records written to the file or Stdout (handed
// to the sinks, without a file).
func (l *Logger) Written() uint64 { return l.written.Load() }

// Stats is the account of every record a Logger was given.
type Stats struct {
	Written   uint64 // handed to the operating system
	Refused   uint64 // not queued: the queue was full or the log closed
	Failed    uint64 // queued, but their write failed
	Unwritten uint64 // every record not written: refused, failed, or still queued
}

// Stats returns the account so far; after Close it is final.
func (l *Logger) Stats() Stats {
	s := Stats{Written: l.written.Load(), Refused: l.refused(), Failed: l.failed()}
	s.Unwritten = s.Refused + max(l.accepted.Load(), s.Written) - s.Written
	return s
}

// Close stops accepting records, hands every record already queued to the
// sinks (at once: the pipeline never waits for one), then writes what the
// file's queue holds and flushes, syncs and closes the file. When ctx ends
// first, the records not written yet are counted as unwritten (Stats,
// Dropped) and Close returns an error saying how many. The other sinks are
// their owners' to close, after this: each drains its own queue or counts
// what it could not.
func (l *Logger) Close(ctx context.Context) error {
	l.queue.Close()
	select {
	case <-l.done:
		return l.closeErr
	case <-ctx.Done():
		// The writer is stuck (a stalled disk or reader): what it has not
		// written by now is lost with the process.
		stuck := l.accepted.Load() - l.written.Load() - l.failed()
		l.abandoned.Store(stuck)
		return fmt.Errorf("decision log: closed with %d records not written: %w", stuck, ctx.Err())
	}
}

// run masks every record once and hands it to each sink and to the file's
// queue, which holds room for it since Log. It never waits for a sink.
func (l *Logger) run() {
	defer func() {
		if l.file != nil { // it writes what it holds, then the file closes
			l.file.b.Close(context.Background())
			l.closeErr = l.file.close()
		}
		close(l.done)
	}()
	var batch []queued
	var recs []Record
	for {
		var closed bool
		batch, closed = l.queue.Take(batch[:0], 0)
		if len(batch) > 0 {
			for i := range batch {
				q := &batch[i]
				q.rec = l.masker.mask(q.rec)
				recs = append(recs, q.rec)
				if q.file {
					l.file.b.PutReserved(q.rec, q.size)
				}
			}
			for _, s := range l.sinks {
				s.Write(recs)
			}
			if l.file == nil {
				l.written.Add(uint64(len(recs)))
			}
			clear(batch) // drop the inputs before waiting
			clear(recs)
			recs = recs[:0]
			continue // more may have come meanwhile
		}
		if closed {
			return
		}
		<-l.queue.Ready()
	}
}
