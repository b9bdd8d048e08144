package decisionlog

import "github.com/prometheus/client_golang/prometheus"

// Collector exports the records the log did not write, read at scrape time.
func (l *Logger) Collector() prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "arbiter_decision_log_dropped_total",
		Help: "Decision log records not written: refused by a full queue or a closed log, failed writes, and records still queued when a stop ran out of time.",
	}, func() float64 { return float64(l.Dropped()) })
}
