package gguf

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
)

// Architectures maps the GGUF architectures clawrl runs
// (general.architecture) to their Hugging Face names.
var Architectures = map[string]string{
	"llama":   model.ArchLlama,
	"qwen2":   model.ArchQwen2,
	"qwen3":   model.ArchQwen3,
	"phi3":    model.ArchPhi3,
	"gemma2":  model.ArchGemma2,
	"gemma3":  model.ArchGemma3,
	"granite": model.ArchGranite,
	"olmo2":   model.ArchOlmo2,
	"smollm3": model.ArchSmolLM3,
}

// KeyRopeFreqs names the tensor of per-frequency divisors that llama.cpp's
// converter writes for Llama 3 rope scaling.
const KeyRopeFreqs = "rope_freqs.weight"

// The tensors of LongRoPE's factors (Phi-3 128k, Phi-3.5), one per pair
// of head dimensions, as llama.cpp's converter writes them.
const (
	KeyRopeFactorsLong  = "rope_factors_long.weight"
	KeyRopeFactorsShort = "rope_factors_short.weight"
)

// TensorName maps a Hugging Face tensor name of the Llama, Qwen2, Qwen3
// and Phi-3 models to its GGUF name ("model.layers.3.mlp.up_proj.weight" →
// "blk.3.ffn_up.weight"; Phi-3's fused "self_attn.qkv_proj" → "attn_qkv"
// and "mlp.gate_up_proj" → "ffn_up", which llama.cpp splits in half as
// Phi-3 does); ok is false for a name outside them.
func TensorName(hf string) (name string, ok bool) {
	switch hf {
	case "model.embed_tokens.weight":
		return "token_embd.weight", true
	case "model.norm.weight":
		return "output_norm.weight", true
	case "lm_head.weight":
		return "output.weight", true
	}
	rest, ok := strings.CutPrefix(hf, "model.layers.")
	if !ok {
		return "", false
	}
	layer, part, ok := strings.Cut(rest, ".")
	if !ok || layer == "" || strings.TrimLeft(layer, "0123456789") != "" || len(layer) > 1 && layer[0] == '0' {
		return "", false
	}
	stem, kind := part, ""
	for _, k := range []string{".weight", ".bias"} {
		if s, found := strings.CutSuffix(part, k); found {
			stem, kind = s, k
		}
	}
	g, ok := layerTensors[stem]
	if !ok || kind == "" {
		return "", false
	}
	return "blk." + layer + "." + g + kind, true
}

// TensorNameFor is TensorName for a model of config c: Gemma's and
// OLMo 2's sandwich norms have names of their own ("post_attention_layernorm", the
// attention output's norm, → "post_attention_norm"; the MLP's input norm
// "pre_feedforward_layernorm" → "ffn_norm"; "post_feedforward_layernorm"
// → "post_ffw_norm").
func TensorNameFor(c *model.Config, hf string) (string, bool) {
	if c.SandwichNorms {
		if layer, ok := strings.CutPrefix(hf, "model.layers."); ok {
			if n, part, ok := strings.Cut(layer, "."); ok {
				if g, ok := sandwichTensors[part]; ok {
					if _, err := strconv.Atoi(n); err == nil {
						return "blk." + n + "." + g, true
					}
				}
			}
		}
	}
	return TensorName(hf)
}

