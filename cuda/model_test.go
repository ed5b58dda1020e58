package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cpu/kernels"
	"github.com/clawrl/clawrl/model"
)

// TestModelMatchesCPU loads random checkpoints on the CPU backend (at BF16
// products, the precision of this backend) and on the CUDA backend over the
// fake driver, and checks that a prefill's logits at every position and a
// greedy decode's logits and tokens agree.
//
// The tolerance is BF16 rounding (2⁻⁸ of the logits' rms), not float32
// rounding: from the second layer on, the two backends' activations differ
// by float32 sums in other orders, and an activation that lies near a
// rounding boundary of BF16 rounds one way on one backend and the other
// way on the other before its product with a BF16 weight. A kernel that is
// wrong gives errors of the order of the logits themselves. When the
// logits differ by more, the test runs the model again on both backends in
// lockstep and names the first op whose output differs.
func TestModelMatchesCPU(t *testing.T) {
	b := testBackend(t)
	cases := []struct {
		name string
		spec model.RandomSpec
		kv   compute.DType
	}{
		{"qwen3-bf16", model.RandomSpec{Arch: model.ArchQwen3, Hidden: 64, Intermediate: 160, Layers: 2, Heads: 4, KVHeads: 2,
			HeadDim: 32, Vocab: 300, MaxPositions: 256, DType: "bfloat16", Tied: true, Seed: 3}, compute.BF16},
		{"llama-f32", model.RandomSpec{Arch: model.ArchLlama, Hidden: 48, Intermediate: 96, Layers: 2, Heads: 6, KVHeads: 2,
			Vocab: 200, MaxPositions: 256, DType: "float32", Seed: 4}, compute.F32},
		{"qwen2-bias", model.RandomSpec{Arch: model.ArchQwen2, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 4,
			Vocab: 256, MaxPositions: 256, DType: "bfloat16", Seed: 5}, compute.F32},
		// OLMo 2 (post-norms only, q/k norms over whole rows) and
		// SmolLM3 (the fourth layer without RoPE) need no op beyond
		// Llama's. (OLMo 2 in BF16 differed from the CPU's BF16
		// products by 0.7% of the logits' rms at its output projection,
		// past this test's 1/256, where in F32 the two agree to 3e-6:
		// the BF16 rounding of its activations, not its math.)
		{"olmo2-f32", model.RandomSpec{Arch: model.ArchOlmo2, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2,
			Vocab: 256, MaxPositions: 256, DType: "float32", Seed: 6}, compute.F32},
		{"smollm3-f32", model.RandomSpec{Arch: model.ArchSmolLM3, Hidden: 48, Intermediate: 96, Layers: 4, Heads: 6, KVHeads: 2,
			Vocab: 200, MaxPositions: 256, DType: "float32", Tied: true, Seed: 7}, compute.F32},
		// The ops Gemma and Granite add: sliding windows shorter than
		// the 37-token prompt (and Gemma 3's global layer among windowed
		// ones), GELU, soft-capped scores and logits, scales. (Gemma 3
		// with BF16 weights differed from the CPU's BF16 products by
		// 0.9% of the logits' rms, first past 1/256 at a GELU whose
		// inputs had drifted by BF16 rounding, as OLMo 2's; in F32 the
		// two agree to 6e-7.)
		{"mistral-window-f32", model.RandomSpec{Arch: model.ArchMistral, Hidden: 48, Intermediate: 96, Layers: 2, Heads: 6, KVHeads: 2,
			Vocab: 200, MaxPositions: 256, SlidingWindow: 16, DType: "float32", Seed: 8}, compute.F32},
		{"gemma3-f32", model.RandomSpec{Arch: model.ArchGemma3, Hidden: 64, Intermediate: 128, Layers: 3, Heads: 4, KVHeads: 1,
			HeadDim: 32, Vocab: 256, MaxPositions: 256, SlidingWindow: 16, SlidingPattern: 3, DType: "float32", Tied: true, Seed: 9}, compute.F32},
		{"gemma3-bf16-cache", model.RandomSpec{Arch: model.ArchGemma3, Hidden: 64, Intermediate: 128, Layers: 3, Heads: 4, KVHeads: 1,
			HeadDim: 32, Vocab: 256, MaxPositions: 256, SlidingWindow: 16, SlidingPattern: 3, DType: "float32", Tied: true, Seed: 10}, compute.BF16},
		{"gemma2-f32", model.RandomSpec{Arch: model.ArchGemma2, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2,
			HeadDim: 16, Vocab: 256, MaxPositions: 256, SlidingWindow: 16, AttnSoftcap: 2, FinalSoftcap: 3, DType: "float32", Tied: true, Seed: 11}, compute.F32},
		{"phi4-mini-f32", model.RandomSpec{Arch: model.ArchPhi3, Hidden: 48, Intermediate: 96, Layers: 2, Heads: 6, KVHeads: 2,
			Vocab: 200, MaxPositions: 256, PartialRotary: 0.5, LongRopeOriginal: 64, LongRopeShort: []float64{1, 3},
			LongRopeLong: []float64{2, 5}, DType: "float32", Tied: true, Seed: 13}, compute.F32},
		{"granite-f32", model.RandomSpec{Arch: model.ArchGranite, Hidden: 48, Intermediate: 96, Layers: 2, Heads: 6, KVHeads: 2,
			Vocab: 200, MaxPositions: 256, EmbeddingMultiplier: 12, AttentionMultiplier: 0.015625, ResidualMultiplier: 0.22,
			LogitsScaling: 8, DType: "float32", Seed: 12}, compute.F32},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := model.WriteRandomCheckpoint(dir, c.spec); err != nil {
				t.Fatal(err)
			}
			ref := newRunner(t, cpu.NewWithOptions(cpu.Options{Precision: kernels.PrecisionBF16}), dir, c.kv)
			got := newRunner(t, b, dir, c.kv)
			vocab := ref.m.Config.VocabSize

			// Two sequences prefilled together (a batch of mixed lengths),
			// every position's logits compared.
			prompts := [][]int32{make([]int32, 37), make([]int32, 5)}
			for i, p := range prompts {
				for j := range p {
					p[j] = int32((j*31 + i*7 + 1) % vocab)
				}
			}
			lr := ref.step(prompts, model.AllLogits)
			lg := got.step(prompts, model.AllLogits)
			if err := compareLogits(t, "prefill", lg, lr); err != nil {
				traceDivergence(t, b, dir, c.kv, prompts)
				t.Fatal(err)
			}

			// Greedy decode of both sequences, one token each per step,
			// both models fed the CPU's tokens.
			next := [][]int32{{argmax(lr[(36)*vocab : 37*vocab])}, {argmax(lr[41*vocab : 42*vocab])}}
			for s := range 12 {
				lr := ref.step(next, model.LastLogits)
				lg := got.step(next, model.LastLogits)
				if err := compareLogits(t, fmt.Sprintf("decode step %d", s), lg, lr); err != nil {
					t.Fatal(err)
				}
				for i := range next {
					row := lr[i*vocab : (i+1)*vocab]
					want, gotTok := argmax(row), argmax(lg[i*vocab:(i+1)*vocab])
					if gotTok != want && !nearTie(row, want, gotTok) {
						t.Fatalf("decode step %d, sequence %d: greedy token %d, CPU %d (logits %v vs %v)", s, i, gotTok, want, lg[i*vocab+int(gotTok)], row[want])
					}
					next[i] = []int32{want}
				}
			}
		})
	}
}

