package server

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/arbiter-dev/arbiter/engine"
)

// unknownLabel stands for every decision name the active Snapshot does not
// serve, so a scanner cannot create one time series per path it tries.
const unknownLabel = "unknown"

// noOutcome labels a decision whose result has no string outcome member.
const noOutcome = "none"

type metrics struct {
	decisions *prometheus.CounterVec
	reasons   *prometheus.CounterVec
	rejected  *prometheus.CounterVec
	duration  *prometheus.HistogramVec

	eng   Engine
	names atomic.Pointer[nameSet] // decision names of the last Snapshot seen
}

// nameSet caches the names of one Snapshot for label checks.
type nameSet struct {
	snap  *engine.Snapshot
	names map[string]bool
}

func newMetrics(reg *prometheus.Registry, eng Engine, cfg Config, adm *admission) *metrics {
	m := &metrics{
		eng: eng,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_decisions_total",
			Help: "Decision requests answered, by decision and outcome (\"error\" when no decision was made).",
		}, []string{"decision", "outcome"}),
		reasons: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_refusal_reasons_total",
			Help: "Reasons listed in decision results, by decision and reason.",
		}, []string{"decision", "reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_rejected_inputs_total",
			Help: "Decision requests answered with an error, by decision and error code.",
		}, []string{"decision", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "arbiter_decision_duration_seconds",
			Help:    "Time to answer a decision request, from routing to response.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"decision"}),
	}
	reg.MustRegister(m.decisions, m.reasons, m.rejected, m.duration, revisionCollector{eng},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "arbiter_inflight_bytes",
			Help: "Body bytes of the decision requests being read or decided (admission budget: --max-inflight-bytes).",
		}, func() float64 { return float64(adm.bytes.used.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "arbiter_inflight_values",
			Help: "JSON values of the decision requests being read or decided (admission budget: --max-inflight-values).",
		}, func() float64 { return float64(adm.values.used.Load()) }))
	if cfg.ReloadCounts != nil {
		for _, result := range []string{"ok", "failed"} {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "arbiter_reloads_total",
				Help:        "Reload attempts, by result.",
				ConstLabels: prometheus.Labels{"result": result},
			}, func() float64 {
				ok, failed := cfg.ReloadCounts()
				if result == "ok" {
					return float64(ok)
				}
				return float64(failed)
			}))
		}
	}
	if cfg.Version != "" {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "arbiter_build_info",
			Help:        "Always 1: the version of the running binary in its label.",
			ConstLabels: prometheus.Labels{"version": cfg.Version},
		}, func() float64 { return 1 }))
	}
	if cfg.CompiledDisagreements != nil {
		reg.MustRegister(disagreementCollector{cfg.CompiledDisagreements})
	}
	if cfg.SelfCheckCounts != nil {
		reg.MustRegister(selfCheckCollector{cfg.SelfCheckCounts})
	}
	return m
}

// label returns name when the active Snapshot serves it, else "unknown".
func (m *metrics) label(name string) string {
	snap := m.eng.Snapshot()
	if snap == nil {
		return unknownLabel
	}
	set := m.names.Load()
	if set == nil || set.snap != snap {
		set = &nameSet{snap: snap, names: map[string]bool{}}
		for _, n := range snap.Names() {
			set.names[n] = true
		}
		m.names.Store(set)
	}
	if set.names[name] {
		return name
	}
	return unknownLabel
}

func (m *metrics) observeDecision(d *engine.Decision, elapsed time.Duration) {
	label := m.label(d.Name)
	outcome := d.Outcome
	if outcome == "" {
		outcome = noOutcome
	}
	m.decisions.WithLabelValues(label, outcome).Inc()
	for _, r := range d.Reasons {
		m.reasons.WithLabelValues(label, r).Inc()
	}
	m.duration.WithLabelValues(label).Observe(elapsed.Seconds())
}

func (m *metrics) observeError(name string, code engine.Code, elapsed time.Duration) {
	label := m.label(name)
	m.decisions.WithLabelValues(label, "error").Inc()
	m.rejected.WithLabelValues(label, string(code)).Inc()
	m.duration.WithLabelValues(label).Observe(elapsed.Seconds())
}

// revisionCollector exports the active revision as an info metric, read at
// scrape time so that it follows reloads without hooks.
type revisionCollector struct{ eng Engine }

var revisionDesc = prometheus.NewDesc("arbiter_policy_revision_info",
	"The active policy revision (always 1).", []string{"revision"}, nil)

func (c revisionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- revisionDesc }

func (c revisionCollector) Collect(ch chan<- prometheus.Metric) {
	if snap := c.eng.Snapshot(); snap != nil {
		ch <- prometheus.MustNewConstMetric(revisionDesc, prometheus.GaugeValue, 1, snap.Revision)
	}
}

// disagreementCollector exports the self-check's disagreements between a
// compiled program and topdown, per decision, read at scrape time.
type disagreementCollector struct{ counts func() map[string]uint64 }

var disagreementDesc = prometheus.NewDesc("arbiter_compiled_disagreements_total",
	"Sampled decisions on which the compiled evaluation and topdown disagreed (each turns the compiled path off for the decision until the next reload).",
	[]string{"decision"}, nil)

func (c disagreementCollector) Describe(ch chan<- *prometheus.Desc) { ch <- disagreementDesc }

func (c disagreementCollector) Collect(ch chan<- prometheus.Metric) {
	for name, n := range c.counts() {
		ch <- prometheus.MustNewConstMetric(disagreementDesc, prometheus.CounterValue, float64(n), name)
	}
}

// selfCheckCollector exports what became of the self-check's samples, read
// at scrape time.
type selfCheckCollector struct{ counts func() engine.SelfCheckCounts }

var selfCheckDesc = prometheus.NewDesc("arbiter_selfcheck_samples_total",
	"Compiled decisions sampled by the self-check, by outcome: checked (decided again by topdown), dropped (the queue was full by count or bytes) or too_large (an input over the self-check's byte bound, never copied).",
	[]string{"outcome"}, nil)

func (c selfCheckCollector) Describe(ch chan<- *prometheus.Desc) { ch <- selfCheckDesc }

func (c selfCheckCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.counts()
	ch <- prometheus.MustNewConstMetric(selfCheckDesc, prometheus.CounterValue, float64(n.Checked), "checked")
	ch <- prometheus.MustNewConstMetric(selfCheckDesc, prometheus.CounterValue, float64(n.Dropped), "dropped")
	ch <- prometheus.MustNewConstMetric(selfCheckDesc, prometheus.CounterValue, float64(n.TooLarge), "too_large")
}
