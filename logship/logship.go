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
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/plugins/logs"
	"github.com/open-policy-agent/opa/v1/plugins/rest"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/internal/defaults"
	"github.com/arbiter-dev/arbiter/internal/opalog"
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

// Uploader is a sink of the decision-record pipeline that ships events,
// on the pipeline's batching skeleton (decisionlog.Batcher).
type Uploader struct {
	cfg    Config // its Logger redacts the service's URL
	client rest.Client
	b      *decisionlog.Batcher[json.RawMessage]

	// acceptedMax is the largest batch (bytes of JSON) the service has
	// accepted; only the upload loop uses it.
	acceptedMax int
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
	cfg.Resource = cmp.Or(cfg.Resource, "/logs")
	cfg.BatchEvents = defaults.Positive(cfg.BatchEvents, 1000)
	cfg.BatchBytes = defaults.Positive(cfg.BatchBytes, 1<<20)
	cfg.Interval = defaults.Positive(cfg.Interval, time.Second)
	cfg.MaxRetryDelay = defaults.Positive(cfg.MaxRetryDelay, 10*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("decision-log service %s: want an http(s) URL", redact.URL(cfg.URL))
	}
	cfg.Logger = redact.Logger(cfg.Logger, cfg.URL) // its errors quote the URL, and a token may be in it
	rc, _ := json.Marshal(map[string]any{"url": strings.TrimSuffix(cfg.URL, "/")})
	client, err := rest.New(rc, nil, rest.Logger(opalog.New(cfg.Logger)), rest.Name("decision_logs"))
	if err != nil {
		return nil, fmt.Errorf("decision-log service: %w", err)
	}
	u := &Uploader{cfg: cfg, client: client}
	u.b = decisionlog.NewBatcher[json.RawMessage](decisionlog.BatchConfig{
		Name: "decision-log uploads", Unit: "events",
		Full: "decision-log upload buffer full: events dropped", Failed: "decision-log upload failed; retrying",
		Queue:        queue.Limits{Items: cfg.MaxEvents, Bytes: cfg.MaxBytes}.Or(queue.Limits{Items: DefaultMaxEvents, Bytes: DefaultQueueBytes}),
		BatchRecords: cfg.BatchEvents, BatchBytes: cfg.BatchBytes,
		Linger: cfg.Interval, MaxRetryDelay: cfg.MaxRetryDelay, Logger: cfg.Logger, After: cfg.after,
	})
	u.b.Start(u)
	return u, nil
}

// Reason an event is dropped, beside the batcher's own.
const dropTooLarge = "too_large"

// Write queues records for upload; it never blocks. A full buffer drops
// them and counts them. A candidate's shadow outcome is not uploaded: OPA's
// events have no place for it.
func (u *Uploader) Write(recs []decisionlog.Record) {
	for _, rec := range recs {
		if !rec.IsShadowOutcome() {
			u.b.Put(rec)
		}
	}
}

// Stats returns the totals so far.
func (u *Uploader) Stats() Stats {
	st := u.b.Stats()
	return Stats{
		Sent: st.Sent, DroppedFull: u.b.Dropped(queue.Full) + u.b.Dropped(queue.Closed),
		DroppedStop: u.b.Dropped(decisionlog.DropShutdown), DroppedLarge: u.b.Dropped(dropTooLarge),
		Queued: st.Queued, QueuedBytes: st.QueuedBytes, UploadsOK: st.SendsOK, UploadsFailed: st.SendsFailed,
	}
}

// LastSuccess is the time of the last accepted upload (zero: none yet).
func (u *Uploader) LastSuccess() time.Time { return u.b.Stats().LastOK }

// Close uploads what is queued, retrying until ctx ends; what is still
// unsent then is counted as dropped.
func (u *Uploader) Close(ctx context.Context) error {
	if n := u.b.Close(ctx); n > 0 {
		return fmt.Errorf("%d decision-log events not uploaded before the shutdown deadline", n)
	}
	return nil
}

// Encode is rec's event, sized as its JSON (and the comma after it). An
// event it cannot encode is dropped as too_large, and warned about here,
// where its decision id is known.
func (u *Uploader) Encode(rec decisionlog.Record) (json.RawMessage, int, error) {
	ev, err := u.event(rec)
	if err != nil {
		u.cfg.Logger.Warn("decision-log event not encodable: dropped", "decision_id", rec.DecisionID, "err", err)
		return nil, 0, &decisionlog.Refusal{Index: -1, Drop: true, Reason: dropTooLarge, Err: err}
	}
	return ev, len(ev) + 1, nil
}

// Send uploads batch. A batch the service refuses as too large (413) is
// split in halves by the batcher, each uploaded the same way; a single
// event refused so is dropped as too_large only when it is larger than
// both BatchBytes and the largest batch the service has accepted.
// Otherwise the 413 is the service's fault (a collector answering 413 to
// everything would lose every event), and the event is retried with
// backoff while the bounded buffer holds the rest.
func (u *Uploader) Send(ctx context.Context, batch []json.RawMessage) error {
	err := u.post(ctx, batch)
	if err == nil {
		size := 0
		for _, ev := range batch {
			size += len(ev) + 1
		}
		u.acceptedMax = max(u.acceptedMax, size)
		return nil
	}
	if errors.As(err, new(errTooLarge)) {
		return &decisionlog.Refusal{Index: -1, Drop: len(batch) == 1 && len(batch[0]) > u.cfg.BatchBytes && len(batch[0]) > u.acceptedMax, Reason: dropTooLarge, Err: err}
	}
	return err
}

// Refused warns of an event the service refused as too large (Encode
// warned of one it could not encode: ev is nil).
func (u *Uploader) Refused(ev json.RawMessage, _ error) {
	if ev != nil {
		u.cfg.Logger.Warn("decision-log service refused an event as too large: dropped", "bytes", len(ev), "largest_accepted", u.acceptedMax)
	}
}

// Idle: the upload has no maintenance.
func (u *Uploader) Idle() time.Duration { return time.Hour }

type errTooLarge struct{ error }

func (u *Uploader) post(ctx context.Context, batch []json.RawMessage) error {
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
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
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