// runner is a loaded model with a KV cache and one sequence per prompt.
type runner struct {
	t    *testing.T
	m    *model.Model
	seqs []*model.Sequence
	kv   *model.KVCache
}

func newRunner(t *testing.T, b compute.Backend, dir string, dt compute.DType) *runner {
	t.Helper()
	m, err := model.Load(b, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	kv, err := m.NewKVCache(model.KVCacheOptions{BlockSize: 4, Budget: m.Config.KVBytesPerToken(dt) * 4 * 32, DType: dt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kv.Close)
	return &runner{t: t, m: m, kv: kv}
}

// step appends tokens[i] to sequence i and returns the logits.
func (r *runner) step(tokens [][]int32, out model.Output) []float32 {
	r.t.Helper()
	for len(r.seqs) < len(tokens) {
		r.seqs = append(r.seqs, r.kv.NewSequence())
	}
	steps := make([]model.Step, len(tokens))
	for i, tk := range tokens {
		steps[i] = model.Step{Seq: r.seqs[i], Tokens: tk}
	}
	logits, err := r.m.Forward(steps, out, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	return logits
}

// logitTol is the tolerance of a logit relative to the logits' rms: BF16
// rounding (see TestModelMatchesCPU).
const logitTol = 1.0 / 256

// compareLogits checks got against want within logitTol.
func compareLogits(t *testing.T, what string, got, want []float32) error {
	t.Helper()
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d logits, want %d", what, len(got), len(want))
	}
	ss := 0.0
	for _, w := range want {
		ss += float64(w) * float64(w)
	}
	rms := math.Sqrt(ss / float64(len(want)))
	worst, at := 0.0, 0
	for i := range got {
		if e := math.Abs(float64(got[i]) - float64(want[i])); e > worst || math.IsNaN(e) {
			worst, at = e, i
		}
	}
	if worst > logitTol*rms || math.IsNaN(worst) {
		return fmt.Errorf("%s: logit %d = %v, CPU %v (error %.3g, logits rms %.3g)", what, at, got[at], want[at], worst, rms)
	}
	t.Logf("%s: worst logit error %.3g of rms %.3g", what, worst, rms)
	return nil
}

// traceDivergence runs the prefill again on the CPU and CUDA backends in
// lockstep and reports the first op whose output differs by more than
// logitTol.
func traceDivergence(t *testing.T, b *Backend, dir string, kv compute.DType, prompts [][]int32) {
	t.Helper()
	failed := false
	l := &lockstep{ref: cpu.NewWithOptions(cpu.Options{Precision: kernels.PrecisionBF16}), got: b, tol: logitTol,
		fail: func(format string, args ...any) {
			if !failed {
				t.Errorf("first op that differs: "+format, args...)
				failed = true
			}
		}}
	newRunner(t, l, dir, kv).step(prompts, model.AllLogits)
}

func argmax(row []float32) int32 {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return int32(best)
}

// nearTie reports whether two tokens' logits are too close for the
// backends to order them reliably (within logitTol of the logits' rms).
func nearTie(row []float32, a, b int32) bool {
	ss := 0.0
	for _, v := range row {
		ss += float64(v) * float64(v)
	}
	return math.Abs(float64(row[a]-row[b])) < 2*logitTol*math.Sqrt(ss/float64(len(row)))
}
