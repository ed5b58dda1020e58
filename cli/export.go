package cli

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/export"
	"github.com/clawrl/clawrl/gguf"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/weights"
)

// exportCmd is `clawrl export`: one checkpointed weight version as a
// standalone Hugging Face model directory or PEFT adapter.
func (a *app) exportCmd() *cobra.Command {
	var (
		out, dtype, ckpt, baseName, shard, format, qtype string
		adapter, force                                   bool
	)
	cmd := &cobra.Command{
		Use:   "export [VERSION] --out DIR",
		Short: "Export a trained weight version as a Hugging Face checkpoint or a PEFT adapter",
		Long: `export writes one checkpointed weight version (default: the newest
checkpoint that verifies, under trainer.checkpoint_dir) to DIR as a standard
Hugging Face model directory, the layout transformers, vLLM and llama.cpp's
converter read, and clawrl too (clawrl serve --model DIR): config.json,
model.safetensors (LoRA merged), the tokenizer's files and a model card. With --adapter it writes the LoRA adapters alone in PEFT layout
(adapter_model.safetensors, adapter_config.json) for the configured base
model, refusing a lineage trained without LoRA or on another base.

Every file is checked against the checkpoint's manifest (size and SHA-256) as
it is copied, and DIR appears whole or not at all. A non-empty DIR is refused;
--force replaces it only if it holds an earlier export (never a directory of
other files, nor one holding the checkpoints).

--dtype auto writes the weights as the checkpoint holds them (LoRA-merged
matrices in F32) and sets config.json's torch_dtype to the narrowest dtype
that holds every value exactly, so a loader that honours it keeps every update; f32 widens everything (exact);
bf16 halves the size but rounds away updates below half a BF16 step.
Weights over --max-shard-size (default 5GB, as transformers' save_pretrained)
are split into shards with a model.safetensors.index.json.

--format gguf writes one GGUF file at --out instead, the format llama.cpp and
Ollama load (and clawrl serve --model FILE.gguf): the merged weights with
matrices in --type (bf16, f16, f32, q8_0, q4_0, a K-quant such as q4_k,
iq4_nl, iq4_xs, or llama-quantize's mix q4_k_m or q5_k_m, which Ollama's
downloads mostly are;
norms stay F32), llama's q/k rows permuted as llama.cpp's converter does, and
the tokenizer's vocabulary and chat template in the file's metadata.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("export: --out DIR is required")
			}
			switch format {
			case "gguf":
				return a.exportGGUF(cmd, args, out, ckpt, qtype, baseName, adapter, force)
			case "hf":
			default:
				return fmt.Errorf("export: --format %q: use hf (a Hugging Face directory) or gguf (one file for llama.cpp and Ollama)", format)
			}
			dt, err := export.ParseDType(dtype)
			if err != nil {
				return err
			}
			maxShard, err := export.ParseSize(shard)
			if err != nil {
				return err
			}
			// Opening verifies every file's SHA-256: flags are checked first.
			c, err := a.exportSource(args, ckpt)
			if err != nil {
				return err
			}
			opts := export.Options{DType: dt, Force: force, BaseName: baseName, MaxShardBytes: maxShard, Merged: merged(c)}
			if base, err := engine.ModelDir(a.cfg, "", a.log); err == nil {
				opts.BaseDir = base
				// The fingerprint hashes the base's weights (gigabytes for a
				// real checkpoint): only an adapter needs it.
				if adapter {
					if fp, err := engine.BaseFingerprint(base); err == nil {
						opts.BaseFingerprint = fp
					}
				}
			}
			write, what := export.Model, "model"
			if adapter {
				write, what = export.Adapter, "PEFT adapter"
			}
			res, err := write(c, out, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "exported weight version %d as a %s (%s, %d files, %.1f MB) to %s\n",
				res.Version, what, res.DType, len(res.Files), float64(res.Bytes)/1e6, res.Dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "out", "o", "", "directory to write (created; must be empty unless --force)")
	f.StringVar(&dtype, "dtype", "auto", "dtype of the written weights: auto, f32 or bf16")
	f.BoolVar(&adapter, "adapter", false, "write the LoRA adapters alone, in PEFT layout")
	f.BoolVar(&force, "force", false, "replace an earlier export at --out")
	f.StringVar(&ckpt, "checkpoint", "", "export this checkpoint directory (a vNNNNNNNN under any checkpoint root) instead of a version of the configured lineage")
	f.StringVar(&shard, "max-shard-size", "5GB", "split weights larger than this into model-0000i-of-0000n.safetensors with an index, as transformers does (0: one file)")
	f.StringVar(&baseName, "base-name", "", "name of the base model in the model card, adapter_config.json and a GGUF file's general.name (default: the configured model's directory, or its GGUF file's name)")
	dataDirFlag(f)
	f.StringVar(&format, "format", "hf", "hf: a Hugging Face model directory; gguf: one GGUF file (llama.cpp, Ollama)")
	f.StringVar(&qtype, "type", "bf16", "with --format gguf: the matrices' type (bf16, f16, f32, q8_0, q4_0, q4_k, q6_k, ...) or llama-quantize's mix q4_k_m or q5_k_m")
	return cmd
}

// exportGGUF is `clawrl export --format gguf`.
func (a *app) exportGGUF(cmd *cobra.Command, args []string, out, ckpt, qtype, baseName string, adapter, force bool) error {
	if adapter {
		return errors.New("export: --adapter writes a PEFT directory; --format gguf writes a merged model")
	}
	mix, err := gguf.ParseMix(qtype)
	if err != nil {
		return fmt.Errorf("export: --type: %w", err)
	}
	c, err := a.exportSource(args, ckpt)
	if err != nil {
		return err
	}
	opts := export.Options{Force: force, BaseName: baseName, Merged: merged(c)}
	if base, err := engine.ModelDir(a.cfg, "", a.log); err == nil {
		opts.BaseDir = base
	}
	res, err := export.GGUF(c, out, mix, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "exported weight version %d as GGUF (%s matrices, %.1f MB) to %s\n", res.Version, res.DType, float64(res.Bytes)/1e6, res.Dir)
	return nil
}

// merged opens the merged weights of checkpoint c when it holds LoRA
// adapters only (engine.OpenAdapted loads the base it names).
func merged(c *weights.Checkpoint) func() (model.Source, error) {
	return func() (model.Source, error) { return engine.OpenAdapted(c) }
}

// exportSource opens the checkpoint to export: --checkpoint DIR, the
// version named by args, or the newest that verifies.
func (a *app) exportSource(args []string, dir string) (*weights.Checkpoint, error) {
	if dir != "" {
		if len(args) > 0 {
			return nil, errors.New("export: give a VERSION or --checkpoint, not both")
		}
		return weights.Open(dir)
	}
	root, err := a.cfg.CheckpointDir()
	if err != nil {
		return nil, err
	}
	ns, err := weights.List(root)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if len(ns) == 0 {
		return nil, fmt.Errorf("export: no checkpoints under %s (has the daemon trained with this config?)", root)
	}
	if len(args) == 0 {
		c, refused, err := weights.OpenLatest(root)
		for _, r := range refused {
			a.log.Warn().Err(r).Msg("export: skipping a checkpoint that does not verify")
		}
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	n, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("export: %q is not a version number", args[0])
	}
	for _, have := range ns {
		if have == n {
			return weights.Open(weights.DirOf(root, n))
		}
	}
	return nil, fmt.Errorf("export: no checkpoint of version %d under %s; the checkpoints are %v (see clawrl weights list)", n, root, ns)
}
