package reward

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/tokenizer"
)

// LocalOptions configure a LocalBackend.
type LocalOptions struct {
	// StopTokens end a judge completion. Default: the tokenizer's EOS and,
	// where the vocabulary has them, <|im_end|>, <|endoftext|> and
	// <|eot_id|>.
	StopTokens []int32
	// TemplateVars are extra chat-template variables for the judge prompt,
	// e.g. {"enable_thinking": false} for a Qwen3 judge.
	TemplateVars map[string]any
	// TopP is the nucleus of judge sampling (0: off).
	TopP float32
	// Seed, if set, fixes the sampling: sample i of every call draws with
	// seed Seed+i, so the same prompt gets the same votes (benchmarks and
	// tests); nil draws fresh seeds.
	Seed *uint64
}

// LocalBackend runs the judge on an in-process rollout.Generator with the
// tokenizer's chat template, encoded with EncodeChat: what the transcript
// quotes (a user's "<|im_end|>") is plain text, never a control token of
// the judge's prompt. Its generations are frozen (the checkpoint's
// weights, which training never changes: the judge does not drift with
// the policy it grades) and background (their own queue, below every
// user request, preempted first; see rollout.Request), so judge traffic
// never costs a user a 429 or a batch slot.
type LocalBackend struct {
	gen  rollout.Generator
	tok  *tokenizer.Tokenizer
	opts LocalOptions
}

// NewLocalBackend returns a backend generating on gen; tok must have a
// chat template.
func NewLocalBackend(gen rollout.Generator, tok *tokenizer.Tokenizer, opts LocalOptions) (*LocalBackend, error) {
	if gen == nil || tok == nil {
		return nil, errors.New("reward: local backend needs a generator and a tokenizer")
	}
	if !tok.HasChatTemplate() {
		return nil, errors.New("reward: local backend: the judge's tokenizer has no chat template")
	}
	if opts.StopTokens == nil {
		if id, ok := tok.EOS(); ok {
			opts.StopTokens = append(opts.StopTokens, id)
		}
		for _, s := range []string{"<|im_end|>", "<|endoftext|>", "<|eot_id|>"} {
			if id, ok := tok.TokenID(s); ok && !slices.Contains(opts.StopTokens, id) {
				opts.StopTokens = append(opts.StopTokens, id)
			}
		}
	}
	if len(opts.StopTokens) == 0 {
		return nil, errors.New("reward: local backend: no stop tokens (the tokenizer has no EOS); set StopTokens")
	}
	return &LocalBackend{gen: gen, tok: tok, opts: opts}, nil
}

// Complete renders req.Messages with the chat template and samples req.N
// completions in parallel on the generator. A full generator queue is a
// retryable error; a prompt that does not fit is permanent.
func (l *LocalBackend) Complete(ctx context.Context, req Request) ([]string, error) {
	if req.N < 1 || req.MaxTokens < 1 {
		return nil, Permanent(fmt.Errorf("reward: local judge: need N >= 1 and MaxTokens >= 1 (got %d, %d)", req.N, req.MaxTokens))
	}
	prompt, _, err := l.tok.EncodeChat(tokenizer.ChatRequest{Messages: req.Messages, AddGenerationPrompt: true, Vars: l.opts.TemplateVars})
	if err != nil {
		return nil, Permanent(fmt.Errorf("reward: local judge: %w", err))
	}
	gr := rollout.Request{
		Prompt:     prompt,
		Sampling:   sample.Params{Temperature: req.Temperature, TopP: l.opts.TopP},
		MaxTokens:  req.MaxTokens,
		StopTokens: l.opts.StopTokens,
		Frozen:     true,
		Background: true,
	}

	// Start one generation and wait for its first event: by then its
	// prompt is in the scheduler's prefix cache, and the other N-1, started
	// next, reuse it instead of computing it again. They all decode in one
	// batch; the scheduler buffers each stream, so reading them in turn is
	// fine.
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]<-chan rollout.Event, 0, req.N)
	var head []rollout.Event // events already read from streams[0]
	for i := range req.N {
		if l.opts.Seed != nil {
			seed := *l.opts.Seed + uint64(i)
			gr.Sampling.Seed = &seed
		}
		ch, err := l.gen.Generate(gctx, gr)
		if err != nil {
			cancel()
			for _, s := range streams {
				drain(s)
			}
			if errors.Is(err, rollout.ErrContextLength) || errors.Is(err, rollout.ErrClosed) {
				err = Permanent(err)
			}
			return nil, fmt.Errorf("reward: local judge: %w", err)
		}
		streams = append(streams, ch)
		if i == 0 && req.N > 1 {
			if ev, ok := <-ch; ok {
				head = append(head, ev)
			}
		}
	}
	var out []string
	var firstErr error
	for i, s := range streams {
		var pre []rollout.Event
		if i == 0 {
			pre = head
		}
		text, err := l.collect(ctx, pre, s)
		if err != nil {
			firstErr = cmpOr(firstErr, err)
			continue
		}
		out = append(out, text)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("reward: local judge: %w", firstErr)
	}
	return out, nil
}

// collect reads one stream to its end, after the events already read
// from it (pre), and decodes its tokens.
func (l *LocalBackend) collect(ctx context.Context, pre []rollout.Event, s <-chan rollout.Event) (string, error) {
	var toks []int32
	var err error
	add := func(ev rollout.Event) {
		if ev.HasToken && !slices.Contains(l.opts.StopTokens, ev.Token) {
			toks = append(toks, ev.Token)
		}
		switch ev.Finish {
		case rollout.FinishError:
			err = fmt.Errorf("generation failed: %w", ev.Err)
		case rollout.FinishCancelled:
			err = cmpOr(ctx.Err(), errors.New("generation cancelled"))
		}
	}
	for _, ev := range pre {
		add(ev)
	}
	for ev := range s {
		add(ev)
	}
	if err == nil && ctx.Err() != nil {
		// The stream closed early because the caller's context ended.
		err = ctx.Err()
	}
	if err != nil {
		return "", err
	}
	return l.tok.Decode(toks), nil
}

// drain reads a stream to its end (its generation was cancelled).
func drain(s <-chan rollout.Event) {
	for range s {
	}
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// defanger returns a replacer that breaks every special token string of
// tok (such as <|im_end|>) in text by inserting a zero-width space after
// its first character. (The judge no longer needs it: EncodeChat keeps
// quoted text from forging turn boundaries.)
func defanger(tok *tokenizer.Tokenizer) *strings.Replacer {
	if r, ok := defangers.Load(tok); ok {
		return r.(*strings.Replacer)
	}
	r, _ := defangers.LoadOrStore(tok, buildDefanger(tok))
	return r.(*strings.Replacer)
}

// defangers caches a replacer per tokenizer (tokenizers are immutable).
var defangers sync.Map

func buildDefanger(tok *tokenizer.Tokenizer) *strings.Replacer {
	var pairs []string
	for id := range int32(tok.VocabSize()) {
		if !tok.IsSpecial(id) {
			continue
		}
		s := tok.TokenString(id)
		if len(s) < 2 {
			continue
		}
		_, size := utf8.DecodeRuneInString(s)
		pairs = append(pairs, s, s[:size]+"\u200b"+s[size:])
	}
	return strings.NewReplacer(pairs...)
}
