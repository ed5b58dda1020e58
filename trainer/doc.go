// Package trainer turns scored turns into parameter updates: binary RL
// (PPO-clip on judge votes), hint distillation (per-token advantages from a
// teacher's log-probs), or both, with AdamW, on the served model, in full
// or through LoRA adapters.
//
// # The loss
//
// For a sample with response tokens t and an unmasked count n:
//
//	A_t  = w_rl·r + w_opd·clip(teacher_t − old_t, ±c)     (or Sample.Advantages)
//	w_t  = min(exp(old_t − rollout_t), importance_cap)   (staleness correction)
//	ρ_t  = exp(logπ_t − old_t)
//	pg_t = max(−ρ_t·A_t, −clip(ρ_t, 1−ε_low, 1+ε_high)·A_t)
//	kl_t = exp(ref_t − logπ_t) − (ref_t − logπ_t) − 1     (k3, when kl_coef > 0)
//	L    = mean over samples of (1/n)·Σ_t (w_t·pg_t + kl_coef·kl_t)
//
// The loss is computed on the host from the forward pass's log-probs; its
// derivative with respect to each token's log-prob is worked out by hand
// (zero where the clipped branch is active) and handed to the model's
// backward pass, which turns it into parameter gradients. old_t is the
// forward pass's own log-prob, detached (see Trainer.Step).
//
// # A step
//
// Trainer.Step validates the batch, drops samples that are too stale or
// carry no signal, runs forward and backward in micro-batches bounded by a
// token budget (the gradients add up to the whole batch's), checks the
// global gradient norm, clips it, and applies one AdamW step with a
// linearly warmed-up learning rate. A NaN or infinite loss or gradient
// skips the step without touching parameters or optimizer state.
//
// # Versions and checkpoints
//
// Trainer.Publish turns the parameters into an immutable weights.Version
// (package weights) that serving swaps to; Trainer.Save writes it with
// the optimizer state as a checkpoint, and Trainer.Restore resumes from
// one, bit for bit.
package trainer
