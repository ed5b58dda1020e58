package pretrain

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/safetensors"
)

func TestGrowPlan(t *testing.T) {
	for _, tc := range []struct {
		n, layers int
		copies    []int // old layers followed by a copy
	}{
		{8, 16, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{8, 12, []int{1, 3, 5, 7}},
		{8, 9, []int{7}},
		{3, 4, []int{2}},
		{3, 5, []int{1, 2}},
		{1, 2, []int{0}},
	} {
		plan := growPlan(tc.n, tc.layers)
		if len(plan) != tc.layers {
			t.Fatalf("%d→%d: %d layers planned", tc.n, tc.layers, len(plan))
		}
		var copies, order []int
		for i, p := range plan {
			if p.copy {
				copies = append(copies, p.from)
				if i == 0 || plan[i-1].from != p.from || plan[i-1].copy {
					t.Errorf("%d→%d: the copy of layer %d at %d does not follow it", tc.n, tc.layers, p.from, i)
				}
			} else {
				order = append(order, p.from)
			}
		}
		if !slices.Equal(copies, tc.copies) {
			t.Errorf("%d→%d: copies after %v, want %v", tc.n, tc.layers, copies, tc.copies)
		}
		if want := []int{}; !slices.Equal(order, append(want, seq(tc.n)...)) {
			t.Errorf("%d→%d: old layers in order %v", tc.n, tc.layers, order)
		}
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// TestGrowDepthKeepsFunction grows random checkpoints and checks that the
// grown model scores every token exactly as the original does, that the
// added layers are copies with zero output projections, and that bad
// depths are refused.
func TestGrowDepthKeepsFunction(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	spec := model.RandomSpec{Arch: model.ArchLlama, Hidden: 32, Intermediate: 64, Layers: 3, Heads: 4, KVHeads: 2, Vocab: 97,
		MaxPositions: 256, RopeTheta: 10000, DType: "bfloat16", Seed: 3,
		ExtraFiles: map[string][]byte{"tokenizer.json": []byte(`{"t":1}`), "tokenizer_config.json": []byte(`{"c":2}`)}}
	if err := model.WriteRandomCheckpoint(src, spec); err != nil {
		t.Fatal(err)
	}
	reqs := []model.ScoreRequest{
		{Prompt: []int32{1, 5, 9, 14}, Response: []int32{20, 33, 41, 7, 96, 2}},
		{Prompt: []int32{3}, Response: []int32{60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70}},
	}
	want := score(t, src, reqs)
	for _, layers := range []int{4, 5, 6} {
		dst := filepath.Join(dir, "grown"+strconv.Itoa(layers))
		if err := GrowDepth(src, dst, layers); err != nil {
			t.Fatal(err)
		}
		s, err := ShapeOf(dst)
		if err != nil || s.Layers != layers || s.Hidden != spec.Hidden || s.Vocab != spec.Vocab {
			t.Fatalf("grown shape %+v, %v", s, err)
		}
		got := score(t, dst, reqs)
		for i := range want {
			if !slices.Equal(got[i].LogProbs, want[i].LogProbs) {
				t.Fatalf("%d layers: request %d log-probs %v, want %v", layers, i, got[i].LogProbs, want[i].LogProbs)
			}
		}
		for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
			a, _ := os.ReadFile(filepath.Join(src, name))
			b, _ := os.ReadFile(filepath.Join(dst, name))
			if !bytes.Equal(a, b) {
				t.Errorf("%s changed", name)
			}
		}
		// Every layer of the plan holds its source layer's tensors, with
		// zero output projections in the copies.
		a, err := safetensors.OpenDir(src)
		if err != nil {
			t.Fatal(err)
		}
		b, err := safetensors.OpenDir(dst)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range growPlan(spec.Layers, layers) {
			for _, rest := range []string{"self_attn.q_proj.weight", "self_attn.o_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight"} {
				from, err := a.Uint16(layerName(p.from, rest))
				if err != nil {
					t.Fatal(err)
				}
				to, err := b.Uint16(layerName(i, rest))
				if err != nil {
					t.Fatal(err)
				}
				zero := p.copy && (rest == "self_attn.o_proj.weight" || rest == "mlp.down_proj.weight")
				if zero && slices.ContainsFunc(to, func(v uint16) bool { return v != 0 }) {
					t.Errorf("%d layers: layer %d %s is not zero", layers, i, rest)
				}
				if !zero && !slices.Equal(from, to) {
					t.Errorf("%d layers: layer %d %s is not layer %d's", layers, i, rest, p.from)
				}
			}
		}
		a.Close()
		b.Close()
	}
	for _, tc := range []struct {
		layers int
		want   string
	}{
		{3, "growing needs more than 3 and at most 6"},
		{2, "growing needs more than 3"},
		{7, "at most 6 (twice as many)"},
	} {
		if err := GrowDepth(src, filepath.Join(dir, "bad"), tc.layers); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), src) {
			t.Errorf("grow to %d: %v, want an error naming %s and %q", tc.layers, err, src, tc.want)
		}
	}
	if err := GrowDepth(filepath.Join(dir, "missing"), filepath.Join(dir, "bad"), 4); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing checkpoint: %v", err)
	}
}

func layerName(i int, rest string) string {
	return "model.layers." + strconv.Itoa(i) + "." + rest
}

// score loads the checkpoint in dir and scores reqs.
func score(t *testing.T, dir string, reqs []model.ScoreRequest) []model.Scored {
	t.Helper()
	m, err := model.Load(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	per := m.Config.KVBytesPerToken(compute.F32) * 16
	kv, err := m.NewKVCache(model.KVCacheOptions{BlockSize: 16, Budget: per * 8})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	out, err := m.LogProbsBatch(kv, reqs, 0)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
