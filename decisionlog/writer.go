package decisionlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/arbiter-dev/arbiter/internal/jsonenc"
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

// batchBytes is how much the writer gathers before one write. Batches hold
// whole lines only, so that a rotation never splits a record between files.
const batchBytes = 64 << 10

// Options configure a Logger. The zero value of each field means its default.
type Options struct {
	// Path is the log file, or "-" for Stdout (then there is no rotation).
	Path string
	// Stdout is written when Path is "-"; nil means os.Stdout.
	Stdout io.Writer
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
	// Mask lists JSON pointers into the input whose values are logged as
	// MaskedValue, each named in the record's masked list; pointers that
	// name nothing in an input are ignored. On the OPA Data API path (a
	// Record.Path under /v1/data/), where a failed request logs its
	// {"input": ...} body as received, each pointer applies under /input
	// too. With a mask, a body that is not JSON is not logged at all (it
	// cannot be masked) and the record's erased list says so.
	Mask []string
	// Logger receives the log's own warnings (refusals, write failures);
	// nil means slog.Default().
	Logger *slog.Logger

	sink io.Writer // tests: replaces the file or Stdout
}

// Logger writes Records as JSON lines from one background goroutine, so
// that logging never blocks a request. Every record is accounted for: it is
// written, or counted as refused (the queue was full or the log closed),
// failed (its write failed) or unwritten at Close.
type Logger struct {
	log        *slog.Logger
	masker     *masker
	dataMasker *masker // masker, also under /input: see Options.Mask
	maxQueue   int64

	mu     sync.Mutex // guards the queue and closed
	closed bool
	queue  []Record
	queued int64 // bytes of the records in queue and being written
	wake   chan struct{}
	done   chan struct{}

	accepted, written, refused, failed atomic.Uint64
	abandoned                          atomic.Uint64
	lastWarn                           atomic.Int64 // unix nanoseconds of the last refusal warning

	// Owned by the writing goroutine; closeErr is read after done.
	path     string             // "" when writing to Stdout
	rotating *lumberjack.Logger // nil when writing to Stdout
	dest     io.Writer
	maxWrite int64 // the largest write dest takes
	torn     bool  // a failed write may have left a partial line
	batch    bytes.Buffer
	batchN   uint64    // records in batch
	warnedAt time.Time // when warnDropped last warned
	line     []byte
	scratch  bytes.Buffer
	closeErr error
}

// Open starts a Logger writing to opts.Path, creating its folder (0750) and
// the file (0640) when missing and appending to it otherwise. A file that
// ends mid-line (what a crash leaves) is rotated away first, so that no
// record is glued to the torn one and no file starts with a blank line.
func Open(opts Options) (*Logger, error) {
	if opts.Path == "" {
		return nil, errors.New("decision log: no path (use - for stdout)")
	}
	l := &Logger{log: opts.Logger, maxQueue: opts.QueueBytes, maxWrite: 1<<63 - 1}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.maxQueue <= 0 {
		l.maxQueue = DefaultQueueBytes
	}
	if len(opts.Mask) > 0 {
		m, err := newMasker(opts.Mask)
		if err != nil {
			return nil, fmt.Errorf("decision log: %w", err)
		}
		wrapped := append([]string(nil), opts.Mask...)
		for _, p := range opts.Mask {
			wrapped = append(wrapped, "/input"+p)
		}
		l.masker = m
		l.dataMasker, _ = newMasker(wrapped) // valid: built from valid pointers
	}
	switch {
	case opts.sink != nil:
		l.dest = opts.sink
	case opts.Path == "-":
		l.dest = opts.Stdout
		if l.dest == nil {
			l.dest = os.Stdout
		}
	default:
		if err := l.openFile(opts); err != nil {
			return nil, fmt.Errorf("decision log: %w", err)
		}
	}
	l.wake = make(chan struct{}, 1)
	l.done = make(chan struct{})
	go l.run()
	return l, nil
}

