// Package loop connects the stages that follow serving, through the
// durable store: turns that the session tracker wrote and completed are
// taken out of the store (those with feedback first, then newest first)
// and scored by the reward stage; each result is written back as a
// sample; queued samples are trained in batches (those a thumb decided
// first), each applied step recorded in the store with the samples it
// trained, in one transaction, before the new weight version is published
// and (every CheckpointEvery steps, and at shutdown) checkpointed.
//
// A thumb does not wait for the judge: a turn whose reward a thumb
// decides and that carries nothing for a hint is scored as soon as it is
// read. The judge reads only turns whose samples can still train: not a
// turn already more than max_staleness steps behind the trainer, nor one
// while the samples queued ahead of it fill the steps it has left.
//
// Serving never waits on any of this, and nothing is dropped because a
// stage is busy: a turn that the scorer cannot take now stays ready in the
// store and is offered again later; a crash loses only what the store
// says it lost (steps after the last checkpoint, whose samples the next
// start queues again).
package loop

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/ratelog"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/store"
	"github.com/clawrl/clawrl/trainer"
	"github.com/clawrl/clawrl/weights"
)

// Options wire the loop.
type Options struct {
	// DB is the durable store: the queue of turns and samples.
	DB *store.DB
	// Scorer scores turns; the loop runs it (Scorer.Run) and owns it.
	Scorer *reward.Scorer
	// Trainer steps on batches of samples; nil scores turns without
	// training (the samples stay queued in the store).
	Trainer *trainer.Trainer
	// Versions receives the published versions.
	Versions *weights.Store
	// BatchSize is how many trainable samples make one optimizer step.
	BatchSize int
	// MaxWait trains a partial batch when its oldest sample has waited
	// this long (0: wait for a full batch).
	MaxWait time.Duration
	// FeedbackWait trains a partial batch sooner: once a sample that a
	// thumb decided (source feedback) has waited this long (0: only
	// MaxWait). A user who thumbs one answer sees a new version within
	// seconds; the wait lets judged samples arriving beside it join.
	FeedbackWait time.Duration
	// TemplateVars are the chat-template variables the server rendered
	// prompts with; the teacher context is rendered with the same.
	TemplateVars map[string]any
	// Checkpoint, if its Root is set, saves a checkpoint every
	// CheckpointEvery published versions and when Run ends.
	Checkpoint      trainer.CheckpointOptions
	CheckpointEvery int
	// CheckpointShare bounds the share of the trainer's time that the
	// checkpoints of CheckpointEvery take: after one that took d, the
	// next is written no sooner than d·(1/share − 1) later, at the first
	// step or idle moment after that (0 or ≥ 1: every CheckpointEvery
	// steps, whatever they cost). A checkpoint holding a 0.6B model's
	// merged weights (2.4 GB) took 25 s: every step would have waited for
	// one. Checkpoints of the guard's good versions and the one at
	// shutdown are written whatever the share.
	CheckpointShare float64
	// Poll is how often the store is looked at without a signal (default
	// 1s).
	Poll time.Duration
	// OnPublish, if set, is called with every version the loop publishes.
	OnPublish func(v *weights.Version)
	// Guard configures automatic rollback (see GuardOptions); with a
	// trainer, non-finite steps always trip it.
	Guard GuardOptions
	// Replay, if set, adds ReplaySamples samples to every step beside the
	// queued ones (package replay): examples of what the model already
	// does, against forgetting. They are not in the store; a step records
	// only the samples it took from there.
	Replay        Replayer
	ReplaySamples int
	// Registry receives the loop's metrics (nil: none registered).
	Registry prometheus.Registerer
	Log      zerolog.Logger
}

// Replayer supplies replay samples stamped with a version (*replay.Source).
type Replayer interface {
	Samples(n int, version uint64) ([]trainer.Sample, error)
}

// Loop is the running pipeline. Create it with New and run it with Run.
type Loop struct {
	opts Options
	met  metrics
	warn *ratelog.Limiter

	mu           sync.Mutex
	last         trainer.Metrics
	inflight     map[string]inflight // by sample id
	checkpointed uint64              // version of the newest checkpoint written

	// Owned by the training goroutine (and Run after it ends): when the
	// last checkpoint ended and how long it took, and whether a periodic
	// one is owed (CheckpointShare).
	ckptEnd  time.Time
	ckptTook time.Duration
	ckptOwed bool

	guard         *guard        // owned by the training goroutine (nil without a trainer)
	guardGood     atomic.Uint64 // the guard's last good version, for Guard
	guardBaseline atomic.Uint64 // float64 bits of its starting skill score

	pending  map[string]bool // turns feedback made ready, not yet taken; true: it waits for the judge (the feed goroutine's)
	heldAt   uint64          // trainGen when fill last held a turn back (the feed goroutine's)
	trainGen atomic.Uint64   // counts training events that can make held-back turns trainable

	samples  chan struct{}    // pinged when a sample was queued
	rollback chan rollbackReq // served by the training goroutine, between steps
}

