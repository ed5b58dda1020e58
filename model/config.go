package model

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/clawrl/clawrl/compute"
)

// Architectures this package runs, as named in config.json.
const (
	ArchLlama = "LlamaForCausalLM"
	// ArchMistral is Llama's architecture under another name (Mistral 7B,
	// Mistral Nemo); ParseConfig reads it as ArchLlama, with a sliding
	// window shorter than the context capping the context (see
	// Config.SlidingWindow).
	ArchMistral = "MistralForCausalLM"
	ArchQwen2   = "Qwen2ForCausalLM"
	ArchQwen3   = "Qwen3ForCausalLM"
	// ArchPhi3 is Llama's math with the query, key and value projections
	// stored as one matrix (qkv_proj) and the gate and up projections as
	// another (gate_up_proj, gate first): Phi-3 mini and medium, Phi-4.
	// The model computes with them split (Config.FileParts); checkpoint
	// files, GGUF files and exports hold them fused, as Phi-3's own do.
	ArchPhi3 = "Phi3ForCausalLM"
	// ArchGemma3 is Gemma 3's text model (gemma-3-270m, gemma-3-1b):
	// Llama's blocks with a norm after attention and after the MLP as
	// well as before them ("sandwich" norms), per-head q/k norms, norm
	// weights applied as 1 + w, the embedding scaled by √hidden_size, a
	// GELU (tanh) gated MLP, and sliding-window layers (five of every six)
	// with a rotary base of their own. Its multimodal siblings
	// (Gemma3ForConditionalGeneration, 4B and up) are not run.
	ArchGemma3 = "Gemma3ForCausalLM"
	// ArchGranite is IBM's Granite 3 (GraniteForCausalLM): Llama's blocks
	// with four multipliers: the embedding's (EmbedScale), the attention
	// scores' (attention_multiplier, in place of head_dim^−½), the
	// residual branches' (ResidualScale) and the logits' divisor
	// (LogitScale).
	ArchGranite = "GraniteForCausalLM"
	// ArchOlmo2 is AI2's OLMo 2 (Olmo2ForCausalLM): Llama's blocks with
	// the norms after the attention and the MLP instead of before them
	// (PostNormsOnly) and q/k norms over whole query and key rows
	// (QKNormFull).
	ArchOlmo2 = "Olmo2ForCausalLM"
	// ArchSmolLM3 is Hugging Face's SmolLM3 (SmolLM3ForCausalLM): Llama's
	// blocks, every fourth without rotary embedding (NoRopeLayers).
	ArchSmolLM3 = "SmolLM3ForCausalLM"
	// ArchGemma2 is Gemma 2 (Gemma2ForCausalLM: 2B, 9B, 27B): Gemma 3's
	// blocks without q/k norms, every other layer windowed (the same
	// rotary base in all), and soft-capped attention scores and logits
	// (AttnSoftcap, FinalSoftcap).
	ArchGemma2 = "Gemma2ForCausalLM"
)

// Activations of the gated MLP (Config.Activation).
const (
	ActSiLU     = "silu"      // SwiGLU: silu(gate)·up
	ActGELUTanh = "gelu_tanh" // GeGLU with GELU's tanh approximation (Gemma's gelu_pytorch_tanh)
)

