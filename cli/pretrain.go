package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/clawrl/clawrl/corpus"
	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/pretrain"
)

func (a *app) pretrainCmd() *cobra.Command {
	o := pretrain.DefaultOptions()
	var preset string
	var corpusOnly int
	var evalOnly string
	var shape pretrain.Shape
	var mix map[string]string
	cmd := &cobra.Command{
		Use:   "pretrain",
		Short: "Train the small bundled model from scratch on the CPU",
		Long: `pretrain trains a small Llama-architecture model from scratch on the CPU:
it generates its own corpus of short assistant dialogues (greetings,
arithmetic, units, dates, spelling, lists, formats, instructions, corrections,
tool calls, JSON, judge verdicts, and public-domain text from the Debian
packages fortunes, jargon-text and bible-kjv when they are installed), learns
a byte-level BPE vocabulary on it, and trains with next-token cross-entropy
on the assistant replies (AdamW, warm-up, cosine decay, gradient clipping).

The run is deterministic for a seed and a thread count. It saves itself every
--checkpoint-every steps into --work; after an interruption (Ctrl-C saves too)
the same command with --resume continues bit for bit. At the end the model is
written to --out in Hugging Face layout (BF16) and evaluated through the
serving engine on held-out questions; report.json, TRAINING.md and loss.png
go beside it.

The bundled model was made with:

  clawrl pretrain --out bundled/model --seed 1

--init DIR continues a checkpoint (its vocabulary and shape) on the current
corpus; with --layers N (up to twice the checkpoint's depth) it first grows
the checkpoint in depth: each added layer copies the one before it with its
output projections zeroed, so training starts from exactly the model DIR
holds.

--corpus-only N prints N generated conversations and exits; --eval-only DIR
evaluates a checkpoint (the bundled one: bundled/model) and prints the same
tables a finished run writes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.cfg.Model.Threads > 0 {
				engine.SetThreads(a.cfg.Model.Threads)
			}
			if corpusOnly > 0 {
				return printCorpus(cmd.OutOrStdout(), corpusOnly, o.Seed, o.NoTexts)
			}
			if evalOnly != "" {
				return a.evalCheckpoint(cmd, evalOnly, o)
			}
			base, ok := pretrain.Presets[preset]
			if !ok {
				return fmt.Errorf("unknown --preset %q (known: %s)", preset, strings.Join(presetList(), ", "))
			}
			o.Shape = overrideShape(cmd.Flags(), base, shape)
			if o.Init != "" {
				for _, name := range []string{"preset", "hidden", "intermediate", "heads", "kv-heads", "vocab", "context"} {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s cannot be used with --init: the shape is the checkpoint's (only --layers may grow it)", name)
					}
				}
				s, err := pretrain.ShapeOf(o.Init)
				if err != nil {
					return fmt.Errorf("--init %s: %w", o.Init, err)
				}
				if cmd.Flags().Changed("layers") && shape.Layers != s.Layers {
					if shape.Layers < s.Layers || shape.Layers > 2*s.Layers {
						return fmt.Errorf("--layers %d with --init %s: the checkpoint has %d layers; it can grow to %d–%d", shape.Layers, o.Init, s.Layers, s.Layers+1, 2*s.Layers)
					}
					s.Layers = shape.Layers
				}
				o.Shape = s
			}
			for cat, v := range mix {
				w, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return fmt.Errorf("--mix %s=%s: the weight is not a number", cat, v)
				}
				if o.Mix == nil {
					o.Mix = map[string]float64{}
				}
				o.Mix[cat] = w
			}
			if o.Work == "" {
				w, err := defaultWorkDir(o.Out)
				if err != nil {
					return err
				}
				o.Work = w
			}
			o.Progress = a.stderr
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Fprintf(a.stderr, "pretraining into %s (run state in %s), %d threads\n", o.Out, o.Work, engine.Threads())
			rep, err := pretrain.Run(ctx, o)
			if errors.Is(err, pretrain.ErrInterrupted) {
				return fmt.Errorf("%w: continue with the same command and --resume", err)
			}
			if err != nil {
				return err
			}
			rep.Command = commandLine(cmd)
			if err := rep.Write(o.Out); err != nil {
				return err
			}
			printReport(a.stdout, rep)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", "bundled/model", "directory for the trained checkpoint")
	f.StringVar(&o.Work, "work", "", "directory for the run's resumable state (default: a directory under the user cache)")
	f.StringVar(&preset, "preset", "small", "model shape: "+strings.Join(presetList(), ", "))
	f.IntVar(&shape.Hidden, "hidden", 0, "hidden size (overrides the preset)")
	f.IntVar(&shape.Intermediate, "intermediate", 0, "MLP size (overrides the preset)")
	f.IntVar(&shape.Layers, "layers", 0, "layers (overrides the preset; with --init, grows the checkpoint to this depth)")
	f.IntVar(&shape.Heads, "heads", 0, "query heads (overrides the preset)")
	f.IntVar(&shape.KVHeads, "kv-heads", 0, "key/value heads (overrides the preset)")
	f.IntVar(&shape.Vocab, "vocab", 0, "vocabulary size (overrides the preset)")
	f.IntVar(&shape.MaxPositions, "context", 0, "max_position_embeddings (overrides the preset)")
	f.IntVar(&o.Steps, "steps", o.Steps, "optimizer steps")
	f.IntVar(&o.SeqLen, "seq-len", o.SeqLen, "longest training conversation, in tokens")
	f.IntVar(&o.Batch, "batch", o.Batch, "tokens per step, in units of --seq-len (whole conversations are packed)")
	f.Float64Var(&o.LR, "lr", o.LR, "peak learning rate")
	f.Float64Var(&o.MinLR, "min-lr", o.MinLR, "final learning rate, as a fraction of --lr")
	f.IntVar(&o.Warmup, "warmup", o.Warmup, "warm-up steps")
	f.Float64Var(&o.WeightDecay, "weight-decay", o.WeightDecay, "AdamW weight decay (matrices only)")
	f.Float64Var(&o.GradClip, "grad-clip", o.GradClip, "global gradient-norm clip (0 = off)")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the corpus, the vocabulary and the initial weights")
	f.IntVar(&o.EvalEvery, "eval-every", o.EvalEvery, "held-out loss every this many steps")
	f.IntVar(&o.CheckpointEvery, "checkpoint-every", o.CheckpointEvery, "save the run every this many steps")
	f.IntVar(&o.TokenizerDocs, "tokenizer-docs", o.TokenizerDocs, "generated conversations the vocabulary is learned from")
	f.BoolVar(&o.NoTexts, "no-text", false, "do not use the public-domain text of installed Debian packages")
	f.IntVar(&o.EvalArithmetic, "eval-arithmetic", o.EvalArithmetic, "held-out arithmetic questions in the final evaluation")
	f.IntVar(&o.EvalTools, "eval-tools", o.EvalTools, "held-out tool-use prompts in the final evaluation")
	f.IntVar(&o.EvalJudge, "eval-judge", o.EvalJudge, "held-out judge prompts in the final evaluation")
	f.StringVar(&o.Init, "init", "", "start from this checkpoint (a pretrain output) instead of a new vocabulary and random weights")
	f.StringToStringVar(&mix, "mix", nil, "corpus mix overrides, category=weight,... (categories: "+strings.Join(corpus.Categories, ", ")+")")
	f.BoolVar(&o.Resume, "resume", false, "continue the run saved in --work")
	f.BoolVar(&o.Restart, "restart", false, "discard a run saved in --work and start over")
	f.IntVar(&o.StopAfter, "stop-after", 0, "stop (and save) after this many steps, as if interrupted")
	_ = f.MarkHidden("stop-after")
	f.IntVar(&corpusOnly, "corpus-only", 0, "print this many generated conversations and exit")
	f.IntVar(&o.EvalFollow, "eval-follow", o.EvalFollow, "held-out prompts per instruction kind and placement in the final evaluation")
	f.StringVar(&evalOnly, "eval-only", "", "evaluate this checkpoint directory as a finished run is evaluated, print the results and exit")
	return cmd
}

func presetList() []string {
	var names []string
	for n := range pretrain.Presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// overrideShape applies the size flags that were given.
func overrideShape(f *pflag.FlagSet, s, over pretrain.Shape) pretrain.Shape {
	set := func(name string, dst *int, v int) {
		if f.Changed(name) {
			*dst = v
		}
	}
	set("hidden", &s.Hidden, over.Hidden)
	set("intermediate", &s.Intermediate, over.Intermediate)
	set("layers", &s.Layers, over.Layers)
	set("heads", &s.Heads, over.Heads)
	set("kv-heads", &s.KVHeads, over.KVHeads)
	set("vocab", &s.Vocab, over.Vocab)
	set("context", &s.MaxPositions, over.MaxPositions)
	return s
}

// defaultWorkDir is a directory under the user cache named after the
// output directory, so that runs into different outputs do not collide.
func defaultWorkDir(out string) (string, error) {
	abs, err := filepath.Abs(out)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no --work given and no user cache directory: %w", err)
	}
	h := sha256.Sum256([]byte(abs))
	return filepath.Join(cache, "clawrl", "pretrain", filepath.Base(abs)+"-"+hex.EncodeToString(h[:4])), nil
}

// commandLine is the command as typed, for the report (flags that were set,
// less those that do not change the result).
func commandLine(cmd *cobra.Command) string {
	parts := []string{"clawrl pretrain"}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		switch f.Name {
		case "resume", "restart", "work", "stop-after":
			return
		}
		if f.Value.Type() == "bool" {
			parts = append(parts, "--"+f.Name)
			return
		}
		v := f.Value.String()
		if f.Name == "out" {
			v = relative(v)
		}
		parts = append(parts, "--"+f.Name+" "+v)
	})
	if t := engine.Threads(); t > 0 {
		parts = append(parts, fmt.Sprintf("--threads %d", t))
	}
	return strings.Join(parts, " ")
}

// relative writes path relative to the working directory when it lies
// inside it.
func relative(path string) string {
	wd, err1 := os.Getwd()
	abs, err2 := filepath.Abs(path)
	if err1 != nil || err2 != nil {
		return path
	}
	if rel, err := filepath.Rel(wd, abs); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return path
}

func printCorpus(w io.Writer, n int, seed uint64, noTexts bool) error {
	var texts *corpus.Texts
	if !noTexts {
		t, err := corpus.LoadTexts()
		if err != nil {
			return err
		}
		texts = t
	}
	render, err := corpus.NewRenderer()
	if err != nil {
		return err
	}
	g := corpus.NewGenerator(texts)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range n {
		ex := g.Next(r)
		s, err := corpus.Render(render, ex, false)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "### %d: %s\n%s\n", i+1, ex.Category, s)
	}
	return nil
}

func printReport(w io.Writer, rep *pretrain.Report) {
	fmt.Fprintf(w, "parameters      %d (%.2fM), vocabulary %d, context %d\n", rep.Params, float64(rep.Params)/1e6, rep.VocabSize, rep.Context)
	fmt.Fprintf(w, "training        %d steps, %d tokens (%d trained targets), %s\n", rep.Steps, rep.Tokens, rep.Targets,
		(time.Duration(rep.TrainSeconds) * time.Second).String())
	fmt.Fprintf(w, "loss            train %.3f, held-out %.3f\n", rep.TrainLoss, rep.HeldOutLoss)
	if e := rep.Eval; e != nil {
		fmt.Fprintf(w, "arithmetic      %.1f%% of %d held-out questions\n", 100*e.Arithmetic.Rate, e.Arithmetic.N)
		fmt.Fprintf(w, "tool calls      %.1f%% parse, %.1f%% right function, %.1f%% right arguments (%d prompts)\n",
			100*e.Tools.ParseRate, 100*e.Tools.NameRate, 100*e.Tools.ArgsRate, e.Tools.N)
		fmt.Fprintf(w, "judge           %.1f%% of %d votes right\n", 100*e.Judge.Rate, e.Judge.N)
	}
}

// evalCheckpoint evaluates dir as a finished run is evaluated and prints
// the evaluation's part of TRAINING.md.
func (a *app) evalCheckpoint(cmd *cobra.Command, dir string, o pretrain.Options) error {
	var texts *corpus.Texts
	if !o.NoTexts {
		t, err := corpus.LoadTexts()
		if err != nil {
			return err
		}
		texts = t
	}
	ev, err := pretrain.Evaluate(cmd.Context(), dir, pretrain.EvalOptions{Seed: o.Seed, Arithmetic: o.EvalArithmetic, Tools: o.EvalTools,
		Judge: o.EvalJudge, Follow: o.EvalFollow, Texts: texts})
	if err != nil {
		return fmt.Errorf("evaluating %s: %w", dir, err)
	}
	fmt.Fprint(a.stdout, (&pretrain.Report{Eval: ev}).EvalMarkdown())
	return nil
}
