package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/safetensors"
)

// fuseToPhi3 writes the Llama checkpoint of dir as Phi-3's checkpoints
// hold the same model: each layer's q, k and v projections joined by rows
// into self_attn.qkv_proj.weight, its gate and up projections into
// mlp.gate_up_proj.weight, and config.json naming Phi3ForCausalLM. It is
// written here from the file format, independently of FileTensorSpecs.
func fuseToPhi3(t *testing.T, dir string) string {
	t.Helper()
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	raw := func(name string) ([]byte, safetensors.TensorInfo) {
		f, info, err := ck.Find(name)
		if err != nil {
			t.Fatal(err)
		}
		if info.DType == safetensors.BF16 {
			v, err := f.Uint16(name)
			if err != nil {
				t.Fatal(err)
			}
			return safetensors.EncodeUint16(v), info
		}
		v, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		return safetensors.EncodeFloat32(v), info
	}
	var out []safetensors.WriteTensor
	for _, name := range ck.Names() {
		var parts []string
		switch {
		case strings.HasSuffix(name, "self_attn.q_proj.weight"):
			p := strings.TrimSuffix(name, "q_proj.weight")
			name, parts = p+"qkv_proj.weight", []string{p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"}
		case strings.HasSuffix(name, "mlp.gate_proj.weight"):
			p := strings.TrimSuffix(name, "gate_proj.weight")
			name, parts = p+"gate_up_proj.weight", []string{p + "gate_proj.weight", p + "up_proj.weight"}
		case strings.HasSuffix(name, "_proj.weight") && !strings.HasSuffix(name, "o_proj.weight") && !strings.HasSuffix(name, "down_proj.weight"):
			continue // k, v, up: joined above
		default:
			parts = []string{name}
		}
		var data []byte
		var shape []int
		var dt safetensors.DType
		for _, p := range parts {
			b, info := raw(p)
			data = append(data, b...)
			if shape == nil {
				shape = slices.Clone(info.Shape)
			} else {
				shape[0] += info.Shape[0]
			}
			dt = info.DType
		}
		out = append(out, safetensors.WriteTensor{Name: name, DType: dt, Shape: shape, Data: data})
	}
	phi := t.TempDir()
	if err := safetensors.WriteFile(filepath.Join(phi, safetensors.SingleFile), out, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	cj, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(cj, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["architectures"], cfg["model_type"] = []string{ArchPhi3}, "phi3"
	delete(cfg, "head_dim")
	delete(cfg, "mlp_bias")
	delete(cfg, "attention_bias")
	cj, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(phi, "config.json"), cj, 0o644); err != nil {
		t.Fatal(err)
	}
	return phi
}

// TestPhi3IsFusedLlama: a Phi-3 checkpoint computes what the Llama
// checkpoint with the same matrices unfused computes, exactly, in F32,
// BF16 and quantized on load; its weights are written back (FileTensors,
// Source) fused, as the file held them.
func TestPhi3IsFusedLlama(t *testing.T) {
	for _, dtype := range []string{"float32", "bfloat16"} {
		t.Run(dtype, func(t *testing.T) {
			spec := tiny(ArchLlama)
			spec.DType = dtype
			llama, llamaDir := writeAndLoad(t, spec)
			phiDir := fuseToPhi3(t, llamaDir)
			phi, err := Load(cpu.New(), phiDir)
			if err != nil {
				t.Fatal(err)
			}
			defer phi.Close()
			if phi.Config.Architecture != ArchPhi3 {
				t.Fatalf("architecture %q", phi.Config.Architecture)
			}
			toks := testTokens(24, spec.Vocab)
			want := fullLogits(t, llama, toks)
			if got := fullLogits(t, phi, toks); !slices.Equal(got, want) {
				t.Errorf("Phi-3 logits differ from Llama's by %g", maxAbsDiff(got, want))
			}
			for _, q := range []compute.DType{compute.Q8_0, compute.Q4_0} {
				a, b := loadQuantized(t, llamaDir, q), loadQuantized(t, phiDir, q)
				if got, want := fullLogits(t, b, toks), fullLogits(t, a, toks); !slices.Equal(got, want) {
					t.Errorf("%v: Phi-3 logits differ from Llama's by %g", q, maxAbsDiff(got, want))
				}
			}

			// Written back fused, each tensor as the file holds it.
			files := phi.Weights().FileTensors()
			ck, err := safetensors.OpenDir(phiDir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			var names []string
			for _, ft := range files {
				names = append(names, ft.Name)
				f, info, err := ck.Find(ft.Name)
				if err != nil {
					t.Fatalf("FileTensors names %q, which the file does not hold", ft.Name)
				}
				if !slices.Equal(ft.Shape, info.Shape) {
					t.Errorf("%s: shape %v, file %v", ft.Name, ft.Shape, info.Shape)
				}
				got, err := ft.Read()
				if err != nil {
					t.Fatal(err)
				}
				fv, _ := f.Float32(ft.Name)
				if !slices.Equal(got, fv) {
					t.Errorf("%s: values differ from the file's", ft.Name)
				}
			}
			if s := strings.Join(names, " "); len(files) != len(ck.Names()) || strings.Contains(s, "q_proj") || !strings.Contains(s, "qkv_proj") {
				t.Errorf("FileTensors: %v; the file holds %v", names, ck.Names())
			}
			specs := phi.Config.FileTensorSpecs()
			for i, s := range specs {
				if s.Name != files[i].Name {
					t.Errorf("FileTensorSpecs[%d] %q, FileTensors %q", i, s.Name, files[i].Name)
				}
			}
			// And loaded from that set as a source.
			again, err := LoadFrom(cpu.New(), phi.Weights().Source("phi3 set", nil))
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if got := fullLogits(t, again, toks); !slices.Equal(got, want) {
				t.Errorf("reloaded from FileTensors: logits differ by %g", maxAbsDiff(got, want))
			}
		})
	}
}

// TestPhi3Refuses: a fused matrix of the wrong shape is refused with its
// name; Phi-3 configs that clawrl does not run are refused with the reason.
func TestPhi3Refuses(t *testing.T) {
	_, llamaDir := writeAndLoad(t, tiny(ArchLlama))
	phiDir := fuseToPhi3(t, llamaDir)
	editHeader(t, filepath.Join(phiDir, safetensors.SingleFile), func(h map[string]any) {
		e := h["model.layers.1.self_attn.qkv_proj.weight"].(map[string]any)
		shape := e["shape"].([]any)
		shape[0], shape[1] = shape[1], shape[0]
	})
	if _, err := Load(cpu.New(), phiDir); err == nil || !strings.Contains(err.Error(), "model.layers.1.self_attn.qkv_proj.weight") {
		t.Errorf("a qkv_proj of the wrong shape: %v", err)
	}
}

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, float64(abs32(a[i]-b[i])))
	}
	return d
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// TestPartialRotaryFiles: with partial rotary the model keeps each query
// and key head's dimensions reordered (HeadPerm), and writes them back in
// Hugging Face's order: FileTensors equals the checkpoint file, a model
// loaded from it computes the same logits, and quantized on load its
// blocks are the file's rows reordered (logits near the float model's).
func TestPartialRotaryFiles(t *testing.T) {
	spec := tiny(ArchPhi3)
	spec.PartialRotary = 0.5
	m, dir := writeAndLoad(t, spec)
	if m.Config.RotaryDim != 4 || m.Config.HeadPerm() == nil {
		t.Fatalf("rotary %d of %d", m.Config.RotaryDim, m.Config.HeadDim)
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, ft := range m.Weights().FileTensors() {
		got, err := ft.Read()
		if err != nil {
			t.Fatal(err)
		}
		want, err := ck.Float32(ft.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: FileTensors differs from the file", ft.Name)
		}
	}
	toks := testTokens(20, spec.Vocab)
	want := fullLogits(t, m, toks)
	again, err := LoadFrom(cpu.New(), m.Weights().Source("set", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := fullLogits(t, again, toks); !slices.Equal(got, want) {
		t.Errorf("reloaded from FileTensors: logits differ by %g", maxAbsDiff(got, want))
	}
	q := loadQuantized(t, dir, compute.Q8_0)
	// Q8_0's rounding moves these logits by about 0.1 with or without
	// partial rotary; rows reordered wrongly would move them by units.
	if d := maxAbsDiff(fullLogits(t, q, toks), want); d > 0.25 {
		t.Errorf("Q8_0 on load: logits differ by %g", d)
	}
}

// noWindow is the CPU backend without sliding windows, as a backend
// without them would be.
type noWindow struct{ *cpu.Backend }

func (noWindow) SlidingWindow() bool { return false }

// TestSlidingWindowCap: on a backend whose attention has no sliding window
// a model with one is loaded with its context capped to the window
// (CappedToWindow), where attending over every earlier position is the
// same: its logits equal the windowed model's within the window, and a
// longer sequence is refused; on the CPU the window applies and the
// context stays the model's.
func TestSlidingWindowCap(t *testing.T) {
	spec := tiny(ArchMistral)
	spec.SlidingWindow = 8
	m, dir := writeAndLoad(t, spec)
	if m.Config.SlidingWindow != 8 || m.Config.MaxPositions != spec.MaxPositions || m.Config.CappedToWindow {
		t.Fatalf("on the CPU: window %d, context %d, capped %v", m.Config.SlidingWindow, m.Config.MaxPositions, m.Config.CappedToWindow)
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
	if c := capped.Config; !c.CappedToWindow || c.MaxPositions != 8 || c.SlidingWindow != 0 {
		t.Fatalf("without windows: window %d, context %d, capped %v", c.SlidingWindow, c.MaxPositions, c.CappedToWindow)
	}
	if src.Config().MaxPositions != spec.MaxPositions {
		t.Error("capping changed the source's config")
	}
	toks := testTokens(8, spec.Vocab)
	if got, want := fullLogits(t, capped, toks), fullLogits(t, m, toks); maxAbsDiff(got, want) > 1e-5 {
		t.Errorf("within the window the capped model's logits differ by %g", maxAbsDiff(got, want))
	}
	kv := newCache(t, capped, 4, 16)
	seq := kv.NewSequence()
	defer seq.Free()
	if _, err := capped.Forward([]Step{{seq, testTokens(9, spec.Vocab)}}, LastLogits, nil); err == nil {
		t.Error("a capped model took 9 tokens in a window of 8")
	}
}