type rollbackReq struct {
	c     *weights.Checkpoint
	reply chan rollbackReply
}

type rollbackReply struct {
	version uint64
	err     error
}

type inflight struct {
	turnID string
	gen    int
}

type metrics struct {
	submitted prometheus.Counter
	scored    *prometheus.CounterVec
	steps     *prometheus.CounterVec
	loss      prometheus.Gauge
	published prometheus.Counter
	stale     prometheus.Counter
	unscored  prometheus.Counter
	replayed  prometheus.Counter
	inflight  prometheus.GaugeFunc
	step      *prometheus.GaugeVec     // the last applied step's statistics
	staleness *prometheus.HistogramVec // versions between generation and training
}

// New checks the options.
func New(opts Options) (*Loop, error) {
	if opts.DB == nil || opts.Scorer == nil || opts.Versions == nil {
		return nil, errors.New("loop: DB, Scorer and Versions are required")
	}
	if opts.BatchSize < 1 {
		return nil, fmt.Errorf("loop: batch size %d must be >= 1", opts.BatchSize)
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	l := &Loop{opts: opts, inflight: map[string]inflight{}, pending: map[string]bool{}, heldAt: math.MaxUint64,
		samples: make(chan struct{}, 1), rollback: make(chan rollbackReq),
		warn: ratelog.New(opts.Log, 10*time.Second)}
	l.met = metrics{
		submitted: prometheus.NewCounter(prometheus.CounterOpts{Name: "clawrl_loop_turns_submitted_total",
			Help: "Turns taken from the store and submitted to the scorer."}),
		scored: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "clawrl_loop_scored_total",
			Help: "Scored turns, by sample kind."}, []string{"kind"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "clawrl_loop_train_steps_total",
			Help: "Trainer steps, by outcome (applied, skipped, empty, error)."}, []string{"outcome"}),
		loss: prometheus.NewGauge(prometheus.GaugeOpts{Name: "clawrl_loop_loss",
			Help: "Loss of the last applied training step."}),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "clawrl_loop_versions_published_total",
			Help: "Weight versions published by training."}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{Name: "clawrl_loop_samples_stale_total",
			Help: "Queued samples dropped because their generating version was more than max_staleness optimizer steps of the lineage behind."}),
		unscored: prometheus.NewCounter(prometheus.CounterOpts{Name: "clawrl_loop_turns_unscored_total",
			Help: "Ready turns not given to the judge because their version was already more than max_staleness optimizer steps behind (stored as samples dropped stale_unscored)."}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{Name: "clawrl_loop_replay_samples_total",
			Help: "Replay samples (trainer.replay) added to training steps."}),
		step: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "clawrl_train_step",
			Help: "The last applied training step: clip_fraction (updates after the first, trainer.ppo_epochs > 1), importance_weight (mean truncated behaviour-to-proximal weight), kl (to the reference, at the step's start), step_kl (from the step's start to its result: the trust region's), trust_scale (share of the update kept), entropy, grad_norm, lr, advantage, baseline (the reward baseline, trainer.reward_baseline_window), samples, tokens."},
			[]string{"stat"}),
		staleness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "clawrl_train_sample_staleness_versions",
			Help: "Optimizer steps of the lineage between the version that generated a trained sample and the trainer's (a rollback adds none).", Buckets: []float64{0, 1, 2, 3, 4, 6, 8, 16}}, nil),
		inflight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "clawrl_loop_scoring_inflight",
			Help: "Turns submitted to the scorer and not yet scored."}, func() float64 {
			l.mu.Lock()
			defer l.mu.Unlock()
			return float64(len(l.inflight))
		}),
	}
	l.guardBaseline.Store(math.Float64bits(math.NaN()))
	cs := []prometheus.Collector{l.met.submitted, l.met.scored, l.met.steps, l.met.loss,
		l.met.published, l.met.stale, l.met.unscored, l.met.replayed, l.met.inflight, l.met.step, l.met.staleness}
	if opts.Trainer != nil {
		l.guard = newGuard(opts.Guard)
		cs = append(cs, l.guard.collectors()...)
	}
	if opts.Registry != nil {
		for _, c := range cs {
			if err := opts.Registry.Register(c); err != nil {
				return nil, fmt.Errorf("loop: metrics: %w", err)
			}
		}
	}
	return l, nil
}

