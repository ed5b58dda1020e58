// Package loop connects the stages that follow serving: the turn records
// the session tracker emits are scored by the reward stage, scored turns
// become training samples, the trainer takes one optimizer step per batch
// of them, and every step publishes a new weight version that the
// scheduler picks up for the generations that start after it.
//
// Serving never waits on any of this: records arrive on a bounded channel
// that the tracker offers to without blocking, and the loop itself never
// blocks its input for longer than a hand-off to the scorer's queue.
package loop

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/trainer"
	"github.com/clawrl/clawrl/weights"
)

// Options wire the loop.
type Options struct {
	// Records are the session tracker's output (turns and feedback).
	Records <-chan session.Record
	// Scorer scores turns; the loop runs it (Scorer.Run) and owns it.
	Scorer *reward.Scorer
	// Trainer steps on batches of samples; nil scores turns without
	// training (the scores are still counted and logged).
	Trainer *trainer.Trainer
	// Store receives the published versions.
	Store *weights.Store
	// BatchSize is how many trainable samples make one optimizer step.
	BatchSize int
	// MaxWait trains a partial batch when its oldest sample has waited
	// this long (0: wait for a full batch).
	MaxWait time.Duration
	// Backlog bounds the turns waiting for the scorer's queue (default
	// 1024); beyond it turns are dropped and counted.
	Backlog int
	// TemplateVars are the chat-template variables the server rendered
	// prompts with; the teacher context is rendered with the same.
	TemplateVars map[string]any
	// Checkpoint, if its Root is set, saves a checkpoint every
	// CheckpointEvery published versions.
	Checkpoint      trainer.CheckpointOptions
	CheckpointEvery int
	// Registry receives the loop's metrics (nil: none registered).
	Registry prometheus.Registerer
	Log      zerolog.Logger
}

// Loop is the running pipeline. Create it with New and run it with Run.
type Loop struct {
	opts Options
	met  metrics

	mu      sync.Mutex
	last    trainer.Metrics
	backlog []reward.Turn
}

type metrics struct {
	records   *prometheus.CounterVec
	dropped   prometheus.Counter
	scored    *prometheus.CounterVec
	steps     *prometheus.CounterVec
	loss      prometheus.Gauge
	published prometheus.Counter
}

// New checks the options.
func New(opts Options) (*Loop, error) {
	if opts.Records == nil || opts.Scorer == nil || opts.Store == nil {
		return nil, errors.New("loop: Records, Scorer and Store are required")
	}
	if opts.BatchSize < 1 {
		return nil, fmt.Errorf("loop: batch size %d must be >= 1", opts.BatchSize)
	}
	if opts.Backlog == 0 {
		opts.Backlog = 1024
	}
	l := &Loop{opts: opts}
	l.met = metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "clawrl_loop_records_total",
			Help: "Records received from the session tracker, by kind."}, []string{"kind"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "clawrl_loop_turns_dropped_total",
			Help: "Turns dropped because the scoring backlog was full."}),
		scored: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "clawrl_loop_scored_total",
			Help: "Scored turns, by sample kind."}, []string{"kind"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "clawrl_loop_train_steps_total",
			Help: "Trainer steps, by outcome (applied, skipped, empty, error)."}, []string{"outcome"}),
		loss: prometheus.NewGauge(prometheus.GaugeOpts{Name: "clawrl_loop_loss",
			Help: "Loss of the last applied training step."}),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "clawrl_loop_versions_published_total",
			Help: "Weight versions published by training."}),
	}
	if opts.Registry != nil {
		for _, c := range []prometheus.Collector{l.met.records, l.met.dropped, l.met.scored, l.met.steps,
			l.met.loss, l.met.published} {
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

// Run runs the pipeline until ctx ends: it feeds records to the scorer,
// runs the scorer, and trains on its results. It returns after every
// goroutine it started has stopped.
func (l *Loop) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	scoreErr := make(chan error, 1)
	wg.Go(func() { scoreErr <- l.opts.Scorer.Run(ctx) })
	wg.Go(func() { l.feed(ctx) })
	l.train(ctx) // returns when the scorer's results close
	cancel()
	wg.Wait()
	if err := <-scoreErr; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// feed turns records into scorer submissions. When the scorer's queue is
// full, turns wait in a bounded backlog and are offered again shortly.
func (l *Loop) feed(ctx context.Context) {
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case rec := <-l.opts.Records:
			l.met.records.WithLabelValues(rec.Kind.String()).Inc()
			if rec.Kind != session.KindTurn || rec.Turn == nil {
				// Feedback that arrives before its turn is emitted travels
				// inside the turn; a record of its own adds nothing.
				continue
			}
			l.enqueue(ToRewardTurn(rec.Turn, l.opts.TemplateVars))
		case <-retry.C:
		}
		l.flush()
	}
}

func (l *Loop) enqueue(t reward.Turn) {
	if len(l.backlog) >= l.opts.Backlog {
		l.met.dropped.Inc()
		l.opts.Log.Warn().Str("turn", t.ID).Msg("scoring backlog full: turn dropped")
		return
	}
	l.backlog = append(l.backlog, t)
}

// flush offers backlogged turns to the scorer, oldest first, until it is
// busy.
func (l *Loop) flush() {
	n := 0
	for _, t := range l.backlog {
		if err := l.opts.Scorer.Submit(t); err != nil {
			break
		}
		n++
	}
	l.backlog = append(l.backlog[:0], l.backlog[n:]...)
}

