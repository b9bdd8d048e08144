package logship

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/arbiter-dev/arbiter/internal/scrape"
)

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
func (u *Uploader) Collector() prometheus.Collector {
	return scrape.Collector(func(ch chan<- prometheus.Metric) {
		s := u.Stats()
		scrape.Counter(ch, eventsDesc, s.Sent, "sent", "")
		scrape.Counter(ch, eventsDesc, s.DroppedFull, "dropped", "buffer_full")
		scrape.Counter(ch, eventsDesc, s.DroppedStop, "dropped", "shutdown")
		scrape.Counter(ch, eventsDesc, s.DroppedLarge, "dropped", "too_large")
		scrape.Counter(ch, uploadsDesc, s.UploadsOK, "ok")
		scrape.Counter(ch, uploadsDesc, s.UploadsFailed, "failed")
		scrape.Gauge(ch, queuedDesc, s.Queued)
		scrape.Gauge(ch, queuedBytesDesc, s.QueuedBytes)
		scrape.Gauge(ch, lastOKDesc, scrape.Unix(u.LastSuccess()))
	}, eventsDesc, uploadsDesc, queuedDesc, queuedBytesDesc, lastOKDesc)
}
