package store

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

type metrics struct {
	commits       prometheus.Counter
	batch         prometheus.Histogram
	commitSeconds prometheus.Histogram
	writeErrors   prometheus.Counter
	refused       *prometheus.CounterVec
	turns         *prometheus.CounterVec
	samples       *prometheus.CounterVec
}

func newMetrics(d *DB, reg prometheus.Registerer) (metrics, error) {
	m := metrics{
		commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "clawrl_store_commits_total",
			Help: "Transactions committed by the store's writer (group commits)."}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "clawrl_store_commit_writes",
			Help: "Writes per committed transaction.", Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "clawrl_store_commit_seconds",
			Help: "Time to run and commit one transaction (fsync included).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "clawrl_store_write_errors_total",
			Help: "Writes that failed (disk full, I/O error)."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "clawrl_store_refused_total",
			Help: "Training data refused, by reason (disk_budget)."}, []string{"reason"}),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "clawrl_store_turns_total",
			Help: "Turns written, by event (recorded, completed, rescored, forgotten)."}, []string{"event"}),
		samples: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "clawrl_store_samples_total",
			Help: "Samples by outcome (queued, trained, dropped_<reason>, requeued)."}, []string{"outcome"}),
	}
	if reg == nil {
		return m, nil
	}
	size := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "clawrl_store_bytes",
		Help: "Size of the database files."}, func() float64 { return float64(d.Bytes()) })
	queue := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "clawrl_store_queue_writes",
		Help: "Writes waiting for the store's writer."}, func() float64 {
		d.mu.Lock()
		defer d.mu.Unlock()
		return float64(len(d.queue))
	})
	for _, c := range []prometheus.Collector{m.commits, m.batch, m.commitSeconds, m.writeErrors, m.refused, m.turns, m.samples, size, queue} {
		if err := reg.Register(c); err != nil {
			return m, fmt.Errorf("store: metrics: %w", err)
		}
	}
	return m, nil
}

// RateLimited logs repeated warnings at most once per interval and key,
// with the count of those it held back, instead of one line per event.
type RateLimited struct {
	log      zerolog.Logger
	interval time.Duration

	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// NewRateLimited returns a limiter that logs through log.
func NewRateLimited(log zerolog.Logger, interval time.Duration) *RateLimited {
	return &RateLimited{log: log, interval: interval, last: map[string]time.Time{}, held: map[string]int{}}
}

// Warn logs msg with err under key, unless a warning of the same key was
// logged less than an interval ago; then it only counts it, and the next
// line logged for key says how many were held back.
func (r *RateLimited) Warn(key string, err error, msg string) {
	now := time.Now()
	r.mu.Lock()
	if t, ok := r.last[key]; ok && now.Sub(t) < r.interval {
		r.held[key]++
		r.mu.Unlock()
		return
	}
	held := r.held[key]
	r.last[key], r.held[key] = now, 0
	r.mu.Unlock()
	ev := r.log.Warn().Err(err)
	if held > 0 {
		ev = ev.Int("repeats", held).Dur("in_last", r.interval)
	}
	ev.Msg(msg)
}