// train collects scored samples into batches and steps the trainer.
func (l *Loop) train(ctx context.Context) {
	var batch []trainer.Sample
	var oldest time.Time
	var wait <-chan time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	results := l.opts.Scorer.Results()
	for {
		select {
		case res, ok := <-results:
			if !ok {
				return
			}
			if res.Err != nil {
				l.opts.Log.Warn().Err(res.Err).Str("turn", res.TurnID).Msg("turn not scored")
				continue
			}
			l.met.scored.WithLabelValues(res.Sample.Kind.String()).Inc()
			s, ok := ToTrainerSample(res.Sample)
			l.opts.Log.Debug().Str("turn", res.TurnID).Str("kind", res.Sample.Kind.String()).
				Int("reward", res.Sample.Reward).Str("source", string(res.Sample.Source)).
				Bool("hint", res.Sample.Hint != "").Msg("turn scored")
			if !ok || l.opts.Trainer == nil {
				continue
			}
			if len(batch) == 0 {
				oldest = time.Now()
				if l.opts.MaxWait > 0 {
					if timer == nil {
						timer = time.NewTimer(l.opts.MaxWait)
					} else {
						timer.Reset(l.opts.MaxWait)
					}
					wait = timer.C
				}
			}
			batch = append(batch, s)
			if len(batch) >= l.opts.BatchSize {
				l.step(batch)
				batch, wait = nil, nil
			}
		case <-wait:
			if len(batch) > 0 && time.Since(oldest) >= l.opts.MaxWait {
				l.step(batch)
				batch = nil
			}
			wait = nil
		case <-ctx.Done():
			// Drain nothing more: the scorer closes its results when it
			// stops, which ends this loop.
			ctx = context.Background()
		}
	}
}

// step runs one optimizer step and publishes the result.
func (l *Loop) step(batch []trainer.Sample) {
	start := time.Now()
	met, err := l.opts.Trainer.Step(batch)
	l.mu.Lock()
	l.last = met
	l.mu.Unlock()
	switch {
	case err != nil:
		l.met.steps.WithLabelValues("error").Inc()
		l.opts.Log.Error().Err(err).Int("samples", len(batch)).Msg("training step failed")
		return
	case met.Skipped:
		l.met.steps.WithLabelValues("skipped").Inc()
		l.opts.Log.Warn().Str("reason", met.SkipReason).Msg("training step skipped")
		return
	case !met.Applied:
		l.met.steps.WithLabelValues("empty").Inc()
		l.opts.Log.Info().Int("dropped", met.Dropped).Msg("training step had no usable samples")
		return
	}
	l.met.steps.WithLabelValues("applied").Inc()
	l.met.loss.Set(met.Loss)
	v, err := l.opts.Trainer.Publish(l.opts.Store)
	if err != nil {
		l.opts.Log.Error().Err(err).Msg("publishing the new weights failed")
		return
	}
	l.met.published.Inc()
	l.opts.Log.Info().Uint64("version", v.Number()).Int64("step", met.Step).Int("samples", met.Samples).
		Int("tokens", met.Tokens).Float64("loss", met.Loss).Float64("grad_norm", met.GradNorm).
		Float64("entropy", met.Entropy).Dur("took", time.Since(start).Round(time.Millisecond)).
		Msg("trained and published a new version")
	if l.opts.Checkpoint.Root != "" && l.opts.CheckpointEvery > 0 && met.Step%int64(l.opts.CheckpointEvery) == 0 {
		if c, err := l.opts.Trainer.Save(l.opts.Store, l.opts.Checkpoint); err != nil {
			l.opts.Log.Error().Err(err).Msg("checkpoint failed")
		} else {
			l.opts.Log.Info().Str("dir", c.Dir()).Msg("checkpoint saved")
		}
	}
}

// ToRewardTurn adapts a session turn record to the reward stage's input.
func ToRewardTurn(t *session.Turn, vars map[string]any) reward.Turn {
	rt := reward.Turn{
		ID:             t.ResponseID + "/" + strconv.Itoa(t.Choice),
		Messages:       t.Messages,
		Tools:          t.Tools,
		TemplateVars:   vars,
		Response:       t.Reply,
		PromptTokens:   t.PromptTokens,
		ResponseTokens: t.ResponseTokens,
		LogProbs:       t.LogProbs,
		Version:        t.Version,
		NextState:      t.NextState,
	}
	for _, f := range t.Feedback {
		rt.Feedback = append(rt.Feedback, reward.Feedback{Thumb: f.Thumb, Text: f.Text})
	}
	return rt
}

// ToTrainerSample adapts a scored turn to a training sample; ok is false
// when it carries no training signal.
func ToTrainerSample(s reward.Sample) (trainer.Sample, bool) {
	if s.Kind == reward.KindNone {
		return trainer.Sample{}, false
	}
	ts := trainer.Sample{
		TurnID:          s.TurnID,
		Prompt:          s.PromptTokens,
		Response:        s.ResponseTokens,
		Version:         s.Version,
		RolloutLogProbs: s.LogProbs,
	}
	if s.Kind == reward.KindBinary || s.Kind == reward.KindBoth {
		ts.Reward = float32(s.Reward)
	}
	if s.Kind == reward.KindDistill || s.Kind == reward.KindBoth {
		ts.TeacherLogProbs = s.TeacherLogProbs
	}
	return ts, true
}