func (l *Logger) openFile(opts Options) error {
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o750); err != nil {
		return err
	}
	// Created here with the mode lumberjack then keeps for every new file,
	// and opened once so that a path that cannot be written fails at start.
	f, err := os.OpenFile(opts.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	_ = f.Close()
	if err != nil {
		return err
	}
	mb := opts.MaxMegabytes
	if mb <= 0 {
		mb = DefaultMaxMegabytes
	}
	backups := opts.MaxBackups
	switch {
	case backups == 0:
		backups = DefaultMaxBackups
	case backups < 0:
		backups = 0 // lumberjack keeps every backup
	}
	l.path = opts.Path
	l.rotating = &lumberjack.Logger{Filename: opts.Path, MaxSize: mb, MaxBackups: backups}
	l.dest = l.rotating
	l.maxWrite = MaxLineBytes(mb)
	if st.Size() > 0 && !endsWithNewline(opts.Path, st.Size()) {
		if err := l.rotating.Rotate(); err != nil {
			return fmt.Errorf("rotating away a torn last line: %w", err)
		}
	}
	// lumberjack opens its file on the first write; an empty one opens it
	// now, so that a process short of descriptors later still logs.
	if _, err := l.rotating.Write(nil); err != nil {
		return err
	}
	return nil
}

// endsWithNewline reports whether the file at path, of size n, ends with a
// newline.
func endsWithNewline(path string, n int64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [1]byte
	_, err = f.ReadAt(b[:], n-1)
	return err == nil && b[0] == '\n'
}

// size is what rec costs in the queue.
func size(rec *Record) int64 {
	return int64(len(rec.Input)+len(rec.Result)+len(rec.BodyBase64)+len(rec.BodyPrefix)) + recordOverhead
}

// Log queues rec and returns at once, true when it was queued. rec's slices
// are kept, not copied: the caller must not modify them afterwards. A record
// that finds the queue full, or the Logger closed, is refused and counted.
func (l *Logger) Log(rec Record) bool {
	n := size(&rec)
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		l.refuse("decision log is closed: records refused")
		return false
	case l.queued > 0 && l.queued+n > l.maxQueue:
		l.mu.Unlock()
		l.refuse("decision log queue is full: records refused")
		return false
	}
	if rec.pending != nil {
		rec.pending.wake.Store(&l.wake)
	}
	l.queue = append(l.queue, rec)
	l.queued += n
	l.accepted.Add(1)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

func (l *Logger) refuse(msg string) {
	total := l.refused.Add(1)
	now := time.Now().UnixNano()
	last := l.lastWarn.Load()
	if now-last >= int64(time.Second) && l.lastWarn.CompareAndSwap(last, now) {
		l.log.Warn(msg, "refused_total", total, "queue_bytes", l.maxQueue)
	}
}

// Dropped is the number of records that were not written so far: refused,
// failed, and (after a Close that ran out of time) still queued. It only
// grows, as a counter metric must.
func (l *Logger) Dropped() uint64 {
	return l.refused.Load() + l.failed.Load() + l.abandoned.Load()
}

// Written is the number of records written to the file or Stdout.
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
	s := Stats{Refused: l.refused.Load(), Failed: l.failed.Load()}
	accepted := l.accepted.Load()
	s.Written = l.written.Load()
	s.Unwritten = s.Refused
	if accepted > s.Written {
		s.Unwritten += accepted - s.Written
	}
	return s
}

// Close stops accepting records, writes every record already queued, then
// flushes, syncs and closes the file. When ctx ends first, the records
// still queued are counted as unwritten (Stats, Dropped) and Close returns
// an error saying how many.
func (l *Logger) Close(ctx context.Context) error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()
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

