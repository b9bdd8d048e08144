package logship

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/internal/logsink"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// masked is rec as the decision-record pipeline hands it to its sinks
// (this Uploader among them) under mask.
func masked(t *testing.T, mask []string, rec decisionlog.Record) decisionlog.Record {
	t.Helper()
	got := &sinkRecords{}
	l, err := decisionlog.Open(decisionlog.Options{Mask: mask, Sinks: []decisionlog.Sink{got}})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(rec)
	if err := l.Close(context.Background()); err != nil || len(got.recs) != 1 {
		t.Fatalf("the pipeline handed %d records: %v", len(got.recs), err)
	}
	return got.recs[0]
}

// sinkRecords is a sink that keeps what the pipeline hands it.
type sinkRecords struct{ recs []decisionlog.Record }

func (s *sinkRecords) Write(recs []decisionlog.Record) { s.recs = append(s.recs, recs...) }

func record(i int) decisionlog.Record {
	return decisionlog.Record{
		DecisionID: fmt.Sprintf("id-%05d", i), Time: time.Date(2026, 12, 3, 10, 0, 0, i, time.UTC),
		Decision: "some_decision", Revision: "r7", Path: "/v1/decisions/some_decision",
		Input: []byte(`{"n": 18446744073709551615, "secret": {"token": "t"}, "f": 1.000E+3}`), Result: []byte(`{"allow":false}`),
		DurationNS: 1234, Caller: "host-preparation",
	}
}

