package rollout

import (
	"context"
	"errors"
	"hash/maphash"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Pool spreads generations over the schedulers of several replicas of one
// model (a devices group with one scheduler per GPU). A request goes to
// the replica its prompt's first tokens hash to, so that a session's turns
// (and requests with one system prompt) meet their prefix in that
// replica's prefix cache, unless that replica has Slack more requests
// running and waiting than the least loaded one; then it goes to the
// least loaded. A pool of one scheduler is that scheduler.
type Pool struct {
	scheds []*Scheduler
	seed   maphash.Seed
	// Slack is how many more requests the prompt's replica may have than
	// the least loaded before the request goes elsewhere (default 4).
	Slack int
}

// NewPool makes a pool of the schedulers (at least one).
func NewPool(scheds ...*Scheduler) *Pool {
	if len(scheds) == 0 {
		panic("rollout: a pool of no schedulers")
	}
	return &Pool{scheds: scheds, seed: maphash.MakeSeed(), Slack: 4}
}

// Replicas are the pool's schedulers.
func (p *Pool) Replicas() []*Scheduler { return p.scheds }

// affinityTokens is how much of a prompt picks its replica: the chat
// template's start and the system prompt, mostly.
const affinityTokens = 64

// pick chooses the scheduler for a prompt.
func (p *Pool) pick(prompt []int32) *Scheduler {
	if len(p.scheds) == 1 {
		return p.scheds[0]
	}
	var h maphash.Hash
	h.SetSeed(p.seed)
	var buf [4]byte
	for _, t := range prompt[:min(len(prompt), affinityTokens)] {
		buf[0], buf[1], buf[2], buf[3] = byte(t), byte(t>>8), byte(t>>16), byte(t>>24)
		h.Write(buf[:])
	}
	home := p.scheds[h.Sum64()%uint64(len(p.scheds))]
	best, bestLoad := home, home.load()
	homeLoad := bestLoad
	for _, s := range p.scheds {
		if l := s.load(); l < bestLoad {
			best, bestLoad = s, l
		}
	}
	if homeLoad-bestLoad <= p.Slack {
		return home
	}
	return best
}

// load is the requests a scheduler has running and waiting.
func (s *Scheduler) load() int {
	st := s.Stats()
	return st.Running + st.Waiting
}

// Generate starts a generation on one replica (see Pool). A replica whose
// queue is full passes the request to the others before it is refused.
func (p *Pool) Generate(ctx context.Context, req Request) (<-chan Event, error) {
	first := p.pick(req.Prompt)
	ch, err := first.Generate(ctx, req)
	if err == nil || len(p.scheds) == 1 || !errors.Is(err, ErrQueueFull) {
		return ch, err
	}
	for _, s := range p.scheds {
		if s == first {
			continue
		}
		if ch, err2 := s.Generate(ctx, req); err2 == nil || !errors.Is(err2, ErrQueueFull) {
			return ch, err2
		}
	}
	return nil, err
}

// Stats sums the replicas' counters.
func (p *Pool) Stats() Stats {
	var t Stats
	for _, s := range p.scheds {
		st := s.Stats()
		t.Running += st.Running
		t.Waiting += st.Waiting
		t.WaitingBackground += st.WaitingBackground
		t.Background += st.Background
		t.PrefixBlocks += st.PrefixBlocks
		t.FreeBlocks += st.FreeBlocks
		t.Steps += st.Steps
		t.PromptTokens += st.PromptTokens
		t.CachedTokens += st.CachedTokens
		t.GeneratedTokens += st.GeneratedTokens
		t.Preemptions += st.Preemptions
		t.Completed += st.Completed
		t.Cancelled += st.Cancelled
	}
	return t
}

// Collector is Scheduler.Collector for the pool: the replicas' metrics
// summed (their KV caches as one), plus clawrl_replicas.
func (p *Pool) Collector() prometheus.Collector {
	if len(p.scheds) == 1 {
		return p.scheds[0].Collector()
	}
	return poolCollector{p, servingDescs, replicasDesc}
}

// GroupCollector is Scheduler.GroupCollector for the pool: the replicas'
// metrics summed, named clawrl_<group>_..., plus clawrl_<group>_replicas.
func (p *Pool) GroupCollector(group string) prometheus.Collector {
	if len(p.scheds) == 1 {
		return p.scheds[0].GroupCollector(group)
	}
	prefix := "clawrl_" + group + "_"
	return poolCollector{p, newSchedDescs(prefix), prometheus.NewDesc(prefix+"replicas", "Replicas (one scheduler per device) the "+group+" group's requests are spread over.", nil, nil)}
}

var replicasDesc = prometheus.NewDesc("clawrl_replicas", "Serving replicas (one scheduler per device) the requests are spread over.", nil, nil)

type poolCollector struct {
	p        *Pool
	d        *schedDescs
	replicas *prometheus.Desc
}

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	schedCollector{c.p.scheds[0], c.d}.Describe(ch)
	ch <- c.replicas
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	total := 0
	for _, s := range c.p.scheds {
		total += s.opts.Cache.NumBlocks()
	}
	kv := c.p.scheds[0].opts.Cache
	collectStats(ch, c.d, c.p.Stats(), total, kv.DType().String(), strconv.Itoa(kv.BlockSize()))
	ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, float64(len(c.p.scheds)))
}
