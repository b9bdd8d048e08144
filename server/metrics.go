package server

import (
	"cmp"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/scrape"
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
	counters := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, used *atomic.Int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(used.Load()) })
	}
	m := &metrics{
		eng: eng,
		decisions: counters("arbiter_decisions_total",
			"Decision requests answered, by decision and outcome (\"error\" when no decision was made).", "decision", "outcome"),
		reasons: counters("arbiter_refusal_reasons_total",
			"Reasons listed in decision results, by decision and reason.", "decision", "reason"),
		rejected: counters("arbiter_rejected_inputs_total",
			"Decision requests answered with an error, by decision and error code.", "decision", "code"),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "arbiter_decision_duration_seconds",
			Help:    "Time to answer a decision request, from routing to response.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"decision"}),
	}
	reg.MustRegister(m.decisions, m.reasons, m.rejected, m.duration, revisionCollector(eng),
		gauge("arbiter_inflight_bytes",
			"Body bytes of the decision requests being read or decided (admission budget: --max-inflight-bytes).", &adm.bytes.used),
		gauge("arbiter_inflight_values",
			"JSON values of the decision requests being read or decided (admission budget: --max-inflight-values).", &adm.values.used))
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
	m.decisions.WithLabelValues(label, cmp.Or(d.Outcome, noOutcome)).Inc()
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

var revisionDesc = prometheus.NewDesc("arbiter_policy_revision_info",
	"The active policy revision (always 1).", []string{"revision"}, nil)

// revisionCollector exports the active revision as an info metric, read at
// scrape time so that it follows reloads without hooks.
func revisionCollector(eng Engine) prometheus.Collector {
	return scrape.Collector(func(ch chan<- prometheus.Metric) {
		if snap := eng.Snapshot(); snap != nil {
			scrape.Gauge(ch, revisionDesc, 1, snap.Revision)
		}
	}, revisionDesc)
}
