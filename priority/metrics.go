package priority

import "github.com/prometheus/client_golang/prometheus"

// Collector exports the gate's counters to Prometheus:
// clawrl_train_yields_total and clawrl_train_busy_seconds_total.
func (g *Gate) Collector() prometheus.Collector { return gateCollector{g} }

var (
	yieldsDesc = prometheus.NewDesc("clawrl_train_yields_total",
		"Slice boundaries at which a training pass or a teacher/reference scoring pass gave way to serving (trainer.yield_to_serving).", nil, nil)
	busyDesc = prometheus.NewDesc("clawrl_train_busy_seconds_total",
		"Time training and scoring slices ran while serving had work (bounded by trainer.share_under_load).", nil, nil)
)

type gateCollector struct{ g *Gate }

func (c gateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- yieldsDesc
	ch <- busyDesc
}

func (c gateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.Stats()
	ch <- prometheus.MustNewConstMetric(yieldsDesc, prometheus.CounterValue, float64(st.Yields))
	ch <- prometheus.MustNewConstMetric(busyDesc, prometheus.CounterValue, st.BusyTraining.Seconds())
}
