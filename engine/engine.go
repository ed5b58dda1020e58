// Package engine assembles clawrl's model for every command, as vLLM's
// LLMEngine or llama.cpp's llama_context do: Open loads a checkpoint once,
// picks the compute backend of each devices group (config.yaml's
// devices:), and hands out what runs over it: the served model and its KV
// cache, the versions store that training publishes into, the serving
// scheduler, and on demand the actor group's view (the trainer and the
// teacher), the judge group's scheduler and the actor's scheduler for
// hinted rollouts. Serving, generate, the benches, pretrain and export get
// their models here; no other package constructs a backend.
//
// The CPU is the only backend today: a devices group with a thread budget
// gets a worker pool of its own and a view of the model over it
// (model.Model.View), sharing the weights; a group with budget 0 shares
// serving's pool and scheduler, serving first. The CUDA backend plugs in
// at newBackend and the group constructors.
//
// An Engine owns everything it builds: Close stops the schedulers and
// frees the views, caches and weights, in the reverse order of their
// construction.
package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/priority"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/tokenizer"
	"github.com/clawrl/clawrl/weights"
)

// Options are what Open needs beside the config.
type Options struct {
	// Model is the checkpoint: a Hugging Face directory or a GGUF file;
	// "" takes model.path, and failing that the bundled model (see
	// ModelDir).
	Model string
	// Log receives the engine's events (the model loaded, the groups).
	Log zerolog.Logger
	// Registry, if set, gets the engine's metrics: the schedulers'
	// (serving's and each group's) and the priority gate's.
	Registry prometheus.Registerer
}

// Engine is a loaded checkpoint with its backends, KV caches, versions and
// schedulers. Its methods may be called from several goroutines.
type Engine struct {
	cfg  *config.Config
	log  zerolog.Logger
	reg  prometheus.Registerer
	dir  string
	base string // the checkpoint's fingerprint (BaseFingerprint)

	model    *model.Model // on the CPU: serving's (unless on GPUs), the actor's, the versions'
	tok      *tokenizer.Tokenizer
	kvType   compute.DType
	cache    *model.KVCache // the CPU serving scheduler's; nil when serving runs on GPUs
	versions *weights.Store
	pool     *rollout.Pool // serving: the CPU scheduler, or one per GPU
	gate     *priority.Gate
	gpus     plan

	mu      sync.Mutex
	closers []func() // run in reverse by Close
	closed  bool

	build    sync.Mutex        // held while a group's pieces are made
	actor    *model.Model      // the actor group's model (lazily made)
	judgeGen rollout.Generator // the judge group's scheduler (lazily made)
	actorGen rollout.Generator // the actor group's scheduler (lazily made)
}

