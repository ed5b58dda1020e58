package trainer

import "math"

// This file holds the loss arithmetic on host slices: advantages,
// importance weights, the PPO-clip objective, the k3 KL estimator, and
// their derivatives with respect to each token's log-probability. The
// model's backward pass takes those derivatives (Pass.Backward), so the
// loss never needs a tensor of its own.

// clipConfig is what the per-token loss needs from Options.
type clipConfig struct {
	epsLow, epsHigh float64 // PPO clip range [1−epsLow, 1+epsHigh]
	klCoef          float64 // β of the k3 KL penalty (0: off)
}

// tokenTerm is one token's share of the loss and its derivative.
type tokenTerm struct {
	loss    float64 // w·pg + β·kw·kl
	grad    float64 // d loss / d logπ
	clipped bool    // the clipped branch was active (zero policy gradient)
	kl      float64 // the k3 estimate (reported even when β is 0)
}

// ppoToken evaluates the clipped surrogate for one token:
//
//	ρ    = exp(logπ − logπ_old)
//	pg   = max(−ρ·A, −clip(ρ, 1−ε_low, 1+ε_high)·A)
//	kl   = exp(ref − logπ) − (ref − logπ) − 1          (k3, when hasRef)
//	loss = w·pg + β·kw·kl
//
// and its derivative with respect to logπ. Where the unclipped branch is the
// max (always so when ρ lies inside the clip range, since then the two are
// equal) d pg/d logπ = −ρ·A; where the clipped branch is strictly larger,
// pg does not depend on logπ and the derivative is zero. That happens
// exactly when A > 0 and ρ > 1+ε_high, or A < 0 and ρ < 1−ε_low: the
// update already moved the token's probability far enough in the direction
// the advantage asks for. The importance weights w (of the loss) and kw
// (of the KL term, see klWeight) are constants (they do not depend on
// logπ). d kl/d logπ = 1 − exp(ref − logπ).
func ppoToken(c clipConfig, logp, old, adv, w, kw, ref float64, hasRef bool) tokenTerm {
	rho := math.Exp(logp - old)
	unclipped := -rho * adv
	clipped := -math.Min(math.Max(rho, 1-c.epsLow), 1+c.epsHigh) * adv
	var t tokenTerm
	if clipped > unclipped {
		t.loss = w * clipped
		t.clipped = true
	} else {
		t.loss = w * unclipped
		t.grad = w * unclipped // d(−ρA)/dlogπ = −ρA
	}
	if hasRef {
		d := ref - logp
		e := math.Exp(d)
		t.kl = e - d - 1
		if c.klCoef != 0 {
			t.loss += c.klCoef * kw * t.kl
			t.grad += c.klCoef * kw * (1 - e)
		}
	}
	return t
}

// importanceWeight is the truncated importance ratio that corrects a token
// drawn from the behaviour distribution μ (the rollout's sampling
// distribution: an older version's, tempered, truncated, masked) for the
// proximal policy being updated: min(exp(old − behaviour), cap). A cap ≤ 0
// turns the correction off.
func importanceWeight(old, behaviour, cap float64) float64 {
	if cap <= 0 {
		return 1
	}
	return math.Min(math.Exp(old-behaviour), cap)
}

// lossWeight is the importance weight of token t of s in the loss: against
// its behaviour log-prob when it has one, 1 for a response the teacher drew
// (distillation on the teacher's tokens is off-policy by design) or one
// without a record of its sampling.
func lossWeight(s *Sample, t int, old, cap float64) float64 {
	if s.TeacherDrawn || s.RolloutLogProbs == nil {
		return 1
	}
	return importanceWeight(old, float64(s.RolloutLogProbs[t]), cap)
}

