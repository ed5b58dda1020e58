package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/cuda"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/weights"
)

// GPUs. A devices group that lists GPUs (or, with no list anywhere, the
// default split of the GPUs the driver reports; config.DefaultGPUSplit)
// runs on one replica per GPU: a backend of its own (context, stream),
// the model loaded onto it, a KV cache in its memory and a scheduler,
// whose goroutine owns the device. Requests spread over the replicas of
// a group (rollout.Pool). The trainer stays on the CPU (the GPU trainer
// is not built yet): the engine loads the checkpoint on the CPU too, as
// the actor's model and the source of versions, and each serving replica
// mirrors the versions store (mirror), copying each new version onto its
// device beside the one it serves and swapping between steps, so serving
// never pauses for an update.

// accelerator is a GPU's backend as the engine uses it.
type accelerator interface {
	compute.Backend
	// MemInfo is the device's free and total memory in bytes.
	MemInfo() (free, total uint64, err error)
	Close() error
}

// gpuDriver finds and opens GPUs: the CUDA driver, or a stand-in in
// tests.
type gpuDriver interface {
	// Count is how many GPUs there are; an error wrapping cuda.ErrNoDriver
	// means no driver at all.
	Count() (int, error)
	Open(index int) (accelerator, error)
}

// cudaDriver is the driver the binary uses.
type cudaDriver struct{}

func (cudaDriver) Count() (int, error) {
	ds, err := cuda.Devices()
	return len(ds), err
}

func (cudaDriver) Open(i int) (accelerator, error) {
	b, err := cuda.Open(i)
	if err != nil {
		return nil, err
	}
	return cudaBackend{b}, nil
}

// cudaBackend gives cuda.Backend the accelerator's MemInfo.
type cudaBackend struct{ *cuda.Backend }

func (c cudaBackend) MemInfo() (free, total uint64, err error) { return c.Device().MemInfo() }

// drivers is the GPU driver; tests replace it.
var drivers gpuDriver = cudaDriver{}

// plan is which GPUs the rollout and judge groups run on.
type plan struct {
	rollout, judge []int
	auto           bool // the default split of the GPUs found (no list in the config)
}

// planGPUs decides the groups' GPUs: the lists of config.yaml, checked
// against the driver; with none anywhere, the default split of the GPUs
// the driver reports (none without a driver: the CPU). Training has no GPU
// backend yet: devices.actor.gpus is refused, and in the default split
// the actor's share serves (rollout) until it has.
//
// A Q8_0 KV cache (model.kv_cache_dtype: q8_0) is built for the CPU
// backend only: a plan with GPUs is refused with it, whether the GPUs
// were listed or found.
func planGPUs(cfg *config.Config, drv gpuDriver) (plan, error) {
	p, err := planGroups(cfg, drv)
	if err != nil || cfg.Model.KVCacheDType != "q8_0" || len(p.rollout)+len(p.judge) == 0 {
		return p, err
	}
	where := fmt.Sprintf("devices.rollout.gpus %v, devices.judge.gpus %v", p.rollout, p.judge)
	if p.auto {
		where = fmt.Sprintf("the GPUs found (rollout %v, judge %v; no devices lists in the config)", p.rollout, p.judge)
	}
	return plan{}, fmt.Errorf("model.kv_cache_dtype: q8_0: a Q8_0 KV cache is built for the CPU backend only, not for the CUDA backend that serves on %s; "+
		"set model.kv_cache_dtype: bf16 (or auto) to serve on the GPUs", where)
}

