// Package logship uploads decision records to an OPA-compatible decision-log
// service: gzip-compressed JSON arrays of OPA's EventV1
// (github.com/open-policy-agent/opa/v1/plugins/logs), POSTed through OPA's
// REST client, as OPA's decision-log plugin does. The Uploader is a sink of
// the decision-record pipeline (decisionlog.Sink): it receives records
// masked already. Events wait in a bounded buffer; a failed upload is retried with backoff and nothing is sent out of
// order; every event that cannot be kept is counted as dropped, never lost
// silently.
package logship

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/plugins/logs"
	"github.com/open-policy-agent/opa/v1/plugins/rest"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/internal/opalog"
	"github.com/arbiter-dev/arbiter/internal/passes"
	"github.com/arbiter-dev/arbiter/internal/queue"
	"github.com/arbiter-dev/arbiter/internal/redact"
)

// Config of an Uploader; cmd fills it from flags.
type Config struct {
	// URL is the decision-log service; events go to URL + Resource.
	URL      string
	Resource string // default "/logs", as OPA's decision_logs.resource
	// BundleName keys each event's bundles{NAME: {revision}}.
	BundleName string
	// Labels go on every event; OPA's own are id (the replica) and version.
	Labels map[string]string
	// MaxEvents and MaxBytes bound the events waiting for upload (default
	// 10000 events, DefaultQueueBytes), the batch being uploaded or
	// retried included, each event sized as the decision log sizes its
	// record (decisionlog.Record.Size); an event that finds either full is
	// dropped and counted (reason full).
	MaxEvents int
	MaxBytes  int64
	// BatchEvents and BatchBytes bound one upload (default 1000 events,
	// 1 MiB of uncompressed JSON). An event no larger than BatchBytes is
	// never dropped as too large: see upload.
	BatchEvents, BatchBytes int
	// Interval between uploads while events trickle in (default 1s); a
	// full batch goes at once.
	Interval time.Duration
	// MaxRetryDelay caps the backoff between retries of a failed upload
	// (default 10s).
	MaxRetryDelay time.Duration
	Logger        *slog.Logger

	after func(time.Duration) <-chan time.Time // tests: the backoff's wait; nil is time.After
}

// Defaults of Config.
const (
	DefaultMaxEvents = 10000
	// DefaultQueueBytes holds the default 10000 events at about 2 KiB each,
	// or two of the largest inputs (16 MiB): what a service that is down
	// may pin in a replica's memory.
	DefaultQueueBytes = 32 << 20
)

// Uploader is a sink of the decision-record pipeline that ships events.
type Uploader struct {
	cfg    Config
	client rest.Client
	log    *slog.Logger

	queue *queue.Queue[decisionlog.Record]
	done  chan struct{}
	ctx   context.Context // cancelled by Close at its deadline
	abort context.CancelFunc

	// acceptedMax is the largest batch (bytes of JSON) the service has
	// accepted; only the upload loop uses it.
	acceptedMax int

	sent                     atomic.Uint64
	uploadsOK, uploadsFailed atomic.Uint64
	lastOK                   atomic.Int64
	// batched counts the events taken from the queue and not yet sent or
	// dropped: the batch being built, uploaded or retried.
	batched atomic.Int64

	// The outage the upload loop is in (failingSince zero: none): when the
	// first upload failed, and the events of batches retried since.
	failingSince time.Time
	retried      int
}

// Stats are an Uploader's totals.
type Stats struct {
	Sent         uint64 `json:"sent"`
	DroppedFull  uint64 `json:"dropped_buffer_full"`
	DroppedStop  uint64 `json:"dropped_shutdown"`
	DroppedLarge uint64 `json:"dropped_too_large"`
	// Queued is every event waiting for upload: in the buffer, and in the
	// batch being uploaded or retried (during an outage, that batch is
	// most of what waits).
	Queued int `json:"queued"`
	// QueuedBytes is what those events cost against Config.MaxBytes.
	QueuedBytes   int64  `json:"queued_bytes"`
	UploadsOK     uint64 `json:"uploads_ok"`
	UploadsFailed uint64 `json:"uploads_failed"`
}

// Dropped is every event dropped, whatever the reason.
func (s Stats) Dropped() uint64 { return s.DroppedFull + s.DroppedStop + s.DroppedLarge }

