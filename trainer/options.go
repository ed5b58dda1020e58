package trainer

import (
	"errors"
	"fmt"
	"math"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/model"
)

// Options configure a Trainer. Each field mirrors a key of the trainer
// section of config.yaml (named in its comment). Start from DefaultOptions:
// a zero field is not replaced by a default, and New rejects values that
// make no sense.
type Options struct {
	// Optimizer (AdamW with decoupled weight decay).
	LR          float64 // lr: peak learning rate
	Beta1       float64 // adam_beta1
	Beta2       float64 // adam_beta2
	AdamEps     float64 // adam_eps
	WeightDecay float64 // weight_decay: decoupled, on matrices only (see DecaysWeight)
	GradClip    float64 // grad_clip: global L2 norm bound of the gradient; ≤ 0 disables
	WarmupSteps int     // warmup_steps: the learning rate rises linearly over this many optimizer steps

	// Loss.
	EpsLow        float64 // clip_eps_low: PPO clip range below 1
	EpsHigh       float64 // clip_eps_high: PPO clip range above 1
	KLCoef        float64 // kl_coef: weight of the k3 KL penalty to the reference; 0 disables
	RLWeight      float64 // rl_weight: w_rl, weight of the binary reward in the advantage
	OPDWeight     float64 // opd_weight: w_opd, weight of teacher − old in the advantage
	AdvantageClip float64 // advantage_clip: bound on |teacher − old|; ≤ 0 disables
	// BaselineWindow (reward_baseline_window) is the window, in rewards,
	// of the running mean of binary rewards that is subtracted from each
	// reward in the advantage (REINFORCE's baseline): an exponential mean
	// with decay 1 − 1/window over the rewards of earlier steps, starting
	// from one neutral reward of prior weight (see rewardMean). 0 turns it
	// off: the advantage is rl_weight·reward. Without it a user who
	// rejects nearly every answer pushes down every token the model wrote;
	// with it rejections that are the rule soon teach little, and the rare
	// accepted answer much.
	BaselineWindow int
	// MeasureKL computes the KL to the frozen reference (Metrics.KL) even
	// when KLCoef is 0, for a guard that watches it; it costs a forward
	// pass of the reference per sample.
	MeasureKL bool

	// Off-policy samples.
	MaxStaleness  int     // max_staleness: samples more optimizer steps of the lineage behind are dropped
	ImportanceCap float64 // importance_cap: cap of the truncated importance weight; ≤ 0 disables
	// PPOEpochs (ppo_epochs) is the number of optimizer updates one Step
	// makes on its batch, all against the proximal policy (the parameters
	// before the first update): AReaL's decoupled PPO. With 1 the clip
	// never binds (the proximal policy is the one being updated); with
	// more it bounds how far one batch moves each token.
	PPOEpochs int
	// TargetKL (target_kl) is the trust region of a step: the largest KL
	// from the parameters at the step's start to those after an update,
	// per trained token (importance-weighted k3 over the batch); an update
	// that goes further is halved until it is within, or undone (see
	// Trainer.Step). 0 turns it off, and saves a forward pass per update.
	TargetKL float64

	// Batching.
	MicroBatchTokens int // micro_batch_tokens: token budget of one forward/backward pass

	// What is trained.
	LoRARank    int      // lora.rank: 0 trains every weight (full fine-tuning)
	LoRAAlpha   float64  // lora.alpha: adapter scale is alpha/rank
	LoRATargets []string // lora.targets: q, k, v, o, gate, up, down
	LoRASeed    uint64   // lora.seed: initialisation of the adapters
	// LoRAMergeDType is the dtype of the merged matrices of a published LoRA
	// version (lora.merge_dtype): "float32" keeps every update; "bfloat16"
	// halves their memory and decode bandwidth but loses updates smaller
	// than half a BF16 step of a weight. Over a quantized base (Q8_0,
	// Q4_0, Q4_1 matrices) a version merges nothing: it serves the adapters
	// unmerged over the quantized matrices (model.Trainable.Snapshot).
	LoRAMergeDType string
	Checkpointing  bool // activation_checkpointing: recompute activations in backward to save memory
}