// planGroups is planGPUs without the check of the cache's dtype.
func planGroups(cfg *config.Config, drv gpuDriver) (plan, error) {
	d := cfg.Devices
	if len(d.Actor.GPUs) > 0 {
		return plan{}, fmt.Errorf("devices.actor.gpus: %v: training on GPUs is not built yet (the trainer runs on the CPU, devices.actor.threads); "+
			"leave devices.actor.gpus empty and give the GPUs to devices.rollout and devices.judge", d.Actor.GPUs)
	}
	explicit := len(d.Rollout.GPUs) > 0 || len(d.Judge.GPUs) > 0
	n, err := drv.Count()
	if err != nil {
		if !explicit && errors.Is(err, cuda.ErrNoDriver) {
			return plan{}, nil // a machine without GPUs: the CPU, as configured
		}
		var which []int
		key := "devices.rollout.gpus"
		if len(d.Rollout.GPUs) > 0 {
			which = d.Rollout.GPUs
		} else {
			key, which = "devices.judge.gpus", d.Judge.GPUs
		}
		if !explicit {
			return plan{}, fmt.Errorf("finding GPUs: %w", err)
		}
		return plan{}, fmt.Errorf("%s: %v: %w", key, which, err)
	}
	if !explicit {
		if n == 0 {
			return plan{}, nil
		}
		actor, rollout, judge := config.DefaultGPUSplit(n)
		p := plan{rollout: sortedUnion(actor, rollout), judge: judge, auto: true}
		if !slices.ContainsFunc(p.judge, func(i int) bool { return !slices.Contains(p.rollout, i) }) {
			p.judge = nil // on serving's GPUs: it shares serving's replicas
		}
		return p, nil
	}
	for _, g := range []struct {
		key  string
		gpus []int
	}{{"devices.rollout.gpus", d.Rollout.GPUs}, {"devices.judge.gpus", d.Judge.GPUs}} {
		for _, i := range g.gpus {
			if i >= n {
				return plan{}, fmt.Errorf("%s: GPU %d is not there: the driver reports %d GPU(s), numbered from 0", g.key, i, n)
			}
		}
	}
	return plan{rollout: d.Rollout.GPUs, judge: d.Judge.GPUs}, nil
}