// Open loads the checkpoint that opts.Model or cfg names on the backend of
// the rollout group, makes its KV cache and versions store (the
// checkpoint's weights are the first version), and starts the serving
// scheduler. Close releases it all.
func Open(cfg *config.Config, opts Options) (*Engine, error) {
	if cfg == nil {
		cfg = Defaults()
	}
	dir, err := ModelDir(cfg, opts.Model, opts.Log)
	if err != nil {
		return nil, err
	}
	setServingThreads(cfg)
	if mb := int64(cfg.Model.KVCacheMB); mb > 0 {
		// The cache takes its memory as it fills: a budget past what the
		// machine has would start fine and die of out-of-memory later.
		if avail := memAvailable(); avail > 0 && mb<<20 > avail {
			return nil, fmt.Errorf("model.kv_cache_mb: %d MiB is more than the %d MiB of memory available; lower it (0 sizes it from the model)", mb, avail>>20)
		}
	}
	base, err := BaseFingerprint(dir)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, log: opts.Log, reg: opts.Registry, dir: dir, base: base}
	if err := e.open(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Engine) open() error {
	cfg, dir := e.cfg, e.dir
	gpus, err := planGPUs(cfg, drivers)
	if err != nil {
		return err
	}
	e.gpus = gpus
	tok, err := LoadTokenizer(dir)
	if err != nil {
		return err
	}
	if err := setChatTemplate(tok, cfg.Model.ChatTemplate); err != nil {
		return err
	}
	e.tok = tok
	start := time.Now()
	m, requantized, err := loadHostNoting(cfg, dir)
	if err != nil {
		return err
	}
	e.model = m
	e.onClose(func() { m.Close() })
	e.kvType = kvDType(cfg, m.Config)
	// The checkpoint's weights are the first version; versions published
	// later replace it for generations that start after them. Keep one
	// older version so that a teacher pass or a generation that just
	// started on it is not cut short.
	e.versions = weights.NewStore(weights.StoreOptions{Keep: 1})
	e.onClose(e.versions.Close)
	if _, err := e.versions.Publish(m.Weights(), 0, weights.Meta{Note: "base: " + dir}); err != nil {
		return err
	}
	rc := cfg.Rollout
	// Teacher, reference and KL passes run in rounds of the same size as
	// the prefill chunks, letting decode steps in between.
	m.SetScoreChunk(rc.StepTokens)
	e.gate = priority.New(cfg.Trainer.ShareUnderLoad)
	c := m.Config
	ev := e.log.Info().Str("model", dir).Str("arch", c.Architecture).
		Float64("params_m", float64(c.NumParams())/1e6).Int("context", c.MaxPositions).Str("kernels", Kernels()).
		Str("quantize", cfg.Model.Quantize).Int64("weights_mib", m.Weights().Bytes()>>20)
	if requantized != "" {
		ev = ev.Str("requantized", requantized)
	}
	if len(gpus.rollout) > 0 {
		// Serving on GPUs: the CPU model is the actor's and the versions'.
		reps, err := e.openReplicas(groupRollout, gpus.rollout, e.versions, false)
		if err != nil {
			return err
		}
		scheds := make([]*rollout.Scheduler, len(reps))
		for i, r := range reps {
			scheds[i] = r.sched
		}
		e.pool = rollout.NewPool(scheds...)
		ev = ev.Ints("gpus", gpus.rollout).Bool("default_split", gpus.auto).Str("trainer", m.Backend().Name())
	} else {
		budget := kvBudget(cfg.Model.KVCacheMB, c.KVBytesPerToken(e.kvType)*int64(c.MaxPositions), 4, 4, 1<<30, memAvailable())
		cache, err := m.NewKVCache(model.KVCacheOptions{Budget: budget, DType: e.kvType})
		if err != nil {
			return err
		}
		e.cache = cache
		e.onClose(cache.Close)
		sched, err := rollout.New(rollout.Options{
			Model: m, Cache: cache, Log: e.log, Versions: e.versions, Gate: e.gate,
			MaxBatch: rc.MaxBatch, QueueSize: rc.QueueSize, StepTokens: rc.StepTokens, NoPrefixCache: !rc.PrefixCache, BackgroundKV: rc.BackgroundKV,
			BackgroundPrefill: rc.BackgroundPrefill, BackgroundRows: rc.BackgroundRows,
		})
		if err != nil {
			return err
		}
		e.pool = rollout.NewPool(sched)
		e.onClose(sched.Start())
		ev = ev.Str("backend", m.Backend().Name()).Int("kv_blocks", cache.NumBlocks()).Stringer("kv_dtype", cache.DType()).
			Int64("kv_mib", budget>>20).Int64("kv_tokens", int64(cache.NumBlocks()*cache.BlockSize()))
	}
	if e.reg != nil {
		if err := registerAll(e.reg, e.pool.Collector(), e.gate.Collector()); err != nil {
			return err
		}
	}
	ev.Dur("load", time.Since(start)).Msg("model loaded")
	e.warnMergedAdapters(m)
	switch c := m.Config; {
	case c.CappedToWindow:
		e.log.Warn().Int("sliding_window", c.MaxPositions).Str("backend", m.Backend().Name()).
			Msg("the model attends over a sliding window shorter than its context, which this backend does not run; it attends over every earlier position, the same within the window, so the context is capped to the window")
	case c.SlidingWindow > 0 && c.WindowLayers != nil:
		n := 0
		for l := range c.NumLayers {
			if c.LayerWindow(l) > 0 {
				n++
			}
		}
		e.log.Info().Int("sliding_window", c.SlidingWindow).Int("windowed_layers", n).Int("layers", c.NumLayers).
			Int("context", c.MaxPositions).Msg("attention over a sliding window in some layers, over the whole context in the others")
	case c.SlidingWindow > 0:
		e.log.Info().Int("sliding_window", c.SlidingWindow).Int("context", c.MaxPositions).Msg("attention over a sliding window")
	}
	switch lr := m.Config.LongRope; {
	case lr != nil && lr.UseLong:
		e.log.Info().Int("context", m.Config.MaxPositions).Msg("LongRoPE: the long factors over the whole context (model.long_context)")
	case lr != nil && lr.MaxPositions > m.Config.MaxPositions:
		e.log.Warn().Int("model_context", lr.MaxPositions).Int("context", m.Config.MaxPositions).
			Msg("LongRoPE: the short factors, which apply within original_max_position_embeddings, so the context is capped to it; model.long_context: true runs the long factors over the whole context, as llama.cpp does with a longer context")
	}
	return nil
}