// Config is the part of a Hugging Face config.json that shapes the model,
// after defaults are applied and the values are checked.
type Config struct {
	Architecture string // one of ArchLlama, ArchQwen2, ArchQwen3, ArchPhi3, ArchGemma3 (ArchMistral reads as ArchLlama)
	ModelType    string // "llama", "qwen2", "qwen3", "mistral", "phi3", "gemma3_text"

	HiddenSize       int
	IntermediateSize int
	NumLayers        int
	NumHeads         int
	NumKVHeads       int
	HeadDim          int
	// RotaryDim is how many dimensions of each query and key head RoPE
	// rotates: HeadDim, or fewer with partial_rotary_factor (Phi-4-mini's
	// 0.75), the first RotaryDim as Hugging Face rotates them, the rest
	// passed through. The model computes with each head's dimensions
	// reordered (Config.HeadPerm) so that its rotation, which pairs
	// dimension i with i+HeadDim/2, pairs them as Hugging Face does.
	RotaryDim    int
	VocabSize    int
	MaxPositions int // max_position_embeddings: positions must stay below it
	// SlidingWindow is a Mistral or Phi-3 model's attention window when
	// it is shorter than max_position_embeddings (Mistral 7B v0.1's 4096
	// of 32768, Phi-3 mini's 2047 of 4096): the query at position p
	// attends to positions p−SlidingWindow+1 through p. A model loaded on
	// a backend whose attention has no window (compute.SlidingWindow; the
	// CPU's and the GPU's have it) runs with MaxPositions capped to the window instead, where
	// attending over every earlier position is the same, and
	// CappedToWindow set.
	SlidingWindow  int
	CappedToWindow bool
	// WindowLayers, when not nil, says which layers are Gemma 3's
	// "sliding_attention" layers: they attend over SlidingWindow (when
	// set: a window shorter than the context) and rotate with
	// LocalRopeTheta; the others attend over the whole context. nil: every
	// layer attends over SlidingWindow, when set.
	WindowLayers []bool
	// NoRopeLayers, when not nil, marks the layers whose queries and keys
	// are not rotated (SmolLM3's no_rope_layers, by default every fourth
	// layer: NoPE).
	NoRopeLayers []bool
	// LocalRopeTheta, when positive, is the rotary base of the windowed
	// layers (Gemma 3's rope_local_base_freq, without scaling); the other
	// layers use RopeTheta with the scaling.
	LocalRopeTheta float64

	RMSNormEps  float64
	RopeTheta   float64
	RopeScaling *RopeScaling // nil: plain RoPE
	// RopeLinear, when above 1, divides every rotary frequency (positions
	// interpolated, rope_scaling type "linear": DeepSeek Coder's 4, Code
	// Llama's and many long-context fine-tunes'); 0 for none.
	RopeLinear float64
	// LongRope is Phi-3's LongRoPE scaling, or nil.
	LongRope *LongRope

	TieWordEmbeddings bool
	QKVBias           bool // q, k and v projections have a bias (Qwen2; attention_bias)
	OBias             bool // the output projection has a bias (attention_bias)
	MLPBias           bool // gate, up and down projections have a bias (Llama mlp_bias)
	QKNorm            bool // per-head RMSNorm of queries and keys before RoPE (Qwen3, Gemma 3)

	// Gemma's differences from Llama's block (zero values: Llama's).
	//
	// Activation is the gated MLP's: ActSiLU or ActGELUTanh.
	Activation string
	// PostNormsOnly drops the norms before the attention and the MLP
	// (input_layernorm and post_attention_layernorm as Llama has them):
	// the projections read the residual stream itself, and only the
	// sandwich norms of the outputs remain (OLMo 2).
	PostNormsOnly bool
	// QKNormFull makes q_norm and k_norm normalise whole query and key
	// rows (heads × head_dim) rather than each head (OLMo 2).
	QKNormFull bool
	// SandwichNorms adds a norm of the attention's output and of the
	// MLP's output before each is added to the residual stream
	// (post_attention_layernorm and post_feedforward_layernorm; the MLP's
	// input norm is then pre_feedforward_layernorm).
	SandwichNorms bool
	// NormOffset is added to every norm weight of a checkpoint to give the
	// weight the model multiplies by: Gemma's RMSNorm computes x̂·(1 + w).
	// The model holds w + NormOffset; files hold w.
	NormOffset float64
	// EmbedScale, when positive, multiplies the embedding's output
	// (Gemma's √hidden_size); the output projection reads the table as it
	// is.
	EmbedScale float64
	// QueryPreAttnScalar, when positive, makes the attention scale
	// QueryPreAttnScalar^−½ (Gemma's query_pre_attn_scalar) instead of
	// HeadDim^−½.
	QueryPreAttnScalar float64

	// AttnSoftcap and FinalSoftcap, when positive, soft-cap the attention
	// scores and the logits as cap·tanh(x/cap) (Gemma 2's
	// attn_logit_softcapping and final_logit_softcapping).
	AttnSoftcap, FinalSoftcap float64

	// Granite's multipliers (zero values: none).
	//
	// AttnMultiplier, when positive, is the attention scale itself
	// (attention_multiplier).
	AttnMultiplier float64
	// ResidualScale, when positive, multiplies the attention's and the
	// MLP's outputs before they join the residual stream
	// (residual_multiplier).
	ResidualScale float64
	// LogitScale, when positive, divides the logits (logits_scaling).
	LogitScale float64

	BOSTokenID  int   // -1 when absent
	EOSTokenIDs []int // every id that ends generation
	TorchDType  string
}

// RopeScaling is Llama 3's frequency-dependent stretch of the rotary
// frequencies ("rope_type": "llama3").
type RopeScaling struct {
	Factor               float64
	LowFreqFactor        float64
	HighFreqFactor       float64
	OriginalMaxPositions int
}

