package decisionlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/arbiter-dev/arbiter/internal/jsonenc"
)

// Defaults of Options.
const (
	// 8192 records is seconds of slack at thousands of decisions a second;
	// a deeper queue only holds more inputs in memory while the disk stalls.
	DefaultBufferSize = 8192
	DefaultMaxBytes   = 100 << 20
	DefaultMaxBackups = 5
)

// Options configure a Logger. The zero value of each field means its default.
type Options struct {
	// Path is the log file, or "-" for Stdout (then there is no rotation).
	Path string
	// Stdout is written when Path is "-"; nil means os.Stdout.
	Stdout io.Writer
	// BufferSize is how many records may wait to be written; default 8192.
	BufferSize int
	// MaxBytes rotates the file before a record would take it past this
	// size; 0 means 100 MiB, a negative value never rotates.
	MaxBytes int64
	// MaxBackups is how many rotated files (Path.1 ... Path.N) are kept;
	// 0 means 5, a negative value keeps none.
	MaxBackups int
	// Mask lists JSON pointers into the input whose values are logged as
	// MaskedValue; pointers that name nothing in an input are ignored.
	// On the OPA Data API path (a Record.Path under /v1/data/), where a
	// failed request logs its {"input": ...} body as received, each pointer
	// applies under /input too. With a mask, a body that is not valid JSON
	// is not logged at all, since it cannot be masked.
	Mask []string
	// Logger receives the log's own warnings (drops, write failures);
	// nil means slog.Default().
	Logger *slog.Logger
}

// Logger writes Records as JSON lines from one background goroutine, so
// that logging never blocks a request: when its queue is full a record is
// dropped, counted, and reported at most once per second.
type Logger struct {
	log        *slog.Logger
	masker     *masker
	dataMasker *masker // masker, also under /input: see Options.Mask

	mu     sync.RWMutex // guards closed against a concurrent close(ch)
	closed bool
	ch     chan Record
	done   chan struct{}

	dropped  atomic.Uint64
	written  atomic.Uint64
	lastWarn atomic.Int64 // unix nanoseconds of the last drop warning

	// Owned by the writing goroutine; closeErr is read after done.
	path       string // "" when writing to Stdout
	open       openFunc
	maxBytes   int64
	maxBackups int
	file       logFile
	dest       io.Writer // the file, Stdout, or io.Discard while no file is open
	out        *bufio.Writer
	size       int64
	pending    uint64 // records in out, not yet flushed
	torn       bool   // a failed write may have left a partial line
	failWarn   time.Time
	line       bytes.Buffer
	scratchIn  bytes.Buffer
	scratchOut bytes.Buffer
	closeErr   error
}

// logFile is what the writer needs of an *os.File; tests substitute it.
type logFile interface {
	io.Writer
	Sync() error
	Close() error
}

// openFunc opens path for appending and returns its current size.
type openFunc func(path string) (logFile, int64, error)

func openAppend(path string) (logFile, int64, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, 0, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// endsWithNewline reports whether the file at path, of size n, ends with a
// newline. When it cannot tell it says no: a stray newline only makes a
// blank line, which readers skip.
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

// Open starts a Logger writing to opts.Path, creating its folder (0750) and
// the file (0640) when missing and appending to it otherwise.
func Open(opts Options) (*Logger, error) {
	return newLogger(opts, openAppend)
}

func newLogger(opts Options, open openFunc) (*Logger, error) {
	if opts.Path == "" {
		return nil, errors.New("decision log: no path (use - for stdout)")
	}
	l := &Logger{log: opts.Logger, open: open, maxBytes: opts.MaxBytes, maxBackups: opts.MaxBackups}
	if l.log == nil {
		l.log = slog.Default()
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
	size := opts.BufferSize
	if size <= 0 {
		size = DefaultBufferSize
	}
	if l.maxBytes == 0 {
		l.maxBytes = DefaultMaxBytes
	}
	if l.maxBackups == 0 {
		l.maxBackups = DefaultMaxBackups
	}
	var w io.Writer
	if opts.Path == "-" {
		w = opts.Stdout
		if w == nil {
			w = os.Stdout
		}
		l.maxBytes = -1
	} else {
		f, n, err := open(opts.Path)
		if err != nil {
			return nil, fmt.Errorf("decision log: %w", err)
		}
		l.path, l.file, l.size, w = opts.Path, f, n, f
		// A crash can leave the file ending mid-line. Appending right after
		// it would glue the first new record to the torn one and lose it
		// too, so the first write ends the torn line first (found by
		// cmd/arbiter/crash_test.go).
		l.torn = n > 0 && !endsWithNewline(opts.Path, n)
	}
	l.dest = w
	l.out = bufio.NewWriterSize(w, 64<<10)
	l.ch = make(chan Record, size)
	l.done = make(chan struct{})
	go l.run()
	return l, nil
}

// Log queues rec and returns at once. rec's slices are kept, not copied:
// the caller must not modify them afterwards. A record that finds the queue
// full, or the Logger closed, is dropped and counted.
func (l *Logger) Log(rec Record) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		l.drop("decision log is closed: dropping records")
		return
	}
	select {
	case l.ch <- rec:
		l.mu.RUnlock()
	default:
		l.mu.RUnlock()
		l.drop("decision log queue is full: dropping records")
	}
}

