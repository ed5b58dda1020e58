package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/bundled"
	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cpu/kernels"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/priority"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/tokenizer"
	"github.com/clawrl/clawrl/weights"
)

// engine is a loaded checkpoint ready to generate: model, tokenizer, KV
// cache and a running scheduler. The same pieces back `serve`.
type engine struct {
	dir   string
	model *model.Model
	tok   *tokenizer.Tokenizer
	cache *model.KVCache
	store *weights.Store // versions: the base, then what training publishes
	sched *rollout.Scheduler
	// gate is taken by every scheduler step; a trainer that yields to
	// serving (trainer.yield_to_serving) takes it a slice at a time and
	// waits while the scheduler has work (priority.Gate).
	gate *priority.Gate
	stop func()
}

// modelDir resolves the checkpoint directory from a flag or the config;
// with neither, it is the bundled model, extracted once into the user's
// cache.
func (a *app) modelDir(flag string) (string, error) {
	dir := flag
	if dir == "" {
		dir = a.cfg.Model.Path
	}
	if dir == "" {
		d, err := bundled.Dir()
		if err != nil {
			return "", fmt.Errorf("%w; pass --model DIR or set model.path to a Hugging Face checkpoint directory", err)
		}
		a.log.Info().Str("dir", d).Msg("no model configured: using the bundled model")
		return d, nil
	}
	return dir, nil
}

// backend returns the CPU backend for serving and benchmarks, at the
// precision model.precision names (auto: BF16 products where the CPU
// multiplies BF16 in hardware).
func (a *app) backend() *cpu.Backend {
	return cpu.NewWithOptions(cpu.Options{Precision: a.precision()})
}

// precision is the precision model.precision names.
func (a *app) precision() kernels.Precision {
	switch a.cfg.Model.Precision {
	case "bf16":
		return kernels.PrecisionBF16
	case "auto":
		if kernels.HasBF16Dot() {
			return kernels.PrecisionBF16
		}
	}
	return kernels.PrecisionF32
}

// kvDType is the KV cache storage model.kv_cache_dtype names for a model
// of config c (auto: BF16 for BF16 or F16 weights, F32 for float32 ones).
func (a *app) kvDType(c *model.Config) compute.DType {
	switch a.cfg.Model.KVCacheDType {
	case "bf16":
		return compute.BF16
	case "auto":
		if c.TorchDType == "bfloat16" || c.TorchDType == "float16" {
			return compute.BF16
		}
	}
	return compute.F32
}

// kvBudget is the bytes of a KV cache: mb MiB when mb > 0, else sized
// from the model: contexts full contexts of contextBytes each, at most
// 1/share of avail (the memory available, 0 when unknown), at least floor.
// A cache's memory is committed as it fills, so a large budget costs
// nothing until sequences use it.
func kvBudget(mb int, contextBytes int64, contexts int, share, floor, avail int64) int64 {
	if mb > 0 {
		return int64(mb) << 20
	}
	b := contextBytes * int64(contexts)
	if avail > 0 {
		b = min(b, avail/share)
	}
	return max(b, floor)
}

// memAvailable is the memory the kernel reports available for new
// allocations, in bytes; 0 where it cannot be read.
func memAvailable() int64 { return memInfo("MemAvailable") }