// LongRope is Phi-3's LongRoPE ("longrope", formerly "su"; Phi-3 mini
// 128k, Phi-3.5 mini): each rotary frequency divided by its factor, and
// cos and sin multiplied by AttnFactor. The short factors apply to
// sequences within OriginalMaxPositions and the long ones beyond, as
// Hugging Face switches them by the sequence's length; clawrl runs the
// short ones only, so Config.MaxPositions is capped to
// OriginalMaxPositions, and the long factors are kept for exports.
type LongRope struct {
	ShortFactor, LongFactor []float64
	OriginalMaxPositions    int     // original_max_position_embeddings
	MaxPositions            int     // max_position_embeddings, before the cap
	AttnFactor              float64 // attention_factor, or √(1 + ln(max/original)/ln(original))
	// UseLong runs the long factors over the whole context
	// (Config.LongContext) instead of the short ones within the original.
	UseLong bool
}

// LongContext is c with a LongRoPE model's long factors and its whole
// context (MaxPositions uncapped, LongRope.UseLong), as llama.cpp runs
// such a model with a context above the original; c itself for a model
// without LongRoPE.
func (c *Config) LongContext() *Config {
	if c.LongRope == nil || c.LongRope.UseLong {
		return c
	}
	cc, lr := *c, *c.LongRope
	lr.UseLong = true
	cc.LongRope, cc.MaxPositions = &lr, lr.MaxPositions
	return &cc
}

// configJSON mirrors config.json; pointers tell absent from zero.
type configJSON struct {
	Architectures     []string        `json:"architectures"`
	ModelType         string          `json:"model_type"`
	HiddenSize        *int            `json:"hidden_size"`
	IntermediateSize  *int            `json:"intermediate_size"`
	NumHiddenLayers   *int            `json:"num_hidden_layers"`
	NumAttentionHeads *int            `json:"num_attention_heads"`
	NumKeyValueHeads  *int            `json:"num_key_value_heads"`
	HeadDim           *int            `json:"head_dim"`
	VocabSize         *int            `json:"vocab_size"`
	MaxPositions      *int            `json:"max_position_embeddings"`
	RMSNormEps        *float64        `json:"rms_norm_eps"`
	RopeTheta         *float64        `json:"rope_theta"`
	RopeScaling       json.RawMessage `json:"rope_scaling"`
	RopeParameters    json.RawMessage `json:"rope_parameters"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	AttentionBias     *bool           `json:"attention_bias"`
	MLPBias           *bool           `json:"mlp_bias"`
	UseSlidingWindow  *bool           `json:"use_sliding_window"`
	SlidingWindow     *int            `json:"sliding_window"`
	HiddenAct         *string         `json:"hidden_act"`
	HiddenActivation  *string         `json:"hidden_activation"`
	EmbeddingMult     *float64        `json:"embedding_multiplier"`
	AttentionMult     *float64        `json:"attention_multiplier"`
	ResidualMult      *float64        `json:"residual_multiplier"`
	LogitsScaling     *float64        `json:"logits_scaling"`
	QueryPreAttn      *float64        `json:"query_pre_attn_scalar"`
	RopeLocalBase     *float64        `json:"rope_local_base_freq"`
	SlidingPattern    *int            `json:"sliding_window_pattern"`
	LayerTypes        []string        `json:"layer_types"`
	NoRopeLayers      []int           `json:"no_rope_layers"`
	NoRopeInterval    *int            `json:"no_rope_layer_interval"`
	AttnSoftcap       *float64        `json:"attn_logit_softcapping"`
	FinalSoftcap      *float64        `json:"final_logit_softcapping"`
	PartialRotary     *float64        `json:"partial_rotary_factor"`
	OriginalMaxPos    *int            `json:"original_max_position_embeddings"`
	BOSTokenID        json.RawMessage `json:"bos_token_id"`
	EOSTokenID        json.RawMessage `json:"eos_token_id"`
	TorchDType        string          `json:"torch_dtype"`
	DType             string          `json:"dtype"`
}

type ropeJSON struct {
	RopeType                      string    `json:"rope_type"`
	Type                          string    `json:"type"`
	RopeTheta                     *float64  `json:"rope_theta"`
	Factor                        *float64  `json:"factor"`
	LowFreqFactor                 *float64  `json:"low_freq_factor"`
	HighFreqFactor                *float64  `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings *int      `json:"original_max_position_embeddings"`
	PartialRotaryFactor           *float64  `json:"partial_rotary_factor"`
	ShortFactor                   []float64 `json:"short_factor"`
	LongFactor                    []float64 `json:"long_factor"`
	AttentionFactor               *float64  `json:"attention_factor"`
}

