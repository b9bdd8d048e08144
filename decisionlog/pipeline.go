// Package decisionlog is the decision-record pipeline: every answered
// decision's record is queued once (a bounded queue, off the request path),
// masked once, and handed in batches to its sinks: the JSON Lines file
// (file.go), the decision-log upload (package logship), the pages' ring
// (server/ui). Reader.go reads what the file sink wrote, for replay, the
// pages and shadow.
package decisionlog

import (
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
// recs (the slice) after Write returns, only the Records. A sink whose
// destination can stall (a network service, a database) must not stall the
// others: it puts the batch on its own bounded queue (internal/queue) and
// counts what it drops, by reason. The file is the one sink written in
// place, so that a stalled disk fills the pipeline's queue, whose refusals
// are the log's (Stats).
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
	// QueueBytes bounds the records waiting to be written, by size: a
	// record that would take the queue past it is refused and counted (a
	// record larger than the bound alone is taken when the queue is empty).
	QueueBytes int64
	// MaxMegabytes rotates the file before a write would take it past this
	// many MiB (lumberjack's unit); 0 means 100. It must hold the largest
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
// background goroutine masks each record and hands it to the sinks. Every
// record is accounted for: it is written, or counted as refused (the queue
// was full or the log closed), failed (its write failed) or unwritten at
// Close.
type Logger struct {
	log    *slog.Logger
	now    func() time.Time
	masker *recordMasker
	queue  *queue.Queue[Record]
	file   *fileSink // nil: no file
	sinks  []Sink
	done   chan struct{}

	accepted, written, failed, abandoned atomic.Uint64
	lastWarn                             atomic.Int64 // unix nanoseconds of the last refusal warning
	closeErr                             error        // read after done
}

// Open starts a Logger writing to opts.Path (file.go) and opts.Sinks.
func Open(opts Options) (*Logger, error) {
	if opts.Path == "" && len(opts.Sinks) == 0 {
		return nil, errors.New("decision log: no path (use - for stdout) and no sink")
	}
	l := &Logger{log: opts.Logger, now: opts.now, sinks: opts.Sinks, done: make(chan struct{})}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.now == nil {
		l.now = time.Now
	}
	l.queue = queue.New[Record](queue.Limits{Bytes: opts.QueueBytes, HoldBytes: true}.Or(queue.Limits{Bytes: DefaultQueueBytes}))
	var err error
	if l.masker, err = newRecordMasker(opts.Mask); err != nil {
		return nil, fmt.Errorf("decision log: %w", err)
	}
	if opts.Path != "" {
		if l.file, err = openFile(opts, l); err != nil {
			return nil, fmt.Errorf("decision log: %w", err)
		}
		// Last: the sinks that only queue or keep a record get it before a
		// slow disk's write.
		l.sinks = append(append([]Sink(nil), l.sinks...), l.file)
	}
	go l.run()
	return l, nil
}

// size is what rec costs in the queue.
func size(rec *Record) int64 {
	return int64(len(rec.Input)+len(rec.Result)+len(rec.BodyBase64)+len(rec.BodyPrefix)+len(rec.Promotion)) + recordOverhead
}

// Log queues rec and returns at once, true when it was queued. rec's slices
// are kept, not copied: the caller must not modify them afterwards. A record
// that finds the queue full, or the Logger closed, is refused and counted.
func (l *Logger) Log(rec Record) bool {
	ok, why := l.queue.Put(rec, size(&rec))
	if !ok {
		msg := "decision log queue is full: records refused"
		if why == queue.Closed {
			msg = "decision log is closed: records refused"
		}
		now := l.now().UnixNano()
		last := l.lastWarn.Load()
		if (last == 0 || now-last >= int64(time.Second)) && l.lastWarn.CompareAndSwap(last, now) {
			l.log.Warn(msg, "refused_total", l.refused(), "queue_bytes", l.queue.Limits().Bytes)
		}
		return false
	}
	l.accepted.Add(1)
	return true
}

func (l *Logger) refused() uint64 {
	return l.queue.Dropped(queue.Full) + l.queue.Dropped(queue.Closed)
}

// Dropped is the number of records that were not written so far: refused,
// failed, and (after a Close that ran out of time) still queued. It only
// grows, as a counter metric must.
func (l *Logger) Dropped() uint64 {
	return l.refused() + l.failed.Load() + l.abandoned.Load()
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
	s := Stats{Refused: l.refused(), Failed: l.failed.Load()}
	accepted := l.accepted.Load()
	s.Written = l.written.Load()
	s.Unwritten = s.Refused
	if accepted > s.Written {
		s.Unwritten += accepted - s.Written
	}
	return s
}

// Close stops accepting records, hands every record already queued to the
// sinks, then flushes, syncs and closes the file. When ctx ends first, the
// records still queued are counted as unwritten (Stats, Dropped) and Close
// returns an error saying how many. The other sinks are their owners' to
// close, after this.
func (l *Logger) Close(ctx context.Context) error {
	l.queue.Close()
	select {
	case <-l.done:
		return l.closeErr
	case <-ctx.Done():
		// The writer is stuck (a stalled disk or reader): what it has not
		// written by now is lost with the process.
		stuck := l.accepted.Load() - l.written.Load() - l.failed.Load()
		l.abandoned.Store(stuck)
		return fmt.Errorf("decision log: closed with %d records not written: %w", stuck, ctx.Err())
	}
}

// run masks every record once and hands it to each sink. A written record
// reaches the operating system at most FlushDelay later: a crash loses at
// most that much, and under load one write carries many records instead of
// one each (a write per decision was a tenth of the server's CPU at a few
// thousand decisions a second).
func (l *Logger) run() {
	defer close(l.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	var recs []Record
	for {
		var closed bool
		recs, closed = l.queue.Take(recs[:0], 0)
		if len(recs) > 0 {
			select { // under steady load the queue is never empty: still flush on time
			case <-timer.C:
				armed = false
				l.file.flush()
			default:
			}
			var taken int64
			for i := range recs {
				taken += size(&recs[i])
				recs[i] = l.masker.mask(recs[i])
			}
			for _, s := range l.sinks {
				s.Write(recs)
			}
			l.queue.Done(taken)
			if l.file == nil {
				l.written.Add(uint64(len(recs)))
			}
			clear(recs) // drop the inputs before waiting
			if !armed && l.file != nil && l.file.batchN > 0 {
				armed = true
				timer.Reset(FlushDelay)
			}
			continue // more may have come meanwhile
		}
		if closed {
			if l.file != nil {
				l.file.flush()
				l.closeErr = l.file.close()
			}
			return
		}
		select {
		case <-l.queue.Ready():
		case <-timer.C:
			armed = false
			l.file.flush()
		}
	}
}