// DefaultOptions returns the defaults of config.yaml's trainer section.
func DefaultOptions() Options {
	return Options{
		LR: 1e-5, Beta1: 0.9, Beta2: 0.98, AdamEps: 1e-8, WeightDecay: 0.1,
		GradClip: 1.0, WarmupSteps: 10,
		EpsLow: 0.2, EpsHigh: 0.28, KLCoef: 0, RLWeight: 1, OPDWeight: 1, AdvantageClip: 0, BaselineWindow: DefaultBaselineWindow,
		MaxStaleness: 4, ImportanceCap: 2, PPOEpochs: 1, TargetKL: DefaultTargetKL,
		MicroBatchTokens: 4096,
		LoRARank:         0, LoRAAlpha: 32, LoRATargets: []string{"q", "k", "v", "o", "gate", "up", "down"}, LoRASeed: 1,
		LoRAMergeDType: "float32",
	}
}

// DefaultTargetKL is target_kl's default (config.yaml says how it was
// measured).
const DefaultTargetKL = 0.03

// DefaultBaselineWindow is reward_baseline_window's default.
const DefaultBaselineWindow = 16

// maxMaxStaleness bounds max_staleness (Metrics.Staleness has one bin per
// version).
const maxMaxStaleness = 1024

// loraTargetNames are the module names Options.LoRATargets may list.
var loraTargetNames = []string{"q", "k", "v", "o", "gate", "up", "down"}

// Validate reports every option that is out of range, joined into one
// error, each naming its config key.
func (o *Options) Validate() error {
	var errs []error
	bad := func(key string, v any, want string) {
		errs = append(errs, fmt.Errorf("trainer.%s = %v: %s", key, v, want))
	}
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	if !(o.LR > 0) || !finite(o.LR) {
		bad("lr", o.LR, "must be positive")
	}
	if !(o.Beta1 >= 0 && o.Beta1 < 1) {
		bad("adam_beta1", o.Beta1, "must lie in [0, 1)")
	}
	if !(o.Beta2 >= 0 && o.Beta2 < 1) {
		bad("adam_beta2", o.Beta2, "must lie in [0, 1)")
	}
	if !(o.AdamEps > 0) || !finite(o.AdamEps) {
		bad("adam_eps", o.AdamEps, "must be positive")
	}
	if !(o.WeightDecay >= 0) || !finite(o.WeightDecay) {
		bad("weight_decay", o.WeightDecay, "must be ≥ 0")
	}
	if !finite(o.GradClip) {
		bad("grad_clip", o.GradClip, "must be finite (≤ 0 disables)")
	}
	if o.WarmupSteps < 0 {
		bad("warmup_steps", o.WarmupSteps, "must be ≥ 0")
	}
	if !(o.EpsLow >= 0 && o.EpsLow < 1) {
		bad("clip_eps_low", o.EpsLow, "must lie in [0, 1)")
	}
	if !(o.EpsHigh >= 0) || !finite(o.EpsHigh) {
		bad("clip_eps_high", o.EpsHigh, "must be ≥ 0")
	}
	if !(o.KLCoef >= 0) || !finite(o.KLCoef) {
		bad("kl_coef", o.KLCoef, "must be ≥ 0")
	}
	if !finite(o.RLWeight) {
		bad("rl_weight", o.RLWeight, "must be finite")
	}
	if !finite(o.OPDWeight) {
		bad("opd_weight", o.OPDWeight, "must be finite")
	}
	if !finite(o.AdvantageClip) {
		bad("advantage_clip", o.AdvantageClip, "must be finite (≤ 0 disables)")
	}
	if o.BaselineWindow < 0 {
		bad("reward_baseline_window", o.BaselineWindow, "must be ≥ 0 (0 disables)")
	}
	if o.PPOEpochs < 1 || o.PPOEpochs > 16 {
		bad("ppo_epochs", o.PPOEpochs, "must lie in [1, 16]")
	}
	if o.MaxStaleness < 0 || o.MaxStaleness > maxMaxStaleness {
		bad("max_staleness", o.MaxStaleness, fmt.Sprintf("must lie in [0, %d]", maxMaxStaleness))
	}
	if !(o.TargetKL >= 0) || !finite(o.TargetKL) {
		bad("target_kl", o.TargetKL, "must be ≥ 0 (0 disables)")
	}
	if !finite(o.ImportanceCap) {
		bad("importance_cap", o.ImportanceCap, "must be finite (≤ 0 disables)")
	}
	if o.MicroBatchTokens < 1 {
		bad("micro_batch_tokens", o.MicroBatchTokens, "must be positive")
	}
	if o.LoRARank < 0 {
		bad("lora.rank", o.LoRARank, "must be ≥ 0 (0: full fine-tuning)")
	}
	if o.LoRARank > 0 {
		if !(o.LoRAAlpha > 0) || !finite(o.LoRAAlpha) {
			bad("lora.alpha", o.LoRAAlpha, "must be positive")
		}
		if len(o.LoRATargets) == 0 {
			bad("lora.targets", o.LoRATargets, "must name at least one of q, k, v, o, gate, up, down")
		}
		if o.LoRAMergeDType != "float32" && o.LoRAMergeDType != "bfloat16" {
			bad("lora.merge_dtype", o.LoRAMergeDType, "want float32 or bfloat16")
		}
		for _, t := range o.LoRATargets {
			ok := false
			for _, n := range loraTargetNames {
				ok = ok || t == n
			}
			if !ok {
				bad("lora.targets", t, "unknown module (want q, k, v, o, gate, up or down)")
			}
		}
	}
	return errors.Join(errs...)
}

