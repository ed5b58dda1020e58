// Package rollout generates tokens for many requests at once: a scheduler
// with continuous batching over a paged KV cache, sampling, per-token
// log-probs, and the weight version each generation ran on.
//
// The server hands it prompts already tokenised and reads back a stream of
// token events; it knows nothing of chat messages, and nothing of losses.
package rollout

import (
	"context"
	"errors"
	"fmt"

	"github.com/clawrl/clawrl/sample"
)

// Request is one generation: a tokenised prompt and how to continue it.
type Request struct {
	// Prompt is the full prompt, chat template already applied.
	Prompt []int32
	// Sampling holds temperature, top-p, top-k, seed and how many
	// alternatives to report per token.
	Sampling sample.Params
	// MaxTokens bounds the response length (> 0).
	MaxTokens int
	// StopTokens end the generation when sampled (EOS, end-of-turn); the
	// stop token is reported in the last event but is not part of the text.
	StopTokens []int32
	// Frozen runs the generation on the model's checkpoint weights, which
	// training never changes, instead of the current version: the judge
	// grades with the reference policy, not the one it trains.
	Frozen bool
	// Background puts the generation below every foreground request: it
	// waits in a queue of its own (a full one refuses background requests
	// only), starts only when no foreground request is waiting (beyond
	// Options.MinBackground slots, which it keeps), runs at most
	// Options.MaxBackground at once, and is the first to be preempted when
	// a foreground request needs its slot or the KV cache is full. For the
	// judge and other work users do not wait on.
	Background bool
	// Constraint, if set, decides which tokens may come next (constrained
	// decoding: grammar.Constraint). The token is drawn from the model's
	// distribution restricted to the allowed ones, then tempered and
	// truncated with the sampling settings; Event.LogProb is the model's
	// own log-prob, Event.SampleLogProb the one under that restricted
	// distribution. Each generation needs its own.
	Constraint Constraint
}

// Constraint restricts a generation's tokens. Allow must not change the
// constraint; Accept moves past the token drawn.
type Constraint interface {
	Allow(tok int32) bool
	Accept(tok int32)
}

// FinishReason says why a generation ended.
type FinishReason string

// Finish reasons, as the OpenAI API names them where it has a name.
const (
	FinishStop      FinishReason = "stop"      // a stop token was sampled
	FinishLength    FinishReason = "length"    // MaxTokens or the context was reached
	FinishCancelled FinishReason = "cancelled" // the caller's context ended
	FinishError     FinishReason = "error"     // the engine failed; see Event.Err
)

// Event is one step of a generation's stream. Every stream ends with exactly
// one event whose Finish is set, then the channel is closed.
type Event struct {
	// Token is the sampled token (valid when HasToken).
	Token    int32
	HasToken bool
	// LogProb is log p(Token) under the weights that produced it
	// (temperature 1, before any truncation): the policy's own log-prob,
	// reported to clients and recomputed by the trainer.
	LogProb float32
	// SampleLogProb is log q(Token) under the distribution it was drawn
	// from: the same weights' logits restricted to what the Constraint
	// allows, divided by the temperature, truncated by top-k and top-p and
	// renormalised (0 for greedy decoding and forced tokens). It is the
	// behaviour policy of the turn, which the trainer's importance weights
	// divide by (sample.Result.SampleLogProb).
	SampleLogProb float32
	// Forced reports a token that the Constraint left no alternative to
	// (sample.Result.Forced): not the model's choice, and not trained on.
	Forced bool
	// Top holds the requested alternatives, most likely first.
	Top []sample.TokenLogProb
	// Version is the weight version that produced this token.
	Version uint64
	// CachedTokens, on the first event, is how many prompt tokens were
	// served from the prefix cache instead of being recomputed.
	CachedTokens int
	// Finish is set on the last event.
	Finish FinishReason
	// Err is set when Finish is FinishError.
	Err error
}

// Generator runs generations. Generate returns at once: the events arrive
// on the channel as tokens are produced. Cancelling ctx ends the generation
// and frees its cache promptly; the stream still ends with a final event.
type Generator interface {
	Generate(ctx context.Context, req Request) (<-chan Event, error)
}

// Errors Generate returns before any event.
var (
	// ErrQueueFull means the scheduler's waiting queue is full: the caller
	// should retry later (HTTP 429 with Retry-After).
	ErrQueueFull = errors.New("rollout: queue full")
	// ErrContextLength means prompt plus MaxTokens cannot fit the model's
	// context (HTTP 400, context_length_exceeded).
	ErrContextLength = errors.New("rollout: prompt does not fit the context")
	// ErrClosed means the scheduler has shut down.
	ErrClosed = errors.New("rollout: scheduler closed")
)

// Output is what one generation produced, read to its end.
type Output struct {
	// Tokens are the sampled tokens (a closing stop token included) and
	// LogProbs their log-probs; Version is the weight version of the last.
	Tokens   []int32
	LogProbs []float32
	Version  uint64
	Finish   FinishReason
	// Err is set when the generation failed or was cancelled.
	Err error
}

// GenerateAll starts every request at once (so that they batch together)
// and reads each stream to its end. If a request cannot start, the ones
// already started are cancelled and drained, and the error is returned.
func GenerateAll(ctx context.Context, g Generator, reqs []Request) ([]Output, error) {
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]<-chan Event, 0, len(reqs))
	for _, r := range reqs {
		ch, err := g.Generate(gctx, r)
		if err != nil {
			cancel()
			for _, s := range streams {
				for range s {
				}
			}
			return nil, err
		}
		streams = append(streams, ch)
	}
	out := make([]Output, len(streams))
	for i, s := range streams {
		o := &out[i]
		for ev := range s {
			if ev.HasToken {
				o.Tokens = append(o.Tokens, ev.Token)
				o.LogProbs = append(o.LogProbs, ev.LogProb)
				o.Version = ev.Version
			}
			if ev.Finish != "" {
				o.Finish = ev.Finish
			}
			switch ev.Finish {
			case FinishError:
				o.Err = fmt.Errorf("generation failed: %w", ev.Err)
			case FinishCancelled:
				o.Err = errors.New("generation cancelled")
				if ctx.Err() != nil {
					o.Err = ctx.Err()
				}
			}
		}
	}
	return out, nil
}