// klWeight is the importance weight of token t of s in the KL estimates
// (to the reference, and the trust region's to the step's start): k3 is an
// estimator of KL(π‖·) on tokens drawn from π, and a token drawn from
// another distribution μ counts min(π/μ, cap) times, μ being the rollout's
// sampling distribution, or the teacher's for a response it drew. Without
// this, one token the policy has learnt to avoid and a teacher or an old
// version drew makes exp(ref − logπ) (e^10 and more) the mean of a whole
// batch. ok is false for a token no distribution on record drew (a
// Supervised example): it is left out. A sample without a record counts
// as the policy's own (weight 1), and so does every token when cap ≤ 0.
func klWeight(s *Sample, t int, old, cap float64) (w float64, ok bool) {
	switch {
	case s.Supervised:
		return 0, false
	case cap <= 0:
		return 1, true
	case s.TeacherDrawn && s.TeacherLogProbs != nil:
		return importanceWeight(old, float64(s.TeacherLogProbs[t]), cap), true
	case s.RolloutLogProbs != nil && !s.TeacherDrawn:
		return importanceWeight(old, float64(s.RolloutLogProbs[t]), cap), true
	}
	return 1, true
}

// advantageConfig is what advantage needs from Options.
type advantageConfig struct {
	rlWeight, opdWeight float64
	clip                float64 // |teacher − old| bound of the distillation term; ≤ 0: none
	baseline            float64 // subtracted from a binary reward (Options.BaselineWindow)
}

// advantage is one token's advantage: w_rl·(r − b) (binary RL, when the
// sample has a reward; b the running baseline, 0 when off) plus w_opd·clip(teacher − old, ±c) (hint distillation, when it
// has teacher log-probs). An explicit per-token advantage overrides both.
func advantage(c advantageConfig, s *Sample, t int, old float64) float64 {
	if s.Advantages != nil {
		return float64(s.Advantages[t])
	}
	var a float64
	if s.Reward != 0 {
		a += c.rlWeight * (float64(s.Reward) - c.baseline)
	}
	if s.TeacherLogProbs != nil {
		d := float64(s.TeacherLogProbs[t]) - old
		if c.clip > 0 {
			d = math.Max(-c.clip, math.Min(c.clip, d))
		}
		a += c.opdWeight * d
	}
	return a
}

// sampleTerms is the result of sampleLoss for one sample.
type sampleTerms struct {
	loss    float64   // mean over unmasked tokens of the token losses
	grad    []float32 // d(scale·loss)/d logπ per response token
	tokens  int       // unmasked tokens
	clipped int       // unmasked tokens on the clipped branch
	klSum   float64   // Σ kw·k3 over unmasked tokens with a reference
	klW     float64   // Σ kw over them
	advSum  float64
	wSum    float64 // sum of importance weights over unmasked tokens
}

// sampleLoss computes one sample's token-mean loss and the derivative of
// scale·loss with respect to each response token's log-probability (zero at
// masked tokens). logp are the current policy's log-probs, old the detached
// old-policy log-probs (see Trainer.Step), ref the reference log-probs (nil
// without a reference), isCap the importance_cap of lossWeight and
// klWeight.
func sampleLoss(cc clipConfig, ac advantageConfig, isCap float64, s *Sample, logp, old, ref []float32, scale float64) sampleTerms {
	n := len(s.Response)
	st := sampleTerms{grad: make([]float32, n)}
	for t := range n {
		if s.Mask != nil && !s.Mask[t] {
			continue
		}
		st.tokens++
	}
	if st.tokens == 0 {
		return st
	}
	inv := 1 / float64(st.tokens)
	for t := range n {
		if s.Mask != nil && !s.Mask[t] {
			continue
		}
		o := float64(old[t])
		a := advantage(ac, s, t, o)
		w := lossWeight(s, t, o, isCap)
		kw, hasKW := klWeight(s, t, o, isCap)
		var r float64
		hasRef := ref != nil && hasKW
		if hasRef {
			r = float64(ref[t])
		}
		tt := ppoToken(cc, float64(logp[t]), o, a, w, kw, r, hasRef)
		st.loss += tt.loss * inv
		st.grad[t] = float32(tt.grad * inv * scale)
		if tt.clipped {
			st.clipped++
		}
		if hasRef {
			st.klSum += kw * tt.kl
			st.klW += kw
		}
		st.advSum += a
		st.wSum += w
	}
	return st
}
