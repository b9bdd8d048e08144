package policybundle

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	requestsDesc = prometheus.NewDesc("arbiter_bundle_requests_total",
		"Bundle polls, by result: downloaded, not_modified, stalled (past the download deadline or minimum rate) or failed (network, HTTP status, size limits, signature).", []string{"bundle", "result"}, nil)
	loadsDesc = prometheus.NewDesc("arbiter_bundle_loads_total",
		"Downloaded bundles, by result: activated, refused at read (layout, no schemas/) or at the gate (compile, schemas, tests), or unchanged (the bytes last judged, from a server without ETags: not judged again); a bundle that fails its signature is a failed request.", []string{"bundle", "result"}, nil)
	lastDesc = prometheus.NewDesc("arbiter_bundle_last_timestamp_seconds",
		"Unix time of the last bundle request, successful request, download and activation (0: never).", []string{"bundle", "event"}, nil)
	activeDesc = prometheus.NewDesc("arbiter_bundle_active_revision_info",
		"The active bundle's manifest revision (always 1).", []string{"bundle", "revision"}, nil)
)

// Collector exports the counts and times of sources (a nil one has none),
// read at scrape time and told apart by their bundle label: one collector
// for them all, as a registry takes one collector of a descriptor.
func Collector(sources ...*Source) prometheus.Collector { return sourceCollector(sources) }

type sourceCollector []*Source

func (c sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- requestsDesc
	ch <- loadsDesc
	ch <- lastDesc
	ch <- activeDesc
}

func (c sourceCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c {
		if s != nil {
			s.collect(ch)
		}
	}
}

func (s *Source) collect(ch chan<- prometheus.Metric) {
	st, n := s.Status(), s.Counts()
	name := st.Name
	counter := func(d *prometheus.Desc, v uint64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name, label)
	}
	counter(requestsDesc, n.Requests-n.NotModified-n.DownloadFailed-n.Stalled, "downloaded")
	counter(requestsDesc, n.NotModified, "not_modified")
	counter(requestsDesc, n.DownloadFailed, "failed")
	counter(requestsDesc, n.Stalled, "stalled")
	counter(loadsDesc, n.Loaded, "activated")
	counter(loadsDesc, n.ReadFailed, "refused_read")
	counter(loadsDesc, n.GateFailed, "refused_gate")
	counter(loadsDesc, n.Unchanged, "unchanged")
	for event, t := range map[string]time.Time{
		"request": st.LastRequest, "successful_request": st.LastSuccessfulRequest,
		"successful_download": st.LastSuccessfulDownload, "successful_activation": st.LastSuccessfulActivation,
	} {
		v := 0.0
		if !t.IsZero() {
			v = float64(t.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(lastDesc, prometheus.GaugeValue, v, name, event)
	}
	if st.ActiveRevision != "" {
		ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, 1, name, st.ActiveRevision)
	}
}