// LastStep returns the metrics of the last trainer step.
func (l *Loop) LastStep() trainer.Metrics {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// SetCheckpointed tells the loop that version n is already checkpointed
// (the version a restart resumed from), so Run does not write it again.
func (l *Loop) SetCheckpointed(n uint64) {
	l.mu.Lock()
	l.checkpointed = n
	l.mu.Unlock()
}

// Run runs the pipeline until ctx ends: it feeds ready turns to the
// scorer, stores its results, and trains on queued samples. When ctx ends
// it stops taking work, lets the step in progress finish, checkpoints the
// current version if it is not checkpointed yet, and returns after every
// goroutine it started has stopped.
func (l *Loop) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	scoreErr := make(chan error, 1)
	wg.Go(func() { scoreErr <- l.opts.Scorer.Run(ctx) })
	wg.Go(func() { l.feed(ctx) })
	wg.Go(func() { l.collect() }) // ends when the scorer's results close
	if l.opts.Trainer != nil {
		wg.Go(func() { l.train(ctx) })
	}
	<-ctx.Done()
	wg.Wait()
	l.finalCheckpoint()
	if err := <-scoreErr; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// feed submits ready turns from the store to the scorer, newest first,
// until the scorer is busy; it looks again when the store signals new
// turns, and every Poll.
func (l *Loop) feed(ctx context.Context) {
	tick := time.NewTicker(l.opts.Poll)
	defer tick.Stop()
	for {
		l.fill()
		select {
		case <-ctx.Done():
			return
		case <-l.opts.DB.Ready():
		case <-tick.C:
		}
	}
}

// fill takes ready turns from the store and scores them: first the
// turns that feedback made ready (the store names them, DB.FeedbackReady,
// so finding them costs no scan of the other ready turns; one that
// waits for the judge is read again only when the judge can take it),
// then the others, newest first, while the scorer has room; at most
// maxPendingReads turns a call. take says what becomes of each.
func (l *Loop) fill() {
	for _, id := range l.opts.DB.FeedbackReady() {
		l.pending[id] = false
	}
	busy := l.busyTurns()
	reads := 0
	for id, judge := range l.pending {
		if busy[id] {
			continue // scored now: read again once it is done
		}
		if judge && !l.judgeFree() {
			// It waits for the judge: read again only when the judge can
			// take it. Reading thousands of such turns on every call, under
			// load, kept the store busy and starved the trainer.
			continue
		}
		if reads++; reads > maxPendingReads {
			break // the rest at the next call (map order varies)
		}
		t, ok, err := l.opts.DB.ReadTurn(id)
		if err != nil {
			l.warn.Warn("ready_turns", err, "loop: reading turns to score failed")
			return
		}
		if !ok {
			delete(l.pending, id)
			continue
		}
		switch l.take(t) {
		case taken:
			delete(l.pending, id)
		case waiting, heldBack:
			l.pending[id] = true
		case closed:
			return
		}
	}

	gen := l.trainGen.Load()
	held := map[string]bool{}
	for reads = 0; reads < maxPendingReads; {
		// As many as the scorer has room for, and none while it has no
		// worker about to be free (a busy scorer costs serving no reads)
		// or while the newest turn was held back and no step has been
		// taken since (nothing has changed for the ones behind it).
		if !l.judgeFree() || l.heldAt == gen {
			return
		}
		room := min(l.opts.Scorer.Room(), 8)
		busy := l.busyTurns()
		for id := range held {
			busy[id] = true
		}
		turns, err := l.opts.DB.ReadyTurns(room, busy)
		if err != nil {
			l.warn.Warn("ready_turns", err, "loop: reading turns to score failed")
			return
		}
		if len(turns) == 0 {
			return
		}
		reads += len(turns)
		for _, t := range turns {
			held[t.ID] = true
			switch l.take(t) {
			case heldBack:
				l.heldAt = gen
				return
			case closed:
				return
			}
		}
	}
}

// maxPendingReads bounds the turns fill reads in a call, from its
// pending ones and from the other ready turns: the rest wait for the next
// call (the store signals each new ready turn), so that a backlog of
// thousands of ready turns under load is not read in one pass while
// serving and training wait for the store.
const maxPendingReads = 32

// judgeFree reports whether the scorer can take a turn for the judge
// now: it has room, and a worker is about to be free.
func (l *Loop) judgeFree() bool {
	return l.opts.Scorer.Room() > 0 && l.opts.Scorer.Waiting() < l.opts.Scorer.Workers()
}

// busyTurns are the turns in the scorer's hands.
func (l *Loop) busyTurns() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	busy := make(map[string]bool, len(l.inflight))
	for _, f := range l.inflight {
		busy[f.turnID] = true
	}
	return busy
}

