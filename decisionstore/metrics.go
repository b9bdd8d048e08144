package decisionstore

import "github.com/prometheus/client_golang/prometheus"

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
func (s *Sink) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Sink }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{writtenDesc, droppedDesc, queuedDesc, lagDesc, writesDesc, lastWriteDesc, failingDesc, unreadableDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(writtenDesc, prometheus.CounterValue, float64(st.Written))
	for _, r := range DropReasons {
		ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(st.Dropped[r]), r)
	}
	ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(st.Queued))
	ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, st.LagSeconds)
	ch <- prometheus.MustNewConstMetric(writesDesc, prometheus.CounterValue, float64(st.WritesOK), "ok")
	ch <- prometheus.MustNewConstMetric(writesDesc, prometheus.CounterValue, float64(st.WritesFailed), "failed")
	last := 0.0
	if st.LastWrite != nil {
		last = float64(st.LastWrite.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(lastWriteDesc, prometheus.GaugeValue, last)
	failing := 0.0
	if st.LastError != "" {
		failing = 1
	}
	ch <- prometheus.MustNewConstMetric(failingDesc, prometheus.GaugeValue, failing)
	ch <- prometheus.MustNewConstMetric(unreadableDesc, prometheus.CounterValue, float64(c.s.reader.Unreadable()))
}
