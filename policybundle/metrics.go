package policybundle

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/arbiter-dev/arbiter/internal/scrape"
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
func Collector(sources ...*Source) prometheus.Collector {
	return scrape.Collector(func(ch chan<- prometheus.Metric) {
		for _, s := range sources {
			if s != nil {
				s.collect(ch)
			}
		}
	}, requestsDesc, loadsDesc, lastDesc, activeDesc)
}

func (s *Source) collect(ch chan<- prometheus.Metric) {
	st, n := s.Status(), s.Counts()
	name := st.Name
	for result, v := range map[string]uint64{"downloaded": n.Requests - n.NotModified - n.DownloadFailed - n.Stalled, "not_modified": n.NotModified, "failed": n.DownloadFailed, "stalled": n.Stalled} {
		scrape.Counter(ch, requestsDesc, v, name, result)
	}
	for result, v := range map[string]uint64{"activated": n.Loaded, "refused_read": n.ReadFailed, "refused_gate": n.GateFailed, "unchanged": n.Unchanged} {
		scrape.Counter(ch, loadsDesc, v, name, result)
	}
	for event, t := range map[string]time.Time{
		"request": st.LastRequest, "successful_request": st.LastSuccessfulRequest,
		"successful_download": st.LastSuccessfulDownload, "successful_activation": st.LastSuccessfulActivation,
	} {
		scrape.Gauge(ch, lastDesc, scrape.Unix(t), name, event)
	}
	if st.ActiveRevision != "" {
		scrape.Gauge(ch, activeDesc, 1, name, st.ActiveRevision)
	}
}