// What take did with a turn.
type outcome int

const (
	taken    outcome = iota // scored, submitted, marked failed or not to be scored
	waiting                 // left ready: no room for it now
	heldBack                // left ready: its sample could not train now, nor could older turns'
	closed                  // the scorer stopped
)

// take scores a ready turn now if that needs no judge call (its reward a
// thumb decides, with nothing to draw a hint from): it does not wait
// behind judged turns for a worker, so a thumb becomes a sample as soon
// as it is stored. A turn that needs the judge is submitted while the
// scorer has room; unless a thumb decided it, only while its sample
// could still train (judgeable), since judge work on a turn that cannot
// train is spent for nothing, and only when a worker is about to be free,
// so that it does not go stale in the scorer's queue. A turn already too
// stale to train is not scored at all (a sample dropped stale_unscored).
func (l *Loop) take(t store.ReadyTurn) outcome {
	rt := ToRewardTurn(t, l.opts.TemplateVars)
	if !l.opts.Scorer.NeedsJudge(rt) {
		sm, err := l.opts.Scorer.Score(context.Background(), rt)
		l.stored(inflight{turnID: t.ID, gen: t.Gen}, reward.Result{TurnID: rt.ID, Sample: sm, Err: err})
		return taken
	}
	feedback := len(t.Feedback) > 0
	decided := slices.ContainsFunc(t.Feedback, func(f session.Feedback) bool { return f.Thumb != 0 })
	if !decided {
		ok, stale := l.judgeable(t.Version)
		switch {
		case stale:
			if err := l.opts.DB.SkipTurn(t.ID, t.Gen, t.Version, "stale_unscored"); err != nil {
				l.warn.Warn("skip_turn", err, "loop: marking a stale turn unscored failed")
				return waiting
			}
			l.met.unscored.Inc()
			return taken
		case !ok && feedback:
			return waiting
		case !ok:
			return heldBack
		}
	}
	if l.opts.Scorer.Room() <= 0 || (!decided && l.opts.Scorer.Waiting() >= l.opts.Scorer.Workers()) {
		return waiting
	}
	id := store.SampleID(t.ID, t.Gen)
	l.mu.Lock()
	l.inflight[id] = inflight{turnID: t.ID, gen: t.Gen}
	l.mu.Unlock()
	err := l.opts.Scorer.Submit(rt)
	switch {
	case err == nil:
		l.met.submitted.Inc()
		return taken
	case errors.Is(err, reward.ErrBusy), errors.Is(err, reward.ErrClosed):
		l.forget(id)
		return closed
	}
	l.forget(id)
	l.warn.Warn("unscorable", fmt.Errorf("turn %s: %w", t.ID, err), "loop: a turn cannot be scored; it is marked failed")
	if err := l.opts.DB.FailTurn(t.ID, t.Gen, err.Error()); err != nil {
		l.warn.Warn("fail_turn", err, "loop: marking a turn failed")
		return closed
	}
	return taken
}

// judgeable reports whether a judged sample of a turn generated by
// version v could still train: ok when it could, stale when it never can
// (v is already more than max_staleness optimizer steps behind the
// trainer). Neither when the samples queued ahead of it (those a thumb
// decided, and those of v and newer versions) fill every step it has
// left: it would go stale waiting, so the judge does not read it now.
// Without a trainer every turn is judgeable.
func (l *Loop) judgeable(v uint64) (ok, stale bool) {
	tr := l.opts.Trainer
	if tr == nil {
		return true, false
	}
	left := tr.Options().MaxStaleness - tr.Staleness(v)
	if left < 0 {
		return false, true
	}
	ahead, err := l.opts.DB.QueuedAhead(v)
	if err != nil {
		l.warn.Warn("queued", err, "loop: counting queued samples failed")
		return true, false
	}
	return ahead < l.opts.BatchSize*(left+1), false
}

func (l *Loop) forget(sampleID string) {
	l.mu.Lock()
	delete(l.inflight, sampleID)
	l.mu.Unlock()
}

