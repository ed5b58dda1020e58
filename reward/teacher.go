package reward

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
)

// HintMarker is the line that introduces the hint in the teacher context.
const HintMarker = "[Hint from hindsight]"

// Teacher scores a response under a prompt: for every response token t,
// log p(response_t | prompt, response_<t), in one forward pass.
type Teacher interface {
	LogProbs(ctx context.Context, prompt, response []int32) ([]float32, error)
}

// TeacherPrompt builds the teacher context of turn t: its messages with
// hint appended to the last user message after a blank line and
// HintMarker, rendered with tok's chat template (the turn's tools and
// template variables, and the generation prompt) and tokenised as the
// server tokenises prompts. Special-token strings in the hint are broken so
// that it cannot forge turn boundaries.
func TeacherPrompt(tok *tokenizer.Tokenizer, t *Turn, hint string) ([]int32, error) {
	if hint == "" {
		return nil, errors.New("reward: teacher prompt without a hint")
	}
	return RenderPrompt(tok, t, hint)
}

// RenderPrompt renders the turn's prompt from its render spec (messages,
// tools as rendered, template variables, prefill), with hint appended to
// its last user message when hint is not empty. With an empty hint it is
// the turn's PromptTokens exactly: the invariant that lets the teacher and
// the hinted rollouts score the student's own context.
func RenderPrompt(tok *tokenizer.Tokenizer, t *Turn, hint string) ([]int32, error) {
	msgs := t.Messages
	if hint != "" {
		last := -1
		for i, m := range t.Messages {
			if m.Role == "user" {
				last = i
			}
		}
		if last < 0 {
			return nil, errors.New("reward: teacher prompt: the turn has no user message to append the hint to")
		}
		msgs = slices.Clone(t.Messages)
		msgs[last].Content += "\n\n" + HintMarker + "\n" + defanger(tok).Replace(hint)
	}
	ids, _, err := tok.EncodeChat(tokenizer.ChatRequest{
		Messages:            msgs,
		Tools:               t.Tools,
		Vars:                t.TemplateVars,
		AddGenerationPrompt: true,
		Prefill:             t.Prefill,
	})
	if err != nil {
		return nil, fmt.Errorf("reward: teacher prompt: %w", err)
	}
	return ids, nil
}

// ModelTeacher is a Teacher over a local model: the judge model, the frozen
// reference policy, or the live policy (self-distillation), whichever the
// caller loads, at the weight version Weights picks. It runs one pass at a
// time in its own KV cache, so it never takes blocks from a scheduler's
// cache; the model itself serialises its forward passes with any scheduler
// running on it.
type ModelTeacher struct {
	m       *model.Model
	cache   *model.KVCache
	weights func() *model.Weights
	turn    chan struct{} // one slot: the pass in progress
}

// NewModelTeacher returns a teacher scoring with m in cache, which must
// belong to m and hold a whole prompt plus response (it is emptied after
// each pass). weights picks the weight set of each pass: the live policy's
// current version for self-distillation; nil (or a nil result) means the
// checkpoint's set, the frozen model. The set it returns must stay unfreed
// for the pass; one freed meanwhile fails that pass (the turn then gets no
// distillation), it does not crash.
func NewModelTeacher(m *model.Model, cache *model.KVCache, weights func() *model.Weights) (*ModelTeacher, error) {
	if m == nil || cache == nil {
		return nil, errors.New("reward: teacher needs a model and a KV cache")
	}
	return &ModelTeacher{m: m, cache: cache, weights: weights, turn: make(chan struct{}, 1)}, nil
}

// LogProbs scores response after prompt. It waits for a pass in progress
// unless ctx ends first; a pass, once started, runs to its end.
func (mt *ModelTeacher) LogProbs(ctx context.Context, prompt, response []int32) ([]float32, error) {
	c := mt.m.Config
	if len(prompt) == 0 || len(response) == 0 {
		return nil, errors.New("reward: teacher: empty prompt or response")
	}
	if n := len(prompt) + len(response); n > c.MaxPositions {
		return nil, fmt.Errorf("reward: teacher: %d prompt + %d response tokens exceed the context of %d", len(prompt), len(response), c.MaxPositions)
	}
	for _, ids := range [][]int32{prompt, response} {
		for _, id := range ids {
			if id < 0 || int(id) >= c.VocabSize {
				return nil, fmt.Errorf("reward: teacher: token %d is outside the vocabulary of %d", id, c.VocabSize)
			}
		}
	}
	select {
	case mt.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-mt.turn }()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var w *model.Weights
	if mt.weights != nil {
		w = mt.weights()
	}
	out, err := mt.m.LogProbsWith(w, mt.cache, []model.ScoreRequest{{Prompt: prompt, Response: response}}, 0)
	if err != nil {
		return nil, fmt.Errorf("reward: teacher: %w", err)
	}
	return out[0].LogProbs, nil
}
