package model

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/safetensors"
)

// editHeader rewrites the JSON header of a safetensors file, keeping its
// data section.
func editHeader(t *testing.T, path string, edit func(h map[string]any)) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw)
	var h map[string]any
	if err := json.Unmarshal(raw[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	edit(h)
	hj, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hj)))
	out = append(append(out, hj...), raw[8+n:]...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// byOffset lists the tensors of a header in data order.
func byOffset(h map[string]any) []string {
	var names []string
	for k := range h {
		if k != "__metadata__" {
			names = append(names, k)
		}
	}
	off := func(n string) float64 { return h[n].(map[string]any)["data_offsets"].([]any)[0].(float64) }
	sort.Slice(names, func(i, j int) bool { return off(names[i]) < off(names[j]) })
	return names
}

func editConfig(t *testing.T, dir string, edit func(c map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	edit(c)
	raw, _ = json.Marshal(c)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDamagedCheckpointsRefused(t *testing.T) {
	const upProj = "model.layers.1.mlp.up_proj.weight"
	tests := []struct {
		name   string
		shards int
		damage func(t *testing.T, dir string)
		want   []string // substrings of the error; "$FILE" is the weights file
	}{
		{"truncated data", 0, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-10)
		}, []string{"$FILE", "run past the data section"}},
		{"header length beyond file", 0, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			raw, _ := os.ReadFile(p)
			binary.LittleEndian.PutUint64(raw, uint64(len(raw)))
			os.WriteFile(p, raw, 0o644)
		}, []string{"$FILE", "exceeds the file size"}},
		{"bad header JSON", 0, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			raw, _ := os.ReadFile(p)
			raw[9] = '#'
			os.WriteFile(p, raw, 0o644)
		}, []string{"$FILE", "header JSON"}},
		{"offsets out of bounds", 0, func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]any) {
				e := h[upProj].(map[string]any)
				o := e["data_offsets"].([]any)
				e["data_offsets"] = []any{o[0].(float64) + 1e6, o[1].(float64) + 1e6}
			})
		}, []string{"$FILE", upProj, "run past the data section"}},
		{"overlapping tensors", 0, func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]any) {
				names := byOffset(h)
				e := h[names[1]].(map[string]any)
				o := e["data_offsets"].([]any)
				size := o[1].(float64) - o[0].(float64)
				e["data_offsets"] = []any{4.0, 4 + size}
			})
		}, []string{"$FILE", "overlaps"}},
		{"unsupported dtype", 0, func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]any) {
				h[upProj].(map[string]any)["dtype"] = "I16"
			})
		}, []string{"$FILE", upProj, "unsupported dtype I16"}},
		{"shape mismatch with config", 0, func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["intermediate_size"] = 40 })
		}, []string{"$FILE", "model.layers.0.mlp.gate_proj.weight", "shape [48 32]", "[40 32]"}},
		{"missing tensor", 0, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			f, err := safetensors.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			var keep []safetensors.WriteTensor
			for _, name := range f.Names() {
				if name == upProj {
					continue
				}
				info, _ := f.Info(name)
				data, _ := f.Bytes(name)
				keep = append(keep, safetensors.WriteTensor{Name: name, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), data...)})
			}
			f.Close()
			if err := safetensors.WriteFile(p, keep, nil); err != nil {
				t.Fatal(err)
			}
		}, []string{"$FILE", upProj, "not found"}},
		{"missing shard", 3, func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model-00002-of-00003.safetensors"))
		}, []string{"model-00002-of-00003.safetensors", "no such file"}},
		{"no weights", 0, func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model.safetensors"))
		}, []string{"no model.safetensors"}},
		{"config not JSON", 0, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "config.json"), []byte("{hidden_size: 3"), 0o644)
		}, []string{"config.json", "invalid JSON"}},
		{"config heads not divisible", 0, func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["num_key_value_heads"] = 3 })
		}, []string{"config.json", "num_attention_heads 4 is not divisible by num_key_value_heads 3"}},
		{"config missing", 0, func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "config.json"))
		}, []string{"config.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			spec := tiny(ArchLlama)
			spec.DType = "bfloat16"
			spec.Shards = tt.shards
			if err := WriteRandomCheckpoint(dir, spec); err != nil {
				t.Fatal(err)
			}
			tt.damage(t, dir)
			m, err := Load(cpu.New(), dir)
			if err == nil {
				m.Close()
				t.Fatal("damaged checkpoint loaded")
			}
			t.Log(err)
			for _, w := range tt.want {
				w = strings.ReplaceAll(w, "$FILE", filepath.Join(dir, "model.safetensors"))
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestHalfPrecisionWeightsExact checks that BF16 and F16 checkpoints load to
// exactly the values an independent conversion of their bits gives.
func TestHalfPrecisionWeightsExact(t *testing.T) {
	bf16 := func(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
	half := func(h uint16) float32 { // IEEE 754 binary16, by the definition
		sign := 1.0
		if h&0x8000 != 0 {
			sign = -1
		}
		e, m := int(h>>10&0x1f), float64(h&0x3ff)
		switch e {
		case 0:
			return float32(sign * math.Ldexp(m, -24))
		case 31:
			if m == 0 {
				return float32(math.Inf(int(sign)))
			}
			return float32(math.NaN())
		}
		return float32(sign * math.Ldexp(1+m/1024, e-15))
	}
	for _, tt := range []struct {
		dtype string
		conv  func(uint16) float32
	}{{"bfloat16", bf16}, {"float16", half}} {
		t.Run(tt.dtype, func(t *testing.T) {
			spec := tiny(ArchQwen3)
			spec.DType = tt.dtype
			m, dir := writeAndLoad(t, spec)
			raw, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			h, err := safetensors.ParseHeader(raw)
			if err != nil {
				t.Fatal(err)
			}
			bitsOf := func(name string) []uint16 {
				ti := h.Tensors[name]
				b := raw[h.DataStart+ti.Begin : h.DataStart+ti.End]
				out := make([]uint16, len(b)/2)
				for i := range out {
					out[i] = binary.LittleEndian.Uint16(b[2*i:])
				}
				return out
			}
			be := m.Backend()
			check := func(name string, got []float32) {
				t.Helper()
				for i, b := range bitsOf(name) {
					if w := tt.conv(b); got[i] != w {
						t.Fatalf("%s[%d] = %v, bits %#04x are %v", name, i, got[i], b, w)
					}
				}
			}
			// A norm vector (always widened to F32 at load).
			check("model.layers.1.self_attn.q_norm.weight", cpu.Float32s(m.w.Layers[1].QNorm))
			check("model.norm.weight", cpu.Float32s(m.w.Norm))
			// The embedding matrix, read back through the backend.
			ids := make([]int32, spec.Vocab)
			for i := range ids {
				ids[i] = int32(i)
			}
			idt, _ := be.NewTensor(compute.I32, len(ids))
			be.WriteInt32(idt, ids)
			rows, _ := be.NewTensor(compute.F32, spec.Vocab, spec.Hidden)
			be.Embedding(rows, m.w.Embed, idt)
			check("model.embed_tokens.weight", cpu.Float32s(rows))
			wantDType := compute.BF16
			if tt.dtype == "float16" {
				wantDType = compute.F32
			}
			if got := m.w.Layers[0].Q.DType(); got != wantDType {
				t.Errorf("q_proj held as %v, want %v", got, wantDType)
			}
		})
	}
}

func TestParseConfig(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{
			"architectures": []any{"LlamaForCausalLM"}, "hidden_size": 64, "intermediate_size": 128,
			"num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
		}
	}
	tests := []struct {
		name  string
		edit  func(c map[string]any)
		check func(t *testing.T, c *Config)
		err   string
	}{
		{"defaults", func(map[string]any) {}, func(t *testing.T, c *Config) {
			if c.NumKVHeads != 4 || c.HeadDim != 16 || c.RopeTheta != 10000 || c.RMSNormEps != 1e-6 ||
				c.MaxPositions != 2048 || c.TieWordEmbeddings || c.QKVBias || c.BOSTokenID != -1 || c.EOSTokenIDs != nil {
				t.Errorf("defaults: %+v", c)
			}
		}, ""},
		{"eos list and explicit head_dim", func(c map[string]any) {
			c["eos_token_id"], c["bos_token_id"], c["head_dim"] = []any{1, 7}, 3, 32
		}, func(t *testing.T, c *Config) {
			if !c.IsEOS(7) || !c.IsEOS(1) || c.IsEOS(3) || c.BOSTokenID != 3 || c.HeadDim != 32 || c.QDim() != 128 {
				t.Errorf("got %+v", c)
			}
		}, ""},
		{"qwen2 biases", func(c map[string]any) { c["architectures"] = []any{"Qwen2ForCausalLM"} }, func(t *testing.T, c *Config) {
			if !c.QKVBias || c.OBias || c.QKNorm || c.MaxPositions != 32768 {
				t.Errorf("got %+v", c)
			}
		}, ""},
		{"phi3 mini 4k", func(c map[string]any) {
			c["architectures"], c["model_type"], c["sliding_window"], c["max_position_embeddings"] = []any{"Phi3ForCausalLM"}, "phi3", 2047, 4096
			c["original_max_position_embeddings"], c["rope_scaling"] = 4096, nil
		}, func(t *testing.T, c *Config) {
			if c.Architecture != ArchPhi3 || c.SlidingWindow != 2047 || c.MaxPositions != 4096 || c.QKVBias || c.MLPBias {
				t.Errorf("got %+v", c)
			}
			if specs := c.FileTensorSpecs(); specs[4].Name != "model.layers.0.self_attn.qkv_proj.weight" || !slices.Equal(specs[4].Shape, []int{64 + 2*64, 64}) {
				t.Errorf("file specs %v", specs[:6])
			}
		}, ""},
		{"phi4-mini partial rotary", func(c map[string]any) {
			c["architectures"], c["partial_rotary_factor"] = []any{"Phi3ForCausalLM"}, 0.75
		}, func(t *testing.T, c *Config) {
			if c.RotaryDim != 12 || c.HeadDim != 16 {
				t.Errorf("rotary %d of %d", c.RotaryDim, c.HeadDim)
			}
			f := c.RopeFrequencies() // six rotated pairs, θ^(−2i/12), then two that stay
			if len(f) != 8 || f[1] != math.Pow(10000, -2.0/12) || f[6] != 0 || f[7] != 0 {
				t.Errorf("frequencies %v", f)
			}
			if p := c.HeadPerm(); !slices.Equal(p, []int{0, 1, 2, 3, 4, 5, 12, 13, 6, 7, 8, 9, 10, 11, 14, 15}) {
				t.Errorf("head permutation %v", p)
			}
		}, ""},
		{"partial rotary in rope_parameters", func(c map[string]any) {
			c["architectures"] = []any{"Phi3ForCausalLM"}
			c["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
		}, func(t *testing.T, c *Config) {
			if c.RotaryDim != 8 {
				t.Errorf("rotary %d", c.RotaryDim)
			}
		}, ""},
		{"partial rotary odd", func(c map[string]any) {
			c["architectures"], c["partial_rotary_factor"] = []any{"Phi3ForCausalLM"}, 0.3125
		}, nil, "rotates 5 of 16"},
		{"partial rotary above 1", func(c map[string]any) { c["architectures"], c["partial_rotary_factor"] = []any{"Phi3ForCausalLM"}, 1.5 }, nil, "must be in (0, 1]"},
		{"partial rotary of llama", func(c map[string]any) { c["partial_rotary_factor"] = 0.5 }, nil, "partial rotary for Phi3ForCausalLM only"},
		{"phi3.5 longrope", func(c map[string]any) {
			eight := []any{1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7}
			c["architectures"], c["max_position_embeddings"], c["original_max_position_embeddings"] = []any{"Phi3ForCausalLM"}, 131072, 4096
			twos := []any{2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0}
			c["rope_scaling"], c["sliding_window"] = map[string]any{"type": "longrope", "short_factor": eight, "long_factor": twos}, 262144
		}, func(t *testing.T, c *Config) {
			lr := c.LongRope
			if lr == nil || c.MaxPositions != 4096 || lr.MaxPositions != 131072 || lr.OriginalMaxPositions != 4096 || c.SlidingWindow != 0 ||
				math.Abs(lr.AttnFactor-math.Sqrt(1+math.Log(32)/math.Log(4096))) > 1e-12 || c.RopeScale() != lr.AttnFactor {
				t.Errorf("got %+v, LongRope %+v", c, lr)
			}
			if f := c.RopeFrequencies(); math.Abs(f[1]-math.Pow(10000, -2.0/16)/1.1) > 1e-15 {
				t.Errorf("frequency 1: %v", f[1])
			}
			long := c.LongContext() // the long factors over the whole context
			if long.MaxPositions != 131072 || !long.LongRope.UseLong || c.LongRope.UseLong || c.MaxPositions != 4096 {
				t.Errorf("LongContext: context %d, %+v; the original %d, %+v", long.MaxPositions, long.LongRope, c.MaxPositions, c.LongRope)
			}
			if f := long.RopeFrequencies(); math.Abs(f[1]-math.Pow(10000, -2.0/16)/2) > 1e-15 || long.RopeScale() != lr.AttnFactor {
				t.Errorf("long frequency 1: %v", f[1])
			}
		}, ""},
		{"su with attention_factor", func(c map[string]any) {
			eight := []any{1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0}
			c["architectures"], c["rope_scaling"] = []any{"Phi3ForCausalLM"}, map[string]any{"type": "su", "short_factor": eight, "long_factor": eight, "attention_factor": 1.5}
		}, func(t *testing.T, c *Config) {
			if c.LongRope == nil || c.LongRope.AttnFactor != 1.5 {
				t.Errorf("LongRope %+v", c.LongRope)
			}
		}, ""},
		{"longrope factors of the wrong length", func(c map[string]any) {
			c["architectures"], c["rope_scaling"] = []any{"Phi3ForCausalLM"}, map[string]any{"type": "longrope", "short_factor": []any{1.0}, "long_factor": []any{2.0}}
		}, nil, "short_factor has 1 values, want one per pair of rotated dimensions, 8"},
		{"longrope factor zero", func(c map[string]any) {
			eight := []any{1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0}
			c["architectures"], c["rope_scaling"] = []any{"Phi3ForCausalLM"}, map[string]any{"type": "longrope", "short_factor": eight, "long_factor": eight}
		}, nil, "factors must be positive"},
		{"mistral as llama", func(c map[string]any) {
			c["architectures"], c["model_type"], c["sliding_window"] = []any{"MistralForCausalLM"}, "mistral", nil
		}, func(t *testing.T, c *Config) {
			if c.Architecture != ArchLlama || c.ModelType != "mistral" || c.MaxPositions != 32768 || c.SlidingWindow != 0 || c.QKVBias {
				t.Errorf("got %+v", c)
			}
		}, ""},
		{"mistral's sliding window", func(c map[string]any) {
			c["architectures"], c["sliding_window"], c["max_position_embeddings"] = []any{"MistralForCausalLM"}, 4096, 32768
		}, func(t *testing.T, c *Config) {
			if c.MaxPositions != 32768 || c.SlidingWindow != 4096 {
				t.Errorf("got %+v", c)
			}
		}, ""},
		{"a window as long as the context", func(c map[string]any) {
			c["architectures"], c["sliding_window"], c["max_position_embeddings"] = []any{"MistralForCausalLM"}, 32768, 32768
		}, func(t *testing.T, c *Config) {
			if c.MaxPositions != 32768 || c.SlidingWindow != 0 {
				t.Errorf("got %+v", c)
			}
		}, ""},
		{"qwen3 norms", func(c map[string]any) { c["architectures"] = []any{"Qwen3ForCausalLM"}; c["attention_bias"] = false }, func(t *testing.T, c *Config) {
			if c.QKVBias || !c.QKNorm {
				t.Errorf("got %+v", c)
			}
		}, ""},
		{"llama3 rope", func(c map[string]any) {
			c["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
		}, func(t *testing.T, c *Config) {
			if c.RopeScaling == nil || c.RopeScaling.Factor != 8 || c.RopeScaling.OriginalMaxPositions != 8192 {
				t.Errorf("got %+v", c.RopeScaling)
			}
		}, ""},
		{"rope_parameters", func(c map[string]any) {
			c["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 500000.0}
		}, func(t *testing.T, c *Config) {
			if c.RopeTheta != 500000 || c.RopeScaling != nil {
				t.Errorf("got θ %v scaling %+v", c.RopeTheta, c.RopeScaling)
			}
		}, ""},
		{"default rope type", func(c map[string]any) { c["rope_scaling"] = map[string]any{"type": "default"} }, nil, ""},
		{"linear rope", func(c map[string]any) { c["rope_scaling"] = map[string]any{"type": "linear", "factor": 4.0} }, func(t *testing.T, c *Config) {
			if c.RopeLinear != 4 || c.RopeScaling != nil {
				t.Errorf("linear %v, scaling %+v", c.RopeLinear, c.RopeScaling)
			}
		}, ""},
		{"linear rope factor 1", func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": 1.0} }, func(t *testing.T, c *Config) {
			if c.RopeLinear != 0 {
				t.Errorf("linear %v", c.RopeLinear)
			}
		}, ""},
		{"linear rope without factor", func(c map[string]any) { c["rope_scaling"] = map[string]any{"type": "linear"} }, nil, "linear needs a finite factor"},
		{"linear rope factor below 1", func(c map[string]any) { c["rope_scaling"] = map[string]any{"type": "linear", "factor": 0.5} }, nil, "linear needs a finite factor"},
		{"yarn refused", func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 4.0} }, nil, `rope_scaling type "yarn" is not supported`},
		{"llama3 incomplete", func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8.0} }, nil, "llama3 needs"},
		{"heads not divisible", func(c map[string]any) { c["num_key_value_heads"] = 3 }, nil, "not divisible by num_key_value_heads 3"},
		{"hidden not divisible", func(c map[string]any) { c["num_attention_heads"] = 5; c["num_key_value_heads"] = 5 }, nil, "hidden_size 64 is not divisible"},
		{"odd head_dim", func(c map[string]any) { c["head_dim"] = 7 }, nil, "head_dim must be positive and even"},
		{"missing hidden_size", func(c map[string]any) { delete(c, "hidden_size") }, nil, "hidden_size is missing"},
		{"zero layers", func(c map[string]any) { c["num_hidden_layers"] = 0 }, nil, "num_hidden_layers must be positive"},
		{"gelu", func(c map[string]any) { c["hidden_act"] = "gelu" }, nil, `hidden_act "gelu"`},
		{"unknown architecture", func(c map[string]any) { c["architectures"] = []any{"GPT2LMHeadModel"} }, nil, `"GPT2LMHeadModel" is not supported`},
		{"no architecture", func(c map[string]any) { delete(c, "architectures") }, nil, "exactly one architecture"},
		{"sliding window", func(c map[string]any) { c["use_sliding_window"] = true }, nil, "use_sliding_window"},
		{"eos out of vocab", func(c map[string]any) { c["eos_token_id"] = 100 }, nil, "outside vocab_size"},
		{"eos string", func(c map[string]any) { c["eos_token_id"] = "</s>" }, nil, "eos_token_id must be an integer"},
		{"bad eps", func(c map[string]any) { c["rms_norm_eps"] = 0 }, nil, "rms_norm_eps"},
		{"negative theta", func(c map[string]any) { c["rope_theta"] = -1 }, nil, "rope_theta must be positive"},
		{"implausible context", func(c map[string]any) { c["max_position_embeddings"] = 1 << 30 }, nil, "max_position_embeddings must be from 1 to 16777216"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.edit(c)
			raw, _ := json.Marshal(c)
			cfg, err := ParseConfig(raw)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, cfg)
			}
		})
	}
}

