package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/gguf"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
)

// chatMLTemplate is the ChatML chat template (the Qwen family's format,
// without tools), used for the tokenizer testmodel trains.
const chatMLTemplate = `{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}`

// presets are the checkpoint shapes testmodel and bench know by name.
func presets() map[string]model.RandomSpec {
	return map[string]model.RandomSpec{
		"tiny": {Arch: model.ArchQwen3, Hidden: 64, Intermediate: 192, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
			Vocab: 1024, MaxPositions: 4096, DType: "bfloat16", Seed: 1, InitStd: 0.05},
		"20m":         model.SpecLlama20M(),
		"qwen3-0.6b":  model.SpecQwen3_0_6B(),
		"qwen3-1.7b":  model.SpecQwen3_1_7B(),
		"gemma3-1b":   model.SpecGemma3_1B(),
		"gemma3-270m": model.SpecGemma3_270M(),
		"gemma2-2b":   model.SpecGemma2_2B(),
	}
}

// testArchs are the architectures testmodel writes.
var testArchs = []string{model.ArchLlama, model.ArchQwen2, model.ArchQwen3, model.ArchPhi3, model.ArchMistral, model.ArchGemma2, model.ArchGemma3, model.ArchGranite, model.ArchOlmo2, model.ArchSmolLM3}

