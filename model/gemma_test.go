package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/safetensors"
)

// gemma3_1b is google/gemma-3-1b-it's config.json as published.
const gemma3_1b = `{
  "architectures": ["Gemma3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "attn_logit_softcapping": null,
  "bos_token_id": 2,
  "cache_implementation": "hybrid",
  "eos_token_id": [1, 106],
  "final_logit_softcapping": null,
  "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 1152,
  "initializer_range": 0.02,
  "intermediate_size": 6912,
  "max_position_embeddings": 32768,
  "model_type": "gemma3_text",
  "num_attention_heads": 4,
  "num_hidden_layers": 26,
  "num_key_value_heads": 1,
  "pad_token_id": 0,
  "query_pre_attn_scalar": 256,
  "rms_norm_eps": 1e-06,
  "rope_local_base_freq": 10000,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": 512,
  "sliding_window_pattern": 6,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.50.0.dev0",
  "use_cache": true,
  "vocab_size": 262144
}`

func TestGemma3Config(t *testing.T) {
	c, err := ParseConfig([]byte(gemma3_1b))
	if err != nil {
		t.Fatal(err)
	}
	if c.Architecture != ArchGemma3 || !c.TieWordEmbeddings || !c.QKNorm || !c.SandwichNorms || c.NormOffset != 1 ||
		c.Activation != ActGELUTanh || c.SlidingWindow != 512 || c.LocalRopeTheta != 10000 || c.RopeTheta != 1e6 ||
		c.QueryPreAttnScalar != 256 || c.EmbedScale*c.EmbedScale < 1151.99 || c.EmbedScale*c.EmbedScale > 1152.01 ||
		c.BOSTokenID != 2 || !slices.Equal(c.EOSTokenIDs, []int{1, 106}) {
		t.Fatalf("parsed %+v", c)
	}
	var global []int
	for l := range c.NumLayers {
		if c.LayerWindow(l) == 0 {
			global = append(global, l)
		}
		if c.localRope(l) == (c.LayerWindow(l) == 0) {
			t.Errorf("layer %d: window %d, local rope %v", l, c.LayerWindow(l), c.localRope(l))
		}
	}
	if !slices.Equal(global, []int{5, 11, 17, 23}) {
		t.Errorf("global layers %v, want every sixth", global)
	}
	// 26 layers: 2·(1152 + 1152·1024 + 2·1152·256 + 1024·1152 + 3·1152·6912) per layer and norms, tied.
	if n := c.NumParams(); n < 999_000_000 || n > 1_001_000_000 {
		t.Errorf("NumParams %d, want about a billion (Gemma 3 1B)", n)
	}

	edit := func(old, new string) string {
		t.Helper()
		if !strings.Contains(gemma3_1b, old) {
			t.Fatalf("config lacks %q", old)
		}
		return strings.Replace(gemma3_1b, old, new, 1)
	}
	// layer_types (gemma-3-270m and newer configs) instead of the pattern.
	types := `"layer_types": ["sliding_attention", "full_attention"` + strings.Repeat(`, "sliding_attention"`, 24) + `],`
	c, err = ParseConfig([]byte(edit(`"sliding_window_pattern": 6,`, types)))
	if err != nil {
		t.Fatal(err)
	}
	if c.LayerWindow(0) != 512 || c.LayerWindow(1) != 0 || c.LayerWindow(5) != 512 {
		t.Errorf("layer_types: windows %d %d %d", c.LayerWindow(0), c.LayerWindow(1), c.LayerWindow(5))
	}
	// Soft-caps, as Gemma3TextConfig allows them (null in every published
	// Gemma 3).
	c, err = ParseConfig([]byte(edit(`"final_logit_softcapping": null`, `"final_logit_softcapping": 30.0`)))
	if err != nil || c.FinalSoftcap != 30 || c.AttnSoftcap != 0 {
		t.Errorf("final_logit_softcapping 30: %v, caps %g and %g", err, c.AttnSoftcap, c.FinalSoftcap)
	}
	// rope_parameters per kind of layer (newer transformers).
	c, err = ParseConfig([]byte(edit(`"rope_scaling": null,`, `"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}, "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}},`)))
	if err != nil {
		t.Fatal(err)
	}
	if c.RopeLinear != 8 || c.LocalRopeTheta != 20000 || c.RopeTheta != 1e6 {
		t.Errorf("rope_parameters: linear %g, local %g, theta %g", c.RopeLinear, c.LocalRopeTheta, c.RopeTheta)
	}
	for _, tt := range []struct{ old, new, want string }{
		{`"final_logit_softcapping": null`, `"final_logit_softcapping": -30.0`, "final_logit_softcapping"},
		{`"attn_logit_softcapping": null`, `"attn_logit_softcapping": -1`, "attn_logit_softcapping"},
		{`"gelu_pytorch_tanh"`, `"gelu"`, "hidden_activation"},
		{`"sliding_window_pattern": 6,`, `"layer_types": ["sliding_attention"],`, "layer_types has 1 entries"},
		{`"sliding_window_pattern": 6,`, `"sliding_window_pattern": 0,`, "sliding_window_pattern"},
		{`"query_pre_attn_scalar": 256`, `"query_pre_attn_scalar": -1`, "query_pre_attn_scalar"},
		{`"Gemma3ForCausalLM"`, `"Gemma3ForConditionalGeneration"`, "not supported"},
	} {
		_, err := ParseConfig([]byte(edit(tt.old, tt.new)))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one naming %q", tt.new, err, tt.want)
		}
	}
}

