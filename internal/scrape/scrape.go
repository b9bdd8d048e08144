// Package scrape is the one way a component exports totals it keeps itself
// as Prometheus metrics, read at scrape time: a Collector of fixed
// descriptors and a function that sends their samples.
package scrape

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector describes descs and collects what collect sends.
func Collector(collect func(ch chan<- prometheus.Metric), descs ...*prometheus.Desc) prometheus.Collector {
	return collector{descs, collect}
}

type collector struct {
	descs   []*prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// Number is what a sample is read from.
type Number interface {
	~int | ~int64 | ~uint64 | ~float64
}

// Counter sends d's sample v with labels.
func Counter[N Number](ch chan<- prometheus.Metric, d *prometheus.Desc, v N, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

// Gauge sends d's sample v with labels.
func Gauge[N Number](ch chan<- prometheus.Metric, d *prometheus.Desc, v N, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
}

// Unix is t in Unix seconds, 0 for the zero time (never).
func Unix(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
