package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus collectors.
type metrics struct {
	requests *prometheus.CounterVec
	tokens   *prometheus.CounterVec
	ttft     *prometheus.HistogramVec
	inFlight prometheus.Gauge
	version  prometheus.GaugeFunc
}

func newMetrics(s *Server) *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clawrl_http_requests_total",
			Help: "HTTP requests by endpoint (route pattern) and status code.",
		}, []string{"endpoint", "code"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clawrl_generated_tokens_total",
			Help: "Tokens generated, by endpoint.",
		}, []string{"endpoint"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "clawrl_time_to_first_token_seconds",
			Help:    "Time from a request's arrival to its first generated token.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"endpoint"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clawrl_http_requests_in_flight",
			Help: "HTTP requests being served.",
		}),
		version: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "clawrl_weight_version",
			Help: "The weight version being served.",
		}, func() float64 { return float64(s.opts.Version()) }),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.tokens, m.ttft, m.inFlight, m.version}
}
