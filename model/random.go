package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/clawrl/clawrl/safetensors"
)

// RandomSpec describes a checkpoint of random weights for tests and
// benchmarks. Zero fields take the defaults noted.
type RandomSpec struct {
	Arch                 string // ArchLlama (default), ArchMistral, ArchQwen2, ArchQwen3, ArchPhi3 or ArchGemma3
	Hidden, Intermediate int
	Layers               int
	Heads, KVHeads       int // KVHeads defaults to Heads
	HeadDim              int // default Hidden/Heads; written to config.json for Llama and Qwen3
	Vocab                int
	MaxPositions         int          // default 2048
	RopeTheta            float64      // default 10000 (Qwen: 1e6)
	RopeScaling          *RopeScaling // Llama 3 scaling, or nil
	RopeLinear           float64      // linear rope scaling's factor (Llama), or 0
	// LongRope, with Arch ArchPhi3, writes LongRoPE's rope_scaling with
	// these factors (head_dim/2 each) and original_max_position_embeddings
	// LongRopeOriginal.
	LongRopeShort, LongRopeLong []float64
	LongRopeOriginal            int
	// PartialRotary, with Arch ArchPhi3, is partial_rotary_factor (0: 1).
	PartialRotary float64
	// SlidingWindow, with Arch ArchMistral, ArchPhi3 or ArchGemma3, is
	// sliding_window (0: none).
	SlidingWindow int
	// Gemma 3: sliding_window_pattern (0: 6, every sixth layer global),
	// query_pre_attn_scalar (0: head_dim) and rope_local_base_freq (0:
	// 10000).
	SlidingPattern     int
	QueryPreAttnScalar float64
	LocalRopeTheta     float64
	// Gemma's attn_logit_softcapping and final_logit_softcapping (0:
	// null).
	AttnSoftcap, FinalSoftcap float64
	// Granite's embedding_multiplier, attention_multiplier,
	// residual_multiplier and logits_scaling (0: not written, 1).
	EmbeddingMultiplier, AttentionMultiplier, ResidualMultiplier, LogitsScaling float64
	RMSNormEps                                                                  float64 // default 1e-6
	DType                                                                       string  // "float32", "bfloat16" (default) or "float16"
	Tied                                                                        bool    // tie_word_embeddings: no lm_head.weight
	AttentionBias                                                               bool    // Llama and Qwen3 attention_bias (Qwen2 always has q/k/v biases)
	MLPBias                                                                     bool    // Llama mlp_bias
	Shards                                                                      int     // >1 writes model-0000i-of-0000n.safetensors and an index
	Seed                                                                        uint64
	InitStd                                                                     float64 // standard deviation of matrix weights, default 0.02
	BOSTokenID                                                                  *int    // default 1 (Llama) or Vocab−2 (Qwen)
	EOSTokenIDs                                                                 []int   // default [2] (Llama) or [Vocab−1] (Qwen)
	// ExtraFiles are written beside the checkpoint (e.g. "tokenizer.json").
	ExtraFiles map[string][]byte
}

// SpecQwen3_0_6B has the shapes of Qwen3-0.6B (about 0.6 billion
// parameters, tied embeddings), with BF16 weights.
func SpecQwen3_0_6B() RandomSpec {
	return RandomSpec{
		Arch: ArchQwen3, Hidden: 1024, Intermediate: 3072, Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128,
		Vocab: 151936, MaxPositions: 40960, RopeTheta: 1e6, Tied: true, DType: "bfloat16", Seed: 1,
	}
}

// SpecQwen3_1_7B has the shapes of Qwen3-1.7B (about 1.7 billion
// parameters, tied embeddings), with BF16 weights.
func SpecQwen3_1_7B() RandomSpec {
	return RandomSpec{
		Arch: ArchQwen3, Hidden: 2048, Intermediate: 6144, Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128,
		Vocab: 151936, MaxPositions: 40960, RopeTheta: 1e6, Tied: true, DType: "bfloat16", Seed: 1,
	}
}

