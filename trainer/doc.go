// Package trainer turns scored turns into parameter updates: binary RL
// (PPO-clip on judge votes), hint distillation (per-token advantages from a
// teacher's log-probs), or both, with AdamW, on the served model, in full
// or through LoRA adapters.
//
// # The loss
//
// For a sample with response tokens t and an unmasked count n:
//
//	A_t  = w_rl·(r − b) + w_opd·clip(teacher_t − old_t, ±c) (or Sample.Advantages)
//	w_t  = min(exp(old_t − μ_t), importance_cap)          (behaviour → proximal)
//	ρ_t  = exp(logπ_t − old_t)
//	pg_t = max(−ρ_t·A_t, −clip(ρ_t, 1−ε_low, 1+ε_high)·A_t)
//	kl_t = exp(ref_t − logπ_t) − (ref_t − logπ_t) − 1     (k3, when kl_coef > 0)
//	L    = mean over samples of (1/n)·Σ_t (w_t·pg_t + kl_coef·kw_t·kl_t)
//
// Tokens a grammar forced (the only one it allowed) are masked out: the
// model had no choice there, and a reward must not push them up or down.
//
// b is the reward baseline (Options.BaselineWindow): a running mean of the
// binary rewards of earlier steps. There is one response per prompt, so
// GRPO's group mean is not available; REINFORCE's running mean stands in.
// Without it a user who rejects nearly everything (a preference the model
// never meets yet) is pure −1 reward on every token the model wrote, which
// measurably damaged the bundled model's skills (bundled/LEARNING.md).
//
// # Which policy is trained, and what the importance weight divides by
//
// The trainer optimises the model's own distribution: softmax of the raw
// logits, temperature 1, the whole vocabulary. That is what the teacher's
// and the reference's log-probs are (distillation's teacher − old and
// the KL compare distributions at temperature 1), and what every client
// temperature is derived from: clients choose temperature, top-p and
// top-k per request, so there is no single tempered policy to train.
// Tokens, though, are drawn from μ, the behaviour distribution: the
// generating version's logits restricted to what a grammar allows,
// divided by the temperature, truncated by top-k and top-p, renormalised
// (rollout.Event.SampleLogProb, recorded per turn beside the model's own
// log-prob). An unbiased importance weight for a temperature-1 objective
// must divide by the probability the token was really drawn with, so μ_t
// is that log-prob, not the model's: w_t = min(π_prox/μ, cap) corrects at
// once for the versions between the rollout and the step and for the
// sampler (a token the sampler favours, the mode at temperature 0.7, counts
// less than 1; one it disfavours counts up to the cap; tokens outside the
// top-p nucleus are never drawn and cannot be corrected for). Greedy
// decoding gives μ = 1 and a forced token is masked. A turn recorded
// before these log-probs were kept trains with the model's own, as
// before.
//
// verl and AReaL make the other choice with the same decomposition: one
// temperature for every rollout, and the tempered policy trained. verl's
// actor recomputes the proximal ("old") log-probs with logits divided by
// the rollout temperature (workers/actor/dp_actor.py), and its rollout
// log-probs come from vLLM with logprobs_mode "processed_logprobs" (after
// temperature and top-k/top-p), so its rollout-correction weight
// π_old/π_rollout (TIS, docs/algo/rollout_corr_math.md: Drift 1) covers
// truncation and engine mismatch while the clip ratio π_θ/π_old (Drift 2)
// bounds the update. AReaL's decoupled PPO (areal/utils/functional:
// behave_imp_weight = π_proximal/π_behave, the ratio against the
// proximal policy) likewise recomputes the proximal log-probs with the
// actor's generation temperature. Both keep the behaviour policy (the
// distribution that sampled) apart from the proximal one (the parameters
// at the step's start), as here; neither trains a per-request temperature,
// which an OpenAI-compatible server must serve.
//
// # KL estimates
//
// k3 estimates KL(π‖ref) without bias only on tokens drawn from π. On a
// token a teacher or an old version drew and the policy has since learnt
// to avoid, exp(ref − logπ) is e^10 and more: in `clawrl bench learn`
// over every scenario, a batch of four teacher rollouts whose mean
// log-ratio log π − log ref was −0.99 read a mean KL of 80 (one token's
// k3: 620), and of the nine KL trips of the run, five had a mean
// log-ratio under 0.6 (the issue saw 534 and 1.17e3). So every KL
// estimate weights each token by
// kw = min(π/μ, cap), μ being the distribution that drew it (the
// sampler's, or the teacher's for a hinted rollout), and replay examples,
// which nothing drew, are left out. The KL to the reference (Metrics.KL,
// the guard's kl_max) is Σ kw·k3 / Σ kw at the step's start; the trust
// region's (Metrics.StepKL) is the same estimate of KL(π_start‖π_new).
//
// The loss is computed on the host from the forward pass's log-probs; its
// derivative with respect to each token's log-prob is worked out by hand
// (zero where the clipped branch is active) and handed to the model's
// backward pass, which turns it into parameter gradients. old_t is the
// forward pass's own log-prob, detached (see Trainer.Step).
//
// # A step
//
// Trainer.Step validates the batch, drops samples that are too stale (more
// than max_staleness optimizer steps between their weights and the
// trainer's along the version tree, Lineage: a rollback ages nothing) or
// carry no signal, runs forward and backward in micro-batches bounded by a
// token budget (the gradients add up to the whole batch's), checks the
// global gradient norm, clips it, and applies one AdamW step with a
// linearly warmed-up learning rate. With target_kl the step then stays in
// a trust region: a forward pass estimates its KL to the step's start and
// the update is scaled back until it is within. A NaN or infinite loss or
// gradient skips the step without touching parameters or optimizer
// state.
//
// # Versions and checkpoints
//
// Trainer.Publish turns the parameters into an immutable weights.Version
// (package weights) that serving swaps to; Trainer.Save writes it with
// the optimizer state as a checkpoint, and Trainer.Restore resumes from
// one, bit for bit.
package trainer
