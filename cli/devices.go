package cli

import (
	"fmt"

	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cpu/kernels"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/weights"
)

// The devices groups on the CPU. Serving (devices.rollout) runs on the
// kernels' default pool, whose budget devices.rollout.threads (or
// model.threads) sets. A group with a thread budget of its own gets a worker
// pool of that many threads and a view of the model over it
// (model.Model.View): the actor's view runs the trainer, the teacher's
// scoring passes and a scheduler for the teacher's hinted rollouts; the
// judge's view a scheduler of its own on the frozen checkpoint weights. A
// group with budget 0 shares serving's pool and scheduler, serving first
// (trainer.yield_to_serving).

// groupView returns a view of e.model whose ops run on a new pool of
// threads, and a func that frees both (after everything using the view
// has stopped).
func (e *engine) groupView(group string, threads int) (*model.Model, func(), error) {
	cb, ok := e.model.Backend().(*cpu.Backend)
	if !ok {
		return nil, nil, fmt.Errorf("devices.%s.threads: the backend %s has no CPU worker pools; leave it 0", group, e.model.Backend().Name())
	}
	pool := kernels.NewPool(threads)
	v := e.model.View(cb.WithPool(pool))
	return v, func() {
		v.Close()
		pool.Close()
	}, nil
}

// actorModel is the model the actor group computes on: a view on a pool
// of devices.actor.threads threads, or with 0 the served model itself. The
// returned func frees the view (after everything using it has stopped).
func (e *engine) actorModel(a *app) (*model.Model, func(), error) {
	if t := a.cfg.Devices.Actor.Threads; t > 0 {
		return e.groupView("actor", t)
	}
	return e.model, func() {}, nil
}

// judgeScheduler is the scheduler the local judge generates on: with
// devices.judge.threads, a scheduler of the judge group's own, on a view of
// the model over threads of its own, running only the checkpoint's frozen
// weights (no versions store), with a KV cache for seqs sequences; with 0,
// the serving scheduler (the judge's work is background work there). The
// returned func stops the group's scheduler and frees what it holds.
func (e *engine) judgeScheduler(a *app, seqs int) (*rollout.Scheduler, func(), error) {
	threads := a.cfg.Devices.Judge.Threads
	if threads <= 0 {
		return e.sched, func() {}, nil
	}
	v, closeView, err := e.groupView("judge", threads)
	if err != nil {
		return nil, nil, err
	}
	s, stop, err := e.groupScheduler(a, "judge", v, nil, e.groupKVBudget(seqs))
	if err != nil {
		closeView()
		return nil, nil, err
	}
	return s, func() {
		stop()
		closeView()
	}, nil
}

// groupScheduler starts a scheduler of a devices group on v, its view of
// the model, with a KV cache of its own of kvBudget bytes: every request
// is background work, with the whole batch and cache to itself. versions
// nil runs only the checkpoint's weights; else generations run on the
// current version as serving's do (Request.Frozen picks the checkpoint's).
// The returned func stops it and frees its cache.
func (e *engine) groupScheduler(a *app, group string, v *model.Model, versions *weights.Store, kvBudget int64) (*rollout.Scheduler, func(), error) {
	cache, err := v.NewKVCache(model.KVCacheOptions{Budget: kvBudget, DType: e.cache.DType()})
	if err != nil {
		return nil, nil, fmt.Errorf("devices.%s: the group's KV cache: %w", group, err)
	}
	rc := a.cfg.Rollout
	maxBatch := rc.MaxBatch
	if maxBatch <= 0 {
		maxBatch = 32 // the scheduler's default
	}
	s, err := rollout.New(rollout.Options{
		Model: v, Cache: cache, Log: a.log, Versions: versions,
		MaxBatch: maxBatch, QueueSize: rc.QueueSize, StepTokens: rc.StepTokens, NoPrefixCache: !rc.PrefixCache,
		MaxBackground: maxBatch, BackgroundKV: 1, BackgroundPrefill: -1, BackgroundRows: -1,
	})
	if err != nil {
		cache.Close()
		return nil, nil, err
	}
	stop := s.Start()
	return s, func() {
		stop()
		cache.Close()
	}, nil
}

// groupKVBudget sizes a group scheduler's KV cache: room for seqs full
// contexts of the model, at most an eighth of the memory available, at
// least 64 MiB.
func (e *engine) groupKVBudget(seqs int) int64 {
	c := e.model.Config
	return kvBudget(0, c.KVBytesPerToken(e.cache.DType())*int64(c.MaxPositions), max(1, seqs), 8, 64<<20, memAvailable())
}

// groupThreads says how the kernel threads are split between the groups,
// as the startup log reports it: "serving 2, judge 1, actor 1", with
// "shared" for a group on serving's pool.
func groupThreads(judge, actor int) string {
	g := func(n int) string {
		if n > 0 {
			return fmt.Sprint(n)
		}
		return "shared"
	}
	return fmt.Sprintf("serving %d, judge %s, actor %s", kernels.Threads(), g(judge), g(actor))
}

// trainingYields reports whether training and the teacher's scoring give
// way to serving (priority.Gate): trainer.yield_to_serving, unless the
// actor and rollout groups both have thread budgets of their own; then
// they run side by side on disjoint pools, and waiting would only idle
// the actor's threads.
func (a *app) trainingYields() bool {
	d := a.cfg.Devices
	return a.cfg.Trainer.YieldToServing && !(d.Actor.Threads > 0 && d.Rollout.Threads > 0)
}

// setServingThreads sets the default pool's budget, serving's: model.threads
// or devices.rollout.threads (validation keeps them from disagreeing); 0
// for both keeps one thread per core.
func (a *app) setServingThreads() {
	if t := max(a.cfg.Model.Threads, a.cfg.Devices.Rollout.Threads); t > 0 {
		kernels.SetThreads(t)
	}
}