// sandwichTensors are the norms whose GGUF names differ under sandwich
// norms (TensorNameFor).
var sandwichTensors = map[string]string{
	"post_attention_layernorm.weight":   "post_attention_norm.weight",
	"pre_feedforward_layernorm.weight":  "ffn_norm.weight",
	"post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}

// layerTensors maps a layer's Hugging Face module names to GGUF's.
var layerTensors = map[string]string{
	"input_layernorm":          "attn_norm",
	"self_attn.q_proj":         "attn_q",
	"self_attn.k_proj":         "attn_k",
	"self_attn.v_proj":         "attn_v",
	"self_attn.o_proj":         "attn_output",
	"self_attn.q_norm":         "attn_q_norm",
	"self_attn.k_norm":         "attn_k_norm",
	"post_attention_layernorm": "ffn_norm",
	"mlp.gate_proj":            "ffn_gate",
	"mlp.up_proj":              "ffn_up",
	"mlp.down_proj":            "ffn_down",
	"self_attn.qkv_proj":       "attn_qkv",
	"mlp.gate_up_proj":         "ffn_up",
}

// Model is a GGUF file opened as a clawrl checkpoint: a model.Source whose
// config comes from the metadata and whose tensors have Hugging Face names
// and layout. Llama's query and key projections, which llama.cpp's
// converter stores permuted (see UnpermuteRows), are given back in Hugging
// Face's order. F32 and BF16 tensors are views of the mapped file; F16 is
// widened and quantized tensors are dequantized to F32 (their blocks are
// also offered as stored, for a backend that computes with them).
type Model struct {
	f          *File
	arch       string // the GGUF architecture
	cfg        *model.Config
	configJSON []byte
	names      map[string]string // GGUF tensor name → Hugging Face name
}

// OpenModel opens a GGUF file of a llama, qwen2 or qwen3 model, reads its
// config from the metadata and checks that its tensors are those the
// config implies. Errors name the path and what is wrong.
func OpenModel(path string) (*Model, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	m := &Model{f: f}
	if err := m.readConfig(); err != nil {
		f.Close()
		return nil, err
	}
	return m, nil
}

// File is the open GGUF file.
func (m *Model) File() *File { return m.f }

// Config is the model config the metadata describes.
func (m *Model) Config() *model.Config { return m.cfg }

// ConfigJSON is a Hugging Face config.json equivalent to the metadata
// (model.ParseConfig reads it back to Config), for checkpoints of a model
// loaded from the file.
func (m *Model) ConfigJSON() []byte { return m.configJSON }

// String is the file's path.
func (m *Model) String() string { return m.f.path }

// Close unmaps the file.
func (m *Model) Close() error { return m.f.Close() }

// metaError is an error about the file's metadata.
func (m *Model) metaError(format string, args ...any) error {
	return m.f.errorf("metadata: %s", fmt.Sprintf(format, args...))
}

// intKey reads an integer key (any integer type) of at most 2^31−1; ok
// is false when the key is absent.
func (m *Model) intKey(key string) (n int, ok bool, err error) {
	v, ok := m.f.Get(key)
	if !ok {
		return 0, false, nil
	}
	u, isUint := v.Uint()
	if !isUint || u > math.MaxInt32 {
		return 0, true, m.metaError("%s is %s %v, not an integer from 0 to 2^31−1", key, v.Type(), v)
	}
	return int(u), true, nil
}

func (m *Model) requireInt(key string) (int, error) {
	n, ok, err := m.intKey(key)
	if err == nil && !ok {
		err = m.metaError("%s is missing", key)
	}
	return n, err
}

// floatKey reads a float32 or float64 key.
func (m *Model) floatKey(key string) (x float64, ok bool, err error) {
	v, ok := m.f.Get(key)
	if !ok {
		return 0, false, nil
	}
	x, isFloat := v.Float()
	if !isFloat {
		return 0, true, m.metaError("%s is %s %v, not a float", key, v.Type(), v)
	}
	return x, true, nil
}

func (m *Model) stringKey(key string) (s string, ok bool, err error) {
	v, ok := m.f.Get(key)
	if !ok {
		return "", false, nil
	}
	s, isStr := v.Str()
	if !isStr {
		return "", true, m.metaError("%s is %s %v, not a string", key, v.Type(), v)
	}
	return s, true, nil
}

// jsonFloat writes a float as its shortest decimal at the precision the
// file stored it in (1e-06 for float32(1e-6), not 9.999999974752427e-07).
func jsonFloat(v Value) json.Number {
	x, _ := v.Float()
	bits := 64
	if v.Type() == TypeFloat32 {
		bits = 32
	}
	s := strconv.FormatFloat(x, 'g', -1, bits)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return json.Number(s)
}

// readConfig builds config.json from the metadata and the tensors present,
// parses it with the model package's checks, and checks that the file
// holds exactly the tensors the config implies.
func (m *Model) readConfig() error {
	arch, ok, err := m.stringKey("general.architecture")
	if err != nil {
		return err
	}
	if !ok {
		return m.metaError("general.architecture is missing")
	}
	hf, known := Architectures[arch]
	if !known {
		return m.f.errorf("architecture %q is not one clawrl runs (llama, qwen2, qwen3, phi3, gemma2, gemma3, granite, olmo2, smollm3)", arch)
	}
	if n, _, err := m.intKey("split.count"); err != nil || n > 1 {
		if err != nil {
			return err
		}
		return m.f.errorf("one of %d parts of a split model (split.count): clawrl loads single files; merge the parts first (llama-gguf-split --merge)", n)
	}
	m.arch = arch
	key := func(k string) string { return arch + "." + k }
	if n, _, err := m.intKey(key("expert_count")); err != nil || n > 0 {
		if err != nil {
			return err
		}
		return m.f.errorf("a mixture of %d experts (%s): clawrl runs dense models only", n, key("expert_count"))
	}

	cfg := map[string]any{"architectures": []string{hf}, "model_type": arch, "hidden_act": "silu"}
	if arch == "gemma3" || arch == "gemma2" {
		modelType := map[string]string{"gemma2": "gemma2", "gemma3": "gemma3_text"}[arch]
		cfg = map[string]any{"architectures": []string{hf}, "model_type": modelType, "hidden_activation": "gelu_pytorch_tanh"}
	}
	for _, f := range []struct{ gguf, hf string }{
		{"embedding_length", "hidden_size"},
		{"feed_forward_length", "intermediate_size"},
		{"block_count", "num_hidden_layers"},
		{"attention.head_count", "num_attention_heads"},
		{"context_length", "max_position_embeddings"},
	} {
		n, err := m.requireInt(key(f.gguf))
		if err != nil {
			return err
		}
		cfg[f.hf] = n
	}
	if n := cfg["num_hidden_layers"].(int); n > len(m.f.Tensors) {
		return m.metaError("%s is %d, but the file holds %d tensors", key("block_count"), n, len(m.f.Tensors))
	}
	heads := cfg["num_attention_heads"].(int)
	kvHeads, ok, err := m.intKey(key("attention.head_count_kv"))
	if err != nil {
		return err
	}
	if !ok {
		kvHeads = heads
	}
	cfg["num_key_value_heads"] = kvHeads
	if heads == 0 {
		return m.metaError("%s is 0", key("attention.head_count"))
	}
	headDim, ok, err := m.intKey(key("attention.key_length"))
	if err != nil {
		return err
	}
	if !ok {
		headDim = cfg["hidden_size"].(int) / heads
	}
	cfg["head_dim"] = headDim
	if v, ok, err := m.intKey(key("attention.value_length")); err != nil || ok && v != headDim {
		if err != nil {
			return err
		}
		return m.f.errorf("value heads of %d (%s) differ from key heads of %d: not supported", v, key("attention.value_length"), headDim)
	}
	rotary := headDim
	if r, ok, err := m.intKey(key("rope.dimension_count")); err != nil {
		return err
	} else if ok && r != headDim {
		if arch != "phi3" || r <= 0 || r > headDim || r%2 != 0 {
			return m.f.errorf("rotary embedding over %d of %d head dimensions (%s): partial rotary is supported for phi3 only, over an even number of dimensions", r, headDim, key("rope.dimension_count"))
		}
		rotary = r
		cfg["partial_rotary_factor"] = float64(r) / float64(headDim)
	}
	eps, ok := m.f.Get(key("attention.layer_norm_rms_epsilon"))
	if !ok {
		return m.metaError("%s is missing", key("attention.layer_norm_rms_epsilon"))
	}
	if _, isFloat := eps.Float(); !isFloat {
		return m.metaError("%s is %s, not a float", key("attention.layer_norm_rms_epsilon"), eps.Type())
	}
	cfg["rms_norm_eps"] = jsonFloat(eps)
	theta := Float32(10000) // llama.cpp's default
	if v, ok := m.f.Get(key("rope.freq_base")); ok {
		if _, isFloat := v.Float(); !isFloat {
			return m.metaError("%s is %s, not a float", key("rope.freq_base"), v.Type())
		}
		theta = v
	}
	cfg["rope_theta"] = jsonFloat(theta)
	linear, err := m.ropeLinear(key)
	if err != nil {
		return err
	}

	// What the tensors say: the vocabulary, tied embeddings, biases.
	embd, ok := m.f.Tensor("token_embd.weight")
	if !ok || len(embd.Dims) != 2 {
		return m.f.errorf("no token embedding matrix token_embd.weight")
	}
	vocab := int(embd.Dims[1])
	cfg["vocab_size"] = vocab
	_, untied := m.f.Tensor("output.weight")
	cfg["tie_word_embeddings"] = !untied
	has := func(name string) bool { _, ok := m.f.Tensor(name); return ok }
	qkvBias, oBias := has("blk.0.attn_q.bias") || has("blk.0.attn_qkv.bias"), has("blk.0.attn_output.bias")
	mlpBias := has("blk.0.ffn_gate.bias") || has("blk.0.ffn_up.bias") || has("blk.0.ffn_down.bias")
	switch arch {
	case "llama", "qwen3", "granite", "olmo2", "smollm3":
		if qkvBias != oBias {
			return m.f.errorf("%s with attention biases on only some projections (q: %v, output: %v): not supported", arch, qkvBias, oBias)
		}
		cfg["attention_bias"] = qkvBias
		if arch == "llama" || arch == "granite" || arch == "smollm3" {
			cfg["mlp_bias"] = mlpBias
		}
		if arch == "smollm3" {
			cfg["no_rope_layer_interval"] = 4 // llama.cpp's, fixed: every fourth layer without RoPE
		}
		if arch == "granite" {
			if err := m.granite(cfg, key, headDim); err != nil {
				return err
			}
		}
		if w, ok, err := m.intKey(key("attention.sliding_window")); err != nil || arch == "olmo2" && ok && w > 0 {
			if err != nil {
				return err
			}
			return m.f.errorf("olmo2 with a sliding window (%s = %d, OLMo 3): not supported", key("attention.sliding_window"), w)
		}
	case "qwen2":
		cfg["use_sliding_window"] = false
	case "phi3":
		if qkvBias || oBias || mlpBias {
			return m.f.errorf("phi3 with biases: not supported")
		}
		if w, ok, err := m.intKey(key("attention.sliding_window")); err != nil {
			return err
		} else if ok && w > 0 {
			cfg["sliding_window"] = w
		}
		if has(KeyRopeFactorsLong) || has(KeyRopeFactorsShort) {
			if err := m.longRope(cfg, key, rotary); err != nil {
				return err
			}
		}
	case "gemma3":
		if err := m.gemma3(cfg, key, headDim); err != nil {
			return err
		}
		cfg["attention_bias"] = qkvBias
	case "gemma2":
		if err := m.gemma2(cfg, key, headDim); err != nil {
			return err
		}
		cfg["attention_bias"] = qkvBias
	}
	if err := m.specialTokens(cfg, vocab); err != nil {
		return err
	}
	cfg["torch_dtype"] = m.dtype()
	if scaling, err := m.ropeFreqs(key, headDim, theta); err != nil {
		return err
	} else if scaling != nil {
		if linear > 1 {
			return m.f.errorf("both linear rope scaling (%s) and per-frequency divisors (%s): not supported", key("rope.scaling.type"), KeyRopeFreqs)
		}
		cfg["rope_scaling"] = scaling
	}
	if linear > 1 {
		cfg["rope_scaling"] = map[string]any{"type": "linear", "factor": linear}
	}

	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return m.f.errorf("config: %v", err)
	}
	c, err := model.ParseConfig(data)
	if err != nil {
		return m.metaError("%v", err)
	}
	m.cfg, m.configJSON = c, append(data, '\n')
	return m.checkTensors()
}

