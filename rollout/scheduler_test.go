package rollout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/weights"
)

// otherWeights are weights of tinyModel's shapes from another seed's
// checkpoint, loaded into m.
func otherWeights(t testing.TB, m *model.Model, seed uint64) *model.Weights {
	t.Helper()
	dir := t.TempDir()
	spec := model.RandomSpec{
		Arch: model.ArchQwen3, Hidden: 32, Intermediate: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
		Vocab: 101, MaxPositions: 256, DType: "float32", Seed: seed, InitStd: 0.2,
	}
	if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	w, err := m.LoadWeights(dir)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func tinyModel(t testing.TB) *model.Model {
	t.Helper()
	dir := t.TempDir()
	spec := model.RandomSpec{
		Arch: model.ArchQwen3, Hidden: 32, Intermediate: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
		Vocab: 101, MaxPositions: 256, DType: "float32", Seed: 3, InitStd: 0.2,
	}
	if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newCache(t testing.TB, m *model.Model, blocks int) *model.KVCache {
	t.Helper()
	kv, err := m.NewKVCache(model.KVCacheOptions{BlockSize: 4, Budget: m.Config.KVBytesPerToken(compute.F32) * 4 * int64(blocks)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kv.Close)
	return kv
}

// startScheduler runs a scheduler until the test ends.
func startScheduler(t testing.TB, opts Options) *Scheduler {
	t.Helper()
	opts.Log = zerolog.Nop()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Start())
	return s
}

// greedyRef generates greedily one token at a time with no batching and
// no prefix cache: the reference the scheduler must reproduce.
func greedyRef(t testing.TB, m *model.Model, prompt []int32, maxTokens int, stop []int32) []int32 {
	t.Helper()
	kv := newCache(t, m, 128)
	seq := kv.NewSequence()
	defer seq.Free()
	next := prompt
	var out []int32
	for len(out) < maxTokens {
		logits, err := m.Forward([]model.Step{{Seq: seq, Tokens: next}}, model.LastLogits, nil)
		if err != nil {
			t.Fatal(err)
		}
		best := int32(slices.Index(logits, slices.Max(logits)))
		out = append(out, best)
		if slices.Contains(stop, best) {
			break
		}
		next = []int32{best}
	}
	return out
}

func prompt(n, salt int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*31 + salt*17 + 5) % 101)
	}
	return p
}

type collected struct {
	tokens  []int32
	events  []Event
	finish  FinishReason
	err     error
	cached  int
	version uint64
}

func collect(t testing.TB, ch <-chan Event) collected {
	t.Helper()
	var c collected
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				if c.finish == "" {
					t.Fatal("stream closed without a final event")
				}
				return c
			}
			if c.finish != "" {
				t.Fatalf("event after the final one: %+v", ev)
			}
			c.events = append(c.events, ev)
			if len(c.events) == 1 {
				c.cached = ev.CachedTokens
			}
			if ev.HasToken {
				c.tokens = append(c.tokens, ev.Token)
			}
			c.finish, c.err = ev.Finish, ev.Err
		case <-timeout:
			t.Fatal("generation timed out")
		}
	}
}

func greedyReq(p []int32, maxTokens int) Request {
	return Request{Prompt: p, MaxTokens: maxTokens, Sampling: sample.Params{Temperature: 0, TopLogProbs: 2}}
}