// LearningRate is the learning rate of optimizer step number step (counting
// from 1): linear warm-up from LR/WarmupSteps to LR over the first
// WarmupSteps steps, then constant.
func (o *Options) LearningRate(step int) float64 {
	if o.WarmupSteps > 0 && step < o.WarmupSteps {
		return o.LR * float64(max(step, 1)) / float64(o.WarmupSteps)
	}
	return o.LR
}

// AdamW returns the optimizer the options configure.
func (o *Options) AdamW() AdamW {
	return AdamW{Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.AdamEps, WeightDecay: o.WeightDecay, GradClip: o.GradClip}
}

// AdamW is the project's one AdamW optimizer: Trainer.Step and the
// pretraining run (package pretrain) both update their parameters with
// Update, so that they share the update itself (the backend's
// compute.Trainer.AdamW: decoupled weight decay as torch.optim.AdamW, bias
// correction by the 1-based step number), global-norm clipping and the
// rule for which parameters decay (DecaysWeight). The learning-rate
// schedule is the caller's.
type AdamW struct {
	Beta1, Beta2, Eps float64
	// WeightDecay is the decoupled decay rate, applied to the parameters
	// DecaysWeight accepts.
	WeightDecay float64
	// GradClip bounds the global L2 norm of the gradient (≤ 0: no bound).
	GradClip float64
}

// DecaysWeight reports whether AdamW's weight decay applies to p: to the
// matrices (linear layers, the embedding and a separate LM head, LoRA's A
// and B) and not to tensors of fewer than two dimensions, the RMSNorm
// weights and the biases (Qwen2's q, k and v biases). This is the usual
// rule (nanoGPT decays exactly the ≥ 2-D parameters; Hugging Face's
// Trainer exempts biases and norm weights): decaying a norm's gain pulls
// it towards zero, shrinking the layer's output instead of regularising
// it.
func DecaysWeight(p model.Param) bool { return len(p.Value.Shape()) >= 2 }

// ClipScale is the factor that brings a gradient of global L2 norm
// gradNorm within GradClip: GradClip/gradNorm above the bound, else 1.
func (a AdamW) ClipScale(gradNorm float64) float64 {
	if a.GradClip > 0 && gradNorm > a.GradClip {
		return a.GradClip / gradNorm
	}
	return 1
}

// Update queues AdamW step number step (1-based) of p on b, from p's
// gradient, clipped for a global gradient norm gradNorm (ClipScale), with
// p's moments m and v, at learning rate lr. The caller synchronizes b.
func (a AdamW) Update(b compute.Trainer, p model.Param, m, v compute.Tensor, step int, lr, gradNorm float64) {
	wd := 0.0
	if DecaysWeight(p) {
		wd = a.WeightDecay
	}
	b.AdamW(p.Value, p.Grad, m, v, compute.AdamW{
		LR: float32(lr), Beta1: float32(a.Beta1), Beta2: float32(a.Beta2), Eps: float32(a.Eps),
		WeightDecay: float32(wd), Step: step, GradScale: float32(a.ClipScale(gradNorm)),
	})
}