// gemma3 reads Gemma 3's keys into config.json as llama.cpp reads them:
// a sliding window makes layer il windowed unless il % pattern is
// pattern−1 (attention.sliding_window_pattern, 6 when absent; 0: every
// layer), the windowed layers rotate with rope.freq_base_swa (10,000 when
// absent), the attention scale is head_dim^−½ but for the 27B shape (62
// layers), whose query_pre_attn_scalar is hidden/heads, and a
// final_logit_softcapping key caps the logits.
func (m *Model) gemma3(cfg map[string]any, key func(string) string, headDim int) error {
	if c, ok, err := m.floatKey(key("final_logit_softcapping")); err != nil {
		return err
	} else if ok && c != 0 {
		cfg["final_logit_softcapping"] = c // llama.cpp's gemma3 caps the logits when the key says so
	}
	layers, heads := cfg["num_hidden_layers"].(int), cfg["num_attention_heads"].(int)
	cfg["query_pre_attn_scalar"] = headDim
	if layers == 62 {
		cfg["query_pre_attn_scalar"] = cfg["hidden_size"].(int) / heads
	}
	local := Float32(10000)
	if v, ok := m.f.Get(key("rope.freq_base_swa")); ok {
		if _, isFloat := v.Float(); !isFloat {
			return m.metaError("%s is %s, not a float", key("rope.freq_base_swa"), v.Type())
		}
		local = v
	}
	cfg["rope_local_base_freq"] = jsonFloat(local)
	w, ok, err := m.intKey(key("attention.sliding_window"))
	if err != nil || !ok || w == 0 {
		return err
	}
	cfg["sliding_window"] = w
	return m.layerTypes(cfg, key, layers, 6)
}