func TestBatchedGreedyMatchesReference(t *testing.T) {
	m := tinyModel(t)
	// A small step budget forces chunked prefill interleaved with decode.
	for _, tc := range []struct {
		name   string
		opts   Options
		blocks int
	}{
		{"default", Options{}, 512},
		{"chunked prefill", Options{StepTokens: 8, MaxBatch: 4}, 512},
		{"no prefix cache", Options{NoPrefixCache: true}, 512},
		{"preemption", Options{MaxBatch: 8}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Model = m
			opts.Cache = newCache(t, m, tc.blocks)
			s := startScheduler(t, opts)
			const n = 10
			var wg sync.WaitGroup
			got := make([]collected, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ch, err := s.Generate(context.Background(), greedyReq(prompt(5+3*i, i), 12))
					if err != nil {
						t.Error(err)
						return
					}
					got[i] = collect(t, ch)
				}()
			}
			wg.Wait()
			for i := range n {
				want := greedyRef(t, m, prompt(5+3*i, i), 12, nil)
				if !slices.Equal(got[i].tokens, want) {
					t.Errorf("request %d: got %v, want %v", i, got[i].tokens, want)
				}
				if got[i].finish != FinishLength {
					t.Errorf("request %d finished with %q", i, got[i].finish)
				}
				for _, ev := range got[i].events {
					if ev.HasToken && (len(ev.Top) != 2 || ev.Top[0].Token != ev.Token || ev.LogProb > 0) {
						t.Fatalf("request %d: bad event %+v", i, ev)
					}
				}
			}
			if tc.name == "preemption" && s.Stats().Preemptions == 0 {
				t.Errorf("expected preemptions with a 40-block cache, stats %+v", s.Stats())
			}
		})
	}
}

func TestLogProbsMatchModel(t *testing.T) {
	m := tinyModel(t)
	s := startScheduler(t, Options{Model: m, Cache: newCache(t, m, 256)})
	p := prompt(9, 1)
	ch, err := s.Generate(context.Background(), Request{Prompt: p, MaxTokens: 6, Sampling: sample.Params{Temperature: 1, Seed: new(uint64(5))}})
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, ch)
	kv := newCache(t, m, 64)
	scored, err := m.LogProbs(kv, p, c.tokens, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range c.events {
		if d := ev.LogProb - scored.LogProbs[i]; d > 1e-4 || d < -1e-4 {
			t.Errorf("token %d: rollout logprob %v, model %v", i, ev.LogProb, scored.LogProbs[i])
		}
	}
}

func TestStopTokenAndSeeds(t *testing.T) {
	m := tinyModel(t)
	s := startScheduler(t, Options{Model: m, Cache: newCache(t, m, 256)})
	p := prompt(7, 2)
	ref := greedyRef(t, m, p, 8, nil)
	stop := ref[3]
	ch, err := s.Generate(context.Background(), Request{Prompt: p, MaxTokens: 8, StopTokens: []int32{stop}})
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, ch)
	want := ref[:slices.Index(ref, stop)+1]
	if !slices.Equal(c.tokens, want) || c.finish != FinishStop {
		t.Errorf("got %v (%s), want %v (stop)", c.tokens, c.finish, want)
	}
	// The same seed gives the same tokens, alone or among other requests.
	seeded := Request{Prompt: p, MaxTokens: 10, Sampling: sample.Params{Temperature: 1, TopP: 0.9, Seed: new(uint64(11))}}
	ch, _ = s.Generate(context.Background(), seeded)
	alone := collect(t, ch)
	var chans []<-chan Event
	for i := range 4 {
		other, err := s.Generate(context.Background(), greedyReq(prompt(6, 10+i), 10))
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, other)
	}
	ch, _ = s.Generate(context.Background(), seeded)
	batched := collect(t, ch)
	for _, o := range chans {
		collect(t, o)
	}
	if !slices.Equal(alone.tokens, batched.tokens) {
		t.Errorf("seeded sampling differs: alone %v, batched %v", alone.tokens, batched.tokens)
	}
}