// sortedUnion is a ∪ b in increasing order.
func sortedUnion(a, b []int) []int {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// replica is one GPU's copy of the model with its cache and scheduler.
type replica struct {
	gpu      int
	b        accelerator
	m        *model.Model
	cache    *model.KVCache
	versions *weights.Store // mirrors the engine's; nil for a frozen (judge) replica
	sched    *rollout.Scheduler
}

// openReplicas opens group g on gpus: one replica per GPU, each with its
// KV cache (kvMB MiB, or what the device has free after the weights and
// room for a second copy of them for version swaps) and a scheduler;
// with src, each mirrors src's versions, else it runs the checkpoint's
// frozen weights only. Close frees them.
func (e *Engine) openReplicas(g group, gpus []int, src *weights.Store, background bool) ([]*replica, error) {
	var reps []*replica
	for _, i := range gpus {
		r, err := e.openReplica(g, i, src, background)
		if err != nil {
			return nil, err
		}
		reps = append(reps, r)
	}
	return reps, nil
}

func (e *Engine) openReplica(g group, gpu int, src *weights.Store, background bool) (*replica, error) {
	start := time.Now()
	b, err := drivers.Open(gpu)
	if err != nil {
		return nil, fmt.Errorf("devices.%s.gpus: GPU %d: %w", g, gpu, err)
	}
	e.onClose(func() { b.Close() })
	m, err := loadQuantized(b, e.dir, 0, e.cfg)
	if err != nil {
		return nil, fmt.Errorf("devices.%s.gpus: GPU %d: %w", g, gpu, err)
	}
	e.onClose(func() { m.Close() })
	r := &replica{gpu: gpu, b: b, m: m}
	dt := kvDType(e.cfg, m.Config)
	free, total, err := b.MemInfo()
	if err != nil {
		return nil, fmt.Errorf("devices.%s.gpus: GPU %d: %w", g, gpu, err)
	}
	budget := int64(e.cfg.Model.KVCacheMB) << 20
	if budget == 0 {
		// What is free after the weights, less a second copy of them
		// (a version being copied in while the current one serves) and a
		// tenth for the kernels' scratch, capped at 16 full contexts.
		wb := m.Weights().Bytes()
		if src == nil {
			wb = 0 // a frozen replica never swaps
		}
		budget = min(int64(free)-wb-int64(total)/10, m.Config.KVBytesPerToken(dt)*int64(m.Config.MaxPositions)*16)
	}
	if budget < m.Config.KVBytesPerToken(dt)*1024 {
		return nil, fmt.Errorf("devices.%s.gpus: GPU %d: %d MiB free after the weights leaves no room for a KV cache (model.kv_cache_mb)", g, gpu, free>>20)
	}
	r.cache, err = m.NewKVCache(model.KVCacheOptions{Budget: budget, DType: dt})
	if err != nil {
		return nil, fmt.Errorf("devices.%s.gpus: GPU %d: %w", g, gpu, err)
	}
	e.onClose(r.cache.Close)
	if src != nil {
		r.versions = weights.NewStore(weights.StoreOptions{Keep: 1})
		e.onClose(r.versions.Close)
		if _, _, err := r.mirrorOnce(src); err != nil {
			return nil, fmt.Errorf("devices.%s.gpus: GPU %d: %w", g, gpu, err)
		}
	}
	rc := e.cfg.Rollout
	opts := rollout.Options{
		Model: m, Cache: r.cache, Log: e.log, Versions: r.versions,
		MaxBatch: rc.MaxBatch, QueueSize: rc.QueueSize, StepTokens: rc.StepTokens, NoPrefixCache: !rc.PrefixCache,
		BackgroundKV: rc.BackgroundKV, BackgroundPrefill: rc.BackgroundPrefill, BackgroundRows: rc.BackgroundRows,
	}
	if background { // a group of its own: everything is background work there
		opts.MaxBackground, opts.BackgroundKV, opts.BackgroundPrefill, opts.BackgroundRows = max(rc.MaxBatch, 32), 1, -1, -1
	}
	if r.sched, err = rollout.New(opts); err != nil {
		return nil, err
	}
	e.onClose(r.sched.Start())
	if src != nil {
		stop, done := make(chan struct{}), make(chan struct{})
		go r.mirror(src, stop, done, e)
		e.onClose(func() { close(stop); <-done })
	}
	e.log.Info().Str("group", string(g)).Int("gpu", gpu).Str("backend", b.Name()).Int64("weights_mib", m.Weights().Bytes()>>20).Int("kv_blocks", r.cache.NumBlocks()).
		Stringer("kv_dtype", r.cache.DType()).Int64("kv_mib", budget>>20).Uint64("free_mib", free>>20).Dur("load", time.Since(start)).
		Msg("replica ready")
	return r, nil
}

// mirror keeps the replica's versions equal to src's until stop: at every
// change of src's current version the replica copies it onto its device
// (Model.Import: only what differs from the checkpoint) and publishes it
// under the same number, where its scheduler picks it up between steps.
// A failed copy is logged and retried at the next change; the replica
// keeps serving the version it has.
func (r *replica) mirror(src *weights.Store, stop <-chan struct{}, done chan<- struct{}, e *Engine) {
	defer close(done)
	for {
		changed := src.Changed()
		switch n, took, err := r.mirrorOnce(src); {
		case err != nil && !errors.Is(err, weights.ErrNoVersion):
			e.log.Error().Err(err).Int("gpu", r.gpu).Msg("copying a new version to the GPU failed; the replica keeps serving the version it has")
		case took > 0:
			e.log.Debug().Int("gpu", r.gpu).Uint64("version", n).Dur("copy", took).Msg("version live on the GPU")
		}
		select {
		case <-changed:
		case <-stop:
			return
		}
	}
}

// mirrorOnce copies src's current version onto the replica, unless it has
// it already, and says which version it copied and how long that took (0
// when there was nothing to copy).
func (r *replica) mirrorOnce(src *weights.Store) (uint64, time.Duration, error) {
	v, err := src.Acquire()
	if err != nil {
		return 0, 0, err
	}
	defer src.Release(v)
	if r.versions.Current() == v.Number() {
		return v.Number(), 0, nil
	}
	start := time.Now()
	w, err := r.m.Import(v.Weights(), model.ImportOptions{RoundToBase: true})
	if err != nil {
		return 0, 0, err
	}
	if _, err := r.versions.PublishNumbered(w, v.Number(), v.Parent(), v.Meta()); err != nil {
		w.Free()
		return 0, 0, err
	}
	return v.Number(), time.Since(start), nil
}