// Each record reaches the service as OPA's EventV1, gzip-compressed, with
// its bundle revision, labels, exact numbers, masked values, trace and span
// ids and, under a mask, a body that is not JSON erased.
func TestEventsAreOPAEvents(t *testing.T) {
	sink := logsink.New()
	var encodings atomic.Value
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		encodings.Store(r.Header.Get("Content-Encoding") + " " + r.Header.Get("Content-Type") + " " + r.URL.Path)
		sink.ServeHTTP(w, r)
	}))
	defer hs.Close()
	u, err := New(Config{URL: hs.URL, BundleName: "arbiter", Labels: map[string]string{"id": "replica-1", "app": "arbiter"}, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mask := []string{"/secret/token"}
	u.Write([]decisionlog.Record{masked(t, mask, record(1))})
	dataRec := record(2)
	dataRec.Path = "/v1/data/decisions/some_decision/decision"
	dataRec.Input = []byte(`{"n": 1e3, "secret": {"token": "t"}}`) // a decision logs the input it unwrapped
	u.Write([]decisionlog.Record{masked(t, mask, dataRec)})
	refused := record(3)
	refused.Result, refused.Input = nil, nil
	refused.BodyBase64 = "bm90IGpzb24="
	refused.Error = &decisionlog.RecordError{Code: "malformed_json", Message: "not JSON"}
	u.Write([]decisionlog.Record{masked(t, mask, refused)})
	nothingMasked := record(4) // masked lists what was masked, not what could be
	nothingMasked.Input = []byte(`{"n": 1}`)
	nothingMasked.TraceID, nothingMasked.SpanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7" // traced: the event carries them, as OPA's
	u.Write([]decisionlog.Record{masked(t, mask, nothingMasked)})
	wait.Until(t, 30*time.Second, "four events", func() bool { return sink.Stats().Unique == 4 })
	if got := encodings.Load().(string); got != "gzip application/json /logs" {
		t.Fatalf("upload headers and path: %q", got)
	}
	want := map[string]string{
		"id-00001": `{"labels":{"app":"arbiter","id":"replica-1"},"decision_id":"id-00001","bundles":{"arbiter":{"revision":"r7"}},"path":"decisions/some_decision/decision","input":{"n":18446744073709551615,"secret":{"token":"**masked**"},"f":1.000E+3},"result":{"allow":false},"masked":["/input/secret/token"],"requested_by":"host-preparation","timestamp":"2026-12-03T10:00:00.000000001Z","metrics":{"timer_server_handler_ns":1234}}`,
		"id-00002": `{"labels":{"app":"arbiter","id":"replica-1"},"decision_id":"id-00002","bundles":{"arbiter":{"revision":"r7"}},"path":"decisions/some_decision/decision","input":{"n":1e3,"secret":{"token":"**masked**"}},"result":{"allow":false},"masked":["/input/secret/token"],"requested_by":"host-preparation","timestamp":"2026-12-03T10:00:00.000000002Z","metrics":{"timer_server_handler_ns":1234}}`,
		"id-00004": `{"labels":{"app":"arbiter","id":"replica-1"},"decision_id":"id-00004","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","bundles":{"arbiter":{"revision":"r7"}},"path":"decisions/some_decision/decision","input":{"n":1},"result":{"allow":false},"requested_by":"host-preparation","timestamp":"2026-12-03T10:00:00.000000004Z","metrics":{"timer_server_handler_ns":1234}}`,
		"id-00003": `{"labels":{"app":"arbiter","id":"replica-1"},"decision_id":"id-00003","bundles":{"arbiter":{"revision":"r7"}},"path":"decisions/some_decision/decision","erased":["/input"],"error":{"code":"malformed_json","message":"not JSON"},"requested_by":"host-preparation","timestamp":"2026-12-03T10:00:00.000000003Z","metrics":{"timer_server_handler_ns":1234}}`,
	}
	for id, w := range want {
		got, _ := sink.Event(id)
		if string(got) != w {
			t.Errorf("%s:\n got  %s\n want %s", id, got, w)
		}
	}
	if err := u.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// While the service is down, events wait in the bounded buffer and those
// that do not fit are counted; when it is back, every event either reached
// it or was counted as dropped, and none reached it twice as two.
func TestServiceDownEveryEventArrivesOrIsCounted(t *testing.T) {
	sink := logsink.New()
	var down atomic.Bool
	down.Store(true)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		sink.ServeHTTP(w, r)
	}))
	defer hs.Close()
	u, err := New(Config{URL: hs.URL, MaxEvents: 50, BatchEvents: 10, Interval: 5 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const total = 500
	for i := range total {
		u.Write([]decisionlog.Record{record(i)})
	}
	wait.Until(t, 30*time.Second, "a failed upload", func() bool { return u.Stats().UploadsFailed > 2 })
	down.Store(false)
	wait.Until(t, 30*time.Second, "every kept event delivered", func() bool {
		s := u.Stats()
		return s.Queued == 0 && int(s.Sent+s.Dropped()) == total
	})
	s := u.Stats()
	if s.DroppedFull == 0 {
		t.Fatalf("500 events into a buffer of 50 with the service down dropped none: %+v", s)
	}
	got := sink.Stats().Unique
	if uint64(got)+s.Dropped() != total || uint64(got) != s.Sent {
		t.Fatalf("sink has %d events, uploader sent %d and dropped %d of %d", got, s.Sent, s.Dropped(), total)
	}
	t.Logf("%d delivered, %d dropped (buffer full), %d failed uploads", got, s.DroppedFull, s.UploadsFailed)
	if err := u.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A stalled service: the events waiting (the batch being retried
// included) cost at most MaxBytes, each sized as the decision log sizes its
// record; every other event is dropped as full. When the service is back,
// exactly the kept events arrive and the bytes are released.
func TestStalledServiceHoldsAtMostMaxBytes(t *testing.T) {
	sink := logsink.New()
	var down atomic.Bool
	down.Store(true)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		sink.ServeHTTP(w, r)
	}))
	defer hs.Close()
	rec := record(0)
	const kept, total = 10, 200
	maxBytes := kept * rec.QueueSize()
	u, err := New(Config{URL: hs.URL, MaxBytes: maxBytes, Interval: 5 * time.Millisecond, MaxRetryDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	most := int64(0)
	for i := range total {
		u.Write([]decisionlog.Record{record(i)})
		if i == kept {
			wait.Until(t, 30*time.Second, "a failed upload of the first batch", func() bool { return u.Stats().UploadsFailed > 0 })
		}
		most = max(most, u.Stats().QueuedBytes)
	}
	s := u.Stats()
	if most > maxBytes || s.QueuedBytes != maxBytes || s.Queued != kept || s.DroppedFull != total-kept {
		t.Fatalf("stalled with MaxBytes %d (%d events): held up to %d bytes, now %d bytes in %d events, %d dropped as full; want %d events kept and %d dropped",
			maxBytes, kept, most, s.QueuedBytes, s.Queued, s.DroppedFull, kept, total-kept)
	}
	down.Store(false)
	wait.Until(t, 30*time.Second, "the kept events delivered", func() bool { return u.Stats().Sent == kept })
	if s := u.Stats(); s.QueuedBytes != 0 || sink.Stats().Unique != kept || s.Dropped() != total-kept {
		t.Fatalf("after the service came back: %+v, the service has %d events; want %d sent and the bytes released", s, sink.Stats().Unique, kept)
	}
	if err := u.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A service that never comes back: Close gives up at its deadline and
// counts every event it could not send.
func TestCloseCountsWhatItCouldNotSend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connection refused
	u, err := New(Config{URL: "http://" + addr, Interval: 5 * time.Millisecond, MaxRetryDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		u.Write([]decisionlog.Record{record(i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = u.Close(ctx)
	if s := u.Stats(); err == nil || s.DroppedStop != 30 || s.Sent != 0 {
		t.Fatalf("Close: %v, stats %+v; want all 30 counted as dropped at shutdown", err, s)
	}
}

func TestEventInputOfDataAPIBody(t *testing.T) {
	rec := record(1)
	rec.Path = "/v1/data/decisions/x/decision"
	rec.Input = []byte(`{"input": {"a": [1, 2]}}`)
	if got := string(rec.InputDocument()); got != string(rec.Input) {
		t.Fatalf("a decision's input on the Data API path is the input it unwrapped, %s; got %s", rec.Input, got)
	}
	rec.Result, rec.Error = nil, &decisionlog.RecordError{Code: "input_schema_invalid"} // a failed request logs its body
	if got := string(rec.InputDocument()); got != `{"a": [1, 2]}` {
		t.Fatalf("input of a Data API body: %s", got)
	}
	rec.Input = []byte(`{"other": 1}`)
	if got := rec.InputDocument(); got != nil {
		t.Fatalf("a body without input: %s", got)
	}
	if !strings.HasPrefix(string(record(1).Input), `{"n"`) {
		t.Fatal("record fixture changed")
	}
	var v any
	if err := json.Unmarshal(record(1).InputDocument(), &v); err != nil {
		t.Fatal(err)
	}
}

// A promotion record (who made which candidate live) is uploaded in OPA's
// custom member, with no decision path.
func TestPromotionRecordIsACustomEvent(t *testing.T) {
	u := &Uploader{cfg: Config{BundleName: "arbiter", Labels: map[string]string{"id": "r1"}}}
	rec := decisionlog.Record{DecisionID: "p1", Time: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), Revision: "cand", Path: "/v1/shadow/promote",
		Caller: "sre", Promotion: json.RawMessage(`{"policy_revision":"cand","promoted":true}`)}
	ev, err := u.event(rec)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"labels":{"id":"r1"},"decision_id":"p1","bundles":{"arbiter":{"revision":"cand"}},"requested_by":"sre","timestamp":"2026-12-03T10:00:00Z","metrics":{"timer_server_handler_ns":0},"custom":{"promotion":{"policy_revision":"cand","promoted":true}}}`
	if string(ev) != want {
		t.Errorf("\n got  %s\n want %s", ev, want)
	}
}

// What an event says about its input, as OPA's events do: masked lists
// the values replaced by "**masked**" (OPA's "upsert"), erased what was
// left out (OPA's "remove"). Under a mask, a body that is not JSON cannot
// be masked, so it is erased, never dropped without a word; without a
// mask it travels whole in custom.body_base64.
func TestErasedAndMasked(t *testing.T) {
	notJSON := "bm90IGpzb24=" // "not json"
	tests := []struct {
		name       string
		mask       []string
		input      string
		body64     string
		wantInput  string // "" = no input member
		wantMasked []string
		wantErased []string
		wantCustom string
	}{
		{name: "masked value", mask: []string{"/secret"}, input: `{"secret":"s","n":1}`, wantInput: `{"secret":"**masked**","n":1}`, wantMasked: []string{"/input/secret"}},
		{name: "mask that names nothing", mask: []string{"/secret"}, input: `{"n":1}`, wantInput: `{"n":1}`},
		{name: "body not JSON, masked", mask: []string{"/secret"}, body64: notJSON, wantErased: []string{"/input"}},
		{name: "body not JSON, no mask", body64: notJSON, wantCustom: `{"body_base64":"` + notJSON + `"}`},
		{name: "input not JSON, masked whole", mask: []string{"/secret"}, input: `{"secret":`, wantInput: `"**masked**"`, wantMasked: []string{"/input"}},
		{name: "input not JSON, no mask", input: `{"secret":`, wantErased: []string{"/input"}},
		{name: "no body", mask: []string{"/secret"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, err := New(Config{URL: "http://127.0.0.1:1", Interval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				_ = u.Close(ctx)
			}()
			rec := record(1)
			rec.Result, rec.Input, rec.BodyBase64 = nil, []byte(tc.input), tc.body64
			rec.Error = &decisionlog.RecordError{Code: "malformed_json", Message: "m"}
			if len(tc.mask) > 0 {
				rec = masked(t, tc.mask, rec)
			}
			b, err := u.event(rec)
			if err != nil {
				t.Fatal(err)
			}
			var ev struct {
				Input  json.RawMessage `json:"input"`
				Masked []string        `json:"masked"`
				Erased []string        `json:"erased"`
				Custom json.RawMessage `json:"custom"`
			}
			if err := json.Unmarshal(b, &ev); err != nil {
				t.Fatal(err)
			}
			if string(ev.Input) != tc.wantInput || !slices.Equal(ev.Masked, tc.wantMasked) || !slices.Equal(ev.Erased, tc.wantErased) || string(ev.Custom) != tc.wantCustom {
				t.Errorf("event %s\nwant input %s, masked %q, erased %q, custom %s", b, tc.wantInput, tc.wantMasked, tc.wantErased, tc.wantCustom)
			}
		})
	}
}

// A collector that answers 413 to everything for a while, then accepts:
// a refused batch is split, but a single small event refused is the
// collector's fault, kept and retried with backoff. No event is lost, and
// the refused single-event uploads are all retries of the one event at the
// head of the line, not a march through the buffer dropping each.
func TestCollectorAnswering413LosesNothing(t *testing.T) {
	sink := logsink.New()
	const refusals = 40
	var posts atomic.Int64
	var mu sync.Mutex
	refusedSingles := map[string]int{} // decision id -> 413s on a one-event upload
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if posts.Add(1) > refusals {
			sink.ServeHTTP(w, r)
			return
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		var batch []struct {
			DecisionID string `json:"decision_id"`
		}
		if err := json.NewDecoder(zr).Decode(&batch); err != nil {
			t.Error(err)
		}
		if len(batch) == 1 {
			mu.Lock()
			refusedSingles[batch[0].DecisionID]++
			mu.Unlock()
		}
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	}))
	defer hs.Close()
	var waits []time.Duration // the backoff, counted, not timed
	after := func(d time.Duration) <-chan time.Time {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		return time.After(d)
	}
	u, err := New(Config{URL: hs.URL, BatchEvents: 100, Interval: time.Hour, MaxRetryDelay: 5 * time.Millisecond, after: after})
	if err != nil {
		t.Fatal(err)
	}
	const total = 1000
	for i := range total {
		u.Write([]decisionlog.Record{record(i)})
	}
	// Close sends what is left at once: a batch the loop began before the
	// test had written the rest (the first one may go short, as it has
	// no previous upload to wait an Interval after) leaves a short one at
	// the end, which would otherwise wait the hour.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := u.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s := u.Stats()
	if s.Dropped() != 0 || sink.Stats().Unique != total {
		t.Fatalf("after %d refusals: %d of %d events delivered, stats %+v", refusals, sink.Stats().Unique, total, s)
	}
	// Only full batches go (the interval is an hour): 10 of 100 events (11
	// when the first went short, and the last with Close), and the pieces
	// of the first one, split while refused (at most log2(100) of them):
	// far fewer than one upload per event.
	if n := posts.Load(); n > refusals+11+7 {
		t.Fatalf("%d POSTs for %d events", n, total)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refusedSingles) != 1 {
		t.Fatalf("single events refused: %v; want retries of one kept event", refusedSingles)
	}
	for _, n := range refusedSingles {
		// OPA's backoff retries at once the first time, then waits.
		if len(waits) != n || slices.Contains(waits[1:], 0) {
			t.Fatalf("%d refusals of the kept event, backoff waits %v: want one wait after each", n, waits)
		}
	}
	t.Logf("%d POSTs, single events refused %v, backoff waits %v", posts.Load(), refusedSingles, waits)
}

// A single event larger than the batch size and than anything the
// collector accepted is too large: dropped and counted, and the events
// after it still go.
func TestEventLargerThanTheCollectorTakesIsDropped(t *testing.T) {
	sink := logsink.New()
	const limit = 4 << 10
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		data, _ := io.ReadAll(zr)
		if len(data) > limit {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		sink.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/logs", bytes.NewReader(data)))
	}))
	defer hs.Close()
	u, err := New(Config{URL: hs.URL, BatchBytes: 1 << 10, Interval: 5 * time.Millisecond, MaxRetryDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	u.Write([]decisionlog.Record{record(1)})
	big := record(2)
	big.Input = []byte(`{"s":"` + strings.Repeat("x", 2*limit) + `"}`)
	u.Write([]decisionlog.Record{big})
	u.Write([]decisionlog.Record{record(3)})
	if err := u.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := u.Stats(); s.DroppedLarge != 1 || s.Sent != 2 || sink.Stats().Unique != 2 {
		t.Fatalf("stats %+v, sink %+v; want the large event dropped as too large, the others sent", s, sink.Stats())
	}
}

// A collector that answers 413 to everything until the shutdown deadline:
// the batch is split, its first half retried (one event smaller than a
// batch is the collector's fault, kept), and at the deadline both halves
// are counted as dropped at shutdown, none lost uncounted. Meanwhile the
// events of the batch being retried count as queued.
func TestSplitBatchAtShutdownIsCounted(t *testing.T) {
	var posts atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	}))
	defer hs.Close()
	const total = 8
	u, err := New(Config{URL: hs.URL, BatchEvents: total, Interval: time.Hour, MaxRetryDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range total {
		u.Write([]decisionlog.Record{record(i)})
	}
	wait.Until(t, 30*time.Second, "the single event retried", func() bool { return posts.Load() > 5 })
	if s := u.Stats(); s.Queued != total {
		t.Fatalf("while the split batch is retried: %+v, want all %d queued", s, total)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = u.Close(ctx)
	if s := u.Stats(); err == nil || s.DroppedStop != total || s.Queued != 0 {
		t.Fatalf("Close: %v, stats %+v; want all %d dropped at shutdown", err, s, total)
	}
}
