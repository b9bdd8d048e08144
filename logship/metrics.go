package logship

import "github.com/prometheus/client_golang/prometheus"

var (
	eventsDesc = prometheus.NewDesc("arbiter_decision_log_upload_events_total",
		"Decision-log events, by result: sent (accepted by the service) or dropped (buffer_full, shutdown, too_large: refused with 413 while larger than the batch size and than any batch the service accepted).", []string{"result", "reason"}, nil)
	uploadsDesc = prometheus.NewDesc("arbiter_decision_log_uploads_total",
		"Upload requests to the decision-log service, by result (ok, failed).", []string{"result"}, nil)
	queuedDesc = prometheus.NewDesc("arbiter_decision_log_upload_queued_events",
		"Events waiting for upload: in the buffer, and in the batch being uploaded or retried.", nil, nil)
	queuedBytesDesc = prometheus.NewDesc("arbiter_decision_log_upload_queued_bytes",
		"What the events waiting for upload cost against --decision-log-upload-queue-bytes.", nil, nil)
	lastOKDesc = prometheus.NewDesc("arbiter_decision_log_upload_last_success_timestamp_seconds",
		"Unix time of the last accepted upload (0: none yet).", nil, nil)
)

// Collector exports u's totals, read at scrape time.
func (u *Uploader) Collector() prometheus.Collector { return collector{u} }

type collector struct{ u *Uploader }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- eventsDesc
	ch <- uploadsDesc
	ch <- queuedDesc
	ch <- queuedBytesDesc
	ch <- lastOKDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.u.Stats()
	ev := func(v uint64, result, reason string) {
		ch <- prometheus.MustNewConstMetric(eventsDesc, prometheus.CounterValue, float64(v), result, reason)
	}
	ev(s.Sent, "sent", "")
	ev(s.DroppedFull, "dropped", "buffer_full")
	ev(s.DroppedStop, "dropped", "shutdown")
	ev(s.DroppedLarge, "dropped", "too_large")
	ch <- prometheus.MustNewConstMetric(uploadsDesc, prometheus.CounterValue, float64(s.UploadsOK), "ok")
	ch <- prometheus.MustNewConstMetric(uploadsDesc, prometheus.CounterValue, float64(s.UploadsFailed), "failed")
	ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(s.Queued))
	ch <- prometheus.MustNewConstMetric(queuedBytesDesc, prometheus.GaugeValue, float64(s.QueuedBytes))
	last := 0.0
	if t := c.u.LastSuccess(); !t.IsZero() {
		last = float64(t.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(lastOKDesc, prometheus.GaugeValue, last)
}
