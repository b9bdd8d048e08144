// Package logsink is a minimal OPA-compatible decision-log service for
// tests and the fleet test: it accepts POSTed gzip JSON arrays of events,
// as OPA's decision-log plugin and Arbiter's logship send them, and keeps
// each event by decision_id (a retried upload delivers some twice).
package logsink

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// Sink is an http.Handler collecting events.
type Sink struct {
	mu        sync.Mutex
	events    map[string]json.RawMessage
	received  int // events, duplicates included
	batches   int
	wireBytes int // compressed bytes received
	jsonBytes int // uncompressed
}

// New returns an empty Sink.
func New() *Sink { return &Sink{events: map[string]json.RawMessage{}} }

func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	wire := &countingReader{r: r.Body}
	body := io.Reader(wire)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(wire)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(data, &batch); err != nil {
		http.Error(w, "want a JSON array of events: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range batch {
		var id struct {
			DecisionID string `json:"decision_id"`
		}
		if json.Unmarshal(ev, &id) != nil || id.DecisionID == "" {
			http.Error(w, "an event without decision_id", http.StatusBadRequest)
			return
		}
		s.events[id.DecisionID] = ev
	}
	s.received += len(batch)
	s.batches++
	s.wireBytes += wire.n
	s.jsonBytes += len(data)
	w.WriteHeader(http.StatusNoContent)
}

// Event returns the event of a decision id, if received.
func (s *Sink) Event(id string) (json.RawMessage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev, ok := s.events[id]
	return ev, ok
}

// Stats are what a Sink received.
type Stats struct {
	Unique, Received, Batches, WireBytes, JSONBytes int
}

// Stats returns the totals so far.
func (s *Sink) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Unique: len(s.events), Received: s.received, Batches: s.batches, WireBytes: s.wireBytes, JSONBytes: s.jsonBytes}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
