package store

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
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
	count := func(query string) func() float64 {
		return func() float64 {
			var n int64
			if err := d.db.QueryRow(query).Scan(&n); err != nil {
				return -1
			}
			return float64(n)
		}
	}
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "clawrl_store_turns_ready",
		Help: "Completed turns waiting to be scored (-1: the store could not be read)."}, count("SELECT COUNT(*) FROM turns WHERE status = 'ready'"))
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "clawrl_store_samples_queued",
		Help: "Scored samples waiting for a training step (-1: the store could not be read)."}, count("SELECT COUNT(*) FROM samples WHERE status = 'queued'"))
	for _, c := range []prometheus.Collector{m.commits, m.batch, m.commitSeconds, m.writeErrors, m.refused, m.turns, m.samples, size, queue, ready, queued} {
		if err := reg.Register(c); err != nil {
			return m, fmt.Errorf("store: metrics: %w", err)
		}
	}
	return m, nil
}
