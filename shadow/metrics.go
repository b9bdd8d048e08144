package shadow

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/arbiter-dev/arbiter/internal/scrape"
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
	descDisagreements = prometheus.NewDesc("arbiter_compiled_disagreements_total",
		"Sampled decisions on which the compiled evaluation and topdown disagreed (each turns the compiled path off for the decision until the next reload).",
		[]string{"decision"}, nil)
	descSelfCheck = prometheus.NewDesc("arbiter_selfcheck_samples_total",
		"Compiled decisions sampled by the self-check, by outcome: checked (decided again by topdown and compared), inconclusive (topdown ran out of time), expired (the shadow's CPU budget did not come within its timeout, or the stop came first), dropped (the queue was full by count or bytes) or too_large (an input over the self-check's byte bound, never copied).",
		[]string{"outcome"}, nil)
	descSelfCheckEval = prometheus.NewDesc("arbiter_selfcheck_evaluation_seconds_total",
		"Time the shadow workers spent deciding sampled answers again with topdown for the self-check (within the shadow's CPU budget, pauses for live traffic aside).", nil, nil)
)

// Collector returns the shadow's Prometheus metrics. The counters add up
// over every candidate the process has shadowed (Stats counts one); the
// self-check's are there when it is on.
func (s *Shadow) Collector() prometheus.Collector {
	return scrape.Collector(func(ch chan<- prometheus.Metric) {
		s.classMu.Lock()
		for _, n := range slices.Sorted(maps.Keys(s.classes)) {
			for i, cl := range Classes {
				scrape.Counter(ch, descDecisions, s.classes[n][i], n, string(cl))
			}
		}
		if s.cfg.SelfCheck > 0 {
			for n, c := range s.checks.disagreements {
				scrape.Counter(ch, descDisagreements, c, n)
			}
			for i, o := range checkOutcomes {
				scrape.Counter(ch, descSelfCheck, s.checks.n[i].Load(), o)
			}
			scrape.Counter(ch, descSelfCheckEval, float64(s.checks.evalNS.Load())/1e9)
		}
		s.classMu.Unlock()
		st := s.stats(&s.total)
		scrape.Counter(ch, descSampled, st.Sampled)
		for reason, n := range map[string]uint64{"queue_full": st.Dropped, "abandoned": st.Abandoned, "expired": st.Expired, "unjudged": st.Unjudged} {
			scrape.Counter(ch, descDropped, n, reason)
		}
		scrape.Gauge(ch, descQueued, st.Queued)
		scrape.Counter(ch, descEval, st.EvaluationSeconds)
		scrape.Counter(ch, descThrottled, st.ThrottledSeconds)
		scrape.Counter(ch, descPaused, st.PausedSeconds)
		if cand := s.Candidate(); cand != nil {
			scrape.Gauge(ch, descCandidate, 1, cand.Snapshot.Revision)
		}
		for i, r := range []string{"promoted", "forced", "refused"} {
			scrape.Counter(ch, descPromotions, s.promotions[i].Load(), r)
		}
	}, descDecisions, descSampled, descDropped, descQueued, descEval, descThrottled, descPaused, descCandidate, descPromotions, descDisagreements, descSelfCheck, descSelfCheckEval)
}
