package cli

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/learnbench"
	"github.com/clawrl/clawrl/loop"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/store"
	"github.com/clawrl/clawrl/trainer"
	"github.com/clawrl/clawrl/weights"
)

// feedback is the daemon's loop with what it runs on: the trainer and the
// checkpoints it writes. It is the server's Admin (Rollback).
type feedback struct {
	loop     *loop.Loop
	trainer  *trainer.Trainer // nil when training is off and nothing is resumed
	training bool             // trainer.enabled: the loop steps
	ckpt     trainer.CheckpointOptions
}

// newFeedback builds the reward stage (judge and teacher) and the trainer
// over the engine, and the loop that connects them through the store. The
// trainer is built when training is on, or when there are checkpoints to
// resume (their weights are served even with training off). The engine
// owns and frees what they compute on.
func (a *app) newFeedback(e *engine.Engine, db *store.DB, reg *prometheus.Registry, vars map[string]any, ckptDir string) (*feedback, error) {
	tc := a.cfg.Trainer
	scorer, err := a.newScorer(e, reg, vars)
	if err != nil {
		return nil, err
	}
	fb := &feedback{training: tc.Enabled}
	existing, err := weights.List(ckptDir)
	if err != nil {
		return nil, err
	}
	if tc.Enabled || len(existing) > 0 {
		if fb.trainer, err = e.NewTrainer(engine.TrainerOptions(a.cfg)); err != nil {
			return nil, err
		}
	}
	if fb.ckpt, err = checkpointOptions(e, ckptDir, tc.KeepCheckpoints); err != nil {
		return nil, err
	}
	lo := loop.Options{
		DB: db, Scorer: scorer, Versions: e.Versions(),
		BatchSize: tc.BatchSize, MaxWait: tc.MaxWait, FeedbackWait: tc.FeedbackWait, TemplateVars: vars,
		Checkpoint: fb.ckpt, CheckpointEvery: tc.CheckpointEvery, CheckpointShare: tc.CheckpointShare,
		Guard: loop.GuardOptions{KLMax: tc.Guard.KLMax, SkillMargin: tc.Guard.SkillMargin, SkillEvery: tc.Guard.SkillEvery,
			LRFactor: tc.Guard.LRFactor, RecoverAfter: tc.Guard.RecoverAfter},
		Registry: reg, Log: a.log,
	}
	if tc.Enabled {
		lo.Trainer = fb.trainer
		if err := a.trainingExtras(e, &lo, vars); err != nil {
			return nil, err
		}
	}
	if fb.loop, err = loop.New(lo); err != nil {
		return nil, err
	}
	mode := "off"
	if fb.trainer != nil {
		mode = "full fine-tuning"
		if tc.LoRARank > 0 {
			mode = fmt.Sprintf("LoRA rank %d", tc.LoRARank)
		}
	}
	a.log.Info().Str("judge", a.cfg.Reward.Judge).Str("teacher", a.cfg.Reward.Teacher).Str("training", mode).
		Str("threads", e.GroupThreads()).Int("batch_size", tc.BatchSize).Str("checkpoints", ckptDir).Msg("feedback loop ready")
	return fb, nil
}

// trainingExtras adds to a training loop's options the guard's skill
// check and the replay of examples of what the model already does.
func (a *app) trainingExtras(e *engine.Engine, lo *loop.Options, vars map[string]any) error {
	tc := a.cfg.Trainer
	if n := tc.Guard.SkillProbes; n > 0 {
		check, err := learnbench.SkillCheck(e.Scheduler(), e.Tokenizer(), e.StopTokens(), vars, n)
		if err != nil {
			return err
		}
		lo.Guard.Skill, lo.Guard.SkillSet = check, learnbench.SkillSet(n)
	}
	src, err := replaySource(e, tc.Replay, tc.MicroBatchTokens)
	if err != nil {
		return err
	}
	switch {
	case src != nil:
		lo.Replay, lo.ReplaySamples = src, tc.Replay.Samples
		a.log.Info().Str("from", src.String()).Int("samples", tc.Replay.Samples).Float64("weight", tc.Replay.Weight).Msg("replay on: every step also learns examples of what the model already does")
	case tc.Replay.Samples > 0:
		a.log.Info().Str("model", e.Dir()).Msg("replay off: no replay data for a model other than the bundled one (set trainer.replay.data to a JSONL file of conversations)")
	}
	return nil
}

