package decisionlog

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/arbiter-dev/arbiter/internal/queue"
	"github.com/arbiter-dev/arbiter/internal/scrape"
)

var droppedDesc = prometheus.NewDesc("arbiter_decision_log_dropped_total",
	"Decision log records not written to the file, by reason: full (its queue could not take them; they still reach the other sinks unless --decision-log-full refuse refused their decision), closed (logged after the log closed), failed (the write failed, or a record larger than the file may be) and abandoned (still queued when a stop ran out of time).",
	[]string{"reason"}, nil)

// Collector exports the records the file did not write, by reason, read at
// scrape time. The other sinks count their own (the upload: logship's
// metrics).
func (l *Logger) Collector() prometheus.Collector {
	return scrape.Collector(func(ch chan<- prometheus.Metric) {
		for _, r := range l.droppedByReason() {
			scrape.Counter(ch, droppedDesc, r.n, r.reason)
		}
	}, droppedDesc)
}

type reasonCount struct {
	reason string
	n      uint64
}

// droppedByReason splits Dropped by reason, every reason always present.
func (l *Logger) droppedByReason() []reasonCount {
	return []reasonCount{
		{"full", l.dropped(queue.Full)},
		{"closed", l.dropped(queue.Closed)},
		{"failed", l.failed()},
		{"abandoned", l.abandoned.Load()},
	}
}
