package engine

import (
	"fmt"
	"strings"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/trainer"
)

// TrainerOptions are the trainer's options from the trainer section of
// cfg (trainer.DefaultOptions for what it does not set).
func TrainerOptions(cfg *config.Config) trainer.Options {
	tc := cfg.Trainer
	opts := trainer.DefaultOptions()
	opts.LR, opts.WarmupSteps, opts.WeightDecay, opts.GradClip = tc.LR, tc.WarmupSteps, tc.WeightDecay, tc.GradClip
	opts.EpsLow, opts.EpsHigh = tc.ClipEpsLow, tc.ClipEpsHigh
	opts.RLWeight, opts.OPDWeight, opts.KLCoef = tc.RLWeight, tc.OPDWeight, tc.KLCoef
	opts.MaxStaleness, opts.MicroBatchTokens, opts.PPOEpochs = tc.MaxStaleness, tc.MicroBatchTokens, tc.PPOEpochs
	opts.LoRARank, opts.LoRAAlpha, opts.LoRATargets = tc.LoRARank, tc.LoRAAlpha, tc.LoRATargets
	opts.Checkpointing = tc.ActivationCheckpointing
	opts.MeasureKL = tc.Guard.KLMax > 0
	opts.TargetKL = tc.TargetKL
	opts.BaselineWindow = tc.BaselineWindow
	return opts
}

// NewTrainer makes a trainer with opts over the checkpoint's weights, on
// the actor group's model, at the current version; with TrainingYields
// its passes give way to serving. Close closes it. Over a quantized base
// (model.quantize, or a GGUF file of Q8_0, Q4_0, Q4_1 or K-quant
// matrices) it trains LoRA adapters only (see model.Model.NewTrainable);
// its versions serve the adapters unmerged over the quantized matrices.
func (e *Engine) NewTrainer(opts trainer.Options) (*trainer.Trainer, error) {
	if dt := QuantizeType(e.cfg); dt != 0 && opts.LoRARank == 0 {
		return nil, fmt.Errorf("model.quantize: %s: full fine-tuning (trainer.lora_rank: 0) over a quantized base is not supported: set trainer.lora_rank > 0 to train LoRA adapters over the %v weights (as QLoRA), or model.quantize: none", e.cfg.Model.Quantize, dt)
	}
	actor, err := e.Actor()
	if err != nil {
		return nil, err
	}
	tr, err := trainer.New(actor, e.model.Weights(), opts)
	if err != nil {
		return nil, err
	}
	e.onClose(tr.Close)
	switch {
	case opts.LoRARank == 0 || !e.adaptsBF16():
		// Full fine-tuning; or LoRA over F32 matrices, where an F32 merge
		// reads what the base does, or over quantized ones, never merged.
	case e.OnGPUs():
		// The GPU replicas hold BF16 weights and round each merged matrix
		// they copy to BF16 (model.ImportOptions.RoundToBase): merging in
		// BF16 here gives them the same values at half the bytes to make,
		// keep and copy (BenchmarkImport).
		if err := tr.MergeForServing(compute.BF16); err != nil {
			return nil, err
		}
		e.log.Info().Msg("LoRA versions merge in BF16, as the GPU replicas hold them")
	default:
		// Served on the CPU: the adapters unmerged over the BF16 base
		// (exact), where an F32 merge would double the bytes every decode
		// step reads (BenchmarkDecodeAdapters).
		if err := tr.MergeForServing(0); err != nil {
			return nil, err
		}
		e.log.Info().Msg("LoRA versions serve their adapters unmerged over the BF16 weights")
	}
	tr.SetVersion(e.versions.Current())
	if e.TrainingYields() {
		tr.SetSlicer(e.gate)
		e.model.SetScoreSlicer(e.gate)
		if actor != e.model {
			actor.SetScoreSlicer(e.gate) // the teacher's passes run on the actor's view
		}
	}
	return tr, nil
}

// adaptsBF16 reports whether the checkpoint's layer matrices, those LoRA
// adapts and a version merges, are BF16 (the first layer's query
// projection stands for them).
func (e *Engine) adaptsBF16() bool {
	for _, p := range e.model.Weights().Params() {
		if strings.HasSuffix(p.Name, "layers.0.self_attn.q_proj.weight") {
			return p.T.DType() == compute.BF16
		}
	}
	return false
}

// NewTeacher makes the teacher that scores responses under a hint
// (reward.teacher): on the actor group's model, with a KV cache of kvMB
// MiB (0: one full context), on the live weights for "policy" and the
// checkpoint's frozen ones for "reference" and "judge". kind "none" has
// no teacher (nil).
func (e *Engine) NewTeacher(kind string, kvMB int) (reward.Teacher, error) {
	if kind == reward.TeacherNone {
		return nil, nil
	}
	actor, err := e.Actor()
	if err != nil {
		return nil, err
	}
	cache, err := e.TeacherCache(kvMB)
	if err != nil {
		return nil, err
	}
	var pick func() *model.Weights // nil: the frozen checkpoint weights
	if kind == reward.TeacherPolicy {
		pick = func() *model.Weights {
			v, err := e.versions.Acquire()
			if err != nil {
				return nil
			}
			// The store keeps the previous version as well, so the set
			// outlives a publication that lands during the pass.
			defer e.versions.Release(v)
			return v.Weights()
		}
	}
	return reward.NewModelTeacher(actor, cache, pick)
}
