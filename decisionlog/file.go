package decisionlog

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/arbiter-dev/arbiter/internal/defaults"
	"github.com/arbiter-dev/arbiter/internal/jsonenc"
	"github.com/arbiter-dev/arbiter/internal/queue"
)

// dropFailed is the reason of a record whose write failed, or that is
// larger than the file may be.
const dropFailed = "failed"

// batchBytes is how much the file sink gathers before one write. Batches
// hold whole lines only, so that a rotation never splits a record between
// files.
const batchBytes = 64 << 10

// fileSink writes records as JSON lines to the log file (rotatingFile) or
// Stdout, on the goroutine of its own Batcher (its BatchWriter: room
// reserved by Log, records put by the pipeline), so that a stalled disk or
// reader costs the other sinks nothing; it counts records in the Logger's
// written, and in its Batcher's drops (failed writes, and what Log could
// not queue).
type fileSink struct {
	l        *Logger
	b        *Batcher[Record]
	rotating *rotatingFile // nil when writing to Stdout
	dest     io.Writer
	maxWrite int64     // the largest write dest takes
	torn     bool      // a failed write may have left a partial line
	batch    []byte    // whole lines, encoded straight from the records
	batchN   uint64    // records in batch
	warnedAt time.Time // when warnDropped last warned
}

// FlushDelay bounds how long a written record may wait in memory before it
// is handed to the operating system: a crash loses at most that much, and
// under load one write carries many records instead of one each (a write
// per decision was a tenth of the server's CPU at a few thousand decisions
// a second).
const FlushDelay = 5 * time.Millisecond

// openFile opens opts.Path, creating its folder (0750) and the file (0640)
// when missing and appending to it otherwise. A file that ends mid-line
// (what a crash leaves) is rotated away first, so that no record is glued
// to the torn one and no file starts with a blank line.
func openFile(opts Options, l *Logger, lim queue.Limits) (*fileSink, error) {
	f := &fileSink{l: l, maxWrite: 1<<63 - 1}
	switch {
	case opts.sink != nil:
		f.dest = opts.sink
	case opts.Path == "-":
		f.dest = cmp.Or[io.Writer](opts.Stdout, os.Stdout)
	default:
		if err := f.open(opts); err != nil {
			return nil, err
		}
	}
	f.b = NewBatcher[Record](BatchConfig{Name: "decision log", Queue: lim, BatchBytes: batchBytes, Linger: FlushDelay, Logger: l.log})
	f.b.Start(f)
	return f, nil
}

