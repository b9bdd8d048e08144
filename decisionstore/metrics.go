package decisionstore

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/arbiter-dev/arbiter/internal/scrape"
)

var (
	writtenDesc = prometheus.NewDesc("arbiter_decision_store_written_total",
		"Decision records in the decision store, written by this replica (a retried batch's records already there counted once).", nil, nil)
	droppedDesc = prometheus.NewDesc("arbiter_decision_store_dropped_total",
		"Decision records not written to the decision store, by reason: full (its queue could not take them), closed (after the stop began), rejected (the database refused the record itself), shutdown (still queued when the stop ran out of time).",
		[]string{"reason"}, nil)
	queuedDesc = prometheus.NewDesc("arbiter_decision_store_queued_records",
		"Decision records waiting for the decision store: queued, and in the batch being written or retried.", nil, nil)
	lagDesc = prometheus.NewDesc("arbiter_decision_store_lag_seconds",
		"How long the oldest record not yet in the decision store has waited (0: none waits).", nil, nil)
	writesDesc = prometheus.NewDesc("arbiter_decision_store_writes_total",
		"Batch writes to the decision store, by result (ok, failed).", []string{"result"}, nil)
	lastWriteDesc = prometheus.NewDesc("arbiter_decision_store_last_write_timestamp_seconds",
		"Unix time of the last batch written (0: none yet).", nil, nil)
	failingDesc = prometheus.NewDesc("arbiter_decision_store_failing",
		"1 while the decision store's last attempt failed (it refuses the login, cannot be reached, or refuses writes; the error is /v1/status' store.last_error), else 0. Records wait in its queue meanwhile; the replica keeps answering.", nil, nil)
	unreadableDesc = prometheus.NewDesc("arbiter_decision_store_unreadable_records_total",
		"Stored records the pages of this replica loaded and could not decode (not a decision record), each time one was read: the pages show their rows from their columns.", nil, nil)
)

// Collector exports s's totals, read at scrape time.
func (s *Sink) Collector() prometheus.Collector {
	return scrape.Collector(func(ch chan<- prometheus.Metric) {
		st := s.Stats()
		scrape.Counter(ch, writtenDesc, st.Written)
		for _, r := range DropReasons {
			scrape.Counter(ch, droppedDesc, st.Dropped[r], r)
		}
		scrape.Gauge(ch, queuedDesc, st.Queued)
		scrape.Gauge(ch, lagDesc, st.LagSeconds)
		scrape.Counter(ch, writesDesc, st.WritesOK, "ok")
		scrape.Counter(ch, writesDesc, st.WritesFailed, "failed")
		var last time.Time
		if st.LastWrite != nil {
			last = *st.LastWrite
		}
		scrape.Gauge(ch, lastWriteDesc, scrape.Unix(last))
		scrape.Gauge(ch, failingDesc, map[bool]int{true: 1}[st.LastError != ""])
		scrape.Counter(ch, unreadableDesc, s.reader.Unreadable())
	}, writtenDesc, droppedDesc, queuedDesc, lagDesc, writesDesc, lastWriteDesc, failingDesc, unreadableDesc)
}