func presetNames() string {
	var names []string
	for n := range presets() {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func (a *app) testmodelCmd() *cobra.Command {
	var preset, arch, tokDir, ggufType string
	var seed uint64
	var window int
	cmd := &cobra.Command{
		Use:   "testmodel DIR",
		Short: "Write a random-weight checkpoint in Hugging Face layout (to try the engine and benchmark it)",
		Long: `testmodel writes config.json, model.safetensors, tokenizer.json and
tokenizer_config.json into DIR: a model of the chosen shape with random
weights, and either a copy of an existing tokenizer (--tokenizer DIR; the
vocabulary grows to fit it) or a small byte-level BPE trained on the spot
with the ChatML chat template. The model speaks gibberish; every other part
of the engine is exercised as with a real checkpoint.

With --gguf TYPE it also writes DIR/model-TYPE.gguf, the same model as a
GGUF file (as llama.cpp's converter makes them) in TYPE (f32, f16, bf16,
q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs,
or the mix q4_k_m or q5_k_m), which serve, generate and bench take as
--model as they take DIR.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, ok := presets()[preset]
			if !ok {
				return fmt.Errorf("unknown --preset %q (known: %s)", preset, presetNames())
			}
			if arch != "" {
				switch arch {
				case model.ArchLlama, model.ArchQwen2, model.ArchQwen3, model.ArchPhi3, model.ArchMistral, model.ArchGemma2, model.ArchGemma3, model.ArchGranite, model.ArchOlmo2, model.ArchSmolLM3:
				default:
					return fmt.Errorf("unknown --arch %q (known: %s)", arch, strings.Join(testArchs, ", "))
				}
				spec.Arch = arch
				if arch == model.ArchGemma2 {
					spec.AttnSoftcap, spec.FinalSoftcap = 50, 30 // Gemma 2's
				}
				if arch == model.ArchOlmo2 || arch == model.ArchSmolLM3 {
					spec.HeadDim = spec.Hidden / spec.Heads // their attention's
				}
				if arch == model.ArchGranite {
					// granite-3.x-2b's multipliers, the attention's as
					// 1/head_dim as there (1/64)
					spec.EmbeddingMultiplier, spec.ResidualMultiplier, spec.LogitsScaling = 12, 0.22, 8
					spec.AttentionMultiplier = 1 / float64(spec.HeadDim)
					spec.HeadDim = spec.Hidden / spec.Heads
				}
			}
			if cmd.Flags().Changed("seed") {
				spec.Seed = seed
			}
			if window != 0 {
				if spec.Arch != model.ArchMistral && spec.Arch != model.ArchPhi3 && spec.Arch != model.ArchGemma3 && spec.Arch != model.ArchGemma2 || window < 0 {
					return fmt.Errorf("--sliding-window %d: a positive window, for --arch %s, %s, %s or %s", window, model.ArchMistral, model.ArchPhi3, model.ArchGemma2, model.ArchGemma3)
				}
				spec.SlidingWindow = window
			}
			var mix gguf.Mix
			if ggufType != "" {
				m, err := gguf.ParseMix(ggufType)
				if err != nil {
					return fmt.Errorf("--gguf %q: want one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, q4_k_m, q5_k_m", ggufType)
				}
				mix = m
			}
			if err := writeTestModel(args[0], spec, tokDir, false); err != nil || ggufType == "" {
				return err
			}
			return writeTestGGUF(args[0], mix)
		},
	}
	cmd.Flags().StringVar(&preset, "preset", "tiny", "shape: "+presetNames())
	cmd.Flags().StringVar(&arch, "arch", "", "architecture override: "+strings.Join(testArchs, ", "))
	cmd.Flags().IntVar(&window, "sliding-window", 0, "attention window (with --arch "+model.ArchMistral+", "+model.ArchPhi3+", "+model.ArchGemma2+" or "+model.ArchGemma3+"), shorter than the context")
	cmd.Flags().StringVar(&tokDir, "tokenizer", "", "copy tokenizer.json and tokenizer_config.json from this directory")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the random weights")
	cmd.Flags().StringVar(&ggufType, "gguf", "", "also write the model as DIR/model-TYPE.gguf in this tensor type (q8_0, q4_0, bf16, ...)")
	return cmd
}

// writeTestModel writes a random checkpoint with a tokenizer into dir.
// With keepVocab the model keeps the preset's vocabulary size even when the
// tokenizer has fewer tokens (ids past the tokenizer decode to nothing),
// so that benchmarks measure the preset's real shapes.
func writeTestModel(dir string, spec model.RandomSpec, tokDir string, keepVocab bool) error {
	var tok *tokenizer.Tokenizer
	var err error
	if tokDir != "" {
		tok, err = tokenizer.Load(tokDir)
	} else {
		tok, err = tokenizer.Train(slices.Values(testCorpus()), tokenizer.TrainOptions{
			VocabSize:     min(spec.Vocab, 1024),
			SpecialTokens: []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"},
			EOS:           "<|im_end|>",
			PAD:           "<|endoftext|>",
			ChatTemplate:  chatMLTemplate,
		})
	}
	if err != nil {
		return err
	}
	if tokDir == "" && !keepVocab {
		spec.Vocab = tok.VocabSize() // every id the model can emit decodes
	} else {
		spec.Vocab = max(spec.Vocab, tok.VocabSize())
	}
	eos, ok := tok.EOS()
	if !ok {
		return errors.New("testmodel: the tokenizer has no EOS token")
	}
	spec.EOSTokenIDs = []int{int(eos)}
	if bos, ok := tok.BOS(); ok {
		b := int(bos)
		spec.BOSTokenID = &b
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
		return err
	}
	if err := tok.Save(dir); err != nil {
		return err
	}
	c, err := model.LoadConfig(dir)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s, %.1fM parameters, vocabulary %d, context %d\n",
		filepath.Clean(dir), c.Architecture, float64(c.NumParams())/1e6, c.VocabSize, c.MaxPositions)
	return nil
}

// writeTestGGUF writes the checkpoint in dir, with its tokenizer, as
// dir/model-TYPE.gguf.
func writeTestGGUF(dir string, mix gguf.Mix) error {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	src, err := model.OpenDir(dir)
	if err != nil {
		return err
	}
	defer src.Close()
	path := filepath.Join(dir, "model-"+strings.ToLower(mix.String())+".gguf")
	if err := gguf.WriteModelMix(path, src, tok, mix); err != nil {
		return err
	}
	fmt.Printf("wrote %s\n", path)
	return nil
}

// testCorpus is a little English, code and chat text for the testmodel
// tokenizer: enough for common words and markup to become tokens.
func testCorpus() []string {
	base := []string{
		"The quick brown fox jumps over the lazy dog. ",
		"Hello! How can I help you today? ",
		"I think the answer is 42, but let me check that file first. ",
		"def add(a, b):\n    return a + b\n",
		`{"name": "get_weather", "arguments": {"city": "Paris"}}` + "\n",
		"You are a helpful assistant. Answer briefly and correctly. ",
		"<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n2 + 3 = 5.<|im_end|>\n",
		"No, I meant the other one. Sorry, you are right: the file is config.yaml. ",
	}
	var docs []string
	for i := range 200 {
		docs = append(docs, base[i%len(base)]+base[(i*3+1)%len(base)])
	}
	return docs
}