func TestPrefixCacheReuse(t *testing.T) {
	m := tinyModel(t)
	kv := newCache(t, m, 256)
	s := startScheduler(t, Options{Model: m, Cache: kv})
	system := prompt(40, 9)
	first := append(slices.Clone(system), 1, 2, 3)
	second := append(slices.Clone(system), 7, 8, 9, 10)
	ch, _ := s.Generate(context.Background(), greedyReq(first, 5))
	if c := collect(t, ch); c.cached != 0 {
		t.Errorf("first request reported %d cached tokens", c.cached)
	}
	ch, _ = s.Generate(context.Background(), greedyReq(second, 5))
	c := collect(t, ch)
	if c.cached != 40 { // 10 full blocks of 4 tokens
		t.Errorf("second request: %d cached tokens, want 40", c.cached)
	}
	if want := greedyRef(t, m, second, 5, nil); !slices.Equal(c.tokens, want) {
		t.Errorf("with prefix cache got %v, want %v", c.tokens, want)
	}
	// A follow-up turn that resends prompt + reply + more reuses the reply too.
	third := append(append(slices.Clone(second), c.tokens...), 4, 4)
	ch, _ = s.Generate(context.Background(), greedyReq(third, 3))
	c3 := collect(t, ch)
	if c3.cached < 44 {
		t.Errorf("follow-up turn: %d cached tokens, want >= 44", c3.cached)
	}
	if st := s.Stats(); st.CachedTokens < 84 || st.PrefixBlocks == 0 {
		t.Errorf("stats %+v", st)
	}
	// Distinct prompts through a small cache: old prefixes are evicted, not
	// leaked, and every request still completes.
	for i := range 30 {
		ch, err := s.Generate(context.Background(), greedyReq(prompt(60, 100+i), 4))
		if err != nil {
			t.Fatal(err)
		}
		if c := collect(t, ch); c.finish != FinishLength {
			t.Fatalf("request %d ended with %s: %v", i, c.finish, c.err)
		}
	}
	if st := s.Stats(); st.PrefixBlocks > kv.NumBlocks() || st.FreeBlocks+st.PrefixBlocks != kv.NumBlocks() {
		t.Errorf("after eviction: stats %+v, %d blocks", st, kv.NumBlocks())
	}
}

func TestCancelFreesCache(t *testing.T) {
	m := tinyModel(t)
	kv := newCache(t, m, 256)
	// Held before its second pass (one token out: the sequence is
	// running), so that the cancel lands before the 200 tokens are done
	// however fast the machine is.
	hold := newHoldGate(2, nil)
	s := startScheduler(t, Options{Model: m, Cache: kv, NoPrefixCache: true, Gate: hold})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := s.Generate(ctx, greedyReq(prompt(20, 3), 200))
	if err != nil {
		t.Fatal(err)
	}
	hold.wait(t)
	cancel()
	close(hold.release)
	deadline := time.Now().Add(10 * time.Second)
	for kv.FreeBlocks() != kv.NumBlocks() {
		if time.Now().After(deadline) {
			t.Fatalf("cache not freed after cancel: %d of %d free", kv.FreeBlocks(), kv.NumBlocks())
		}
		time.Sleep(time.Millisecond)
	}
	// The channel still ends (closed; a final event if the reader keeps up).
	for range ch {
	}
	if st := s.Stats(); st.Cancelled != 1 {
		t.Errorf("stats %+v, want 1 cancelled", st)
	}
}