func (l *Logger) run() {
	defer close(l.done)
	// A written record reaches the operating system at most FlushDelay
	// later: a crash loses at most that much, and under load one write
	// carries many records instead of one each (a write per decision was a
	// tenth of the server's CPU at a few thousand decisions a second).
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	var recs []Record
	var held []Record // waiting for their shadow outcome (shadow.go)
	for {
		l.mu.Lock()
		recs, l.queue = l.queue, recs[:0]
		closed := l.closed
		l.mu.Unlock()
		released, n := l.release(&held, closed)
		if len(recs) > 0 || n > 0 {
			select { // under steady load the queue is never empty: still flush on time
			case <-timer.C:
				armed = false
				l.flush()
			default:
			}
			taken := released
			for i := range recs {
				if p := recs[i].pending; p != nil {
					s, ok := p.ready()
					if !ok && !closed {
						held = append(held, recs[i]) // still queued, and counted so
						continue
					}
					recs[i].Shadow = s
				}
				taken += size(&recs[i])
				l.add(recs[i])
			}
			clear(recs) // drop the inputs before waiting
			l.mu.Lock()
			l.queued -= taken
			l.mu.Unlock()
			if !armed && l.batch.Len() > 0 {
				armed = true
				timer.Reset(FlushDelay)
			}
			continue // more may have come meanwhile
		}
		if closed {
			l.flush()
			l.closeDest()
			return
		}
		select {
		case <-l.wake:
		case <-timer.C:
			armed = false
			l.flush()
		}
	}
}

// release adds to the batch the held records whose shadow outcome has
// arrived (every held record once the log is closing, with the outcome or
// without), keeps the others, and returns the bytes and records released.
func (l *Logger) release(held *[]Record, closing bool) (int64, int) {
	kept := (*held)[:0]
	var taken int64
	n := 0
	for _, rec := range *held {
		s, ok := rec.pending.ready()
		if !ok && !closing {
			kept = append(kept, rec)
			continue
		}
		rec.Shadow = s
		taken += size(&rec)
		n++
		l.add(rec)
	}
	clear((*held)[len(kept):])
	*held = kept
	return taken, n
}

// MaxLineBytes is the longest line, newline included, that a Logger writes
// into a file rotated at maxMegabytes MiB (0: DefaultMaxMegabytes): a
// record larger than the file may be is not written (add). The reader
// bounds lines with it.
func MaxLineBytes(maxMegabytes int) int64 {
	if maxMegabytes <= 0 {
		maxMegabytes = DefaultMaxMegabytes
	}
	return int64(maxMegabytes) << 20
}

// FlushDelay bounds how long a written record may wait in memory before it
// is handed to the operating system.
const FlushDelay = 5 * time.Millisecond

// add encodes rec into the batch, writing the batch first when rec would
// take it past batchBytes.
func (l *Logger) add(rec Record) {
	line := l.encode(rec)
	if int64(len(line)) > l.maxWrite {
		l.failed.Add(1)
		l.warnDropped("decision log: a record is larger than the log file may be (--decision-log-max-mb), not written", fmt.Errorf("%d bytes", len(line)), "decision_id", rec.DecisionID)
		return
	}
	if l.batch.Len() > 0 && (l.batch.Len()+len(line) > batchBytes || int64(l.batch.Len()+len(line)) > l.maxWrite) {
		l.flush()
	}
	if len(line) >= batchBytes {
		// A large record (a Runner state of megabytes) is written as it
		// is: copying it into the batch would only double its cost.
		l.write(line, 1)
		return
	}
	l.batch.Write(line)
	l.batchN++
}

// flush writes the batch in one write of whole lines.
func (l *Logger) flush() {
	if l.batchN == 0 {
		return
	}
	l.write(l.batch.Bytes(), l.batchN)
	l.resetBatch()
}

// write writes lines, n whole records, in one write, and counts them as
// written or failed.
func (l *Logger) write(lines []byte, n uint64) {
	if l.torn {
		// The last write failed and may have left a partial line: start a
		// new file rather than append to it (a rotation never leaves a
		// blank line, as a terminating newline would at the top of a file).
		if l.rotating != nil {
			if err := l.rotating.Rotate(); err != nil {
				l.failed.Add(n)
				l.warnDropped("decision log: rotation after a failed write failed, records not written", err)
				return
			}
		}
		l.torn = false
	}
	if _, err := l.dest.Write(lines); err != nil {
		l.torn = true
		l.failed.Add(n)
		l.warnDropped("decision log: write failed, records not written", err)
		return
	}
	l.written.Add(n)
}

func (l *Logger) resetBatch() {
	l.batchN = 0
	l.batch.Reset()
	shrink(&l.batch)
}

