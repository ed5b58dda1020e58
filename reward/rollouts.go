package reward

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
)

// Hinted rollouts: the paper's hint distillation scores only the tokens
// the student sampled, so a behaviour absent from every sample (a closing
// word the user asked for) gets no probability it can raise. With
// MethodHinted the teacher (the policy with the hint in its context) also
// generates responses of its own; each becomes a sample whose prompt is
// the turn's original prompt (no hint) and whose response is the
// teacher's, with the teacher's log-probs per token. The trainer's
// advantage on such a token is opd_weight·(teacher − student): large where
// the teacher chose what the student would not have (the closing word),
// near zero where they agree. That is on-policy distillation on teacher
// samples: the student learns behaviour it never produced.

// HintedRollout is one response the teacher generated under the hint.
type HintedRollout struct {
	// Tokens are the generated tokens, the closing stop token included
	// (the student learns to stop where the teacher stopped).
	Tokens []int32
	// TeacherLogProbs[i] is the teacher's log-prob of Tokens[i] (at
	// temperature 1, under the weights that generated it).
	TeacherLogProbs []float32
	// Version is the policy version that generated it, for teacher
	// "policy"; 0 for a frozen teacher ("reference", "judge"), whose
	// checkpoint weights are no version of the lineage: the store dates
	// such a rollout by the turn it corrects (store.Rollout), so that it
	// ages in training steps like the turn's own sample rather than from
	// the first version.
	Version uint64
}

// RolloutGenerator generates the teacher's responses to a prompt.
type RolloutGenerator interface {
	Rollouts(ctx context.Context, prompt []int32, n, maxTokens int, temperature float32) ([]HintedRollout, error)
}

// SchedulerRollouts generates hinted rollouts through a rollout scheduler,
// as background work below every user request.
type SchedulerRollouts struct {
	Gen rollout.Generator
	// StopTokens end a response (EOS, end of turn).
	StopTokens []int32
	// Frozen generates with the checkpoint's weights (teacher "reference"
	// or "judge") instead of the live policy (teacher "policy").
	Frozen bool
	TopP   float32
}

// Rollouts generates n responses to prompt at once and returns those that
// the teacher finished with a stop token; it fails only when none did. A
// response cut by maxTokens is no demonstration of a whole reply: learnt
// token by token it teaches the student not to stop (measured: replies
// that repeated the learnt closing word to max_tokens).
func (sr *SchedulerRollouts) Rollouts(ctx context.Context, prompt []int32, n, maxTokens int, temperature float32) ([]HintedRollout, error) {
	if sr.Gen == nil || len(sr.StopTokens) == 0 {
		return nil, errors.New("reward: hinted rollouts need a generator and stop tokens")
	}
	if n < 1 || maxTokens < 1 || len(prompt) == 0 {
		return nil, fmt.Errorf("reward: hinted rollouts: need n >= 1, maxTokens >= 1 and a prompt (got %d, %d, %d tokens)", n, maxTokens, len(prompt))
	}
	req := rollout.Request{
		Prompt: prompt, Sampling: sample.Params{Temperature: temperature, TopP: sr.TopP},
		MaxTokens: maxTokens, StopTokens: sr.StopTokens, Frozen: sr.Frozen, Background: true,
	}
	reqs := make([]rollout.Request, n)
	for i := range reqs {
		reqs[i] = req
	}
	outs, err := rollout.GenerateAll(ctx, sr.Gen, reqs)
	if err != nil {
		return nil, fmt.Errorf("reward: hinted rollouts: %w", err)
	}
	var out []HintedRollout
	var firstErr error
	for _, o := range outs {
		switch {
		case o.Err != nil:
			firstErr = cmpOr(firstErr, o.Err)
		case len(o.Tokens) == 0 || len(o.Tokens) == 1 && slices.Contains(sr.StopTokens, o.Tokens[0]):
			// An empty response teaches nothing.
		case o.Finish != rollout.FinishStop:
			firstErr = cmpOr(firstErr, fmt.Errorf("a rollout ended with %q, not a stop token", o.Finish))
		default:
			v := o.Version
			if sr.Frozen {
				v = 0 // the checkpoint's weights, whatever the generator reports
			}
			out = append(out, HintedRollout{Tokens: o.Tokens, TeacherLogProbs: o.LogProbs, Version: v})
		}
	}
	if len(out) == 0 {
		if firstErr == nil {
			firstErr = errors.New("every rollout was empty or unfinished")
		}
		return nil, fmt.Errorf("reward: hinted rollouts: %w", firstErr)
	}
	return out, nil
}
