package gguf

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/clawrl/clawrl/model"
)

// TestMix writes 8-layer models as Q4_K_M and Q5_K_M (a tied qwen3 and an
// untied llama) and reads back every matrix's type: Q6_K for the output
// matrix (the token embedding when tied), and for the value and down
// projections of layers 0, 3, 6 and 7 (use_more_bits of 8 layers), the
// mix's type for every other matrix, F32 for the norms; the file type of
// the mix in the metadata. use_more_bits of 28 layers picks the 14 that
// llama-quantize's Q4_K_M file of the Qwen3-0.6B shape has at Q6_K.
func TestMix(t *testing.T) {
	tok := trainedTokenizer(t)
	var picked []int
	for i := range 28 {
		if useMoreBits(i, 28) {
			picked = append(picked, i)
		}
	}
	if want := []int{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27}; !slices.Equal(picked, want) {
		t.Fatalf("use_more_bits of 28 layers: %v, want %v", picked, want)
	}
	more := map[int]bool{0: true, 3: true, 6: true, 7: true}
	for _, c := range []struct {
		mix  Mix
		arch string
	}{{MixQ4KM, model.ArchQwen3}, {MixQ5KM, model.ArchLlama}} {
		t.Run(c.mix.String()+"/"+c.arch, func(t *testing.T) {
			spec := smallSpec(c.arch, tok.VocabSize())
			spec.Layers, spec.Tied = 8, c.arch == model.ArchQwen3
			src, _ := randomSource(t, spec)
			path := filepath.Join(t.TempDir(), "m.gguf")
			if err := WriteModelMix(path, src, tok, c.mix); err != nil {
				t.Fatal(err)
			}
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if v, ok := f.Get("general.file_type"); !ok || v.String() != fmt.Sprint(c.mix.fileType) {
				t.Errorf("general.file_type %v, want %d", v, c.mix.fileType)
			}
			want := map[string]TensorType{"token_embd.weight": c.mix.base, "output_norm.weight": F32}
			if spec.Tied {
				want["token_embd.weight"] = Q6_K
			} else {
				want["output.weight"] = Q6_K
			}
			for l := range spec.Layers {
				for _, m := range []string{"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"} {
					want[fmt.Sprintf("blk.%d.%s.weight", l, m)] = c.mix.base
				}
				for _, m := range []string{"attn_v", "ffn_down"} {
					want[fmt.Sprintf("blk.%d.%s.weight", l, m)] = c.mix.base
					if more[l] {
						want[fmt.Sprintf("blk.%d.%s.weight", l, m)] = Q6_K
					}
				}
				want[fmt.Sprintf("blk.%d.attn_norm.weight", l)] = F32
			}
			for name, typ := range want {
				ti, ok := f.Tensor(name)
				if !ok {
					t.Fatalf("no tensor %s", name)
				}
				if ti.Type != typ {
					t.Errorf("%s is %v, want %v", name, ti.Type, typ)
				}
			}
		})
	}
	// Rows that are not whole super-blocks, as llama-quantize falls back.
	c := &model.Config{NumLayers: 8}
	for _, f := range []struct {
		mix  Mix
		name string
		cols int
		want TensorType
	}{
		{MixQ4KM, "model.layers.1.mlp.up_proj.weight", 96, Q5_0},
		{MixQ4KM, "model.layers.0.mlp.down_proj.weight", 96, Q8_0},
		{MixQ5KM, "model.layers.1.mlp.up_proj.weight", 96, Q5_1},
		{MixQ4KM, "model.layers.1.mlp.up_proj.weight", 48, F16},
		{MixQ4KM, "model.layers.1.mlp.up_proj.weight", 512, Q4_K},
		{Uniform(Q4_K), "model.layers.1.mlp.up_proj.weight", 96, Q8_0},
	} {
		if got := f.mix.matrixType(c, f.name, f.cols); got != f.want {
			t.Errorf("%v: %s with rows of %d: %v, want %v", f.mix, f.name, f.cols, got, f.want)
		}
	}
	for _, s := range []string{"Q4_K_M", "q5_k_m", "q8_0", "BF16"} {
		if m, err := ParseMix(s); err != nil || !equalFold(m.String(), s) {
			t.Errorf("ParseMix(%q) = %v, %v", s, m, err)
		}
	}
	for _, s := range []string{"q4_k_s", "", "iq2_xs"} {
		if _, err := ParseMix(s); err == nil {
			t.Errorf("ParseMix(%q) accepted", s)
		}
	}
}