// parseLongRope reads LongRoPE's factors (one per pair of head
// dimensions, each positive) and lengths, and works out the attention
// factor as Hugging Face does: the config's attention_factor, or from the
// ratio of max_position_embeddings to original_max_position_embeddings
// (the top-level key, as Phi-3 has it, or rope_scaling's).
func parseLongRope(r ropeJSON, topOrig *int, c *Config) (*LongRope, error) {
	half := c.RotaryDim / 2
	for _, f := range []struct {
		name string
		v    []float64
	}{{"short_factor", r.ShortFactor}, {"long_factor", r.LongFactor}} {
		if len(f.v) != half {
			return nil, fmt.Errorf("rope_scaling longrope: %s has %d values, want one per pair of rotated dimensions, %d", f.name, len(f.v), half)
		}
		for _, x := range f.v {
			if !(x > 0) || math.IsInf(x, 0) {
				return nil, fmt.Errorf("rope_scaling longrope: %s holds %g; factors must be positive and finite", f.name, x)
			}
		}
	}
	lr := &LongRope{ShortFactor: r.ShortFactor, LongFactor: r.LongFactor, MaxPositions: c.MaxPositions}
	factor := 1.0
	switch {
	case topOrig != nil:
		lr.OriginalMaxPositions = *topOrig
		if *topOrig > 0 {
			factor = float64(c.MaxPositions) / float64(*topOrig)
		}
	case r.OriginalMaxPositionEmbeddings != nil:
		lr.OriginalMaxPositions = *r.OriginalMaxPositionEmbeddings
		if *r.OriginalMaxPositionEmbeddings > 0 {
			factor = float64(c.MaxPositions) / float64(*r.OriginalMaxPositionEmbeddings)
		}
	default:
		lr.OriginalMaxPositions = c.MaxPositions
		if r.Factor != nil {
			factor = *r.Factor
		}
	}
	if lr.OriginalMaxPositions <= 0 {
		return nil, fmt.Errorf("rope_scaling longrope: original_max_position_embeddings must be positive, got %d", lr.OriginalMaxPositions)
	}
	switch {
	case r.AttentionFactor != nil:
		lr.AttnFactor = *r.AttentionFactor
	case factor <= 1:
		lr.AttnFactor = 1
	default:
		lr.AttnFactor = math.Sqrt(1 + math.Log(factor)/math.Log(float64(lr.OriginalMaxPositions)))
	}
	if !(lr.AttnFactor > 0) || math.IsInf(lr.AttnFactor, 0) {
		return nil, fmt.Errorf("rope_scaling longrope: attention factor %g must be positive and finite", lr.AttnFactor)
	}
	return lr, nil
}

// LoadConfig reads and checks dir/config.json.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", path, err)
	}
	return c, nil
}

// maxContext bounds max_position_embeddings: 2^24 positions, above the
// longest context of any model clawrl runs (Qwen2.5-1M's 1,010,000) by far;
// a larger value is a damaged config, whose rotary tables alone would not
// fit in memory.
const maxContext = 1 << 24

