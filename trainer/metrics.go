package trainer

// Metrics describe one call of Trainer.Step.
type Metrics struct {
	// Step is the number of optimizer steps applied so far (this one
	// included when it was applied).
	Step int64
	// Applied reports whether this call updated the parameters. It is false
	// when no sample was left to train on or the step was skipped.
	Applied bool
	// Skipped reports a step abandoned because its loss or gradient was
	// NaN or infinite; SkippedTotal counts them over the trainer's life.
	Skipped      bool
	SkippedTotal int64
	// SkipReason says why the step was skipped.
	SkipReason string

	// Loss is the batch loss: per sample the mean over unmasked tokens of
	// w·pg + β·kl, then the mean over samples. Because the old policy is
	// the current one (see Trainer.Step), ρ = 1 and the policy-gradient
	// part equals minus the mean importance-weighted advantage; it shows
	// progress for distillation (teacher − current shrinks) but is flat for
	// pure binary RL.
	Loss float64
	// ClipFraction is the share of unmasked tokens on the clipped branch,
	// averaged over the updates after the first (0 with PPOEpochs 1: the
	// first update's ratio is 1).
	ClipFraction float64
	// KL is the k3 estimate of KL(π‖ref) per unmasked token, at the
	// step's start, each token weighted by the importance of the
	// distribution that drew it (klWeight; 0 without reference log-probs).
	KL float64
	// StepKL is the trust region's estimate of the KL from the step's
	// start to the parameters it published, per trained token (0 when
	// TargetKL is off). Backtracks counts the halvings that brought it
	// within TargetKL, and TrustScale is the share of the optimizer's
	// update that was kept (1: whole; 0: undone).
	StepKL     float64
	Backtracks int
	TrustScale float64
	// Entropy is the mean entropy of the policy per unmasked token, in
	// nats.
	Entropy float64
	// LogProb is the mean log-probability of the response tokens under the
	// policy before the update.
	LogProb float64
	// Advantage is the mean advantage per unmasked token.
	Advantage float64
	// Baseline is the mean reward baseline subtracted from the binary
	// rewards of the step's samples (Options.BaselineWindow; 0 when off or
	// when no sample has a reward).
	Baseline float64
	// ImportanceWeight is the mean truncated importance weight per
	// unmasked token (1 when no sample carries rollout log-probs).
	ImportanceWeight float64
	// GradNorm is the global L2 norm of the gradient before clipping.
	GradNorm float64
	// LR is the learning rate of this step (after warm-up).
	LR float64

	// Samples trained on, their unmasked response Tokens, and all tokens
	// of their forward passes (prompt and response).
	Samples, Tokens, PassTokens int
	// MicroBatches is the number of forward/backward passes.
	MicroBatches int
	// Dropped counts samples not trained on: Stale (more than
	// max_staleness optimizer steps of the lineage old), NoSignal (no
	// reward, teacher or advantage), Empty (every token masked).
	Dropped  int
	Stale    int
	NoSignal int
	Empty    int
	// Staleness[k] counts the trained samples generated k optimizer steps
	// of the lineage before the trainer's parameters (k = 0 …
	// max_staleness).
	Staleness []int
}
