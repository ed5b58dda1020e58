package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/tokenizer"
)

type generateFlags struct {
	model, prompt, system     string
	chat, think, noThink      bool
	maxTokens, topK, logprobs int
	temperature, topP         float32
	seed                      int64
	stops                     []string
}

func (a *app) generateCmd() *cobra.Command {
	var f generateFlags
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Stream a generation from a checkpoint to the terminal",
		Long: `generate loads a Hugging Face checkpoint directory (Llama, Qwen2, Qwen3) and
streams a continuation of --prompt (or of standard input) to standard output.
With --chat the prompt is the user's message and the model's chat template
is applied. Timing goes to standard error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runGenerate(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "checkpoint directory or GGUF file (default: model.path)")
	fl.StringVarP(&f.prompt, "prompt", "p", "", "prompt text (default: read standard input)")
	fl.BoolVar(&f.chat, "chat", false, "apply the chat template: the prompt is a user message")
	fl.StringVar(&f.system, "system", "", "system message (with --chat)")
	fl.BoolVar(&f.think, "think", false, "with --chat, ask for reasoning (enable_thinking=true)")
	fl.BoolVar(&f.noThink, "no-think", false, "with --chat, ask for no reasoning (enable_thinking=false)")
	fl.IntVarP(&f.maxTokens, "max-tokens", "n", 256, "most tokens to generate")
	fl.Float32VarP(&f.temperature, "temperature", "t", 0.7, "sampling temperature; 0 = greedy")
	fl.Float32Var(&f.topP, "top-p", 1, "nucleus sampling mass (1 = off)")
	fl.IntVar(&f.topK, "top-k", 0, "sample among the k most likely tokens (0 = off)")
	fl.Int64Var(&f.seed, "seed", -1, "random seed (-1 = random)")
	fl.StringArrayVar(&f.stops, "stop", nil, "stop string (repeatable)")
	fl.IntVar(&f.logprobs, "logprobs", 0, "print each token's log-prob and this many alternatives to stderr")
	return cmd
}

func (a *app) runGenerate(cmd *cobra.Command, f generateFlags) error {
	if f.think && f.noThink {
		return errors.New("--think and --no-think exclude each other")
	}
	params := sample.Params{Temperature: f.temperature, TopP: f.topP, TopK: f.topK, TopLogProbs: f.logprobs}
	if f.seed >= 0 {
		s := uint64(f.seed)
		params.Seed = &s
	}
	if err := params.Validate(); err != nil {
		return err
	}
	if f.maxTokens < 1 {
		return fmt.Errorf("--max-tokens %d must be >= 1", f.maxTokens)
	}
	text := f.prompt
	if !cmd.Flags().Changed("prompt") {
		b, err := io.ReadAll(cmd.InOrStdin())
		if err != nil {
			return fmt.Errorf("reading the prompt from standard input: %w", err)
		}
		text = string(b)
	}
	e, err := engine.Open(a.cfg, engine.Options{Model: f.model, Log: a.log})
	if err != nil {
		return err
	}
	defer e.Close()
	tok, mc := e.Tokenizer(), e.Model().Config

	if f.chat {
		var msgs []tokenizer.Message
		if f.system != "" {
			msgs = append(msgs, tokenizer.Message{Role: "system", Content: f.system})
		}
		msgs = append(msgs, tokenizer.Message{Role: "user", Content: text})
		vars := map[string]any{}
		if f.think || f.noThink {
			vars["enable_thinking"] = f.think
		}
		text, err = tok.ApplyChatTemplate(tokenizer.ChatRequest{Messages: msgs, AddGenerationPrompt: true, Vars: vars})
		if err != nil {
			return err
		}
	}
	ids := tok.Encode(text) // a rendered chat template writes its own BOS
	if !f.chat {
		ids = tok.EncodePrompt(text)
	}
	if len(ids) == 0 {
		return errors.New("the prompt is empty")
	}
	maxTokens := min(f.maxTokens, mc.MaxPositions-len(ids))
	if maxTokens < 1 {
		return fmt.Errorf("the prompt has %d tokens; the model's context is %d", len(ids), mc.MaxPositions)
	}

	ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer cancel()
	start := time.Now()
	events, err := e.Scheduler().Generate(ctx, rollout.Request{Prompt: ids, Sampling: params, MaxTokens: maxTokens, StopTokens: e.StopTokens()})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	dec := tok.NewStreamDecoder()
	stops := sample.NewStopMatcher(f.stops)
	var first time.Time
	n := 0
	finish := rollout.FinishReason("")
	stoppedOnString := false
	for ev := range events {
		if ev.HasToken {
			if n == 0 {
				first = time.Now()
			}
			n++
			if f.logprobs > 0 {
				printLogProbs(a.stderr, tok, ev)
			}
			if ev.Finish == rollout.FinishStop {
				finish = ev.Finish
				break // the stop token itself is not text
			}
			piece, stopped := stops.Push(tokenizer.Lossy(dec.Add(ev.Token)))
			fmt.Fprint(out, piece)
			if stopped {
				cancel()
				finish, stoppedOnString = rollout.FinishStop, true
				for range events {
				}
				break
			}
		}
		if ev.Finish != "" {
			finish = ev.Finish
			if ev.Err != nil {
				return ev.Err
			}
		}
	}
	if !stoppedOnString {
		rest, stopped := stops.Push(tokenizer.Lossy(dec.Flush()))
		fmt.Fprint(out, rest)
		if !stopped {
			fmt.Fprint(out, stops.Flush())
		}
	}
	fmt.Fprintln(out)
	end := time.Now()
	if n > 0 {
		ttft := first.Sub(start)
		rate := 0.0
		if n > 1 {
			rate = float64(n-1) / end.Sub(first).Seconds()
		}
		a.log.Info().Int("prompt_tokens", len(ids)).Int("tokens", n).Str("finish", string(finish)).
			Dur("ttft", ttft.Round(time.Millisecond)).
			Float64("prefill_tok_s", float64(len(ids))/ttft.Seconds()).
			Float64("decode_tok_s", rate).Msg("generated")
	}
	return nil
}

func printLogProbs(w io.Writer, tok *tokenizer.Tokenizer, ev rollout.Event) {
	var b strings.Builder
	fmt.Fprintf(&b, "%q %.4f", tok.Decode([]int32{ev.Token}), ev.LogProb)
	for _, t := range ev.Top {
		fmt.Fprintf(&b, "  | %q %.4f", tok.Decode([]int32{t.Token}), t.LogProb)
	}
	fmt.Fprintln(w, b.String())
}