func (l *Logger) drop(msg string) {
	total := l.dropped.Add(1)
	now := time.Now().UnixNano()
	last := l.lastWarn.Load()
	if now-last >= int64(time.Second) && l.lastWarn.CompareAndSwap(last, now) {
		l.log.Warn(msg, "dropped_total", total)
	}
}

// Dropped is the number of records that were not written: queue full,
// logger closed, or a write that failed.
func (l *Logger) Dropped() uint64 { return l.dropped.Load() }

// Written is the number of records written and flushed to the file.
func (l *Logger) Written() uint64 { return l.written.Load() }

// Close stops accepting records, writes every record already queued, then
// flushes, syncs and closes the file. When ctx ends first, Close returns
// its error and the queue keeps draining in the background.
func (l *Logger) Close(ctx context.Context) error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.ch)
	}
	l.mu.Unlock()
	select {
	case <-l.done:
		if d := l.dropped.Load(); d > 0 {
			l.log.Warn("decision log closed with dropped records", "written", l.written.Load(), "dropped", d)
		}
		return l.closeErr
	case <-ctx.Done():
		return fmt.Errorf("decision log: close with %d records still queued: %w", len(l.ch), ctx.Err())
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
	pending := false
	for {
		select {
		case rec, ok := <-l.ch:
			if !ok {
				l.flush()
				l.closeFile()
				return
			}
			l.write(rec)
			if !pending {
				pending = true
				timer.Reset(FlushDelay)
			}
		case <-timer.C:
			pending = false
			l.flush()
		}
	}
}

// FlushDelay bounds how long a written record may wait in memory before it
// is handed to the operating system.
const FlushDelay = 5 * time.Millisecond

func (l *Logger) closeFile() {
	if l.file != nil {
		err := l.file.Sync()
		if cerr := l.file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			l.closeErr = fmt.Errorf("decision log: %w", err)
		}
		l.file = nil
	}
}

func (l *Logger) write(rec Record) {
	line, err := l.encode(rec)
	if err != nil {
		l.dropped.Add(1)
		l.fail("decision log: cannot encode a record", err, "decision_id", rec.DecisionID)
		return
	}
	if l.path != "" {
		if l.maxBytes > 0 && l.size > 0 && l.size+int64(len(line)) > l.maxBytes {
			l.rotate()
		}
		if l.file == nil && !l.reopen() {
			l.dropped.Add(1)
			return
		}
	}
	if l.torn {
		// Terminate whatever partial line a failed write left, so that it
		// costs one unreadable line and not the next record too.
		_ = l.out.WriteByte('\n')
		l.size++
		l.torn = false
	}
	if _, err := l.out.Write(line); err != nil {
		l.writeFailed(err)
		l.dropped.Add(1)
		return
	}
	l.size += int64(len(line))
	l.pending++
}