func TestRandomCheckpointLayout(t *testing.T) {
	dir := t.TempDir()
	spec := tiny(ArchQwen3)
	spec.Shards, spec.Tied = 2, true
	spec.ExtraFiles = map[string][]byte{"tokenizer.json": []byte(`{"model":{}}`)}
	if err := WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "tokenizer.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	for _, want := range []string{`"architectures": [`, `"model_type": "qwen3"`, `"torch_dtype": "float32"`, `"rope_theta": 1000000.0`, `"rms_norm_eps": 1e-06`, `"tie_word_embeddings": true`, `"head_dim": 8`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("config.json lacks %s:\n%s", want, raw)
		}
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	names := ck.Names()
	if len(names) != 2+2*11 { // embed, norm, 11 per layer (tied: no lm_head)
		t.Errorf("%d tensors: %v", len(names), names)
	}
	for _, n := range names {
		if n == "lm_head.weight" {
			t.Error("tied checkpoint has lm_head.weight")
		}
	}
	// The same spec gives the same weights.
	dir2 := t.TempDir()
	if err := WriteRandomCheckpoint(dir2, spec); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "model-00002-of-00002.safetensors"))
	b, _ := os.ReadFile(filepath.Join(dir2, "model-00002-of-00002.safetensors"))
	if string(a) != string(b) {
		t.Error("WriteRandomCheckpoint is not deterministic")
	}
	if got := SpecLlama20M(); func() int64 { c, _ := ParseConfig(must(got.withDefaults().configJSON())); return c.NumParams() }() > 22e6 {
		t.Error("the ~20M preset has grown")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