// layerTypes sets config.json's layer_types from the period of the
// windowed layers as llama.cpp reads it (attention.sliding_window_pattern,
// def when absent): layer il is windowed unless il % pattern is
// pattern−1; a pattern of 0 windows every layer.
func (m *Model) layerTypes(cfg map[string]any, key func(string) string, layers, def int) error {
	pattern, ok, err := m.intKey(key("attention.sliding_window_pattern"))
	if err != nil {
		return err
	}
	if !ok {
		pattern = def
	}
	types := make([]string, layers)
	for il := range types {
		types[il] = "full_attention"
		if pattern == 0 || il%pattern < pattern-1 {
			types[il] = "sliding_attention"
		}
	}
	cfg["layer_types"] = types
	return nil
}

// granite reads Granite's multipliers as llama.cpp does: logit_scale
// (required), embedding_scale and residual_scale (1 when absent) and
// attention.scale (head_dim^−½ when absent).
func (m *Model) granite(cfg map[string]any, key func(string) string, headDim int) error {
	for _, k := range []struct {
		gguf, hf string
		def      float64
		required bool
	}{
		{"logit_scale", "logits_scaling", 1, true},
		{"embedding_scale", "embedding_multiplier", 1, false},
		{"residual_scale", "residual_multiplier", 1, false},
		{"attention.scale", "attention_multiplier", 1 / math.Sqrt(float64(headDim)), false},
	} {
		v, ok, err := m.floatKey(key(k.gguf))
		if err != nil {
			return err
		}
		if !ok {
			if k.required {
				return m.metaError("%s is missing", key(k.gguf))
			}
			v = k.def
		}
		cfg[k.hf] = v
	}
	return nil
}

