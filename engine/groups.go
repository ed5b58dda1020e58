package engine

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

// groupView returns a view of the served model whose ops run on a new
// pool of threads; Close frees both (after everything using the view has
// stopped, since it runs later than what was built on it).
func (e *Engine) groupView(g group, threads int) (*model.Model, error) {
	cb, ok := e.model.Backend().(*cpu.Backend)
	if !ok {
		return nil, fmt.Errorf("devices.%s.threads: the backend %s has no CPU worker pools; leave it 0", g, e.model.Backend().Name())
	}
	pool := kernels.NewPool(threads)
	v := e.model.View(cb.WithPool(pool))
	e.onClose(func() {
		v.Close()
		pool.Close()
	})
	return v, nil
}

// Actor is the model the actor group computes on (the trainer, the
// teacher's scoring passes): a view on a pool of devices.actor.threads
// threads, or with 0 the served model itself. It is made once.
func (e *Engine) Actor() (*model.Model, error) {
	e.build.Lock()
	defer e.build.Unlock()
	return e.actorLocked()
}

func (e *Engine) actorLocked() (*model.Model, error) {
	if e.isClosed() {
		return nil, errClosed
	}
	if e.actor != nil {
		return e.actor, nil
	}
	if t := e.cfg.Devices.Actor.Threads; t > 0 {
		v, err := e.groupView(groupActor, t)
		if err != nil {
			return nil, err
		}
		e.actor = v
	} else {
		e.actor = e.model
	}
	return e.actor, nil
}

// JudgeScheduler is the scheduler the local judge generates on: with
// devices.judge.gpus, one replica per GPU running only the checkpoint's
// frozen weights; with devices.judge.threads, a scheduler of the judge
// group's own, on a view of the model over threads of its own, running
// only the frozen weights (no versions), with a KV cache for seqs
// sequences; else serving's scheduler (the judge's work is background
// work there). It is made once (seqs of the first call).
func (e *Engine) JudgeScheduler(seqs int) (rollout.Generator, error) {
	e.build.Lock()
	defer e.build.Unlock()
	if e.isClosed() {
		return nil, errClosed
	}
	if e.judgeGen != nil {
		return e.judgeGen, nil
	}
	if gpus := e.gpus.judge; len(gpus) > 0 {
		reps, err := e.openReplicas(groupJudge, gpus, nil, true)
		if err != nil {
			return nil, err
		}
		scheds := make([]*rollout.Scheduler, len(reps))
		for i, r := range reps {
			scheds[i] = r.sched
		}
		p := rollout.NewPool(scheds...)
		if e.reg != nil {
			if err := registerAll(e.reg, p.GroupCollector(string(groupJudge))); err != nil {
				return nil, err
			}
		}
		e.judgeGen = p
		return p, nil
	}
	threads := e.cfg.Devices.Judge.Threads
	if threads <= 0 {
		e.judgeGen = e.pool
		return e.pool, nil
	}
	v, err := e.groupView(groupJudge, threads)
	if err != nil {
		return nil, err
	}
	s, err := e.groupScheduler(groupJudge, v, nil, e.groupKVBudget(seqs))
	if err != nil {
		return nil, err
	}
	e.judgeGen = s
	return s, nil
}

// ActorScheduler is the scheduler the teacher's hinted rollouts generate
// on: with an actor group of its own (devices.actor.threads), a scheduler
// on the actor's view over the versions store (Request.Frozen picks the
// checkpoint's weights), with a KV cache for seqs sequences; else the
// serving scheduler, where they run below every user request. It is made
// once.
func (e *Engine) ActorScheduler(seqs int) (rollout.Generator, error) {
	e.build.Lock()
	defer e.build.Unlock()
	actor, err := e.actorLocked()
	if err != nil {
		return nil, err
	}
	if e.actorGen != nil {
		return e.actorGen, nil
	}
	if actor == e.model {
		e.actorGen = e.pool
		return e.pool, nil
	}
	s, err := e.groupScheduler(groupActor, actor, e.versions, e.groupKVBudget(seqs))
	if err != nil {
		return nil, err
	}
	e.actorGen = s
	return s, nil
}

