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
func (s *Scheduler) Collector() prometheus.Collector { return schedCollector{s} }

type schedCollector struct{ s *Scheduler }

var (
	descRequests = prometheus.NewDesc("clawrl_scheduler_requests",
		"Generations in the running batch (state=running; running_background: the background ones among them, the judge) or queued to start (waiting, waiting_background).", []string{"state"}, nil)
	descBlocks = prometheus.NewDesc("clawrl_kv_cache_blocks",
		"KV cache blocks: free, held by the prefix cache (prefix), and in all (total).", []string{"state"}, nil)
	descUsage = prometheus.NewDesc("clawrl_kv_cache_usage_ratio",
		"Share of the KV cache's blocks in use (running sequences and the prefix cache).", nil, nil)
	descInfo = prometheus.NewDesc("clawrl_kv_cache_info",
		"The KV cache's storage dtype and tokens per block (value 1).", []string{"dtype", "block_size"}, nil)
	descPrompt = prometheus.NewDesc("clawrl_prompt_tokens_total",
		"Prompt tokens computed (source=computed) or served from the prefix cache (source=cached).", []string{"source"}, nil)
	descSteps = prometheus.NewDesc("clawrl_scheduler_steps_total",
		"Forward passes of the scheduler.", nil, nil)
	descPreempt = prometheus.NewDesc("clawrl_scheduler_preemptions_total",
		"Sequences evicted from the KV cache to make room, and recomputed later.", nil, nil)
	descFinished = prometheus.NewDesc("clawrl_scheduler_finished_total",
		"Generations that ended, by how: completed or cancelled.", []string{"how"}, nil)
)

func (c schedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descBlocks, descUsage, descInfo, descPrompt, descSteps, descPreempt, descFinished} {
		ch <- d
	}
}

func (c schedCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	kv := c.s.opts.Cache
	total := kv.NumBlocks()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(descRequests, float64(st.Running), "running")
	gauge(descRequests, float64(st.Waiting), "waiting")
	gauge(descRequests, float64(st.Background), "running_background")
	gauge(descRequests, float64(st.WaitingBackground), "waiting_background")
	gauge(descBlocks, float64(st.FreeBlocks), "free")
	gauge(descBlocks, float64(st.PrefixBlocks), "prefix")
	gauge(descBlocks, float64(total), "total")
	gauge(descUsage, 1-float64(st.FreeBlocks)/float64(max(1, total)))
	gauge(descInfo, 1, kv.DType().String(), strconv.Itoa(kv.BlockSize()))
	counter(descPrompt, st.PromptTokens, "computed")
	counter(descPrompt, st.CachedTokens, "cached")
	counter(descSteps, st.Steps)
	counter(descPreempt, st.Preemptions)
	counter(descFinished, st.Completed, "completed")
	counter(descFinished, st.Cancelled, "cancelled")
}