// collect stores the scorer's results as samples until the results close.
func (l *Loop) collect() {
	for res := range l.opts.Scorer.Results() {
		l.mu.Lock()
		f, ok := l.inflight[res.TurnID]
		l.mu.Unlock()
		if !ok {
			continue
		}
		l.stored(f, res)
		l.forget(res.TurnID)
	}
}

// stored writes a scoring result to the store: the sample, or the turn
// marked failed.
func (l *Loop) stored(f inflight, res reward.Result) {
	if res.Err != nil {
		l.warn.Warn("not_scored", fmt.Errorf("turn %s: %w", f.turnID, res.Err), "loop: a turn was not scored; it is marked failed")
		if err := l.opts.DB.FailTurn(f.turnID, f.gen, res.Err.Error()); err != nil {
			l.warn.Warn("fail_turn", err, "loop: marking a turn failed")
		}
		return
	}
	s := res.Sample
	l.met.scored.WithLabelValues(s.Kind.String()).Inc()
	if l.guard != nil && s.Source == reward.SourceJudge {
		l.guard.observeReward(s.Reward)
	}
	err := l.opts.DB.AddSample(store.Sample{
		TurnID: f.turnID, Gen: f.gen, Version: s.Version, Kind: s.Kind.String(), Reward: s.Reward,
		Source: string(s.Source), Votes: s.Votes, Hint: s.Hint, Teacher: s.TeacherLogProbs,
		Rollouts: storeRollouts(s.Rollouts),
	})
	if err != nil {
		l.warn.Warn("add_sample", err, "loop: storing a scored turn failed (it will be scored again)")
		return
	}
	l.opts.Log.Debug().Str("turn", f.turnID).Int("gen", f.gen).Str("kind", s.Kind.String()).
		Int("reward", s.Reward).Str("source", string(s.Source)).Bool("hint", s.Hint != "").Msg("turn scored")
	select {
	case l.samples <- struct{}{}:
	default:
	}
}

// train steps the trainer whenever a full batch is queued, or a partial
// one is due (batchDue).
func (l *Loop) train(ctx context.Context) {
	l.loadLineage()
	l.guardStart(ctx)
	tick := time.NewTicker(l.opts.Poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-l.rollback:
			v, err := l.doRollback(req.c, "requested", "POST /admin/rollback")
			req.reply <- rollbackReply{v, err}
			continue
		case <-l.samples:
		case <-tick.C:
		}
		for ctx.Err() == nil && l.maybeStep(ctx) {
		}
		if l.ckptOwed && ctx.Err() == nil && l.ckptWait() <= 0 {
			l.checkpoint()
		}
	}
}

// ckptWait is how long the next periodic checkpoint must wait to keep
// checkpoints within CheckpointShare of the trainer's time (≤ 0: none).
func (l *Loop) ckptWait() time.Duration {
	share := l.opts.CheckpointShare
	if share <= 0 || share >= 1 || l.ckptTook == 0 {
		return 0
	}
	gap := time.Duration(float64(l.ckptTook) * (1/share - 1))
	return gap - time.Since(l.ckptEnd)
}