func TestGenerateErrors(t *testing.T) {
	m := tinyModel(t)
	s, err := New(Options{Model: m, Cache: newCache(t, m, 64), QueueSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		req  Request
		want error
	}{
		{Request{Prompt: prompt(200, 1), MaxTokens: 100}, ErrContextLength},
		{Request{Prompt: nil, MaxTokens: 1}, nil},
		{Request{Prompt: []int32{1000}, MaxTokens: 1}, nil},
		{Request{Prompt: prompt(3, 1), MaxTokens: 0}, nil},
		{Request{Prompt: prompt(3, 1), MaxTokens: 1, Sampling: sample.Params{Temperature: 3}}, nil},
	}
	for i, tt := range tests {
		_, err := s.Generate(context.Background(), tt.req)
		if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("case %d: err = %v, want %v", i, err, tt.want)
		}
	}
	// Nothing runs the queue: the second request finds it full.
	if _, err := s.Generate(context.Background(), greedyReq(prompt(3, 1), 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Generate(context.Background(), greedyReq(prompt(3, 1), 1)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("err = %v, want ErrQueueFull", err)
	}
}

func TestShutdownEndsStreams(t *testing.T) {
	m := tinyModel(t)
	s, err := New(Options{Model: m, Cache: newCache(t, m, 256), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var chans []<-chan Event
	for i := range 3 {
		ch, err := s.Generate(context.Background(), greedyReq(prompt(8, i), 200))
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	<-chans[0]
	cancel()
	<-done
	for i, ch := range chans {
		c := collect(t, ch)
		if c.finish != FinishError && c.finish != FinishLength {
			t.Errorf("stream %d ended with %q", i, c.finish)
		}
	}
	if _, err := s.Generate(context.Background(), greedyReq(prompt(3, 1), 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("after shutdown: %v", err)
	}
}

func TestManyConcurrentClients(t *testing.T) {
	m := tinyModel(t)
	s := startScheduler(t, Options{Model: m, Cache: newCache(t, m, 512), MaxBatch: 16, QueueSize: 64})
	var wg sync.WaitGroup
	errs := make(chan error, 48)
	for i := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch, err := s.Generate(ctx, Request{Prompt: prompt(4+i%9, i), MaxTokens: 8,
				Sampling: sample.Params{Temperature: 0.8, Seed: new(uint64(i))}})
			if err != nil {
				errs <- err
				return
			}
			if i%5 == 0 { // some clients leave early
				<-ch
				cancel()
				for range ch {
				}
				return
			}
			c := collect(t, ch)
			if len(c.tokens) != 8 || c.finish != FinishLength {
				errs <- fmt.Errorf("client %d: %d tokens, %s", i, len(c.tokens), c.finish)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// greedyRefOn is greedyRef on a chosen weight set.
func greedyRefOn(t testing.TB, m *model.Model, w *model.Weights, prompt []int32, maxTokens int) []int32 {
	t.Helper()
	kv := newCache(t, m, 128)
	seq := kv.NewSequence()
	defer seq.Free()
	next := prompt
	var out []int32
	for len(out) < maxTokens {
		logits, err := m.Run(w, []model.Step{{Seq: seq, Tokens: next}}, model.LastLogits, nil)
		if err != nil {
			t.Fatal(err)
		}
		best := int32(slices.Index(logits, slices.Max(logits)))
		out = append(out, best)
		next = []int32{best}
	}
	return out
}

// TestWeightSwapDuringStream publishes new weights while a generation
// streams: it completes on the version it started with, and the next
// request runs on, and reports, the new one.
func TestWeightSwapDuringStream(t *testing.T) {
	m := tinyModel(t)
	w2 := otherWeights(t, m, 99)
	store := weights.NewStore(weights.StoreOptions{})
	t.Cleanup(store.Close)
	v1, err := store.Publish(m.Weights(), 0, weights.Meta{Note: "base"})
	if err != nil {
		t.Fatal(err)
	}
	s := startScheduler(t, Options{Model: m, Cache: newCache(t, m, 256), Versions: store})
	p := prompt(12, 4)
	const n = 200
	long, err := s.Generate(context.Background(), greedyReq(p, n))
	if err != nil {
		t.Fatal(err)
	}
	first := <-long // the stream is running on v1
	v2, err := store.Publish(w2, v1.Number(), weights.Meta{Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Generate(context.Background(), greedyReq(p, 6))
	if err != nil {
		t.Fatal(err)
	}
	next := collect(t, ch)
	rest := collect(t, long)
	got := append([]int32{first.Token}, rest.tokens...)
	if want := greedyRefOn(t, m, m.Weights(), p, n); !slices.Equal(got, want) {
		t.Errorf("stream across the swap: got %v, want the v1 generation %v", got, want)
	}
	for _, ev := range append([]Event{first}, rest.events...) {
		if ev.Version != v1.Number() {
			t.Fatalf("stream event on version %d, want %d", ev.Version, v1.Number())
		}
	}
	if want := greedyRefOn(t, m, w2, p, 6); !slices.Equal(next.tokens, want) {
		t.Errorf("request after the swap: got %v, want the v2 generation %v", next.tokens, want)
	}
	for _, ev := range next.events {
		if ev.Version != v2.Number() {
			t.Fatalf("new request on version %d, want %d", ev.Version, v2.Number())
		}
	}
}

// TestCollector checks the scheduler's Prometheus metrics after two
// generations of one prompt: the second is served from the prefix cache.
func TestCollector(t *testing.T) {
	m := tinyModel(t)
	kv := newCache(t, m, 64)
	s := startScheduler(t, Options{Model: m, Cache: kv})
	reg := prometheus.NewRegistry()
	if err := reg.Register(s.Collector()); err != nil {
		t.Fatal(err)
	}
	p := prompt(13, 1)
	for range 2 {
		ch, err := s.Generate(context.Background(), greedyReq(p, 4))
		if err != nil {
			t.Fatal(err)
		}
		collect(t, ch)
	}
	// The loop counts its running jobs on its next pass, after the last
	// event went out.
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Running != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			name := f.GetName()
			for _, l := range mt.GetLabel() {
				name += "/" + l.GetValue()
			}
			switch {
			case mt.GetGauge() != nil:
				got[name] = mt.GetGauge().GetValue()
			case mt.GetCounter() != nil:
				got[name] = mt.GetCounter().GetValue()
			}
		}
	}
	st := s.Stats()
	for name, want := range map[string]float64{
		"clawrl_scheduler_requests/running":         0,
		"clawrl_kv_cache_blocks/total":              64,
		"clawrl_kv_cache_blocks/free":               float64(st.FreeBlocks),
		"clawrl_kv_cache_blocks/prefix":             float64(st.PrefixBlocks),
		"clawrl_kv_cache_usage_ratio":               1 - float64(st.FreeBlocks)/64,
		"clawrl_kv_cache_info/4/F32":                1, // labels sorted: block_size, dtype
		"clawrl_prompt_tokens_total/computed":       float64(st.PromptTokens),
		"clawrl_scheduler_finished_total/completed": 2,
		"clawrl_scheduler_steps_total":              float64(st.Steps),
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if got["clawrl_prompt_tokens_total/cached"] < 8 {
		t.Errorf("cached prompt tokens %v: the second request did not reuse the first's blocks", got["clawrl_prompt_tokens_total/cached"])
	}
}

// allowSet is a Constraint that allows a fixed set of tokens.
type allowSet struct {
	ok       map[int32]bool
	accepted []int32
}

func (a *allowSet) Allow(t int32) bool { return a.ok[t] }
func (a *allowSet) Accept(t int32)     { a.accepted = append(a.accepted, t) }

// A constrained generation draws only allowed tokens, greedy picks the
// most likely allowed one, every token drawn is accepted, and the
// log-probs reported are the model's own (unmasked).
func TestConstrainedGeneration(t *testing.T) {
	m := tinyModel(t)
	kv := newCache(t, m, 64)
	s := startScheduler(t, Options{Model: m, Cache: kv})
	for _, temp := range []float32{0, 1} {
		c := &allowSet{ok: map[int32]bool{3: true, 50: true, 99: true}}
		req := greedyReq(prompt(6, 9), 12)
		req.Sampling.Temperature = temp
		req.Constraint = c
		ch, err := s.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var toks []int32
		var lps []float32
		for ev := range ch {
			if ev.HasToken {
				toks = append(toks, ev.Token)
				lps = append(lps, ev.LogProb)
			}
		}
		if len(toks) != 12 || !slices.Equal(toks, c.accepted) {
			t.Fatalf("temperature %v: tokens %v, accepted %v", temp, toks, c.accepted)
		}
		scored, err := m.LogProbs(newCache(t, m, 64), prompt(6, 9), toks, 101)
		if err != nil {
			t.Fatal(err)
		}
		for i, tok := range toks {
			if !c.ok[tok] {
				t.Fatalf("temperature %v: token %d not allowed", temp, tok)
			}
			if d := math.Abs(float64(lps[i] - scored.LogProbs[i])); d > 1e-4 {
				t.Errorf("token %d: log-prob %v, the model's %v", i, lps[i], scored.LogProbs[i])
			}
			if temp == 0 { // the best allowed token
				for _, alt := range scored.TopK[i] {
					if c.ok[alt.Token] {
						if alt.Token != tok {
							t.Errorf("greedy token %d is %d, the most likely allowed is %d", i, tok, alt.Token)
						}
						break
					}
				}
			}
		}
	}
}

// TestBehaviourLogProbs: each event carries, beside the model's own
// log-prob, the log-prob under the distribution the token was drawn from,
// checked against the model's whole distribution at each position (the
// tiny model's 101 tokens): at temperature 1 the model's own; under a
// grammar at temperature 1 the model's restricted to the allowed tokens
// and renormalised; greedy 0; a token the grammar alone allows is forced
// (log-prob 0).
func TestBehaviourLogProbs(t *testing.T) {
	m := tinyModel(t)
	s := startScheduler(t, Options{Model: m, Cache: newCache(t, m, 256)})
	p := prompt(6, 9)
	for _, tt := range []struct {
		name  string
		temp  float32
		allow map[int32]bool
	}{
		{"temperature 1", 1, nil},
		{"grammar", 1, map[int32]bool{3: true, 50: true, 99: true}},
		{"greedy", 0, nil},
		{"forced", 1, map[int32]bool{50: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := greedyReq(p, 10)
			req.Sampling.Temperature = tt.temp
			if tt.allow != nil {
				req.Constraint = &allowSet{ok: tt.allow}
			}
			ch, err := s.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			var evs []Event
			var toks []int32
			for ev := range ch {
				if ev.HasToken {
					evs, toks = append(evs, ev), append(toks, ev.Token)
				}
			}
			scored, err := m.LogProbs(newCache(t, m, 64), p, toks, 101)
			if err != nil {
				t.Fatal(err)
			}
			for i, ev := range evs {
				var want float64
				switch {
				case tt.temp == 0 || len(tt.allow) == 1:
				case tt.allow == nil:
					want = float64(scored.LogProbs[i])
				default:
					var z float64
					for _, alt := range scored.TopK[i] {
						if tt.allow[alt.Token] {
							z += math.Exp(float64(alt.LogProb))
						}
					}
					want = float64(scored.LogProbs[i]) - math.Log(z)
				}
				if d := math.Abs(float64(ev.SampleLogProb) - want); d > 1e-4 {
					t.Errorf("token %d (%d): sample log-prob %v, want %v", i, ev.Token, ev.SampleLogProb, want)
				}
				if d := math.Abs(float64(ev.LogProb - scored.LogProbs[i])); d > 1e-4 {
					t.Errorf("token %d: log-prob %v, the model's %v", i, ev.LogProb, scored.LogProbs[i])
				}
				if ev.Forced != (len(tt.allow) == 1) {
					t.Errorf("token %d: forced %v", i, ev.Forced)
				}
			}
		})
	}
}

// BenchmarkSampleConstrained: drawing one token from a 6144-token row
// (the bundled model's vocabulary) without a constraint, with one that
// allows every token, and with one that allows one token in a hundred.
func BenchmarkSampleConstrained(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	row := make([]float32, 6144)
	for i := range row {
		row[i] = float32(r.NormFloat64())
	}
	every := func(n int32) *allowSet {
		a := &allowSet{ok: map[int32]bool{}}
		for t := range int32(len(row)) {
			if t%n == 0 {
				a.ok[t] = true
			}
		}
		return a
	}
	for _, c := range []struct {
		name string
		c    Constraint
	}{{"none", nil}, {"most allowed", every(1)}, {"1 in 100 allowed", every(100)}} {
		b.Run(c.name, func(b *testing.B) {
			smp := sample.New(sample.Params{Temperature: 1})
			for range b.N {
				var err error
				if c.c == nil {
					_, err = smp.Sample(row)
				} else {
					_, err = sampleConstrained(smp, row, c.c)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
