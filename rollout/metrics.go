package rollout

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector of the scheduler's state, read
// from one Stats snapshot per scrape: the requests running and waiting,
// the KV cache's blocks (free, held by the prefix cache, in all) and its
// usage, prompt tokens computed and served from the prefix cache, forward
// passes, preemptions and finished generations. These are the gauges a
// vLLM operator watches (running/waiting requests, cache usage, prefix
// cache hits).
func (s *Scheduler) Collector() prometheus.Collector { return schedCollector{s, servingDescs} }

// GroupCollector is Collector for the scheduler of a devices group (the
// judge's, the actor's): the same metrics named clawrl_<group>_... instead
// of clawrl_... (clawrl_judge_scheduler_requests, clawrl_judge_kv_cache_blocks).
func (s *Scheduler) GroupCollector(group string) prometheus.Collector {
	return schedCollector{s, newSchedDescs("clawrl_" + group + "_")}
}

type schedCollector struct {
	s *Scheduler
	d *schedDescs
}

type schedDescs struct {
	requests, blocks, usage, info, prompt, steps, preempt, finished *prometheus.Desc
}

var servingDescs = newSchedDescs("clawrl_")

func newSchedDescs(prefix string) *schedDescs {
	return &schedDescs{
		requests: prometheus.NewDesc(prefix+"scheduler_requests",
			"Generations in the running batch (state=running; running_background: the background ones among them, the judge) or queued to start (waiting, waiting_background).", []string{"state"}, nil),
		blocks: prometheus.NewDesc(prefix+"kv_cache_blocks",
			"KV cache blocks: free, held by the prefix cache (prefix), and in all (total).", []string{"state"}, nil),
		usage: prometheus.NewDesc(prefix+"kv_cache_usage_ratio",
			"Share of the KV cache's blocks in use (running sequences and the prefix cache).", nil, nil),
		info: prometheus.NewDesc(prefix+"kv_cache_info",
			"The KV cache's storage dtype and tokens per block (value 1).", []string{"dtype", "block_size"}, nil),
		prompt: prometheus.NewDesc(prefix+"prompt_tokens_total",
			"Prompt tokens computed (source=computed) or served from the prefix cache (source=cached).", []string{"source"}, nil),
		steps: prometheus.NewDesc(prefix+"scheduler_steps_total",
			"Forward passes of the scheduler.", nil, nil),
		preempt: prometheus.NewDesc(prefix+"scheduler_preemptions_total",
			"Sequences evicted from the KV cache to make room, and recomputed later.", nil, nil),
		finished: prometheus.NewDesc(prefix+"scheduler_finished_total",
			"Generations that ended, by how: completed or cancelled.", []string{"how"}, nil),
	}
}

func (c schedCollector) Describe(ch chan<- *prometheus.Desc) {
	d := c.d
	for _, x := range []*prometheus.Desc{d.requests, d.blocks, d.usage, d.info, d.prompt, d.steps, d.preempt, d.finished} {
		ch <- x
	}
}

func (c schedCollector) Collect(ch chan<- prometheus.Metric) {
	kv := c.s.opts.Cache
	collectStats(ch, c.d, c.s.Stats(), kv.NumBlocks(), kv.DType().String(), strconv.Itoa(kv.BlockSize()))
}

// collectStats sends the metrics of st, for a KV cache of total blocks of
// the dtype and block size given.
func collectStats(ch chan<- prometheus.Metric, d *schedDescs, st Stats, total int, dtype, blockSize string) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(d.requests, float64(st.Running), "running")
	gauge(d.requests, float64(st.Waiting), "waiting")
	gauge(d.requests, float64(st.Background), "running_background")
	gauge(d.requests, float64(st.WaitingBackground), "waiting_background")
	gauge(d.blocks, float64(st.FreeBlocks), "free")
	gauge(d.blocks, float64(st.PrefixBlocks), "prefix")
	gauge(d.blocks, float64(total), "total")
	gauge(d.usage, 1-float64(st.FreeBlocks)/float64(max(1, total)))
	gauge(d.info, 1, dtype, blockSize)
	counter(d.prompt, st.PromptTokens, "computed")
	counter(d.prompt, st.CachedTokens, "cached")
	counter(d.steps, st.Steps)
	counter(d.preempt, st.Preemptions)
	counter(d.finished, st.Completed, "completed")
	counter(d.finished, st.Cancelled, "cancelled")
}