// memInfo reads field (in kB) of /proc/meminfo, in bytes; 0 where it
// cannot be read.
func memInfo(field string) int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// openEngine loads dir and starts a scheduler over it.
func (a *app) openEngine(dir string) (*engine, error) {
	a.setServingThreads()
	if mb := int64(a.cfg.Model.KVCacheMB); mb > 0 {
		// The cache takes its memory as it fills: a budget past what the
		// machine has would start fine and die of out-of-memory later.
		if avail := memAvailable(); avail > 0 && mb<<20 > avail {
			return nil, fmt.Errorf("model.kv_cache_mb: %d MiB is more than the %d MiB of memory available; lower it (0 sizes it from the model)", mb, avail>>20)
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	m, err := model.Load(a.backend(), dir)
	if err != nil {
		return nil, err
	}
	dt := a.kvDType(m.Config)
	budget := kvBudget(a.cfg.Model.KVCacheMB, m.Config.KVBytesPerToken(dt)*int64(m.Config.MaxPositions), 4, 4, 1<<30, memAvailable())
	cache, err := m.NewKVCache(model.KVCacheOptions{Budget: budget, DType: dt})
	if err != nil {
		m.Close()
		return nil, err
	}
	// The checkpoint's weights are the first version; versions published
	// later replace it for generations that start after them. Keep one
	// older version so that a teacher pass or a generation that just
	// started on it is not cut short.
	store := weights.NewStore(weights.StoreOptions{Keep: 1})
	if _, err := store.Publish(m.Weights(), 0, weights.Meta{Note: "base: " + dir}); err != nil {
		cache.Close()
		m.Close()
		return nil, err
	}
	rc := a.cfg.Rollout
	// Teacher, reference and KL passes run in rounds of the same size as
	// the prefill chunks, letting decode steps in between.
	m.SetScoreChunk(rc.StepTokens)
	gate := priority.New(a.cfg.Trainer.ShareUnderLoad)
	sched, err := rollout.New(rollout.Options{
		Model: m, Cache: cache, Log: a.log, Versions: store, Gate: gate,
		MaxBatch: rc.MaxBatch, QueueSize: rc.QueueSize, StepTokens: rc.StepTokens, NoPrefixCache: !rc.PrefixCache, BackgroundKV: rc.BackgroundKV,
		BackgroundPrefill: rc.BackgroundPrefill, BackgroundRows: rc.BackgroundRows,
	})
	if err != nil {
		store.Close()
		cache.Close()
		m.Close()
		return nil, err
	}
	stopSched := sched.Start()
	c := m.Config
	a.log.Info().Str("model", dir).Str("arch", c.Architecture).
		Float64("params_m", float64(c.NumParams())/1e6).Int("context", c.MaxPositions).
		Str("backend", m.Backend().Name()).Str("kernels", kernels.Kernels()).
		Int("kv_blocks", cache.NumBlocks()).Stringer("kv_dtype", cache.DType()).Int64("kv_mib", budget>>20).
		Int64("kv_tokens", int64(cache.NumBlocks()*cache.BlockSize())).Dur("load", time.Since(start)).Msg("model loaded")
	return &engine{dir: dir, model: m, tok: tok, cache: cache, store: store, sched: sched, gate: gate, stop: func() {
		stopSched()
		store.Close()
		cache.Close()
		m.Close()
	}}, nil
}

// stopTokens are the ids that end a turn: the tokenizer's EOS and the
// model config's eos_token_id list.
func (e *engine) stopTokens() []int32 {
	var ids []int32
	if id, ok := e.tok.EOS(); ok {
		ids = append(ids, id)
	}
	for _, id := range e.model.Config.EOSTokenIDs {
		if !slices.Contains(ids, int32(id)) {
			ids = append(ids, int32(id))
		}
	}
	return ids
}

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
	fl.StringVar(&f.model, "model", "", "checkpoint directory (default: model.path)")
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
	dir, err := a.modelDir(f.model)
	if err != nil {
		return err
	}
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
	e, err := a.openEngine(dir)
	if err != nil {
		return err
	}
	defer e.stop()

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
		text, err = e.tok.ApplyChatTemplate(tokenizer.ChatRequest{Messages: msgs, AddGenerationPrompt: true, Vars: vars})
		if err != nil {
			return err
		}
	}
	ids := e.tok.Encode(text)
	if len(ids) == 0 {
		return errors.New("the prompt is empty")
	}
	maxTokens := min(f.maxTokens, e.model.Config.MaxPositions-len(ids))
	if maxTokens < 1 {
		return fmt.Errorf("the prompt has %d tokens; the model's context is %d", len(ids), e.model.Config.MaxPositions)
	}

	ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer cancel()
	start := time.Now()
	events, err := e.sched.Generate(ctx, rollout.Request{Prompt: ids, Sampling: params, MaxTokens: maxTokens, StopTokens: e.stopTokens()})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	dec := e.tok.NewStreamDecoder()
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
				printLogProbs(a.stderr, e.tok, ev)
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
