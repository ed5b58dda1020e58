package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/clawrl/clawrl/learnbench"
	"github.com/clawrl/clawrl/pretrain"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/tokenizer"
)

// guardSkill returns the guard's held-out skill check: n held-out
// arithmetic, tool-use and plain-question prompts (learnbench.SkillProbes,
// which `bench learn` uses too),
// answered greedily by the live weights through the scheduler as
// background work, scored as the share answered right; a reply that runs
// into the probes' max_tokens never passes (a degenerating model repeats
// "-- Alice" or "banana" to the limit after a right answer, which a
// contains-the-answer check alone would pass). The prompts are
// fixed for the daemon's life, so scores of two versions compare.
// guardSkillSet names the probe set guardSkill scores: a stored baseline
// of another set is measured again. Bump the version when SkillProbes
// changes what it draws.
func guardSkillSet(n int) string {
	return fmt.Sprintf("learnbench.SkillProbes/v3 n=%d seed=%#x", n, guardSkillSeed)
}

// guardSkillSeed seeds the guard's skill probes.
const guardSkillSeed = 0x5a11

func (e *engine) guardSkill(n int, vars map[string]any) (func(ctx context.Context) (float64, error), error) {
	probes := learnbench.SkillProbes(n, guardSkillSeed)
	prompts := make([][]int32, len(probes))
	for i, p := range probes {
		text, err := e.tok.ApplyChatTemplate(tokenizer.ChatRequest{Messages: p.Messages, Tools: p.Tools, Vars: vars, AddGenerationPrompt: true})
		if err != nil {
			return nil, fmt.Errorf("guard: skill probe %d: %w", i, err)
		}
		prompts[i] = e.tok.Encode(text)
	}
	stops := e.stopTokens()
	return func(ctx context.Context) (float64, error) {
		reqs := make([]rollout.Request, len(prompts))
		for i, p := range prompts {
			reqs[i] = rollout.Request{Prompt: p, Sampling: sample.Params{Temperature: 0}, MaxTokens: 96, StopTokens: stops, Background: true}
		}
		outs, err := rollout.GenerateAll(ctx, e.sched, reqs)
		if err != nil {
			return 0, fmt.Errorf("guard: skill probe: %w", err)
		}
		pass := 0
		for i, o := range outs {
			if o.Err != nil {
				return 0, fmt.Errorf("guard: skill probe: %w", o.Err)
			}
			if guardProbePasses(probes[i], e.tok.Decode(o.Tokens), o.Finish) {
				pass++
			}
		}
		return float64(pass) / float64(len(prompts)), nil
	}, nil
}

// guardProbePasses scores one skill probe's reply: right (its text, or the
// tool it calls) and finished before max_tokens.
func guardProbePasses(p learnbench.Probe, text string, finish rollout.FinishReason) bool {
	if finish == rollout.FinishLength {
		return false
	}
	tool := ""
	if c, ok := pretrain.ParseToolCall(text); ok {
		tool = c.Name
	}
	return p.Check(strings.TrimSpace(text), tool)
}