// TestGemma3Files: the model holds 1 + w for every norm and writes w back
// (FileTensors equals the file, a model reloaded from it computes the
// same logits); quantized on load its logits stay near; on a backend
// without sliding windows the windowed layers keep their own rotary base
// within the capped context.
func TestGemma3Files(t *testing.T) {
	spec := tiny(ArchGemma3)
	spec.SlidingWindow, spec.SlidingPattern, spec.LocalRopeTheta = 8, 2, 100
	m, dir := writeAndLoad(t, spec)
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	files := m.Weights().FileTensors()
	if len(files) != len(ck.Names()) {
		t.Errorf("FileTensors lists %d tensors, the file %d", len(files), len(ck.Names()))
	}
	for _, ft := range files {
		got, err := ft.Read()
		if err != nil {
			t.Fatal(err)
		}
		want, err := ck.Float32(ft.Name)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(got, want); d > 1e-7 {
			t.Errorf("%s: FileTensors differs from the file by %g", ft.Name, d)
		}
	}
	toks := testTokens(20, spec.Vocab)
	want := fullLogits(t, m, toks)
	again, err := LoadFrom(cpu.New(), m.Weights().Source("set", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if d := maxAbsDiff(fullLogits(t, again, toks), want); d > 1e-5 {
		t.Errorf("reloaded from FileTensors: logits differ by %g", d)
	}
	q := loadQuantized(t, dir, compute.Q8_0)
	if d := maxAbsDiff(fullLogits(t, q, toks), want); d > 0.25 {
		t.Errorf("Q8_0 on load: logits differ by %g", d)
	}

	src, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	capped, err := LoadFrom(noWindow{cpu.New()}, src)
	if err != nil {
		t.Fatal(err)
	}
	defer capped.Close()
	if c := capped.Config; !c.CappedToWindow || c.MaxPositions != 8 {
		t.Fatalf("without windows: context %d, capped %v", c.MaxPositions, c.CappedToWindow)
	}
	short := testTokens(8, spec.Vocab)
	if d := maxAbsDiff(fullLogits(t, capped, short), fullLogits(t, m, short)); d > 1e-5 {
		t.Errorf("within the window the capped model's logits differ by %g", d)
	}
}

// gemma2_2b is google/gemma-2-2b-it's config.json as published.
const gemma2_2b = `{
  "architectures": ["Gemma2ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "attn_logit_softcapping": 50.0,
  "bos_token_id": 2,
  "cache_implementation": "hybrid",
  "eos_token_id": [1, 107],
  "final_logit_softcapping": 30.0,
  "head_dim": 256,
  "hidden_act": "gelu_pytorch_tanh",
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 2304,
  "initializer_range": 0.02,
  "intermediate_size": 9216,
  "max_position_embeddings": 8192,
  "model_type": "gemma2",
  "num_attention_heads": 8,
  "num_hidden_layers": 26,
  "num_key_value_heads": 4,
  "pad_token_id": 0,
  "query_pre_attn_scalar": 256,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "torch_dtype": "float32",
  "transformers_version": "4.42.4",
  "use_cache": true,
  "vocab_size": 256000
}`

func TestGemma2Config(t *testing.T) {
	c, err := ParseConfig([]byte(gemma2_2b))
	if err != nil {
		t.Fatal(err)
	}
	if c.Architecture != ArchGemma2 || c.QKNorm || !c.SandwichNorms || c.NormOffset != 1 || c.Activation != ActGELUTanh ||
		c.AttnSoftcap != 50 || c.FinalSoftcap != 30 || c.SlidingWindow != 4096 || c.LocalRopeTheta != 0 || !c.TieWordEmbeddings ||
		c.QueryPreAttnScalar != 256 || !slices.Equal(c.EOSTokenIDs, []int{1, 107}) {
		t.Fatalf("parsed %+v", c)
	}
	for l := range c.NumLayers {
		if got, want := c.LayerWindow(l) > 0, l%2 == 0; got != want || c.localRope(l) {
			t.Errorf("layer %d: window %d, local rope %v; want the even layers windowed, one rotary base", l, c.LayerWindow(l), c.localRope(l))
		}
	}
	if n := c.NumParams(); n < 2_600_000_000 || n > 2_620_000_000 {
		t.Errorf("NumParams %d, want about 2.61 billion (Gemma 2 2B)", n)
	}
}