func (l *Logger) closeDest() {
	if l.rotating == nil {
		if f, ok := l.dest.(*os.File); ok {
			_ = f.Sync() // a pipe or terminal cannot sync; nothing is lost by trying
		}
		return
	}
	err := l.rotating.Close()
	// lumberjack does not sync; any descriptor of the file can.
	if f, oerr := os.Open(l.path); oerr == nil {
		if serr := f.Sync(); err == nil {
			err = serr
		}
		_ = f.Close()
	}
	if err != nil {
		l.closeErr = fmt.Errorf("decision log: %w", err)
	}
}

// hasLineBreak reports whether b holds a CR or LF. bytes.IndexByte is
// vectorised; bytes.ContainsAny looks at one byte at a time, a tenth of the
// server's CPU on a 16 MiB input.
func hasLineBreak(b []byte) bool {
	return bytes.IndexByte(b, '\n') >= 0 || bytes.IndexByte(b, '\r') >= 0
}

// encode returns rec as one JSON line: its inputs compacted when they hold
// line breaks, its input masked. Record.Input and Result are JSON already
// (the strict parser accepted the input; the engine wrote the result), so
// they are not validated again here (issue 11 measured json.Valid at 3-5%
// of the server's CPU).
func (l *Logger) encode(rec Record) []byte {
	l.scratch.Reset()
	if len(rec.Input) > 0 && hasLineBreak(rec.Input) {
		// Only line breaks would split the record; other whitespace is
		// kept as received.
		if err := json.Compact(&l.scratch, rec.Input); err != nil {
			rec.Input, rec.Erased = nil, append(rec.Erased, "/input") // not JSON: never a broken line
		} else {
			rec.Input = l.scratch.Bytes()
		}
	}
	if l.masker != nil {
		rec = l.mask(rec)
	}
	if len(rec.Result) > 0 && hasLineBreak(rec.Result) {
		var out bytes.Buffer
		if json.Compact(&out, rec.Result) == nil {
			rec.Result = out.Bytes()
		}
	}
	if rec.Shadow != nil && hasLineBreak(rec.Shadow.Result) {
		var out bytes.Buffer
		if json.Compact(&out, rec.Shadow.Result) == nil {
			sh := *rec.Shadow
			sh.Result = out.Bytes()
			rec.Shadow = &sh
		}
	}
	if hasLineBreak(rec.Promotion) {
		var out bytes.Buffer
		if json.Compact(&out, rec.Promotion) == nil {
			rec.Promotion = out.Bytes()
		}
	}
	if cap(l.line) > 1<<20 {
		l.line = nil // do not hold a large record's buffer between records
	}
	// Sized once for the record, so that a large input is not copied
	// through a series of doubling buffers.
	l.line = appendRecord(slices.Grow(l.line[:0], recordSize(rec)), rec)
	shrink(&l.scratch)
	return l.line
}

// recordSize is about the length of rec's line: its JSON members, which
// are written as they are, and room for the rest.
func recordSize(rec Record) int {
	n := 1024 + len(rec.Input) + len(rec.Result) + len(rec.BodyBase64) + len(rec.BodyPrefix) + len(rec.Promotion)
	if rec.Shadow != nil {
		n += len(rec.Shadow.Result)
	}
	return n
}

// mask applies the configured pointers to rec's input and records which
// values it replaced. A body that is not JSON cannot be masked, so it is
// erased; an input that cannot be walked is masked whole (fail closed).
func (l *Logger) mask(rec Record) Record {
	if rec.BodyBase64 != "" {
		rec.BodyBase64, rec.Erased = "", append(rec.Erased, "/body_base64")
	}
	if rec.BodyPrefix != "" {
		rec.BodyPrefix, rec.Erased = "", append(rec.Erased, "/body_prefix_base64")
	}
	if len(rec.Input) == 0 {
		return rec
	}
	m := l.masker
	if strings.HasPrefix(rec.Path, "/v1/data/") {
		m = l.dataMasker
	}
	masked, matched, err := m.mask(rec.Input)
	if err != nil {
		rec.Input, rec.Masked = maskedJSON, append(rec.Masked, "/input")
		return rec
	}
	rec.Input = masked
	for _, p := range matched {
		rec.Masked = append(rec.Masked, "/input"+p)
	}
	return rec
}

