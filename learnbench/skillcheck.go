package learnbench

import (
	"context"
	"fmt"
	"strings"

	"github.com/clawrl/clawrl/corpus"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/tokenizer"
)

// The daemon's guard measures held-out skills with the same probes as the
// bench (SkillProbes), through its own scheduler rather than the API.

// skillCheckSeed seeds the guard's skill probes.
const skillCheckSeed = 0x5a11

// SkillSet names the probe set SkillCheck scores for n probes: a stored
// baseline of another set is measured again. Bump the version when
// SkillProbes changes what it draws.
func SkillSet(n int) string {
	return fmt.Sprintf("learnbench.SkillProbes/v4 n=%d seed=%#x", n, skillCheckSeed)
}

// SkillCheck returns the guard's skill check: n held-out arithmetic,
// tool-use and plain-question prompts and plain facts (SkillProbes), rendered
// with tok's chat template and vars, answered greedily by the live weights
// through gen as background work, scored as the share answered right; a
// reply that runs into the probes' max_tokens never passes (a
// degenerating model repeats "-- Alice" or "banana" to the limit after a
// right answer, which a contains-the-answer check alone would pass). The
// prompts are fixed for the daemon's life, so scores of two versions
// compare.
func SkillCheck(gen rollout.Generator, tok *tokenizer.Tokenizer, stops []int32, vars map[string]any, n int) (func(ctx context.Context) (float64, error), error) {
	probes := SkillProbes(n, skillCheckSeed)
	prompts := make([][]int32, len(probes))
	for i, p := range probes {
		text, err := tok.ApplyChatTemplate(tokenizer.ChatRequest{Messages: p.Messages, Tools: p.Tools, Vars: vars, AddGenerationPrompt: true})
		if err != nil {
			return nil, fmt.Errorf("guard: skill probe %d: %w", i, err)
		}
		prompts[i] = tok.Encode(text)
	}
	return func(ctx context.Context) (float64, error) {
		reqs := make([]rollout.Request, len(prompts))
		for i, p := range prompts {
			reqs[i] = rollout.Request{Prompt: p, Sampling: sample.Params{Temperature: 0}, MaxTokens: 96, StopTokens: stops, Background: true}
		}
		outs, err := rollout.GenerateAll(ctx, gen, reqs)
		if err != nil {
			return 0, fmt.Errorf("guard: skill probe: %w", err)
		}
		pass := 0
		for i, o := range outs {
			if o.Err != nil {
				return 0, fmt.Errorf("guard: skill probe: %w", o.Err)
			}
			if probePasses(probes[i], tok.Decode(o.Tokens), o.Finish) {
				pass++
			}
		}
		return float64(pass) / float64(len(prompts)), nil
	}, nil
}

// probePasses scores one skill probe's reply: right (its text, or the tool
// it calls) and finished before max_tokens.
func probePasses(p Probe, text string, finish rollout.FinishReason) bool {
	if finish == rollout.FinishLength {
		return false
	}
	tool := ""
	if c, ok := corpus.ParseToolCall(text); ok {
		tool = c.Name
	}
	return p.Check(strings.TrimSpace(text), tool)
}