// ParseConfig parses and checks the contents of a config.json.
func ParseConfig(data []byte) (*Config, error) {
	var j configJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	c := &Config{ModelType: j.ModelType, TorchDType: j.TorchDType}
	if c.TorchDType == "" {
		c.TorchDType = j.DType
	}
	if len(j.Architectures) != 1 {
		return nil, fmt.Errorf("architectures must name exactly one architecture, got %q", j.Architectures)
	}
	c.Architecture = j.Architectures[0]
	defaultMaxPos := 32768
	windowed := c.Architecture == ArchMistral || c.Architecture == ArchPhi3 // a window caps the context
	switch c.Architecture {
	case ArchLlama, ArchMistral, ArchGranite, ArchSmolLM3:
		// Llama's attention_bias and mlp_bias.
		if c.Architecture == ArchLlama || c.Architecture == ArchGranite {
			defaultMaxPos = 2048
		}
		if c.Architecture == ArchMistral {
			c.Architecture = ArchLlama
		}
		c.QKVBias = deref(j.AttentionBias, false)
		c.OBias = c.QKVBias
		c.MLPBias = deref(j.MLPBias, false)
	case ArchPhi3:
		defaultMaxPos = 4096
	case ArchQwen2:
		c.QKVBias = true
	case ArchQwen3:
		c.QKVBias = deref(j.AttentionBias, false)
		c.OBias = c.QKVBias
		c.QKNorm = true
	case ArchOlmo2:
		defaultMaxPos = 4096
		c.QKVBias = deref(j.AttentionBias, false)
		c.OBias = c.QKVBias
		c.QKNorm, c.QKNormFull, c.SandwichNorms, c.PostNormsOnly = true, true, true, true
	case ArchGemma3, ArchGemma2:
		defaultMaxPos = 131072
		c.QKVBias = deref(j.AttentionBias, false)
		c.OBias = c.QKVBias
		c.QKNorm, c.SandwichNorms, c.NormOffset = c.Architecture == ArchGemma3, true, 1
		windowed = true
	default:
		return nil, fmt.Errorf("architecture %q is not supported (want %s, %s, %s, %s, %s, %s, %s, %s, %s or %s)", c.Architecture, ArchLlama, ArchMistral, ArchQwen2, ArchQwen3, ArchPhi3, ArchGemma2, ArchGemma3, ArchGranite, ArchOlmo2, ArchSmolLM3)
	}
	if deref(j.UseSlidingWindow, false) {
		return nil, fmt.Errorf("use_sliding_window is not supported")
	}
	c.Activation = ActSiLU
	if c.Architecture == ArchGemma3 || c.Architecture == ArchGemma2 {
		// Gemma3TextConfig and Gemma2Config name it hidden_activation; a
		// hidden_act, if any, is ignored by Hugging Face's Gemma code.
		if act := deref(j.HiddenActivation, "gelu_pytorch_tanh"); act != "gelu_pytorch_tanh" {
			return nil, fmt.Errorf("hidden_activation %q is not supported (want gelu_pytorch_tanh)", act)
		}
		c.Activation = ActGELUTanh
		for _, sc := range []struct {
			name string
			v    *float64
			dst  *float64
		}{{"attn_logit_softcapping", j.AttnSoftcap, &c.AttnSoftcap}, {"final_logit_softcapping", j.FinalSoftcap, &c.FinalSoftcap}} {
			if sc.v == nil || *sc.v == 0 {
				continue // null in Gemma 3's configs, and in a Gemma 2 one: none
			}
			if !(*sc.v > 0) || math.IsInf(*sc.v, 0) {
				return nil, fmt.Errorf("%s must be positive, got %g", sc.name, *sc.v)
			}
			*sc.dst = *sc.v
		}
	} else if act := deref(j.HiddenAct, "silu"); act != "silu" {
		return nil, fmt.Errorf("hidden_act %q is not supported (want silu)", act)
	}

	required := []struct {
		name string
		v    *int
		dst  *int
	}{
		{"hidden_size", j.HiddenSize, &c.HiddenSize},
		{"intermediate_size", j.IntermediateSize, &c.IntermediateSize},
		{"num_hidden_layers", j.NumHiddenLayers, &c.NumLayers},
		{"num_attention_heads", j.NumAttentionHeads, &c.NumHeads},
		{"vocab_size", j.VocabSize, &c.VocabSize},
	}
	for _, f := range required {
		if f.v == nil {
			return nil, fmt.Errorf("%s is missing", f.name)
		}
		if *f.v <= 0 {
			return nil, fmt.Errorf("%s must be positive, got %d", f.name, *f.v)
		}
		*f.dst = *f.v
	}
	c.NumKVHeads = deref(j.NumKeyValueHeads, c.NumHeads)
	if c.NumKVHeads <= 0 {
		return nil, fmt.Errorf("num_key_value_heads must be positive, got %d", c.NumKVHeads)
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return nil, fmt.Errorf("num_attention_heads %d is not divisible by num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	}
	if j.HeadDim != nil {
		c.HeadDim = *j.HeadDim
	} else {
		if c.HiddenSize%c.NumHeads != 0 {
			return nil, fmt.Errorf("hidden_size %d is not divisible by num_attention_heads %d (and head_dim is not given)", c.HiddenSize, c.NumHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if c.HeadDim <= 0 || c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("head_dim must be positive and even, got %d", c.HeadDim)
	}
	c.RotaryDim = c.HeadDim
	partial := j.PartialRotary
	if !isNull(j.RopeParameters) {
		var r ropeJSON
		if json.Unmarshal(j.RopeParameters, &r) == nil && r.PartialRotaryFactor != nil {
			partial = r.PartialRotaryFactor
		}
	}
	if partial != nil && *partial != 1 {
		// Hugging Face's int(head_dim · factor), kept from rounding down
		// a product that is whole but for the float's last bit.
		f := *partial
		if c.Architecture != ArchPhi3 {
			return nil, fmt.Errorf("partial_rotary_factor %g: clawrl runs partial rotary for %s only (Hugging Face's %s ignores it)", f, ArchPhi3, c.Architecture)
		}
		if !(f > 0 && f < 1) {
			return nil, fmt.Errorf("partial_rotary_factor must be in (0, 1], got %g", f)
		}
		c.RotaryDim = int(float64(c.HeadDim)*f + 1e-9)
		if c.RotaryDim <= 0 || c.RotaryDim%2 != 0 {
			return nil, fmt.Errorf("partial_rotary_factor %g rotates %d of %d head dimensions; it must be a positive even number", f, c.RotaryDim, c.HeadDim)
		}
	}
	c.MaxPositions = deref(j.MaxPositions, defaultMaxPos)
	if c.MaxPositions <= 0 || c.MaxPositions > maxContext {
		return nil, fmt.Errorf("max_position_embeddings must be from 1 to %d, got %d", maxContext, c.MaxPositions)
	}
	if w := deref(j.SlidingWindow, 0); windowed && w > 0 && w < c.MaxPositions {
		c.SlidingWindow = w
	}
	c.RMSNormEps = deref(j.RMSNormEps, 1e-6)
	if !(c.RMSNormEps > 0) || c.RMSNormEps > 1 {
		return nil, fmt.Errorf("rms_norm_eps must be in (0, 1], got %g", c.RMSNormEps)
	}
	c.RopeTheta = deref(j.RopeTheta, 10000)
	c.TieWordEmbeddings = deref(j.TieWordEmbeddings, c.Architecture == ArchGemma3 || c.Architecture == ArchGemma2)
	if c.Architecture == ArchGemma3 || c.Architecture == ArchGemma2 {
		if err := parseGemma(&j, c); err != nil {
			return nil, err
		}
	}
	if c.Architecture == ArchSmolLM3 {
		// SmolLM3Config: no_rope_layers[i] is 1 where layer i rotates,
		// by default every layer but each no_rope_layer_interval-th.
		c.NoRopeLayers = make([]bool, c.NumLayers)
		switch {
		case j.NoRopeLayers != nil:
			if len(j.NoRopeLayers) != c.NumLayers {
				return nil, fmt.Errorf("no_rope_layers has %d entries for %d layers", len(j.NoRopeLayers), c.NumLayers)
			}
			for i, v := range j.NoRopeLayers {
				if v != 0 && v != 1 {
					return nil, fmt.Errorf("no_rope_layers[%d] is %d (want 1 where the layer uses RoPE, 0 where not)", i, v)
				}
				c.NoRopeLayers[i] = v == 0
			}
		default:
			n := deref(j.NoRopeInterval, 4)
			if n < 1 {
				return nil, fmt.Errorf("no_rope_layer_interval must be at least 1, got %d", n)
			}
			for i := range c.NoRopeLayers {
				c.NoRopeLayers[i] = (i+1)%n == 0
			}
		}
	}
	if c.Architecture == ArchGranite {
		// GraniteConfig's defaults are 1: an attention_multiplier of 1
		// scales the scores by 1, not by head_dim^−½.
		for _, m := range []struct {
			name string
			v    *float64
			dst  *float64
		}{
			{"embedding_multiplier", j.EmbeddingMult, &c.EmbedScale},
			{"attention_multiplier", j.AttentionMult, &c.AttnMultiplier},
			{"residual_multiplier", j.ResidualMult, &c.ResidualScale},
			{"logits_scaling", j.LogitsScaling, &c.LogitScale},
		} {
			*m.dst = deref(m.v, 1)
			if !(*m.dst > 0) || math.IsInf(*m.dst, 0) {
				return nil, fmt.Errorf("%s must be positive and finite, got %g", m.name, *m.dst)
			}
		}
	}

	// Newer transformers versions move rope_theta and the scaling into
	// rope_parameters; read either.
	rope := j.RopeScaling
	if !isNull(j.RopeParameters) {
		rope = j.RopeParameters
		if full, ok := perLayerRope(j.RopeParameters); ok {
			rope = full
		}
	}
	if !isNull(rope) {
		var r ropeJSON
		if err := json.Unmarshal(rope, &r); err != nil {
			return nil, fmt.Errorf("rope_scaling: %w", err)
		}
		if r.RopeTheta != nil {
			c.RopeTheta = *r.RopeTheta
		}
		kind := r.RopeType
		if kind == "" {
			kind = r.Type
		}
		switch kind {
		case "", "default":
		case "llama3":
			if r.Factor == nil || r.LowFreqFactor == nil || r.HighFreqFactor == nil || r.OriginalMaxPositionEmbeddings == nil {
				return nil, fmt.Errorf("rope_scaling llama3 needs factor, low_freq_factor, high_freq_factor and original_max_position_embeddings")
			}
			s := &RopeScaling{Factor: *r.Factor, LowFreqFactor: *r.LowFreqFactor, HighFreqFactor: *r.HighFreqFactor, OriginalMaxPositions: *r.OriginalMaxPositionEmbeddings}
			if !(s.Factor >= 1) || !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) || s.OriginalMaxPositions <= 0 {
				return nil, fmt.Errorf("rope_scaling llama3: need factor ≥ 1, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0, got %+v", *s)
			}
			c.RopeScaling = s
		case "linear":
			if r.Factor == nil || !(*r.Factor >= 1) || math.IsInf(*r.Factor, 0) {
				return nil, fmt.Errorf("rope_scaling linear needs a finite factor ≥ 1, got %v", r.Factor)
			}
			if *r.Factor > 1 {
				c.RopeLinear = *r.Factor
			}
		case "longrope", "su":
			lr, err := parseLongRope(r, j.OriginalMaxPos, c)
			if err != nil {
				return nil, err
			}
			c.LongRope = lr
			c.MaxPositions = min(c.MaxPositions, lr.OriginalMaxPositions)
		default:
			return nil, fmt.Errorf("rope_scaling type %q is not supported (want llama3, linear, longrope or default)", kind)
		}
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return nil, fmt.Errorf("rope_theta must be positive, got %g", c.RopeTheta)
	}

	var err error
	bos, err := tokenIDs("bos_token_id", j.BOSTokenID)
	if err != nil {
		return nil, err
	}
	c.BOSTokenID = -1
	if len(bos) > 0 {
		c.BOSTokenID = bos[0]
	}
	if c.EOSTokenIDs, err = tokenIDs("eos_token_id", j.EOSTokenID); err != nil {
		return nil, err
	}
	for _, id := range append(bos, c.EOSTokenIDs...) {
		if id < 0 || id >= c.VocabSize {
			return nil, fmt.Errorf("special token id %d outside vocab_size %d", id, c.VocabSize)
		}
	}
	return c, nil
}

// parseGemma reads what Gemma 3's and Gemma 2's configs add: the attention
// scale, which layers are windowed (layer_types, or
// sliding_window_pattern: in Gemma 3 every sixth layer attends over the
// whole context and the rest over the window, in Gemma 2 every other),
// Gemma 3's rotary base of the windowed layers, and the embedding's scale.
func parseGemma(j *configJSON, c *Config) error {
	c.EmbedScale = math.Sqrt(float64(c.HiddenSize))
	c.QueryPreAttnScalar = deref(j.QueryPreAttn, float64(c.HeadDim))
	if !(c.QueryPreAttnScalar > 0) || math.IsInf(c.QueryPreAttnScalar, 0) {
		return fmt.Errorf("query_pre_attn_scalar must be positive, got %g", c.QueryPreAttnScalar)
	}
	pattern := 6
	if c.Architecture == ArchGemma2 {
		// Gemma 2: every other layer windowed (the even ones), all with
		// rope_theta.
		pattern = 2
	} else if err := parseLocalRope(j, c); err != nil {
		return err
	}
	return parseWindowLayers(j, c, pattern)
}

// parseLocalRope reads Gemma 3's rotary base of its windowed layers.
func parseLocalRope(j *configJSON, c *Config) error {
	c.LocalRopeTheta = deref(j.RopeLocalBase, 10000)
	if !isNull(j.RopeParameters) {
		var per map[string]ropeJSON
		if json.Unmarshal(j.RopeParameters, &per) == nil {
			if r, ok := per["sliding_attention"]; ok && r.RopeTheta != nil {
				c.LocalRopeTheta = *r.RopeTheta
				if k := r.RopeType + r.Type; k != "" && k != "default" {
					return fmt.Errorf("rope_parameters: sliding_attention rope_type %q is not supported (want default)", k)
				}
			}
		}
	}
	if !(c.LocalRopeTheta > 0) || math.IsInf(c.LocalRopeTheta, 0) {
		return fmt.Errorf("rope_local_base_freq must be positive, got %g", c.LocalRopeTheta)
	}
	return nil
}

// parseWindowLayers reads which layers are windowed: layer_types, or
// sliding_window_pattern (default pattern: Gemma 3's 6, Gemma 2's 2),
// layer i windowed unless (i+1) % pattern is 0.
func parseWindowLayers(j *configJSON, c *Config, pattern int) error {
	if deref(j.SlidingWindow, 0) <= 0 {
		return nil // no sliding layers: every layer is global, as llama.cpp reads a file without a window
	}
	c.WindowLayers = make([]bool, c.NumLayers)
	switch {
	case j.LayerTypes != nil:
		if len(j.LayerTypes) != c.NumLayers {
			return fmt.Errorf("layer_types has %d entries for %d layers", len(j.LayerTypes), c.NumLayers)
		}
		for i, t := range j.LayerTypes {
			switch t {
			case "sliding_attention":
				c.WindowLayers[i] = true
			case "full_attention":
			default:
				return fmt.Errorf("layer_types[%d] is %q (want sliding_attention or full_attention)", i, t)
			}
		}
	default:
		p := deref(j.SlidingPattern, pattern)
		if p < 1 {
			return fmt.Errorf("sliding_window_pattern must be at least 1, got %d", p)
		}
		for i := range c.WindowLayers {
			c.WindowLayers[i] = (i+1)%p != 0
		}
	}
	return nil
}

// perLayerRope returns the full-attention layers' parameters when
// rope_parameters holds one set per kind of layer (newer transformers'
// Gemma 3 configs: "full_attention" and "sliding_attention";
// parseLocalRope reads the other); they are then read as the model's rope_scaling.
func perLayerRope(raw json.RawMessage) (json.RawMessage, bool) {
	var per map[string]json.RawMessage
	if json.Unmarshal(raw, &per) != nil {
		return nil, false
	}
	full, ok := per["full_attention"]
	return full, ok
}

// LayerWindow is the sliding window of layer l's attention: SlidingWindow,
// or 0 for a layer that attends over the whole context (WindowLayers).
func (c *Config) LayerWindow(l int) int {
	if c.WindowLayers != nil && !c.WindowLayers[l] {
		return 0
	}
	return c.SlidingWindow
}

// qNormWidth and kNormWidth are the lengths of q_norm's and k_norm's
// weights: a head's, or whole rows' (QKNormFull).
func (c *Config) qNormWidth() int {
	if c.QKNormFull {
		return c.QDim()
	}
	return c.HeadDim
}

func (c *Config) kNormWidth() int {
	if c.QKNormFull {
		return c.KVDim()
	}
	return c.HeadDim
}

// scales reports whether the model multiplies a tensor by a constant
// (Config.EmbedScale, ResidualScale, LogitScale other than 1).
func (c *Config) scales() bool {
	return c.EmbedScale > 0 && c.EmbedScale != 1 || c.residualScale() != 1 || c.logitScale() != 1
}

// residualScale is the factor of the residual branches (ResidualScale, or 1).
func (c *Config) residualScale() float32 {
	if c.ResidualScale > 0 {
		return float32(c.ResidualScale)
	}
	return 1
}

// logitScale is the factor of the final hidden state, 1/LogitScale (or 1):
// the logits' divisor, applied before the output projection.
func (c *Config) logitScale() float32 {
	if c.LogitScale > 0 {
		return float32(1 / c.LogitScale)
	}
	return 1
}

// rotates reports whether layer l applies RoPE to its queries and keys
// (all but SmolLM3's NoRopeLayers).
func (c *Config) rotates(l int) bool {
	return c.NoRopeLayers == nil || !c.NoRopeLayers[l]
}

// localRope reports whether layer l rotates with LocalRopeTheta.
func (c *Config) localRope(l int) bool {
	return c.LocalRopeTheta > 0 && c.WindowLayers != nil && c.WindowLayers[l]
}

// AttentionScale is the factor of the attention scores: HeadDim^−½,
// QueryPreAttnScalar^−½, or AttnMultiplier.
func (c *Config) AttentionScale() float32 {
	if c.AttnMultiplier > 0 {
		return float32(c.AttnMultiplier)
	}
	if c.QueryPreAttnScalar > 0 {
		return float32(1 / math.Sqrt(c.QueryPreAttnScalar))
	}
	return float32(1 / math.Sqrt(float64(c.HeadDim)))
}

// tokenIDs reads an id field that may be null, an integer or a list.
func tokenIDs(name string, raw json.RawMessage) ([]int, error) {
	if isNull(raw) {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("%s must be an integer or a list of integers, got %s", name, raw)
	}
	return many, nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// QDim is the width of the query projection (heads × head_dim).
func (c *Config) QDim() int { return c.NumHeads * c.HeadDim }

// KVDim is the width of the key and value projections.
func (c *Config) KVDim() int { return c.NumKVHeads * c.HeadDim }

// KVBytesPerToken is the KV cache memory one token takes over all layers
// (keys and values) in a cache of dtype dt (F32, BF16, or Q8_0: 34 bytes
// for 32 values).
func (c *Config) KVBytesPerToken(dt compute.DType) int64 {
	return int64(2*c.NumLayers) * int64(dt.Bytes(c.KVDim()))
}

// NumParams counts the model's parameters (tied embeddings once).
func (c *Config) NumParams() int64 {
	h, q, kv, in := int64(c.HiddenSize), int64(c.QDim()), int64(c.KVDim()), int64(c.IntermediateSize)
	layer := 2*h + h*q + 2*h*kv + q*h + 3*h*in
	if c.QKVBias {
		layer += q + 2*kv
	}
	if c.OBias {
		layer += h
	}
	if c.MLPBias {
		layer += 2*in + h
	}
	if c.QKNorm {
		layer += int64(c.qNormWidth() + c.kNormWidth())
	}
	if c.SandwichNorms {
		layer += 2 * h
	}
	if c.PostNormsOnly {
		layer -= 2 * h
	}
	n := int64(c.NumLayers)*layer + int64(c.VocabSize)*h + h
	if !c.TieWordEmbeddings {
		n += int64(c.VocabSize) * h
	}
	return n
}

// IsEOS reports whether id ends generation.
func (c *Config) IsEOS(id int) bool {
	for _, e := range c.EOSTokenIDs {
		if e == id {
			return true
		}
	}
	return false
}