// New checks cfg and starts the upload loop; Close stops it.
func New(cfg Config) (*Uploader, error) {
	if cfg.Resource == "" {
		cfg.Resource = "/logs"
	}
	if cfg.BatchEvents <= 0 {
		cfg.BatchEvents = 1000
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = 1 << 20
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.MaxRetryDelay <= 0 {
		cfg.MaxRetryDelay = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.after == nil {
		cfg.after = time.After
	}
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("decision-log service %s: want an http(s) URL", redact.URL(cfg.URL))
	}
	cfg.Logger = redact.Logger(cfg.Logger, cfg.URL) // its errors quote the URL, and a token may be in it
	rc, _ := json.Marshal(map[string]any{"url": strings.TrimSuffix(cfg.URL, "/")})
	client, err := rest.New(rc, nil, rest.Logger(opalog.New(cfg.Logger)), rest.Name("decision_logs"))
	if err != nil {
		return nil, fmt.Errorf("decision-log service: %w", err)
	}
	u := &Uploader{cfg: cfg, client: client, log: cfg.Logger, done: make(chan struct{})}
	// Held: the batch a stalled service keeps being retried is memory too.
	lim := queue.Limits{Items: cfg.MaxEvents, Bytes: cfg.MaxBytes}.Or(queue.Limits{Items: DefaultMaxEvents, Bytes: DefaultQueueBytes})
	lim.HoldBytes = true
	u.queue = queue.New[decisionlog.Record](lim)
	u.ctx, u.abort = context.WithCancel(context.Background())
	go u.loop()
	return u, nil
}

// Reasons an event is dropped, beside the queue's own.
const (
	dropShutdown = "shutdown"
	dropTooLarge = "too_large"
)

// Write queues records for upload; it never blocks. A full buffer drops
// them and counts them. A candidate's shadow outcome is not uploaded: OPA's
// events have no place for it.
func (u *Uploader) Write(recs []decisionlog.Record) {
	for _, rec := range recs {
		if rec.IsShadowOutcome() {
			continue
		}
		if ok, _ := u.queue.Put(rec, rec.QueueSize()); !ok {
			if n := u.queue.Dropped(queue.Full); n&(n-1) == 0 { // warn at powers of two
				u.log.Warn("decision-log upload buffer full: events dropped", "dropped", n)
			}
		}
	}
}

// Stats returns the totals so far.
func (u *Uploader) Stats() Stats {
	return Stats{
		Sent: u.sent.Load(), DroppedFull: u.queue.Dropped(queue.Full) + u.queue.Dropped(queue.Closed),
		DroppedStop: u.queue.Dropped(dropShutdown), DroppedLarge: u.queue.Dropped(dropTooLarge),
		Queued: u.queue.Len() + int(u.batched.Load()), QueuedBytes: u.queue.Bytes(), UploadsOK: u.uploadsOK.Load(), UploadsFailed: u.uploadsFailed.Load(),
	}
}

// LastSuccess is the time of the last accepted upload (zero: none yet).
func (u *Uploader) LastSuccess() time.Time {
	if n := u.lastOK.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Close uploads what is queued, retrying until ctx ends; what is still
// unsent then is counted as dropped.
func (u *Uploader) Close(ctx context.Context) error {
	u.queue.Close()
	select {
	case <-u.done:
	case <-ctx.Done():
		u.abort()
		<-u.done
	}
	if n := u.queue.Dropped(dropShutdown); n > 0 {
		return fmt.Errorf("%d decision-log events not uploaded before the shutdown deadline", n)
	}
	return nil
}

// loop batches queued records and uploads them in order. While an upload
// fails it retries that batch with backoff and reads nothing new, so the
// buffer bounds what waits.
func (u *Uploader) loop() {
	defer close(u.done)
	ticker := time.NewTicker(u.cfg.Interval)
	defer ticker.Stop()
	var batch []json.RawMessage
	size := 0
	var held int64 // the queue's bytes of the records in batch
	flush := func() {
		if len(batch) > 0 {
			u.upload(batch) // sent or counted as dropped when it returns
			u.queue.Done(held)
			batch, size, held = batch[:0], 0, 0
		}
	}
	add := func(rec decisionlog.Record) {
		ev, err := u.event(rec)
		if err != nil {
			u.queue.Done(rec.QueueSize())
			u.queue.Drop(dropTooLarge, 1)
			u.log.Warn("decision-log event not encodable: dropped", "decision_id", rec.DecisionID, "err", err)
			return
		}
		if size+len(ev) > u.cfg.BatchBytes && len(batch) > 0 {
			flush()
		}
		batch = append(batch, ev)
		u.batched.Add(1)
		held += rec.QueueSize()
		size += len(ev) + 1
		if len(batch) >= u.cfg.BatchEvents {
			flush()
		}
	}
	var recs []decisionlog.Record
	for {
		var closed bool
		recs, closed = u.queue.Take(recs[:0], u.cfg.BatchEvents)
		for _, rec := range recs {
			add(rec)
		}
		clear(recs)
		switch {
		case closed: // and empty: past Close's deadline, each batch taken was counted as dropped
			flush()
			return
		case len(recs) > 0:
			continue
		}
		select {
		case <-u.queue.Ready():
		case <-ticker.C:
			flush()
		}
	}
}

// upload sends batch, retrying with OPA's backoff until it is accepted,
// or until Close's deadline (then the batch is counted as dropped). The
// first upload accepted after failures logs the recovery: how long uploads
// failed, and how many events were retried. A batch
// the service refuses as too large (413) is split in halves, each uploaded
// the same way, first half first; a single event refused so is dropped as
// too_large only when it is larger than both BatchBytes and the largest
// batch the service has accepted. Otherwise the 413 is the service's fault
// (a collector answering 413 to everything would lose every event), and the
// event is retried with backoff while the bounded buffer holds the rest.
func (u *Uploader) upload(batch []json.RawMessage) bool {
	for retry := 0; ; retry++ {
		err := u.post(batch)
		if err == nil {
			size := 0
			for _, ev := range batch {
				size += len(ev) + 1
			}
			u.acceptedMax = max(u.acceptedMax, size)
			u.uploadsOK.Add(1)
			u.sent.Add(uint64(len(batch)))
			u.batched.Add(-int64(len(batch)))
			u.lastOK.Store(time.Now().UnixNano())
			if retry > 0 {
				u.retried += len(batch)
			}
			if !u.failingSince.IsZero() {
				u.log.Info("decision-log uploads recovered", "retried_events", u.retried, "outage", time.Since(u.failingSince).Round(time.Millisecond))
				u.failingSince, u.retried = time.Time{}, 0
			}
			return true
		}
		u.uploadsFailed.Add(1)
		if u.failingSince.IsZero() {
			u.failingSince = time.Now()
		}
		var tooLarge errTooLarge
		if errors.As(err, &tooLarge) {
			if len(batch) > 1 {
				half := len(batch) / 2
				if !u.upload(batch[:half]) { // Close's deadline: the rest is dropped too
					u.queue.Drop(dropShutdown, uint64(len(batch)-half))
					u.batched.Add(-int64(len(batch) - half))
					return false
				}
				return u.upload(batch[half:])
			}
			// One event: too large only when it is larger than a batch
			// this uploader is configured to send and than any batch the
			// service has accepted. A smaller one refused is the
			// service's fault: it is kept and retried with backoff.
			if n := len(batch[0]); n > u.cfg.BatchBytes && n > u.acceptedMax {
				u.queue.Drop(dropTooLarge, 1)
				u.batched.Add(-1)
				u.log.Warn("decision-log service refused an event as too large: dropped", "bytes", n, "largest_accepted", u.acceptedMax)
				return true
			}
		}
		delay := util.DefaultBackoff(float64(100*time.Millisecond), float64(u.cfg.MaxRetryDelay), retry)
		if retry == 0 || retry%10 == 0 {
			u.log.Warn("decision-log upload failed; retrying", "events", len(batch), "retry", retry, "next_in", delay, "err", err)
		}
		select {
		case <-u.cfg.after(delay):
		case <-u.ctx.Done():
			u.queue.Drop(dropShutdown, uint64(len(batch)))
			u.batched.Add(-int64(len(batch)))
			return false
		}
	}
}

type errTooLarge struct{ error }

func (u *Uploader) post(batch []json.RawMessage) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte{'['})
	for i, ev := range batch {
		if i > 0 {
			_, _ = zw.Write([]byte{','})
		}
		_, _ = zw.Write(ev)
	}
	_, _ = zw.Write([]byte{']'})
	if err := zw.Close(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(u.ctx, 30*time.Second)
	defer cancel()
	resp, err := u.client.
		WithHeader("Content-Type", "application/json").
		WithHeader("Content-Encoding", "gzip").
		WithBytes(buf.Bytes()).
		Do(ctx, http.MethodPost, u.cfg.Resource)
	if err != nil {
		return err
	}
	defer util.Close(resp)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusRequestEntityTooLarge:
		return errTooLarge{fmt.Errorf("decision-log service answered %s", resp.Status)}
	default:
		return fmt.Errorf("decision-log service answered %s", resp.Status)
	}
}

