package shadow

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	descDecisions = prometheus.NewDesc("arbiter_shadow_decisions_total",
		"Live decisions judged by a candidate revision in shadow, by decision and class (refuse_to_allow is the dangerous one).", []string{"decision", "class"}, nil)
	descSampled = prometheus.NewDesc("arbiter_shadow_sampled_total",
		"Live decisions picked for shadow evaluation.", nil, nil)
	descDropped = prometheus.NewDesc("arbiter_shadow_dropped_total",
		"Sampled decisions not judged: the queue was full (queue_full), the candidate changed or the shadow stopped first (abandoned), it was paused for live traffic or its CPU budget past its wall-clock bound (expired), or the record could not be decided again (unjudged).", []string{"reason"}, nil)
	descQueued = prometheus.NewDesc("arbiter_shadow_queue_length",
		"Decisions waiting for the candidate.", nil, nil)
	descEval = prometheus.NewDesc("arbiter_shadow_evaluation_seconds_total",
		"Time the shadow workers spent deciding with the candidate.", nil, nil)
	descThrottled = prometheus.NewDesc("arbiter_shadow_throttled_seconds_total",
		"Time the shadow workers waited for their CPU budget.", nil, nil)
	descPaused = prometheus.NewDesc("arbiter_shadow_paused_seconds_total",
		"Time the candidate's evaluations paused while live decisions were in flight.", nil, nil)
	descCandidate = prometheus.NewDesc("arbiter_shadow_candidate_info",
		"The candidate revision in shadow (1), absent when none is.", []string{"revision"}, nil)
	descPromotions = prometheus.NewDesc("arbiter_shadow_promotions_total",
		"Promotion attempts by result: promoted, forced (promoted despite the gate) or refused.", []string{"result"}, nil)
)

// Collector returns the shadow's Prometheus metrics. The counters add up
// over every candidate the process has shadowed (Stats counts one).
func (s *Shadow) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Shadow }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDecisions, descSampled, descDropped, descQueued, descEval, descThrottled, descPaused, descCandidate, descPromotions} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.classMu.Lock()
	names := slices.Sorted(maps.Keys(s.classes))
	for _, n := range names {
		for i, cl := range Classes {
			ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(s.classes[n][i]), n, string(cl))
		}
	}
	s.classMu.Unlock()
	st := s.stats(&s.total)
	ch <- prometheus.MustNewConstMetric(descSampled, prometheus.CounterValue, float64(st.Sampled))
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(st.Dropped), "queue_full")
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(st.Abandoned), "abandoned")
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(st.Expired), "expired")
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(st.Unjudged), "unjudged")
	ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(st.Queued))
	ch <- prometheus.MustNewConstMetric(descEval, prometheus.CounterValue, st.EvaluationSeconds)
	ch <- prometheus.MustNewConstMetric(descThrottled, prometheus.CounterValue, st.ThrottledSeconds)
	ch <- prometheus.MustNewConstMetric(descPaused, prometheus.CounterValue, st.PausedSeconds)
	if cand := s.Candidate(); cand != nil {
		ch <- prometheus.MustNewConstMetric(descCandidate, prometheus.GaugeValue, 1, cand.Snapshot.Revision)
	}
	for i, r := range []string{"promoted", "forced", "refused"} {
		ch <- prometheus.MustNewConstMetric(descPromotions, prometheus.CounterValue, float64(s.promotions[i].Load()), r)
	}
}
