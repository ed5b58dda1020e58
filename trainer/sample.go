package trainer

import "fmt"

// Sample is one trainable response: the tokens the policy saw and produced,
// what the rollout recorded while producing them, and the signal the reward
// stage attached. Slices indexed by response token have len(Response)
// entries; nil means "absent".
type Sample struct {
	// ResponseID and TurnID trace the sample back to the store (the
	// response id the client saw, the turn record); they are not used for
	// training.
	ResponseID string
	TurnID     string

	Prompt   []int32 // the context the response was generated from
	Response []int32 // the generated tokens

	// Version is the weight version that generated Response; it sets the
	// sample's staleness: the optimizer steps between its weights and the
	// trainer's along the lineage (see Lineage), or, for a version the
	// lineage does not know, the difference of the version numbers (a
	// version ahead of the trainer's counts as fresh).
	Version uint64
	// RolloutLogProbs are the log-probabilities of the response tokens
	// under the distribution they were drawn from: the behaviour policy,
	// Version's weights with the request's temperature, top-k, top-p and
	// grammar mask applied (rollout.Event.SampleLogProb), not the model's
	// own distribution. With them each token's loss is weighted by
	// min(π_prox/μ, importance_cap), which corrects both for the versions
	// between the rollout and the step and for the sampler (see the
	// package doc); nil skips the correction.
	RolloutLogProbs []float32
	// TeacherDrawn marks a response the teacher generated (a hinted
	// rollout) rather than the policy: its loss takes no importance weight
	// (the advantage teacher − π says how far the policy is from it), and
	// the KL estimates weight its tokens by min(π/teacher, cap), the
	// teacher's log-probs standing for the distribution that drew them.
	TeacherDrawn bool

	// Reward is the binary RL reward: +1 or −1 from the judge or a thumb,
	// 0 for none. Its advantage is Options.RLWeight·(Reward − b) on every
	// token, b the running mean of earlier rewards (Options.BaselineWindow).
	Reward float32
	// TeacherLogProbs are the log-probabilities of the response tokens
	// under the teacher context (the prompt with the judge's hint); with
	// them each token's advantage gains Options.OPDWeight·(teacher − old).
	TeacherLogProbs []float32
	// Advantages, when set, are used as the per-token advantages instead
	// of those derived from Reward and TeacherLogProbs.
	Advantages []float32
	// RefLogProbs are the response's log-probabilities under the frozen
	// reference policy, for the KL penalty. When the penalty is on and
	// they are nil, the trainer computes them with the reference weights.
	RefLogProbs []float32
	// Supervised marks an example no policy drew (a replay sample, package
	// replay), learnt through explicit Advantages. The KL estimates are
	// importance-weighted by the distribution that drew each token, and an
	// example has none, so it is neither measured nor penalized: unweighted,
	// k3 on tokens the policy has learnt to avoid reads as a huge
	// divergence (and trips the guard's kl_max) where none was sampled.
	Supervised bool
	// Mask selects the response tokens that count in the loss; nil counts
	// all. A token a grammar forced (rollout.Event.Forced) is masked: the
	// model had no choice, and a reward must not push it up or down.
	Mask []bool
}

// Tokens is the number of tokens a forward pass over the sample processes.
func (s *Sample) Tokens() int { return len(s.Prompt) + len(s.Response) }

// hasSignal reports whether the sample asks for any update: a reward, a
// teacher, or explicit advantages. Turns scored 0 with no hint train
// nothing.
func (s *Sample) hasSignal() bool {
	return s.Reward != 0 || s.TeacherLogProbs != nil || s.Advantages != nil
}

// unmasked counts the response tokens that count in the loss.
func (s *Sample) unmasked() int {
	if s.Mask == nil {
		return len(s.Response)
	}
	n := 0
	for _, m := range s.Mask {
		if m {
			n++
		}
	}
	return n
}

// validate checks the sample's shape against the model: both token lists
// non-empty, ids inside the vocabulary, the whole sequence within the
// model's positions, and every per-token slice as long as the response.
// Values (a NaN advantage, say) are not checked here: a non-finite loss or
// gradient skips the step instead (see Trainer.Step).
func (s *Sample) validate(vocab, maxPositions int) error {
	switch {
	case len(s.Prompt) == 0:
		return fmt.Errorf("empty prompt")
	case len(s.Response) == 0:
		return fmt.Errorf("empty response")
	case s.Tokens() > maxPositions:
		return fmt.Errorf("%d tokens exceed the model's %d positions", s.Tokens(), maxPositions)
	}
	for _, toks := range [][]int32{s.Prompt, s.Response} {
		for _, id := range toks {
			if id < 0 || int(id) >= vocab {
				return fmt.Errorf("token id %d outside the vocabulary of %d", id, vocab)
			}
		}
	}
	n := len(s.Response)
	for _, f := range []struct {
		name string
		len  int
		set  bool
	}{
		{"rollout log-probs", len(s.RolloutLogProbs), s.RolloutLogProbs != nil},
		{"teacher log-probs", len(s.TeacherLogProbs), s.TeacherLogProbs != nil},
		{"advantages", len(s.Advantages), s.Advantages != nil},
		{"reference log-probs", len(s.RefLogProbs), s.RefLogProbs != nil},
		{"mask", len(s.Mask), s.Mask != nil},
	} {
		if f.set && f.len != n {
			return fmt.Errorf("%d %s for %d response tokens", f.len, f.name, n)
		}
	}
	return nil
}

// describe names the sample in errors.
func (s *Sample) describe(i int) string {
	switch {
	case s.ResponseID != "":
		return fmt.Sprintf("sample %d (response %s)", i, s.ResponseID)
	case s.TurnID != "":
		return fmt.Sprintf("sample %d (turn %s)", i, s.TurnID)
	}
	return fmt.Sprintf("sample %d", i)
}
