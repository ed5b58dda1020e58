package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/clawrl/clawrl/learnbench"
	"github.com/clawrl/clawrl/pretrain"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/tokenizer"
)

// guardSkill returns the guard's held-out skill check: n held-out
// arithmetic and tool-use prompts (the same kind `bench learn` uses),
// answered greedily by the live weights through the scheduler as
// background work, scored as the share answered right. The prompts are
// fixed for the daemon's life, so scores of two versions compare.
func (e *engine) guardSkill(n int, vars map[string]any) (func(ctx context.Context) (float64, error), error) {
	probes := learnbench.SkillProbes(n, 0x5a11)
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
		streams := make([]<-chan rollout.Event, len(prompts))
		gctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for i, p := range prompts {
			ch, err := e.sched.Generate(gctx, rollout.Request{Prompt: p, Sampling: sample.Params{Temperature: 0},
				MaxTokens: 96, StopTokens: stops, Background: true})
			if err != nil {
				cancel()
				for _, s := range streams[:i] {
					for range s {
					}
				}
				return 0, fmt.Errorf("guard: skill probe: %w", err)
			}
			streams[i] = ch
		}
		pass := 0
		var errs []error
		for i, s := range streams {
			var toks []int32
			for ev := range s {
				if ev.HasToken {
					toks = append(toks, ev.Token)
				}
				if ev.Finish == rollout.FinishError {
					errs = append(errs, ev.Err)
				}
			}
			text := e.tok.Decode(toks)
			tool := ""
			if c, ok := pretrain.ParseToolCall(text); ok {
				tool = c.Name
			}
			if probes[i].Check(strings.TrimSpace(text), tool) {
				pass++
			}
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if len(errs) > 0 {
			return 0, fmt.Errorf("guard: skill probe: %w", errors.Join(errs...))
		}
		return float64(pass) / float64(len(prompts)), nil
	}, nil
}