func (l *fileSink) open(opts Options) error {
	backups := max(0, cmp.Or(opts.MaxBackups, DefaultMaxBackups)) // negative: 0, every backup kept
	l.maxWrite = MaxLineBytes(opts.MaxMegabytes)
	rf, err := openRotating(opts.Path, l.maxWrite, backups, l.l.now)
	if err != nil {
		return err
	}
	l.rotating, l.dest = rf, rf
	if rf.size > 0 && !endsWithNewline(opts.Path, rf.size) {
		if err := rf.Rotate(); err != nil {
			_ = rf.Close()
			return fmt.Errorf("rotating away a torn last line: %w", err)
		}
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

// MaxLineBytes is the longest line, newline included, that a Logger writes
// into a file rotated at maxMegabytes MiB (0: DefaultMaxMegabytes): a
// record larger than the file may be is not written (add). The reader
// bounds lines with it.
func MaxLineBytes(maxMegabytes int) int64 {
	return int64(defaults.Positive(maxMegabytes, DefaultMaxMegabytes)) << 20
}

// Encode keeps rec as it is: Send encodes it into the batch's buffer, or
// writes its large input from the request's buffer (add).
func (l *fileSink) Encode(rec Record) (Record, int, error) { return rec, recordSize(rec), nil }

// Send writes recs in as few writes as whole lines allow. It never fails:
// what a write loses is counted as failed, not retried (a full disk is not
// waited for).
func (l *fileSink) Send(_ context.Context, recs []Record) error {
	for _, rec := range recs {
		l.add(rec)
	}
	l.flush()
	return nil
}

func (l *fileSink) Refused(Record, error) {}
func (l *fileSink) Idle() time.Duration   { return time.Hour }

// add encodes rec into the batch, writing the batch first when rec would
// take it past what the file may take in one write (the Batcher bounds
// the batch at batchBytes).
// The record's input is copied once, from the request's buffer into the
// batch; an input of batchBytes or more is not copied at all: it is written
// alone, from the request's buffer, between its line's head and tail
// (a copy of a 16 MiB input was a fresh 16 MiB of memory per request, its
// pages faulted in and cleared each time: the part of a large request's
// cost that grew faster than its size).
func (l *fileSink) add(rec Record) {
	var ok bool
	if rec, ok = oneLineRecord(rec); !ok {
		rec.Input, rec.Erased = nil, append(rec.Erased, "/input") // not JSON: never a broken line
	}
	if l.rotating != nil && len(rec.Input) >= batchBytes {
		l.flush()
		line := append(appendHead(l.batch, rec), `,"input":`...)
		head := len(line)
		line = appendTail(line, rec)
		if n := int64(len(line) + len(rec.Input)); n > l.maxWrite {
			l.tooLarge(n, rec.DecisionID)
		} else {
			l.write(1, line[:head], rec.Input, line[head:])
		}
		l.resetBatch()
		return
	}
	start := len(l.batch) // the Batcher bounds a batch by BatchBytes; only the file's own bound is checked here
	l.batch = appendRecord(slices.Grow(l.batch, recordSize(rec)), rec)
	switch n := int64(len(l.batch) - start); {
	case n > l.maxWrite:
		l.batch = l.batch[:start]
		l.tooLarge(n, rec.DecisionID)
		return
	case int64(len(l.batch)) > l.maxWrite: // recordSize fell short: the lines before go first
		l.write(l.batchN, l.batch[:start])
		l.batch = l.batch[:copy(l.batch, l.batch[start:])]
		l.batchN = 0
	}
	l.batchN++
}

// tooLarge drops a record of n bytes, more than the log file may hold.
func (l *fileSink) tooLarge(n int64, id string) {
	l.b.Drop(dropFailed, 1)
	l.warnDropped("decision log: a record is larger than the log file may be (--decision-log-max-mb), not written", fmt.Errorf("%d bytes", n), "decision_id", id)
}

// flush writes the batch in one write of whole lines.
func (l *fileSink) flush() {
	if l.batchN == 0 {
		return
	}
	l.write(l.batchN, l.batch)
	l.resetBatch()
}

// write writes lines, n whole records, in one write (parts of one line
// only to the rotating file, which never rotates between them), and counts
// them as written or failed.
func (l *fileSink) write(n uint64, lines ...[]byte) {
	if l.torn {
		// The last write failed and may have left a partial line: start a
		// new file rather than append to it (a rotation never leaves a
		// blank line, as a terminating newline would at the top of a file).
		if l.rotating != nil {
			if err := l.rotating.Rotate(); err != nil {
				l.b.Drop(dropFailed, n)
				l.warnDropped("decision log: rotation after a failed write failed, records not written", err)
				return
			}
		}
		l.torn = false
	}
	var err error
	if l.rotating != nil {
		_, err = l.rotating.writeParts(lines...)
	} else {
		_, err = l.dest.Write(lines[0])
	}
	if err != nil {
		l.torn = true
		l.b.Drop(dropFailed, n)
		l.warnDropped("decision log: write failed, records not written", err)
		return
	}
	l.l.written.Add(n)
}

func (l *fileSink) resetBatch() {
	l.batchN = 0
	l.batch = l.batch[:0]
	if cap(l.batch) > 1<<20 {
		l.batch = nil // do not hold a huge record's buffer for the life of the process
	}
}

func (l *fileSink) close() error {
	if l.rotating == nil {
		if f, ok := l.dest.(*os.File); ok {
			_ = f.Sync() // a pipe or terminal cannot sync; nothing is lost by trying
		}
		return nil
	}
	if err := l.rotating.Close(); err != nil {
		return fmt.Errorf("decision log: %w", err)
	}
	return nil
}

// hasLineBreak reports whether b holds a CR or LF. bytes.IndexByte is
// vectorised; bytes.ContainsAny looks at one byte at a time, a tenth of the
// server's CPU on a 16 MiB input.
func hasLineBreak(b []byte) bool {
	return bytes.IndexByte(b, '\n') >= 0 || bytes.IndexByte(b, '\r') >= 0
}

// oneLineRecord returns rec with its JSON members compacted where they hold
// line breaks (only line breaks would split the record; other whitespace is
// kept as received), and false when its input does and is not JSON. An
// input the one pass over the body found on one line (InputOneLine) is not
// scanned again. Record.Input and Result are JSON already (the strict
// parser accepted the input; the engine wrote the result), so they are not
// validated again here (issue 11 measured json.Valid at 3-5% of the
// server's CPU).
func oneLineRecord(rec Record) (Record, bool) {
	ok := true
	if !rec.InputOneLine {
		rec.Input, ok = oneLine(rec.Input)
	}
	rec.Result, _ = oneLine(rec.Result)
	rec.Promotion, _ = oneLine(rec.Promotion)
	if rec.Shadow != nil && hasLineBreak(rec.Shadow.Result) {
		sh := *rec.Shadow
		sh.Result, _ = oneLine(sh.Result)
		rec.Shadow = &sh
	}
	return rec, ok
}

// oneLine returns b compacted when it holds a line break, and false when it
// does and is not JSON.
func oneLine(b []byte) ([]byte, bool) {
	if !hasLineBreak(b) {
		return b, true
	}
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b, false
	}
	return out.Bytes(), true
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

// AppendLine appends rec as the file sink writes it: its JSON and a line
// break. The decision store keeps the same JSON.
func (rec Record) AppendLine(b []byte) []byte { return appendRecord(b, rec) }

// appendRecord writes rec as one JSON line, members in the order of
// Record's fields and with its tags, as encoding/json would; by hand, since
// this runs once per decision and reflection over RawMessage fields
// compacts them a second time.
func appendRecord(b []byte, rec Record) []byte {
	return appendTail(appendRaw(appendHead(b, rec), `,"input":`, rec.Input), rec)
}

// appendHead appends rec's line up to its input, appendTail what follows
// it.
func appendHead(b []byte, rec Record) []byte {
	b = append(b, `{"decision_id":`...)
	b = jsonenc.AppendString(b, rec.DecisionID)
	b = append(b, `,"time":"`...)
	b = rec.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","decision":`...)
	b = jsonenc.AppendString(b, rec.Decision)
	b = appendString(b, `,"policy_revision":`, rec.Revision)
	b = append(b, `,"path":`...)
	return jsonenc.AppendString(b, rec.Path)
}

func appendTail(b []byte, rec Record) []byte {
	b = appendString(b, `,"body_base64":`, rec.BodyBase64)
	if rec.BodySize != 0 {
		b = append(b, `,"body_size":`...)
		b = strconv.AppendInt(b, rec.BodySize, 10)
	}
	b = appendString(b, `,"body_sha256":`, rec.BodySHA256)
	b = appendString(b, `,"body_prefix_base64":`, rec.BodyPrefix)
	b = appendRaw(b, `,"result":`, rec.Result)
	b = appendError(b, rec.Error)
	b = append(b, `,"duration_ns":`...)
	b = strconv.AppendInt(b, rec.DurationNS, 10)
	b = appendString(b, `,"caller":`, rec.Caller)
	b = appendString(b, `,"trace_id":`, rec.TraceID)
	b = appendString(b, `,"span_id":`, rec.SpanID)
	b = appendStrings(b, `,"masked":[`, rec.Masked)
	b = appendStrings(b, `,"erased":[`, rec.Erased)
	if sh := rec.Shadow; sh != nil {
		b = append(b, `,"shadow":{"policy_revision":`...)
		b = jsonenc.AppendString(b, sh.Revision)
		b = append(b, `,"class":`...)
		b = jsonenc.AppendString(b, sh.Class)
		b = appendRaw(b, `,"result":`, sh.Result)
		b = appendError(b, sh.Error)
		b = append(b, `,"duration_ns":`...)
		b = strconv.AppendInt(b, sh.DurationNS, 10)
		b = append(b, '}')
	}
	b = appendRaw(b, `,"promotion":`, rec.Promotion)
	return append(b, '}', '\n')
}

// appendString appends the member whose key (and the comma before it) is
// member when s is not empty, appendRaw when raw is not.
func appendString(b []byte, member, s string) []byte {
	if s == "" {
		return b
	}
	return jsonenc.AppendString(append(b, member...), s)
}

func appendRaw(b []byte, member string, raw []byte) []byte {
	if len(raw) == 0 {
		return b
	}
	return append(append(b, member...), raw...)
}

// appendError appends the member "error" when e is not nil.
func appendError(b []byte, e *RecordError) []byte {
	if e == nil {
		return b
	}
	b = append(b, `,"error":{"code":`...)
	b = jsonenc.AppendString(b, e.Code)
	b = append(b, `,"message":`...)
	b = jsonenc.AppendString(b, e.Message)
	if len(e.Violations) > 0 {
		b = append(b, `,"violations":[`...)
		for i, v := range e.Violations {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"path":`...)
			b = jsonenc.AppendString(b, v.Path)
			b = append(b, `,"message":`...)
			b = jsonenc.AppendString(b, v.Message)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendStrings(b []byte, member string, list []string) []byte {
	if len(list) == 0 {
		return b
	}
	b = append(b, member...)
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, s)
	}
	return append(b, ']')
}

// warnDropped warns that records were not written (they are already counted
// in failed), at most once per second: a full disk must not turn into a
// flood of warnings.
func (l *fileSink) warnDropped(msg string, err error, args ...any) {
	if now := l.l.now(); now.Sub(l.warnedAt) >= time.Second {
		l.warnedAt = now
		l.l.log.Warn(msg, append([]any{"err", err, "failed_total", l.l.failed()}, args...)...)
	}
}