// gemma2 reads Gemma 2's keys into config.json as llama.cpp reads them:
// the soft-caps (50 and 30 when absent), a sliding window (4,096 when
// absent) on layer il unless il % pattern is pattern−1
// (attention.sliding_window_pattern, 2 when absent), the attention scale
// head_dim^−½ but for the 27B shape (46 layers), hidden/heads. A rotary
// base of the windowed layers of their own is refused.
func (m *Model) gemma2(cfg map[string]any, key func(string) string, headDim int) error {
	for _, k := range []struct {
		gguf, hf string
		def      float64
	}{{"attn_logit_softcapping", "attn_logit_softcapping", 50}, {"final_logit_softcapping", "final_logit_softcapping", 30}} {
		v, ok, err := m.floatKey(key(k.gguf))
		if err != nil {
			return err
		}
		if !ok {
			v = k.def
		}
		if !(v > 0) {
			return m.metaError("%s is %g: llama.cpp's gemma2 caps by it, so it must be positive", key(k.gguf), v)
		}
		cfg[k.hf] = v
	}
	if v, ok, err := m.floatKey(key("rope.freq_base_swa")); err != nil {
		return err
	} else if base, _ := cfg["rope_theta"].(json.Number).Float64(); ok && float64(float32(v)) != float64(float32(base)) {
		return m.f.errorf("a rotary base of %g for the windowed layers (%s) beside %g: not supported for gemma2", v, key("rope.freq_base_swa"), base)
	}
	layers, heads := cfg["num_hidden_layers"].(int), cfg["num_attention_heads"].(int)
	cfg["query_pre_attn_scalar"] = headDim
	if layers == 46 {
		cfg["query_pre_attn_scalar"] = cfg["hidden_size"].(int) / heads
	}
	w, ok, err := m.intKey(key("attention.sliding_window"))
	if err != nil {
		return err
	}
	if !ok {
		w = 4096
	}
	cfg["sliding_window"] = w
	return m.layerTypes(cfg, key, layers, 2)
}

// SlidingPattern is the period of a config's windowed layers as
// llama.cpp's gemma3.attention.sliding_window_pattern gives it: layer il
// is windowed unless il % p is p−1 (0: every layer). ok is false for a
// config whose windowed layers follow no such period (or that has none).
func SlidingPattern(c *model.Config) (p int, ok bool) {
	if c.WindowLayers == nil {
		return 0, false
	}
	for p := 0; p <= c.NumLayers; p++ {
		fits := true
		for il, w := range c.WindowLayers {
			if w != (p == 0 || il%p < p-1) {
				fits = false
				break
			}
		}
		if fits {
			return p, true
		}
	}
	return 0, false
}

// longRope reads LongRoPE's factors and keys (Phi-3 128k, Phi-3.5) into
// config.json's rope_scaling and original_max_position_embeddings.
func (m *Model) longRope(cfg map[string]any, key func(string) string, rotary int) error {
	factors := map[string][]float64{}
	for _, f := range []struct{ tensor, hf string }{{KeyRopeFactorsShort, "short_factor"}, {KeyRopeFactorsLong, "long_factor"}} {
		v, err := m.f.Float32(f.tensor)
		if err != nil {
			return m.f.errorf("LongRoPE needs both %s and %s: %v", KeyRopeFactorsShort, KeyRopeFactorsLong, err)
		}
		if len(v) != rotary/2 {
			return m.f.errorf("%s has %d values, want %d (rotated head dimensions / 2)", f.tensor, len(v), rotary/2)
		}
		for _, x := range v {
			factors[f.hf] = append(factors[f.hf], float64(x))
		}
	}
	orig, ok, err := m.intKey(key("rope.scaling.original_context_length"))
	if err != nil {
		return err
	}
	if !ok {
		return m.metaError("LongRoPE factors without %s", key("rope.scaling.original_context_length"))
	}
	scaling := map[string]any{"type": "longrope", "short_factor": factors["short_factor"], "long_factor": factors["long_factor"]}
	if a, ok, err := m.floatKey(key("rope.scaling.attn_factor")); err != nil {
		return err
	} else if ok {
		scaling["attention_factor"] = a
	}
	cfg["rope_scaling"], cfg["original_max_position_embeddings"] = scaling, orig
	return nil
}

// ropeLinear reads the rope scaling keys: the factor of linear scaling
// (rope.scaling.type "linear" and rope.scaling.factor, or the older
// rope.scale_linear), 0 for none. It refuses the kinds clawrl does not run
// (YaRN, LongRoPE); Llama 3's scaling comes as rope_freqs.weight.
func (m *Model) ropeLinear(key func(string) string) (float64, error) {
	typ, hasType, err := m.stringKey(key("rope.scaling.type"))
	if err != nil {
		return 0, err
	}
	factor, hasFactor, err := m.floatKey(key("rope.scaling.factor"))
	if err != nil {
		return 0, err
	}
	old, hasOld, err := m.floatKey(key("rope.scale_linear"))
	if err != nil {
		return 0, err
	}
	linear := 0.0
	switch {
	case hasType && typ == "linear":
		if !hasFactor {
			return 0, m.f.errorf("linear rope scaling (%s) without its factor (%s)", key("rope.scaling.type"), key("rope.scaling.factor"))
		}
		linear = factor
	case hasType && typ != "none" && !(hasFactor && factor == 1):
		return 0, m.f.errorf("rope scaling %q (%s) is not supported: clawrl runs plain RoPE, linear scaling and Llama 3's", typ, key("rope.scaling.type"))
	}
	if hasOld && old != 1 {
		if linear != 0 && linear != old {
			return 0, m.f.errorf("linear rope scaling by %g (%s) and by %g (%s)", linear, key("rope.scaling.factor"), old, key("rope.scale_linear"))
		}
		linear = old
	}
	if linear != 0 && !(linear >= 1) || math.IsInf(linear, 0) {
		return 0, m.f.errorf("linear rope scaling by %g: the factor must be a finite number ≥ 1", linear)
	}
	return linear, nil
}

