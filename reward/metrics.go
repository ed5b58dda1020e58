package reward

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the judge's Prometheus metrics.
type Metrics struct {
	// Votes counts parsed votes by class ("1", "0", "-1").
	Votes *prometheus.CounterVec
	// Ties counts majorities that were ties.
	Ties prometheus.Counter
	// ParseFailures counts votes that did not parse, by judge ("vote",
	// "hint").
	ParseFailures *prometheus.CounterVec
	// HintVotes counts hint votes by outcome ("accept", "decline",
	// "invalid"); the acceptance rate is accept over the sum.
	HintVotes *prometheus.CounterVec
	// Latency observes each judge call attempt and teacher pass, by stage
	// ("vote", "hint", "teacher").
	Latency *prometheus.HistogramVec
	// Turns counts scored turns by kind and reward source.
	Turns *prometheus.CounterVec
	// Failures counts stages that failed for good on a turn (after the
	// retries), by stage ("vote", "hint", "teacher").
	Failures *prometheus.CounterVec
	// Retries counts judge call attempts after the first, by stage.
	Retries *prometheus.CounterVec
	// Busy counts turns refused by Submit because the queue was full.
	Busy prometheus.Counter
}

// NewMetrics makes the metrics and registers them on reg (nil: not
// registered, for tests and tools).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns, sub = "clawrl", "reward"
	m := &Metrics{
		Votes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "votes_total", Help: "Judge votes that parsed, by class."}, []string{"class"}),
		Ties: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "ties_total", Help: "Vote majorities that were ties (scored 0)."}),
		ParseFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "parse_failures_total", Help: "Judge outputs that did not parse, by judge."}, []string{"judge"}),
		HintVotes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "hint_votes_total", Help: "Hint judge votes by outcome (accept, decline, invalid)."}, []string{"outcome"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "judge_seconds", Help: "Latency of judge call attempts and teacher passes, by stage.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}, []string{"stage"}),
		Turns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "turns_total", Help: "Turns scored, by sample kind and reward source."}, []string{"kind", "source"}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "judge_failures_total", Help: "Judge stages that failed after retries (the turn got a neutral score or no hint), by stage."}, []string{"stage"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "judge_retries_total", Help: "Judge call attempts after the first, by stage."}, []string{"stage"}),
		Busy: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "busy_total", Help: "Turns refused because the scoring queue was full."}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.Votes, m.Ties, m.ParseFailures, m.HintVotes, m.Latency, m.Turns, m.Failures, m.Retries, m.Busy} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("reward: registering metrics: %w", err)
	}
	return m, nil
}

func voteClass(v int) string { return strconv.Itoa(v) }