// SpecGemma3_1B has the shapes of Gemma 3 1B (gemma-3-1b-it: about a
// billion parameters, tied embeddings, a window of 512 on five layers of
// six), with BF16 weights.
func SpecGemma3_1B() RandomSpec {
	return RandomSpec{
		Arch: ArchGemma3, Hidden: 1152, Intermediate: 6912, Layers: 26, Heads: 4, KVHeads: 1, HeadDim: 256,
		Vocab: 262144, MaxPositions: 32768, RopeTheta: 1e6, SlidingWindow: 512, Tied: true, DType: "bfloat16", Seed: 1,
	}
}

// SpecGemma3_270M has the shapes of Gemma 3 270M (gemma-3-270m), with
// BF16 weights.
func SpecGemma3_270M() RandomSpec {
	return RandomSpec{
		Arch: ArchGemma3, Hidden: 640, Intermediate: 2048, Layers: 18, Heads: 4, KVHeads: 1, HeadDim: 256,
		Vocab: 262144, MaxPositions: 32768, RopeTheta: 1e6, SlidingWindow: 512, Tied: true, DType: "bfloat16", Seed: 1,
	}
}

// SpecGemma2_2B has the shapes of Gemma 2 2B (gemma-2-2b-it: 2.6 billion
// parameters, tied embeddings, a window of 4,096 on every other layer,
// soft-caps of 50 and 30), with BF16 weights.
func SpecGemma2_2B() RandomSpec {
	return RandomSpec{
		Arch: ArchGemma2, Hidden: 2304, Intermediate: 9216, Layers: 26, Heads: 8, KVHeads: 4, HeadDim: 256,
		Vocab: 256000, MaxPositions: 8192, RopeTheta: 10000, SlidingWindow: 4096, AttnSoftcap: 50, FinalSoftcap: 30,
		Tied: true, DType: "bfloat16", Seed: 1,
	}
}

// SpecLlama20M is a Llama of about 20 million parameters (hidden 384,
// 8 layers, 6 query and 2 key/value heads, vocabulary 8192), with BF16
// weights.
func SpecLlama20M() RandomSpec {
	return RandomSpec{
		Arch: ArchLlama, Hidden: 384, Intermediate: 1152, Layers: 8, Heads: 6, KVHeads: 2,
		Vocab: 8192, MaxPositions: 32768, RopeTheta: 10000, DType: "bfloat16", Seed: 1,
	}
}

func (s RandomSpec) withDefaults() RandomSpec {
	if s.Arch == "" {
		s.Arch = ArchLlama
	}
	qwen := s.Arch == ArchQwen2 || s.Arch == ArchQwen3
	if s.KVHeads == 0 {
		s.KVHeads = s.Heads
	}
	if s.HeadDim == 0 && s.Heads > 0 {
		s.HeadDim = s.Hidden / s.Heads
	}
	if s.MaxPositions == 0 {
		s.MaxPositions = 2048
	}
	if s.RopeTheta == 0 {
		s.RopeTheta = 10000
		if qwen {
			s.RopeTheta = 1e6
		}
	}
	if s.RMSNormEps == 0 {
		s.RMSNormEps = 1e-6
	}
	if s.DType == "" {
		s.DType = "bfloat16"
	}
	if s.InitStd == 0 {
		s.InitStd = 0.02
	}
	if s.BOSTokenID == nil {
		b := 1
		if qwen {
			b = s.Vocab - 2
		}
		s.BOSTokenID = &b
	}
	if s.EOSTokenIDs == nil {
		s.EOSTokenIDs = []int{2}
		if qwen {
			s.EOSTokenIDs = []int{s.Vocab - 1}
		}
	}
	return s
}