// specialTokens sets bos_token_id and eos_token_id from the tokenizer's
// metadata: EOS, end of turn and end of message, and the control tokens
// that end a turn in a common chat format (tokenizer.IsTurnEnd): as
// llama.cpp does, they end generation even when the file names another
// EOS.
func (m *Model) specialTokens(cfg map[string]any, vocab int) error {
	bos, ok, err := m.intKey("tokenizer.ggml.bos_token_id")
	if err != nil {
		return err
	}
	if ok && bos < vocab {
		cfg["bos_token_id"] = bos
	}
	var eos []int
	for _, k := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		id, ok, err := m.intKey(k)
		if err != nil {
			return err
		}
		if ok && id < vocab && !slices.Contains(eos, id) {
			eos = append(eos, id)
		}
	}
	if v, ok := m.f.Get("tokenizer.ggml.tokens"); ok {
		tokens, _ := v.Strings()
		var types []int64
		if tv, ok := m.f.Get("tokenizer.ggml.token_type"); ok {
			types, _ = tv.Ints()
		}
		for id, s := range tokens {
			if id < vocab && id < len(types) && types[id] == 3 && tokenizer.IsTurnEnd(s) && !slices.Contains(eos, id) {
				eos = append(eos, id)
			}
		}
	}
	if eos != nil {
		cfg["eos_token_id"] = eos
	}
	return nil
}

// dtype names the dtype of the model's matrices for config.json: that of
// most matrices, BF16 for quantized ones (the dtype they were made from).
func (m *Model) dtype() string {
	counts := map[string]int{}
	for _, t := range m.f.Tensors {
		if len(t.Dims) != 2 {
			continue
		}
		switch t.Type {
		case F32:
			counts["float32"]++
		case F16:
			counts["float16"]++
		default:
			counts["bfloat16"]++
		}
	}
	best := "bfloat16"
	for _, d := range []string{"float32", "float16"} {
		if counts[d] > counts[best] {
			best = d
		}
	}
	return best
}

// checkTensors checks that the file holds the tensors the config implies,
// and nothing else but rope_freqs.weight.
func (m *Model) checkTensors() error {
	m.names = map[string]string{}
	for _, spec := range m.cfg.FileTensorSpecs() {
		g, ok := TensorNameFor(m.cfg, spec.Name)
		if !ok {
			return m.f.errorf("no GGUF name for tensor %q", spec.Name)
		}
		if _, ok := m.f.Tensor(g); !ok {
			return m.f.errorf("tensor %s (%s) is missing", g, spec.Name)
		}
		m.names[g] = spec.Name
	}
	for _, t := range m.f.Tensors {
		if _, ok := m.names[t.Name]; !ok && t.Name != KeyRopeFreqs && t.Name != KeyRopeFactorsLong && t.Name != KeyRopeFactorsShort {
			return m.f.errorf("tensor %s is not part of the %s model the metadata describes", t.Name, m.arch)
		}
	}
	return nil
}

// ggmlNormRope reports whether llama.cpp runs the GGUF architecture arch
// with ggml's interleaved rotation, for which its converter stores the
// query and key projections permuted: llama and the architectures its
// converter writes as llama's (granite, smollm3).
func ggmlNormRope(arch string) bool {
	return arch == "llama" || arch == "granite" || arch == "smollm3"
}

// permuted reports whether llama.cpp's converter stores a Hugging Face
// tensor permuted, and over how many heads: the query and key projections
// (weights and biases) of the llama architecture, whose ggml kernel
// rotates interleaved pairs of dimensions (2i, 2i+1) where Hugging Face
// rotates dimension i with i+headDim/2. Qwen2 and Qwen3 run ggml's NEOX
// rotation, Hugging Face's own, and are stored as they are.
func (m *Model) permuted(hf string) (heads int, ok bool) {
	if !ggmlNormRope(m.arch) {
		return 0, false
	}
	switch {
	case strings.HasSuffix(hf, "self_attn.q_proj.weight"), strings.HasSuffix(hf, "self_attn.q_proj.bias"):
		return m.cfg.NumHeads, true
	case strings.HasSuffix(hf, "self_attn.k_proj.weight"), strings.HasSuffix(hf, "self_attn.k_proj.bias"):
		return m.cfg.NumKVHeads, true
	}
	return 0, false
}

// PermuteRows reorders the rows of a llama query or key projection
// (rows rows: those of a matrix, or the elements of a bias) from Hugging
// Face's order to the one llama.cpp's converter stores: within each of
// heads heads of d rows, row 2i+p of the file is row p·d/2+i of Hugging
// Face's (the permutation gguf.md gives for LLaMA's tensor data layout,
// which pairs dimensions (2i, 2i+1) for ggml's interleaved rotation where
// Hugging Face rotates dimension i with i+d/2). It returns a new slice.
func PermuteRows(b []byte, rows, heads int) ([]byte, error) {
	return reorderRows(b, rows, heads, false)
}

// UnpermuteRows undoes PermuteRows.
func UnpermuteRows(b []byte, rows, heads int) ([]byte, error) {
	return reorderRows(b, rows, heads, true)
}