// warnMergedAdapters says, when the engine serves a checkpoint of LoRA
// adapters only trained over a quantized base, what loading it as a
// model did (OpenAdapted merges the adapted matrices in float32, exactly,
// at several times the memory and decode time of the quantized base the
// daemon that trained them serves them over) and what keeps the base
// quantized.
func (e *Engine) warnMergedAdapters(m *model.Model) {
	a, version := weights.AdaptersOf(e.dir) // loading verified the checkpoint
	if a == nil || a.Quantize == "" || a.Quantize == "none" {
		return
	}
	e.log.Warn().Str("checkpoint", e.dir).Str("base", a.Path).Str("base_quantize", a.Quantize).
		Int64("weights_mib", m.Weights().Bytes()>>20).
		Msgf("this checkpoint holds LoRA adapters over a quantized base, and they are served merged into float32 matrices, exactly but at several times the base's memory and decode time; to keep the base quantized, serve the base itself (--model %s) with the data directory that trained the adapters, which resumes them unmerged over it, or export the version as GGUF (clawrl export %d --format gguf --type q8_0)",
			a.Path, version)
}

// registerAll registers every collector or returns the first error.
func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("engine: metrics: %w", err)
		}
	}
	return nil
}

// onClose adds f to what Close runs (last added, first run).
func (e *Engine) onClose(f func()) {
	e.mu.Lock()
	e.closers = append(e.closers, f)
	e.mu.Unlock()
}

// isClosed reports whether Close has run.
func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// Close stops the schedulers and frees everything the engine built, in
// reverse order. Nothing made by the engine may be used afterwards.
func (e *Engine) Close() {
	e.build.Lock() // no group is half made
	defer e.build.Unlock()
	e.mu.Lock()
	closers := e.closers
	e.closers, e.closed = nil, true
	e.mu.Unlock()
	for _, f := range slices.Backward(closers) {
		f()
	}
}

// Dir is the checkpoint the engine loaded: a directory or a GGUF file.
func (e *Engine) Dir() string { return e.dir }

// BaseFiles are the files a checkpoint of this model carries beside its
// weights, so that `serve --model` and `generate --model` load it as they
// load the base: config.json and the tokenizer's files, read from a
// checkpoint directory or made from a GGUF file's metadata and tokenizer.
func (e *Engine) BaseFiles() (configJSON []byte, extra map[string][]byte, err error) {
	return baseFiles(e.dir, e.tok)
}

// Base identifies the checkpoint (BaseFingerprint): a training lineage
// belongs to one base.
func (e *Engine) Base() string { return e.base }

// Config is the configuration the engine was opened with.
func (e *Engine) Config() *config.Config { return e.cfg }

// Model is the model on the CPU: the served one unless serving runs on
// GPUs, the actor's unless it has a view of its own, and the one whose
// weight sets the versions store holds.
func (e *Engine) Model() *model.Model { return e.model }

// Tokenizer is the checkpoint's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// KVDType is the dtype of the engine's KV caches (model.kv_cache_dtype).
func (e *Engine) KVDType() compute.DType { return e.kvType }

// OnGPUs reports whether serving runs on GPUs.
func (e *Engine) OnGPUs() bool { return len(e.gpus.rollout) > 0 }

// Versions is the store of weight versions serving runs on: the
// checkpoint's first, then what training publishes.
func (e *Engine) Versions() *weights.Store { return e.versions }

// Scheduler is serving's scheduler: the CPU's, or those of the GPU
// replicas, which requests are spread over.
func (e *Engine) Scheduler() *rollout.Pool { return e.pool }

// Gate is taken by every serving step; training that yields to serving
// takes it a slice at a time (priority.Gate).
func (e *Engine) Gate() *priority.Gate { return e.gate }

// StopTokens are the ids that end a turn: the tokenizer's EOS, the model
// config's eos_token_id list, generation_config.json's (Llama 3 Instruct
// and Phi-3 list their end-of-turn tokens there only) and the tokenizer's
// end-of-turn tokens of common chat formats (tokenizer.TurnEnds).
func (e *Engine) StopTokens() []int32 {
	var ids []int32
	add := func(id int32) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if id, ok := e.tok.EOS(); ok {
		add(id)
	}
	for _, id := range e.model.Config.EOSTokenIDs {
		add(int32(id))
	}
	for _, id := range generationEOS(e.dir) {
		if id >= 0 && id < e.model.Config.VocabSize {
			add(int32(id))
		}
	}
	for _, id := range e.tok.TurnEnds() {
		add(id)
	}
	return ids
}

// generationEOS reads eos_token_id (one id or a list) from dir's
// generation_config.json; nothing when there is none or it does not parse
// (the model's config already names an EOS).
func generationEOS(dir string) []int {
	raw, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if err != nil {
		return nil
	}
	var g struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if json.Unmarshal(raw, &g) != nil || len(g.EOS) == 0 {
		return nil
	}
	var one int
	if json.Unmarshal(g.EOS, &one) == nil {
		return []int{one}
	}
	var list []int
	json.Unmarshal(g.EOS, &list)
	return list
}

// errClosed is returned by the group constructors after Close.
var errClosed = errors.New("engine: closed")