// eventError is the error of a refused request, as an event's error
// object, in OPA's error shape (v1/server/types.ErrorV1): code, message,
// and errors, one per input violation, as the Data API answered them.
type eventError struct {
	Code    string           `json:"code"`
	Message string           `json:"message"`
	Errors  []eventErrorItem `json:"errors,omitempty"`
}

// eventErrorItem is one of OPA's "errors": an input violation, its message
// led by its JSON pointer into the input.
type eventErrorItem struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *eventError) Error() string { return e.Code + ": " + e.Message }

// event turns a record into OPA's EventV1. The input is the input document
// (the Data API's body is unwrapped), masked; numbers keep their literal
// text.
func (u *Uploader) event(rec decisionlog.Record) (json.RawMessage, error) {
	ev := logs.EventV1{
		Labels:      u.cfg.Labels,
		DecisionID:  rec.DecisionID,
		Path:        "decisions/" + rec.Decision + "/decision",
		RequestedBy: rec.Caller,
		Timestamp:   rec.Time,
		TraceID:     rec.TraceID,
		SpanID:      rec.SpanID,
		Metrics:     map[string]any{"timer_server_handler_ns": rec.DurationNS},
	}
	if rec.Revision != "" {
		ev.Bundles = map[string]logs.BundleInfoV1{u.cfg.BundleName: {Revision: rec.Revision}}
	}
	if in := rec.InputDocument(); in != nil {
		// The record was masked by the pipeline: its pointers are from the
		// record's root, the event's from the input document's parent.
		data := rec.Wrapped()
		for _, p := range rec.Masked {
			switch {
			case !data || p == "/input":
				ev.Masked = append(ev.Masked, p)
			case p == "/input/input" || strings.HasPrefix(p, "/input/input/"):
				ev.Masked = append(ev.Masked, strings.TrimPrefix(p, "/input"))
			}
		}
		var v any = json.RawMessage(in)
		ev.Input = &v
		passes.Scan(len(in)) // json.Marshal compacts a RawMessage into its output
		passes.Copy(len(in))
	} else if rec.BodyBase64 != "" {
		ev.Custom = map[string]any{"body_base64": rec.BodyBase64}
	} else if len(rec.Input) > 0 || slices.Contains(rec.Erased, "/body_base64") || slices.Contains(rec.Erased, "/input") {
		// A body that is not JSON cannot be masked (nor be an input): it is
		// left out and listed in erased, as OPA's "remove" mask op lists
		// the /input it removed, so a collector can tell it from a request
		// that carried none.
		ev.Erased = append(ev.Erased, "/input")
	}
	if len(rec.Result) > 0 {
		var v any = json.RawMessage(rec.Result)
		ev.Result = &v
	}
	if e := rec.Error; e != nil {
		ee := &eventError{Code: e.Code, Message: e.Message}
		for _, v := range e.Violations {
			ee.Errors = append(ee.Errors, eventErrorItem{Code: e.Code, Message: v.String()})
		}
		ev.Error = ee
	}
	if len(rec.Promotion) > 0 { // who made which candidate live: no decision, OPA's custom member
		ev.Path, ev.Custom = "", map[string]any{"promotion": json.RawMessage(rec.Promotion)}
	}
	b, err := json.Marshal(ev)
	if err != nil && ev.Input != nil {
		// An input that is not JSON after all is left out, as a body that
		// is not JSON is: never a broken event.
		ev.Input, ev.Erased = nil, append(ev.Erased, "/input")
		return json.Marshal(ev)
	}
	return b, err
}