// Tensor returns the named tensor (a Hugging Face name) from the file.
func (m *Model) Tensor(name string) (model.SourceTensor, error) {
	g, ok := TensorNameFor(m.cfg, name)
	if !ok {
		return model.SourceTensor{}, m.f.errorf("tensor %q has no GGUF name", name)
	}
	b, ti, err := m.f.Bytes(g)
	if err != nil {
		return model.SourceTensor{}, err
	}
	st := model.SourceTensor{Path: m.f.path, Shape: ti.Shape(), View: true}
	if !ti.Type.Readable() {
		return model.SourceTensor{}, m.f.errorf("tensor %s (%s) is %s, which clawrl cannot read (it reads %s)", g, name, ti.Type, readableNames())
	}
	if heads, ok := m.permuted(name); ok && len(st.Shape) > 0 {
		if b, err = UnpermuteRows(b, st.Shape[0], heads); err != nil {
			return model.SourceTensor{}, m.f.errorf("tensor %s (%s): %v", g, name, err)
		}
		st.View = false
	}
	n := int(ti.Elems())
	typ := ti.Type
	switch {
	case typ == BF16:
		st.BF16 = uint16s(b)
	case typ.Quantized():
		st.Format, st.Blocks = typ.String(), b
	}
	if typ.Quantized() && len(st.Shape) == 2 && st.Shape[0] > 0 {
		rowBytes := len(b) / st.Shape[0]
		st.Rows = func(dst []float32, lo, hi int) error {
			if err := Dequantize(dst, b[lo*rowBytes:hi*rowBytes], typ); err != nil {
				return m.f.errorf("tensor %s rows [%d,%d): %v", g, lo, hi, err)
			}
			return nil
		}
	}
	if to := ReblockTarget(typ); to != 0 {
		st.Reblock = func() (compute.DType, []byte, error) {
			q, err := Reblock(b, typ)
			if err != nil {
				return 0, nil, m.f.errorf("tensor %s: %v", g, err)
			}
			return to, q, nil
		}
	}
	view := st.View
	st.Float32 = func() ([]float32, bool, error) {
		if typ == F32 && littleEndian && n > 0 && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
			return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n), view, nil
		}
		out := make([]float32, n)
		if err := DequantizeParallel(out, b, typ); err != nil {
			return nil, false, m.f.errorf("tensor %s: %v", g, err)
		}
		return out, false, nil
	}
	if m.cfg.NormOffset != 0 && strings.HasSuffix(name, "norm.weight") {
		st = normShifted(st, float32(m.cfg.NormOffset))
	}
	return st, nil
}

// normShifted is a norm weight of a Gemma file, which llama.cpp's
// converter stores as 1 + w (the weight its RMSNorm multiplies by), given
// back as the checkpoint's w: its values less off, read as float32 only.
func normShifted(st model.SourceTensor, off float32) model.SourceTensor {
	f := st.Float32
	st.BF16, st.Blocks, st.Format, st.Reblock, st.Rows, st.View = nil, nil, "", nil, nil, false
	st.Float32 = func() ([]float32, bool, error) {
		v, _, err := f()
		if err != nil {
			return nil, false, err
		}
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = x - off
		}
		return out, false, nil
	}
	return st
}

// reorderRows moves whole rows: with undo, file row h·d+2i+p goes to
// Hugging Face's row h·d+p·d/2+i; without, the reverse. Rows are whole
// blocks of a quantized matrix, so the blocks move as they are.
func reorderRows(b []byte, rows, heads int, undo bool) ([]byte, error) {
	if heads <= 0 || rows%heads != 0 || (rows/heads)%2 != 0 || rows == 0 || len(b)%rows != 0 {
		return nil, fmt.Errorf("%d rows are not %d heads of an even number of rows", rows, heads)
	}
	d, rowBytes := rows/heads, len(b)/rows
	out := make([]byte, len(b))
	for h := range heads {
		for i := range d / 2 {
			for p := range 2 {
				gg := h*d + 2*i + p   // the file's row
				hf := h*d + p*d/2 + i // Hugging Face's row
				from, to := gg, hf
				if !undo {
					from, to = hf, gg
				}
				copy(out[to*rowBytes:(to+1)*rowBytes], b[from*rowBytes:(from+1)*rowBytes])
			}
		}
	}
	return out, nil
}

// ropeFreqs reads rope_freqs.weight, the per-frequency divisors that
// llama.cpp's converter computes from Llama 3's rope scaling, and finds the
// rope_scaling of config.json that gives the same frequencies (nil when
// the tensor is absent or divides by 1 everywhere). The original context
// length comes from rope.scaling.original_context_length when the file
// has it, else Llama 3's 8192; any choice gives the same frequencies,
// since the thresholds scale with it.
func (m *Model) ropeFreqs(key func(string) string, headDim int, theta Value) (map[string]any, error) {
	ti, ok := m.f.Tensor(KeyRopeFreqs)
	if !ok {
		return nil, nil
	}
	if ti.Type != F32 || len(ti.Dims) != 1 || int(ti.Dims[0]) != headDim/2 {
		return nil, m.f.errorf("%s is %s %v, want F32 [%d]", KeyRopeFreqs, ti.Type, ti.Shape(), headDim/2)
	}
	factors, err := m.f.Float32(KeyRopeFreqs)
	if err != nil {
		return nil, err
	}
	orig := 8192
	if n, ok, err := m.intKey(key("rope.scaling.original_context_length")); err != nil {
		return nil, err
	} else if ok && n > 0 {
		orig = n
	}
	base, _ := theta.Float()
	s, err := fitLlama3(base, headDim, factors, orig)
	if err != nil {
		return nil, m.f.errorf("%s: %v", KeyRopeFreqs, err)
	}
	if s == nil {
		return nil, nil
	}
	return map[string]any{
		"rope_type": "llama3", "factor": s.Factor, "low_freq_factor": s.LowFreqFactor,
		"high_freq_factor": s.HighFreqFactor, "original_max_position_embeddings": s.OriginalMaxPositions,
	}, nil
}