// encode returns rec as one JSON line: its raw messages compacted (a
// pretty-printed input has newlines), its input masked.
func (l *Logger) encode(rec Record) ([]byte, error) {
	if len(rec.Input) > 0 {
		switch {
		case !json.Valid(rec.Input):
			// Not JSON (a malformed body): keep its bytes where any are allowed.
			if rec.BodyBase64 == "" {
				rec.BodyBase64 = base64.StdEncoding.EncodeToString(rec.Input)
			}
			rec.Input = nil
		case bytes.ContainsAny(rec.Input, "\r\n"):
			// Only line breaks would split the record; other whitespace
			// is kept as received.
			l.scratchIn.Reset()
			_ = json.Compact(&l.scratchIn, rec.Input)
			rec.Input = l.scratchIn.Bytes()
		}
	}
	if l.masker != nil {
		rec.BodyBase64 = "" // an unparsable body cannot be masked: never log it
		if len(rec.Input) > 0 {
			m := l.masker
			if strings.HasPrefix(rec.Path, "/v1/data/") {
				m = l.dataMasker
			}
			masked, err := m.mask(rec.Input)
			if err != nil {
				masked = maskedJSON // fail closed: hide the whole input
			}
			rec.Input = masked
		}
	}
	if len(rec.Result) > 0 {
		if !json.Valid(rec.Result) {
			return nil, fmt.Errorf("result is not JSON")
		}
		if bytes.ContainsAny(rec.Result, "\r\n") {
			l.scratchOut.Reset()
			_ = json.Compact(&l.scratchOut, rec.Result)
			rec.Result = l.scratchOut.Bytes()
		}
	}
	l.line.Reset()
	l.line.Write(appendRecord(l.line.AvailableBuffer(), rec))
	shrink(&l.scratchIn)
	shrink(&l.scratchOut)
	return l.line.Bytes(), nil
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
	return append(b, '}', '\n')
}

// shrink drops a scratch buffer that a huge input grew, rather than hold on
// to it for the life of the process.
func shrink(b *bytes.Buffer) {
	if b.Cap() > 1<<20 {
		*b = bytes.Buffer{}
	}
}

func (l *Logger) flush() {
	if l.out.Buffered() == 0 && l.pending == 0 {
		return
	}
	if err := l.out.Flush(); err != nil {
		l.writeFailed(err)
		return
	}
	l.written.Add(l.pending)
	l.pending = 0
}

// writeFailed drops the records not yet on disk and starts a clean buffer:
// bufio.Writer keeps its first error forever.
func (l *Logger) writeFailed(err error) {
	l.dropped.Add(l.pending)
	l.pending = 0
	l.out.Reset(l.dest)
	l.torn = true
	l.fail("decision log: write failed, records dropped", err)
}

// rotate renames Path to Path.1 (shifting older files up and dropping the
// oldest) and opens a new Path. On failure the writer keeps going with what
// it has: a log that grows past its size beats a log that stops.
func (l *Logger) rotate() {
	l.flush()
	if err := l.file.Sync(); err != nil {
		l.fail("decision log: sync before rotation failed", err)
	}
	if err := l.file.Close(); err != nil {
		l.fail("decision log: close before rotation failed", err)
	}
	l.file, l.dest = nil, io.Discard
	l.out.Reset(l.dest)
	if l.maxBackups < 0 {
		if err := os.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			l.fail("decision log: rotation failed", err)
		}
	} else {
		for i := l.maxBackups - 1; i >= 1; i-- {
			err := os.Rename(l.backup(i), l.backup(i+1))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				l.fail("decision log: rotation failed", err)
			}
		}
		if err := os.Rename(l.path, l.backup(1)); err != nil {
			l.fail("decision log: rotation failed", err)
		}
	}
	l.reopen()
}

func (l *Logger) backup(i int) string { return l.path + "." + strconv.Itoa(i) }

func (l *Logger) reopen() bool {
	f, n, err := l.open(l.path)
	if err != nil {
		l.fail("decision log: cannot open the log file, records dropped", err, "path", l.path)
		return false
	}
	l.file, l.dest, l.size = f, f, n
	l.out.Reset(f)
	return true
}

// fail reports a failure of the writer, at most once per second: a full
// disk must not turn into a flood of warnings.
func (l *Logger) fail(msg string, err error, args ...any) {
	if now := time.Now(); now.Sub(l.failWarn) >= time.Second {
		l.failWarn = now
		l.log.Warn(msg, append([]any{"err", err, "dropped_total", l.dropped.Load()}, args...)...)
	}
}
