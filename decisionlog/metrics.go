package decisionlog

import "github.com/prometheus/client_golang/prometheus"

// Collector exports the records the file did not write, read at scrape
// time. The other sinks count their own (the upload: logship's metrics).
func (l *Logger) Collector() prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "arbiter_decision_log_dropped_total",
		Help: "Decision log records not written to the file: its full queue could not take them (they still reach the other sinks, unless --decision-log-full refuse refused their decision) or the log was closed, failed writes, and records still queued when a stop ran out of time.",
	}, func() float64 { return float64(l.Dropped()) })
}