// appendRecord writes rec as one JSON line, members in the order of
// Record's fields and with its tags, as encoding/json would; by hand, since
// this runs once per decision and reflection over RawMessage fields
// compacts them a second time.
func appendRecord(b []byte, rec Record) []byte {
	b = append(b, `{"decision_id":`...)
	b = jsonenc.AppendString(b, rec.DecisionID)
	b = append(b, `,"time":"`...)
	b = rec.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","decision":`...)
	b = jsonenc.AppendString(b, rec.Decision)
	if rec.Revision != "" {
		b = append(b, `,"policy_revision":`...)
		b = jsonenc.AppendString(b, rec.Revision)
	}
	b = append(b, `,"path":`...)
	b = jsonenc.AppendString(b, rec.Path)
	if len(rec.Input) > 0 {
		b = append(b, `,"input":`...)
		b = append(b, rec.Input...)
	}
	if rec.BodyBase64 != "" {
		b = append(b, `,"body_base64":`...)
		b = jsonenc.AppendString(b, rec.BodyBase64)
	}
	if rec.BodySize != 0 {
		b = append(b, `,"body_size":`...)
		b = strconv.AppendInt(b, rec.BodySize, 10)
	}
	if rec.BodySHA256 != "" {
		b = append(b, `,"body_sha256":`...)
		b = jsonenc.AppendString(b, rec.BodySHA256)
	}
	if rec.BodyPrefix != "" {
		b = append(b, `,"body_prefix_base64":`...)
		b = jsonenc.AppendString(b, rec.BodyPrefix)
	}
	if len(rec.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, rec.Result...)
	}
	if rec.Error != nil {
		b = append(b, `,"error":{"code":`...)
		b = jsonenc.AppendString(b, rec.Error.Code)
		b = append(b, `,"message":`...)
		b = jsonenc.AppendString(b, rec.Error.Message)
		b = append(b, '}')
	}
	b = append(b, `,"duration_ns":`...)
	b = strconv.AppendInt(b, rec.DurationNS, 10)
	if rec.Caller != "" {
		b = append(b, `,"caller":`...)
		b = jsonenc.AppendString(b, rec.Caller)
	}
	b = appendStrings(b, "masked", rec.Masked)
	b = appendStrings(b, "erased", rec.Erased)
	if sh := rec.Shadow; sh != nil {
		b = append(b, `,"shadow":{"policy_revision":`...)
		b = jsonenc.AppendString(b, sh.Revision)
		b = append(b, `,"class":`...)
		b = jsonenc.AppendString(b, sh.Class)
		if len(sh.Result) > 0 {
			b = append(b, `,"result":`...)
			b = append(b, sh.Result...)
		}
		if sh.Error != nil {
			b = append(b, `,"error":{"code":`...)
			b = jsonenc.AppendString(b, sh.Error.Code)
			b = append(b, `,"message":`...)
			b = jsonenc.AppendString(b, sh.Error.Message)
			b = append(b, '}')
		}
		b = append(b, `,"duration_ns":`...)
		b = strconv.AppendInt(b, sh.DurationNS, 10)
		b = append(b, '}')
	}
	if len(rec.Promotion) > 0 {
		b = append(b, `,"promotion":`...)
		b = append(b, rec.Promotion...)
	}
	return append(b, '}', '\n')
}

func appendStrings(b []byte, name string, list []string) []byte {
	if len(list) == 0 {
		return b
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":[`...)
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, s)
	}
	return append(b, ']')
}

// shrink drops a buffer that a huge record grew, rather than hold on to it
// for the life of the process.
func shrink(b *bytes.Buffer) {
	if b.Cap() > 1<<20 {
		*b = bytes.Buffer{}
	}
}

// warnDropped warns that records were not written (they are already counted
// in failed), at most once per second: a full disk must not turn into a
// flood of warnings.
func (l *Logger) warnDropped(msg string, err error, args ...any) {
	if now := time.Now(); now.Sub(l.warnedAt) >= time.Second {
		l.warnedAt = now
		l.log.Warn(msg, append([]any{"err", err, "failed_total", l.failed.Load()}, args...)...)
	}
}