// fitLlama3 finds Llama 3 rope scaling parameters that divide the
// frequencies θ^(−2i/d) by factors. Scaling keeps a frequency whose
// wavelength 2π/f is below orig/high, divides it by factor above
// orig/low, and in between divides it by 1/((1−t)/factor + t) with t =
// (orig·f/2π − low)/(high − low): so each factor strictly between 1 and
// the largest gives t, a linear function of x = orig·f/2π, which fixes
// low and high. The fit is checked against every factor.
func fitLlama3(theta float64, d int, factors []float32, orig int) (*model.RopeScaling, error) {
	half := d / 2
	x := make([]float64, half)
	for i := range x {
		x[i] = float64(orig) * math.Pow(theta, -float64(2*i)/float64(d)) / (2 * math.Pi)
	}
	factor := 1.0
	for _, r := range factors {
		if !(r >= 1) || math.IsInf(float64(r), 0) {
			return nil, fmt.Errorf("divisor %v: not Llama 3 scaling (every divisor is at least 1)", r)
		}
		factor = max(factor, float64(r))
	}
	if factor-1 < 1e-6 {
		return nil, nil
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-5*b }
	// x falls as i grows: kept (high x), blended, stretched (low x).
	var mid []int
	keptMin, stretchedMax := math.Inf(1), 0.0
	for i, r := range factors {
		switch {
		case near(float64(r), 1):
			keptMin = min(keptMin, x[i])
		case near(float64(r), factor):
			stretchedMax = max(stretchedMax, x[i])
		default:
			mid = append(mid, i)
		}
	}
	tOf := func(i int) float64 { return (1/float64(factors[i]) - 1/factor) / (1 - 1/factor) }
	var low, high float64
	switch len(mid) {
	case 0:
		if math.IsInf(keptMin, 1) {
			keptMin = 2 * stretchedMax
		}
		low, high = stretchedMax+(keptMin-stretchedMax)/3, stretchedMax+2*(keptMin-stretchedMax)/3
	case 1:
		i := mid[0]
		t := tOf(i)
		lo := stretchedMax
		hi := keptMin
		if math.IsInf(hi, 1) {
			hi = 2 * x[i]
		}
		low = (lo + x[i]) / 2
		high = low + (x[i]-low)/t
		if high >= hi {
			high = (x[i] + hi) / 2
			low = (x[i] - t*high) / (1 - t)
		}
	default:
		// Least squares of t = (x − low)/(high − low) over the blended
		// frequencies, whose divisors the file rounded to float32.
		var sx, st, sxx, sxt float64
		for _, i := range mid {
			sx, st = sx+x[i], st+tOf(i)
			sxx, sxt = sxx+x[i]*x[i], sxt+x[i]*tOf(i)
		}
		n := float64(len(mid))
		slope := (n*sxt - sx*st) / (n*sxx - sx*sx)
		icept := (st - slope*sx) / n
		low = -icept / slope
		high = low + 1/slope
	}
	// fits reports whether s gives every frequency within tol (relative).
	fits := func(s *model.RopeScaling, tol float64) bool {
		c := model.Config{HeadDim: d, RopeTheta: theta, RopeScaling: s}
		for i, f := range c.RopeFrequencies() {
			want := math.Pow(theta, -float64(2*i)/float64(d)) / float64(factors[i])
			if math.Abs(f-want) > tol*want {
				return false
			}
		}
		return true
	}
	s := &model.RopeScaling{Factor: factor, LowFreqFactor: low, HighFreqFactor: high, OriginalMaxPositions: orig}
	if !(low > 0 && high > low) || !fits(s, 1e-5) {
		return nil, fmt.Errorf("the divisors are not those of Llama 3 rope scaling, the only per-frequency scaling clawrl runs")
	}
	// Prefer round numbers (Llama 3.1's 8, 1 and 4) where they fit to the
	// precision of the file's float32 divisors.
	round := func(v float64) float64 { return math.Round(v*1e4) / 1e4 }
	if r := (&model.RopeScaling{Factor: round(factor), LowFreqFactor: round(low), HighFreqFactor: round(high), OriginalMaxPositions: orig}); r.LowFreqFactor > 0 && r.HighFreqFactor > r.LowFreqFactor && fits(r, 1.5e-7) {
		s = r
	}
	return s, nil
}