// Rollback makes the weights of checkpoint c current again, as a new
// version whose parent is c's, between two training steps: the trainer
// continues from c's parameters and optimizer state, the steps after c
// are marked rolled_back in the store and their samples dropped, and the
// new version is checkpointed so that a restart serves it.
func (l *Loop) Rollback(ctx context.Context, c *weights.Checkpoint) (uint64, error) {
	if l.opts.Trainer == nil {
		return 0, errors.New("loop: training is off: nothing to roll back")
	}
	req := rollbackReq{c: c, reply: make(chan rollbackReply, 1)}
	select {
	case l.rollback <- req:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	select {
	case r := <-req.reply:
		return r.version, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// doRollback makes checkpoint c's weights current as a new version, whose
// note in the store says why: "rollback to N (reason): why" (reason is
// requested, or the guard's nonfinite, kl or skill). The note starts with
// "rollback to N" whatever follows.
func (l *Loop) doRollback(c *weights.Checkpoint, reason, why string) (uint64, error) {
	defer l.trainGen.Add(1)
	tr := l.opts.Trainer
	if err := tr.Restore(c); err != nil {
		return 0, err
	}
	v, err := tr.Publish(l.opts.Versions)
	if err != nil {
		return 0, err
	}
	note := fmt.Sprintf("rollback to %d (%s)", c.Info().Version, reason)
	if why != "" {
		note += ": " + why
	}
	if err := l.opts.DB.RecordVersion(v.Number(), c.Info().Version, tr.StepCount(), note); err != nil {
		return v.Number(), err
	}
	r, err := l.opts.DB.Resume(tr.StepCount(), true)
	if err != nil {
		return v.Number(), err
	}
	l.met.published.Inc()
	if l.opts.OnPublish != nil {
		l.opts.OnPublish(v)
	}
	l.opts.Log.Warn().Uint64("version", v.Number()).Uint64("rolled_back_to", c.Info().Version).
		Int("undone_steps", r.LostSteps).Int("dropped_samples", r.Requeued).Msg("rolled back")
	l.checkpoint()
	return v.Number(), nil
}

// loadLineage gives the trainer the store's record of versions, so that
// staleness is counted in optimizer steps along the lineage across
// restarts and rollbacks (trainer.Lineage); the trainer adds the versions
// it publishes from then on.
func (l *Loop) loadLineage() {
	vs, err := l.opts.DB.Versions()
	if err != nil {
		l.warn.Warn("lineage", err, "loop: reading the versions failed; staleness counts version numbers for the versions before this start")
		return
	}
	lin := l.opts.Trainer.Lineage()
	for _, v := range vs {
		lin.Add(v.Number, v.Parent, v.Step)
	}
}

// maybeStep trains one batch if one is due; it reports whether it did.
func (l *Loop) maybeStep(ctx context.Context) bool {
	tr := l.opts.Trainer
	keep := tr.Options().MaxStaleness
	n, err := l.opts.DB.DropStale(func(v uint64) bool { return tr.Staleness(v) > keep })
	if err != nil {
		l.warn.Warn("drop_stale", err, "loop: dropping stale samples failed")
	}
	if n > 0 {
		l.trainGen.Add(1)
		l.met.stale.Add(float64(n))
		l.warn.Warn("stale", fmt.Errorf("%d samples more than %d steps behind version %d", n, keep, tr.Version()),
			"loop: stale samples dropped (scoring is behind training)")
	}
	queued, oldest, err := l.opts.DB.Queued(l.opts.BatchSize)
	if err != nil {
		l.warn.Warn("queued", err, "loop: reading queued samples failed")
		return false
	}
	if len(queued) == 0 {
		return false
	}
	if !l.batchDue(queued, oldest) {
		return false
	}
	batch := make([]trainer.Sample, len(queued))
	ids := make([]string, len(queued))
	cur := tr.Version()
	for i, s := range queued {
		batch[i], ids[i] = ToTrainerSample(s), s.ID
		if s.Source == string(reward.SourceFeedback) && tr.Staleness(s.Version) > keep {
			// Late explicit feedback on a turn of a version long gone: its
			// behaviour log-probs say nothing about the current policy, so
			// the step takes the response as if the current version had
			// produced it (no importance correction), rather than drop
			// what the user said.
			batch[i].Version, batch[i].RolloutLogProbs = cur, nil
		}
	}
	if l.opts.Replay != nil && l.opts.ReplaySamples > 0 {
		rs, err := l.opts.Replay.Samples(l.opts.ReplaySamples, cur)
		if err != nil {
			l.warn.Warn("replay", err, "loop: drawing replay samples failed; the step trains without them")
		} else {
			batch = append(batch, rs...)
			l.met.replayed.Add(float64(len(rs)))
		}
	}
	l.step(ctx, batch, ids)
	return true
}

// batchDue reports whether the queued samples (feedback first, as
// DB.Queued hands them out; oldest is when the oldest queued sample was
// made) make a step now: a full batch; a partial one whose oldest
// sample has waited MaxWait; or one with a sample a thumb decided that
// has waited FeedbackWait.
func (l *Loop) batchDue(queued []store.Sample, oldest time.Time) bool {
	if len(queued) >= l.opts.BatchSize {
		return true
	}
	if l.opts.MaxWait > 0 && time.Since(oldest) >= l.opts.MaxWait {
		return true
	}
	if l.opts.FeedbackWait <= 0 {
		return false
	}
	return slices.ContainsFunc(queued, func(s store.Sample) bool {
		return s.Source == string(reward.SourceFeedback) && time.Since(s.Created) >= l.opts.FeedbackWait
	})
}

// step runs one optimizer step, records it with its samples, publishes
// the result and checkpoints it when due.
func (l *Loop) step(ctx context.Context, batch []trainer.Sample, ids []string) {
	defer l.trainGen.Add(1)
	tr := l.opts.Trainer
	start := time.Now()
	met, err := tr.Step(batch)
	l.mu.Lock()
	l.last = met
	l.mu.Unlock()
	drop := func(reason string) {
		if err := l.opts.DB.DropSamples(ids, reason); err != nil {
			l.warn.Warn("drop", err, "loop: dropping samples failed")
		}
	}
	switch {
	case err != nil:
		l.met.steps.WithLabelValues("error").Inc()
		l.opts.Log.Error().Err(err).Int("samples", len(batch)).Msg("training step failed; its samples are dropped")
		drop("error: " + err.Error())
		return
	case met.Skipped:
		l.met.steps.WithLabelValues("skipped").Inc()
		l.opts.Log.Warn().Str("reason", met.SkipReason).Msg("training step skipped; its samples are dropped")
		drop("nonfinite: " + met.SkipReason)
		l.guardTrip("a non-finite step: "+met.SkipReason, "nonfinite")
		return
	case !met.Applied:
		l.met.steps.WithLabelValues("empty").Inc()
		l.opts.Log.Info().Int("dropped", met.Dropped).Msg("training step had no usable samples")
		drop("unusable")
		return
	}
	next := l.opts.Versions.Last() + 1
	stats := stepStats(met, tr.LRScale(), time.Since(start))
	if err := l.opts.DB.CommitStep(store.Step{Step: met.Step, Version: next, Parent: tr.Version(), Samples: ids, Loss: met.Loss, Stats: stats}); err != nil {
		// The step is applied in memory but not on record: publishing it
		// would serve weights the store does not know. Leave the samples
		// queued; the trainer moves on from the new parameters.
		l.opts.Log.Error().Err(err).Msg("recording the training step failed; not publishing it")
		return
	}
	l.met.steps.WithLabelValues("applied").Inc()
	l.met.loss.Set(met.Loss)
	for _, stat := range gaugeStats {
		l.met.step.WithLabelValues(stat).Set(stats[stat])
	}
	for k, n := range met.Staleness {
		for range n {
			l.met.staleness.WithLabelValues().Observe(float64(k))
		}
	}
	v, err := tr.Publish(l.opts.Versions)
	if err != nil {
		l.opts.Log.Error().Err(err).Msg("publishing the new weights failed")
		return
	}
	if v.Number() != next {
		l.opts.Log.Error().Uint64("version", v.Number()).Uint64("recorded", next).Msg("published version number differs from the recorded one")
	}
	l.met.published.Inc()
	if l.opts.OnPublish != nil {
		l.opts.OnPublish(v)
	}
	l.opts.Log.Info().Uint64("version", v.Number()).Int64("step", met.Step).Int("samples", met.Samples).
		Int("tokens", met.Tokens).Float64("loss", met.Loss).Float64("grad_norm", met.GradNorm).
		Float64("entropy", met.Entropy).Float64("kl", met.KL).Float64("step_kl", met.StepKL).
		Float64("trust_scale", met.TrustScale).Dur("took", time.Since(start).Round(time.Millisecond)).
		Msg("trained and published a new version")
	if l.opts.CheckpointEvery > 0 && met.Step%int64(l.opts.CheckpointEvery) == 0 {
		if l.ckptWait() > 0 {
			l.ckptOwed = true // written once the wait is over (train)
		} else {
			l.checkpoint()
		}
	}
	l.guardAfterStep(ctx, met.KL)
}

// stepStats are the trainer's numbers for an applied step by name, as
// the store keeps them with the step (store.Step.Stats) and the dashboard
// charts them: the loss; kl (to the reference, at the step's start),
// step_kl, trust_scale and backtracks (the trust region); entropy, logprob,
// advantage, importance_weight and clip_fraction (per token); grad_norm;
// lr (this step's) and lr_scale (the guard's); samples, tokens and dropped;
// seconds (the step's wall time).
func stepStats(met trainer.Metrics, lrScale float64, took time.Duration) map[string]float64 {
	return map[string]float64{
		"loss": met.Loss, "kl": met.KL, "step_kl": met.StepKL, "trust_scale": met.TrustScale, "backtracks": float64(met.Backtracks),
		"entropy": met.Entropy, "logprob": met.LogProb, "advantage": met.Advantage, "baseline": met.Baseline, "importance_weight": met.ImportanceWeight,
		"clip_fraction": met.ClipFraction, "grad_norm": met.GradNorm, "lr": met.LR, "lr_scale": lrScale,
		"samples": float64(met.Samples), "tokens": float64(met.Tokens), "dropped": float64(met.Dropped), "seconds": took.Seconds(),
	}
}

// gaugeStats are the stepStats exported as clawrl_train_step{stat}.
var gaugeStats = []string{"clip_fraction", "importance_weight", "kl", "step_kl", "trust_scale", "entropy", "grad_norm", "lr", "advantage", "baseline", "samples", "tokens"}

// checkpoint saves the trainer's current version.
func (l *Loop) checkpoint() {
	if l.opts.Checkpoint.Root == "" || l.opts.Trainer == nil {
		return
	}
	l.mu.Lock()
	done := l.checkpointed == l.opts.Trainer.Version() && l.checkpointed != 0
	l.mu.Unlock()
	if done && l.ckptOwed {
		l.ckptOwed = false // a checkpoint of the guard's wrote it already
		return
	}
	l.ckptOwed = false // a failed one is tried again at the next due step
	start := time.Now()
	c, err := l.opts.Trainer.Save(l.opts.Versions, l.opts.Checkpoint)
	l.ckptEnd, l.ckptTook = time.Now(), time.Since(start)
	if err != nil {
		l.opts.Log.Error().Err(err).Msg("checkpoint failed")
		return
	}
	l.mu.Lock()
	l.checkpointed = c.Info().Version
	l.mu.Unlock()
	l.opts.Log.Info().Str("dir", c.Dir()).Uint64("version", c.Info().Version).
		Dur("took", l.ckptTook.Round(time.Millisecond)).Msg("checkpoint saved")
}

// finalCheckpoint checkpoints the trainer's version at shutdown unless it
// is checkpointed already.
func (l *Loop) finalCheckpoint() {
	if l.opts.Trainer == nil || l.opts.Checkpoint.Root == "" {
		return
	}
	l.mu.Lock()
	done := l.checkpointed == l.opts.Trainer.Version()
	l.mu.Unlock()
	if !done {
		l.checkpoint()
	}
}

// ToRewardTurn adapts a stored turn to the reward stage's input; its ID is
// the id of the sample it will become. vars are the template variables of
// a turn stored before turns recorded their own.
func ToRewardTurn(t store.ReadyTurn, vars map[string]any) reward.Turn {
	if t.TemplateVars != nil {
		vars = t.TemplateVars
	}
	rt := reward.Turn{
		ID:             store.SampleID(t.ID, t.Gen),
		Messages:       t.Messages,
		Tools:          t.Tools,
		TemplateVars:   vars,
		Prefill:        t.Prefill,
		Response:       t.Reply,
		PromptTokens:   t.Prompt,
		ResponseTokens: t.Response,
		LogProbs:       t.LogProbs,
		Version:        t.Version,
		NextState:      t.NextState,
	}
	for _, f := range t.Feedback {
		rt.Feedback = append(rt.Feedback, reward.Feedback{Thumb: f.Thumb, Text: f.Text})
	}
	return rt
}

func storeRollouts(rs []reward.HintedRollout) []store.Rollout {
	if len(rs) == 0 {
		return nil
	}
	out := make([]store.Rollout, len(rs))
	for i, r := range rs {
		out[i] = store.Rollout{Tokens: r.Tokens, Teacher: r.TeacherLogProbs, Version: r.Version}
	}
	return out
}

// ToTrainerSample adapts a queued sample to the trainer's input. The
// behaviour log-probs are those of the distribution the tokens were drawn
// from (a turn recorded before they were kept has only the model's own,
// which were drawn from at temperature 1 without truncation); the tokens a
// grammar forced are masked out of the loss.
func ToTrainerSample(s store.Sample) trainer.Sample {
	ts := trainer.Sample{
		TurnID:          s.ID,
		Prompt:          s.Prompt,
		Response:        s.Response,
		Version:         s.Version,
		RolloutLogProbs: s.LogProbs,
	}
	if len(s.SampleLogProbs) == len(s.Response) {
		ts.RolloutLogProbs = s.SampleLogProbs
	}
	if len(s.Forced) == len(s.Response) && slices.Contains(s.Forced, true) {
		ts.Mask = make([]bool, len(s.Forced))
		for i, f := range s.Forced {
			ts.Mask[i] = !f
		}
	}
	if s.Kind == reward.KindBinary.String() || s.Kind == reward.KindBoth.String() {
		ts.Reward = float32(s.Reward)
	}
	if s.Kind == reward.KindDistill.String() || s.Kind == reward.KindBoth.String() || s.Kind == store.KindRollout {
		ts.TeacherLogProbs = s.Teacher
	}
	if s.Kind == store.KindRollout {
		// The teacher generated the response: there are no behaviour
		// log-probs to correct for; the advantage is teacher − current.
		ts.RolloutLogProbs, ts.Mask, ts.TeacherDrawn = nil, nil, true
	}
	return ts
}