// checkpointOptions are where and how the trainer checkpoints. The
// model's config and tokenizer files travel with the weights, so
// `generate --model` and `serve --model` load a checkpoint as they load
// the base. A LoRA lineage's checkpoints hold the adapters only and name
// the base model (as a PEFT adapter does), which loading one reads again.
func checkpointOptions(e *engine.Engine, root string, keep int) (trainer.CheckpointOptions, error) {
	cfgJSON, extra, err := e.BaseFiles()
	if err != nil {
		return trainer.CheckpointOptions{}, err
	}
	ab, err := e.AdapterBase()
	if err != nil {
		return trainer.CheckpointOptions{}, err
	}
	return trainer.CheckpointOptions{Root: root, Keep: keep, ConfigJSON: cfgJSON, ExtraFiles: extra, Base: e.Base(), Adapters: ab}, nil
}

// newScorer builds the reward stage: the judge (the local model on its
// frozen weights, or an OpenAI-compatible endpoint), the teacher, and the
// teacher's hinted rollouts.
func (a *app) newScorer(e *engine.Engine, reg *prometheus.Registry, vars map[string]any) (*reward.Scorer, error) {
	rc := a.cfg.Reward
	cfg := reward.DefaultConfig()
	cfg.Backend, cfg.Teacher = rc.Judge, rc.Teacher
	cfg.Votes, cfg.Temperature, cfg.MaxTokens = rc.Votes, float32(rc.Temperature), rc.MaxTokens
	cfg.HintVotes, cfg.HintRule, cfg.HintGrounding = rc.HintVotes, reward.HintRule(rc.HintRule), rc.HintGrounding
	cfg.Timeout, cfg.Workers = rc.Timeout, rc.Workers
	cfg.Method, cfg.HintedRollouts = rc.Method, rc.HintedRollouts
	cfg.RolloutTemperature, cfg.RolloutMaxTokens = float32(rc.RolloutTemp), rc.RolloutMaxTokens
	if rc.Teacher == reward.TeacherNone {
		cfg.HintVotes = 0
	}
	if err := reward.ValidateConfig(cfg); err != nil {
		return nil, err
	}
	var judge reward.Backend
	var err error
	if rc.Judge == reward.BackendOpenAI {
		judge, err = reward.NewOpenAIBackend(reward.OpenAIOptions{BaseURL: rc.JudgeBaseURL, APIKey: rc.JudgeAPIKey, Model: rc.JudgeModel})
	} else {
		// The local judge generates on the checkpoint's frozen weights:
		// through the judge group's scheduler, or through the serving
		// scheduler as background work below users.
		js, jerr := e.JudgeScheduler(rc.Workers * max(1, rc.Votes))
		if jerr != nil {
			return nil, jerr
		}
		judge, err = reward.NewLocalBackend(js, e.Tokenizer(), reward.LocalOptions{StopTokens: e.StopTokens(), TemplateVars: vars})
	}
	if err != nil {
		return nil, err
	}
	teacher, err := e.NewTeacher(rc.Teacher, rc.TeacherKVCacheMB)
	if err != nil {
		return nil, err
	}
	var rollouts reward.RolloutGenerator
	if teacher != nil && cfg.Uses(reward.MethodHinted) {
		// The teacher writes its responses on the actor group's scheduler
		// (the serving one, below every user request, when the group has
		// no threads of its own): on the live weights for teacher
		// "policy", on the checkpoint's for "reference" and "judge".
		gen, err := e.ActorScheduler(rc.Workers * max(1, rc.HintedRollouts))
		if err != nil {
			return nil, err
		}
		rollouts = &reward.SchedulerRollouts{Gen: gen, StopTokens: e.StopTokens(), Frozen: rc.Teacher != reward.TeacherPolicy, TopP: 1}
	}
	rm, err := reward.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	return reward.New(reward.Options{Config: cfg, Judge: judge, Teacher: teacher, Rollouts: rollouts, Tokenizer: e.Tokenizer(), Metrics: rm, Log: a.log})
}