// groupScheduler starts a scheduler of a devices group on v, its view of
// the model, with a KV cache of its own of kvBudget bytes: every request
// is background work, with the whole batch and cache to itself. versions
// nil runs only the checkpoint's weights; else generations run on the
// current version as serving's do (Request.Frozen picks the checkpoint's).
// Close stops it and frees its cache.
func (e *Engine) groupScheduler(g group, v *model.Model, versions *weights.Store, kvBudget int64) (*rollout.Scheduler, error) {
	cache, err := v.NewKVCache(model.KVCacheOptions{Budget: kvBudget, DType: e.kvType})
	if err != nil {
		return nil, fmt.Errorf("devices.%s: the group's KV cache: %w", g, err)
	}
	e.onClose(cache.Close)
	rc := e.cfg.Rollout
	maxBatch := rc.MaxBatch
	if maxBatch <= 0 {
		maxBatch = 32 // the scheduler's default
	}
	s, err := rollout.New(rollout.Options{
		Model: v, Cache: cache, Log: e.log, Versions: versions,
		MaxBatch: maxBatch, QueueSize: rc.QueueSize, StepTokens: rc.StepTokens, NoPrefixCache: !rc.PrefixCache,
		MaxBackground: maxBatch, BackgroundKV: 1, BackgroundPrefill: -1, BackgroundRows: -1,
	})
	if err != nil {
		return nil, err
	}
	e.onClose(s.Start())
	if e.reg != nil {
		if err := registerAll(e.reg, s.GroupCollector(string(g))); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// groupKVBudget sizes a group scheduler's KV cache: room for seqs full
// contexts of the model, at most an eighth of the memory available, at
// least 64 MiB.
func (e *Engine) groupKVBudget(seqs int) int64 {
	c := e.model.Config
	return kvBudget(0, c.KVBytesPerToken(e.kvType)*int64(c.MaxPositions), max(1, seqs), 8, 64<<20, memAvailable())
}

// TeacherCache makes a KV cache on the actor's model for the teacher's
// scoring passes: mb MiB, or with 0 room for one full context (at most an
// eighth of the memory available, at least 256 MiB). Close frees it.
func (e *Engine) TeacherCache(mb int) (*model.KVCache, error) {
	actor, err := e.Actor()
	if err != nil {
		return nil, err
	}
	c := e.model.Config
	budget := kvBudget(mb, c.KVBytesPerToken(e.kvType)*int64(c.MaxPositions), 1, 8, 256<<20, memAvailable())
	cache, err := actor.NewKVCache(model.KVCacheOptions{Budget: budget, DType: e.kvType})
	if err != nil {
		return nil, err
	}
	e.onClose(cache.Close)
	return cache, nil
}

// GroupThreads says how the kernel threads are split between the groups,
// as the startup log reports it: "serving 2, judge 1, actor 1", with
// "shared" for a group on serving's pool.
func (e *Engine) GroupThreads() string {
	g := func(n int) string {
		if n > 0 {
			return fmt.Sprint(n)
		}
		return "shared"
	}
	d := e.cfg.Devices
	serving, judge := fmt.Sprint(kernels.Threads()), g(d.Judge.Threads)
	if e.OnGPUs() {
		serving = fmt.Sprintf("GPUs %v", e.gpus.rollout)
	}
	if len(e.gpus.judge) > 0 {
		judge = fmt.Sprintf("GPUs %v", e.gpus.judge)
	}
	return fmt.Sprintf("serving %s, judge %s, actor %s", serving, judge, g(d.Actor.Threads))
}

// TrainingYields reports whether training and the teacher's scoring give
// way to serving (priority.Gate): trainer.yield_to_serving, unless the
// actor and rollout groups both have thread budgets of their own; then
// they run side by side on disjoint pools, and waiting would only idle
// the actor's threads.
func (e *Engine) TrainingYields() bool {
	d := e.cfg.Devices
	return e.cfg.Trainer.YieldToServing && !e.OnGPUs() && !(d.Actor.Threads > 0 && d.Rollout.Threads > 0)
}