// pyFloat is a JSON number formatted as Python's json module writes
// floats (10000.0, 1e-06), so config.json reads as Hugging Face writes it.
func pyFloat(f float64) json.Number {
	if f != 0 && (math.Abs(f) < 1e-4 || math.Abs(f) >= 1e16) {
		return json.Number(strconv.FormatFloat(f, 'e', -1, 64))
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return json.Number(s)
}

// slidingWindow is config.json's sliding_window: the window, or null.
func slidingWindow(w int) any {
	if w > 0 {
		return w
	}
	return nil
}

// configJSON returns config.json as transformers writes it for the spec's
// architecture (sorted keys, two-space indent).
func (s RandomSpec) configJSON() ([]byte, error) {
	cfg := map[string]any{
		"architectures":           []string{s.Arch},
		"attention_dropout":       pyFloat(0),
		"bos_token_id":            *s.BOSTokenID,
		"hidden_act":              "silu",
		"hidden_size":             s.Hidden,
		"initializer_range":       pyFloat(s.InitStd),
		"intermediate_size":       s.Intermediate,
		"max_position_embeddings": s.MaxPositions,
		"num_attention_heads":     s.Heads,
		"num_hidden_layers":       s.Layers,
		"num_key_value_heads":     s.KVHeads,
		"rms_norm_eps":            pyFloat(s.RMSNormEps),
		"rope_scaling":            nil,
		"rope_theta":              pyFloat(s.RopeTheta),
		"tie_word_embeddings":     s.Tied,
		"torch_dtype":             s.DType,
		"transformers_version":    "4.51.3",
		"use_cache":               true,
		"vocab_size":              s.Vocab,
	}
	if len(s.EOSTokenIDs) == 1 {
		cfg["eos_token_id"] = s.EOSTokenIDs[0]
	} else {
		cfg["eos_token_id"] = s.EOSTokenIDs
	}
	switch s.Arch {
	case ArchLlama:
		cfg["model_type"] = "llama"
		cfg["attention_bias"] = s.AttentionBias
		cfg["mlp_bias"] = s.MLPBias
		cfg["head_dim"] = s.HeadDim
		cfg["pretraining_tp"] = 1
		if r := s.RopeScaling; r != nil {
			cfg["rope_scaling"] = map[string]any{
				"factor": pyFloat(r.Factor), "low_freq_factor": pyFloat(r.LowFreqFactor),
				"high_freq_factor": pyFloat(r.HighFreqFactor), "original_max_position_embeddings": r.OriginalMaxPositions,
				"rope_type": "llama3",
			}
		}
		if s.RopeLinear != 0 {
			cfg["rope_scaling"] = map[string]any{"type": "linear", "factor": pyFloat(s.RopeLinear)}
		}
	case ArchMistral:
		cfg["model_type"] = "mistral"
		cfg["head_dim"] = s.HeadDim
		cfg["sliding_window"] = slidingWindow(s.SlidingWindow)
	case ArchPhi3:
		cfg["model_type"] = "phi3"
		cfg["original_max_position_embeddings"] = s.MaxPositions
		cfg["sliding_window"] = slidingWindow(s.SlidingWindow)
		cfg["pad_token_id"] = s.EOSTokenIDs[0]
		cfg["resid_pdrop"] = pyFloat(0)
		cfg["embd_pdrop"] = pyFloat(0)
		if s.PartialRotary != 0 {
			cfg["partial_rotary_factor"] = pyFloat(s.PartialRotary)
		}
		if s.LongRopeShort != nil {
			cfg["rope_scaling"] = map[string]any{"type": "longrope", "short_factor": s.LongRopeShort, "long_factor": s.LongRopeLong}
			cfg["original_max_position_embeddings"] = s.LongRopeOriginal
		}
	case ArchGemma2:
		gemmaConfig(cfg, s, "gemma2")
	case ArchGemma3:
		gemmaConfig(cfg, s, "gemma3_text")
		cfg["rope_local_base_freq"] = pyFloat(10000)
		if s.LocalRopeTheta != 0 {
			cfg["rope_local_base_freq"] = pyFloat(s.LocalRopeTheta)
		}
		cfg["sliding_window_pattern"] = 6
		if s.SlidingPattern != 0 {
			cfg["sliding_window_pattern"] = s.SlidingPattern
		}
		if s.RopeLinear != 0 {
			cfg["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": pyFloat(s.RopeLinear)}
		}
	case ArchSmolLM3:
		cfg["model_type"] = "smollm3"
		cfg["attention_bias"] = s.AttentionBias
		cfg["mlp_bias"] = s.MLPBias
		cfg["no_rope_layer_interval"] = 4
		nope := make([]int, s.Layers)
		for i := range nope {
			nope[i] = 1
			if (i+1)%4 == 0 {
				nope[i] = 0
			}
		}
		cfg["no_rope_layers"] = nope
		if s.HeadDim != s.Hidden/s.Heads {
			return nil, fmt.Errorf("smollm3: head_dim %d must be hidden_size / num_attention_heads (%d)", s.HeadDim, s.Hidden/s.Heads)
		}
	case ArchOlmo2:
		cfg["model_type"] = "olmo2"
		cfg["attention_bias"] = s.AttentionBias
		if s.HeadDim != s.Hidden/s.Heads {
			return nil, fmt.Errorf("olmo2: head_dim %d must be hidden_size / num_attention_heads (%d)", s.HeadDim, s.Hidden/s.Heads)
		}
	case ArchGranite:
		cfg["model_type"] = "granite"
		cfg["attention_bias"] = s.AttentionBias
		cfg["mlp_bias"] = s.MLPBias
		if s.HeadDim != s.Hidden/s.Heads {
			return nil, fmt.Errorf("granite: head_dim %d must be hidden_size / num_attention_heads (%d)", s.HeadDim, s.Hidden/s.Heads)
		}
		for k, v := range map[string]float64{"embedding_multiplier": s.EmbeddingMultiplier, "attention_multiplier": s.AttentionMultiplier,
			"residual_multiplier": s.ResidualMultiplier, "logits_scaling": s.LogitsScaling} {
			if v != 0 {
				cfg[k] = pyFloat(v)
			}
		}
	case ArchQwen2:
		cfg["model_type"] = "qwen2"
		cfg["max_window_layers"] = s.Layers
		cfg["sliding_window"] = s.MaxPositions
		cfg["use_sliding_window"] = false
	case ArchQwen3:
		cfg["model_type"] = "qwen3"
		cfg["attention_bias"] = s.AttentionBias
		cfg["head_dim"] = s.HeadDim
		cfg["max_window_layers"] = s.Layers
		cfg["sliding_window"] = nil
		cfg["use_sliding_window"] = false
	default:
		return nil, fmt.Errorf("architecture %q is not supported", s.Arch)
	}
	if s.LongRopeShort != nil && s.Arch != ArchPhi3 {
		return nil, errors.New("LongRoPE is only generated for Phi-3")
	}
	if s.RopeScaling != nil && s.Arch != ArchLlama || s.RopeLinear != 0 && s.Arch != ArchLlama && s.Arch != ArchGemma3 {
		return nil, errors.New("rope_scaling is only generated for Llama (and linear scaling for Gemma 3)")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteRandomCheckpoint writes a checkpoint of random weights in the exact
// Hugging Face layout into dir (created if needed): config.json, the
// weights in model.safetensors (or shards and model.safetensors.index.json),
// and spec.ExtraFiles. Matrices are drawn from N(0, InitStd²), norm weights
// from 1 + N(0, 0.1²) and biases from N(0, InitStd²), each tensor from its
// own stream seeded by Seed and the tensor name, so the same spec always
// gives the same weights.
func WriteRandomCheckpoint(dir string, spec RandomSpec) error {
	s := spec.withDefaults()
	cj, err := s.configJSON()
	if err != nil {
		return fmt.Errorf("model: random checkpoint: %w", err)
	}
	cfg, err := ParseConfig(cj)
	if err != nil {
		return fmt.Errorf("model: random checkpoint: %w", err)
	}
	var st safetensors.DType
	switch s.DType {
	case "float32":
		st = safetensors.F32
	case "bfloat16":
		st = safetensors.BF16
	case "float16":
		st = safetensors.F16
	default:
		return fmt.Errorf("model: random checkpoint: dtype %q (want float32, bfloat16 or float16)", s.DType)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: random checkpoint: %w", err)
	}

	specs := cfg.FileTensorSpecs()
	tensors := make([]safetensors.WriteTensor, len(specs))
	var total int64
	for i, ts := range specs {
		tensors[i] = safetensors.WriteTensor{Name: ts.Name, DType: st, Shape: ts.Shape, Stream: randomStream(ts, st, s)}
		n := int64(st.Size())
		for _, d := range ts.Shape {
			n *= int64(d)
		}
		total += n
	}
	meta := map[string]string{"format": "pt"}
	if s.Shards <= 1 {
		if err := safetensors.WriteFile(filepath.Join(dir, safetensors.SingleFile), tensors, meta); err != nil {
			return fmt.Errorf("model: random checkpoint: %w", err)
		}
	} else {
		// Consecutive tensors, an equal number per shard.
		if s.Shards > len(tensors) {
			return fmt.Errorf("model: random checkpoint: %d shards for %d tensors", s.Shards, len(tensors))
		}
		weightMap := make(map[string]string, len(tensors))
		for k := range s.Shards {
			name := fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, s.Shards)
			group := tensors[k*len(tensors)/s.Shards : (k+1)*len(tensors)/s.Shards]
			for _, t := range group {
				weightMap[t.Name] = name
			}
			if err := safetensors.WriteFile(filepath.Join(dir, name), group, meta); err != nil {
				return fmt.Errorf("model: random checkpoint: %w", err)
			}
		}
		if err := safetensors.WriteIndex(filepath.Join(dir, safetensors.IndexFile), weightMap, total); err != nil {
			return fmt.Errorf("model: random checkpoint: %w", err)
		}
	}
	files := map[string][]byte{"config.json": cj}
	for name, data := range s.ExtraFiles {
		files[name] = data
	}
	for name, data := range files {
		if name != filepath.Base(name) {
			return fmt.Errorf("model: random checkpoint: extra file %q must be a plain file name", name)
		}
		err := safetensors.AtomicWriteFile(filepath.Join(dir, name), func(w io.Writer) error {
			_, err := w.Write(data)
			return err
		})
		if err != nil {
			return fmt.Errorf("model: random checkpoint: %w", err)
		}
	}
	return nil
}

func numElems(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// randomStream returns a writer of the random values of one tensor.
func randomStream(ts TensorSpec, dt safetensors.DType, s RandomSpec) func(io.Writer) error {
	return func(w io.Writer) error {
		h := fnv.New64a()
		h.Write([]byte(ts.Name))
		rng := rand.New(rand.NewPCG(s.Seed, h.Sum64()))
		mean, std := 0.0, s.InitStd
		if len(ts.Shape) == 1 && strings.HasSuffix(ts.Name, "norm.weight") {
			mean, std = 1, 0.1
			if s.Arch == ArchGemma3 || s.Arch == ArchGemma2 {
				mean = 0 // Gemma's norms multiply by 1 + w
			}
		}
		n := numElems(ts.Shape)
		buf := make([]byte, 0, 64<<10)
		for i := 0; i < n; i++ {
			v := float32(mean + std*rng.NormFloat64())
			switch dt {
			case safetensors.F32:
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			case safetensors.BF16:
				buf = binary.LittleEndian.AppendUint16(buf, safetensors.Float32ToBF16(v))
			case safetensors.F16:
				buf = binary.LittleEndian.AppendUint16(buf, safetensors.Float32ToF16(v))
			}
			if len(buf) >= cap(buf)-4 {
				if _, err := w.Write(buf); err != nil {
					return err
				}
				buf = buf[:0]
			}
		}
		_, err := w.Write(buf)
		return err
	}
}

// gemmaConfig writes the config.json keys Gemma 2 and Gemma 3 share (model
// type modelType): the GELU, head_dim, query_pre_attn_scalar, the
// soft-caps (null unless s sets them), the window and the pad token.
func gemmaConfig(cfg map[string]any, s RandomSpec, modelType string) {
	delete(cfg, "hidden_act")
	cfg["model_type"] = modelType
	cfg["attention_bias"] = s.AttentionBias
	cfg["head_dim"] = s.HeadDim
	cfg["hidden_activation"] = "gelu_pytorch_tanh"
	cfg["query_pre_attn_scalar"] = s.HeadDim
	if s.QueryPreAttnScalar != 0 {
		cfg["query_pre_attn_scalar"] = pyFloat(s.QueryPreAttnScalar)
	}
	cfg["attn_logit_softcapping"], cfg["final_logit_softcapping"] = nil, nil
	if s.AttnSoftcap != 0 {
		cfg["attn_logit_softcapping"] = pyFloat(s.AttnSoftcap)
	}
	if s.FinalSoftcap != 0 {
		cfg["final_logit_softcapping"] = pyFloat(s.FinalSoftcap)
	}
	cfg["sliding_window"] = slidingWindow(s.SlidingWindow)
	cfg["pad_token_id"] = 0
}
