package model

import (
	"math"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// TestServingTrainingGap pins how far the log-probs of the serving path
// (the paged KV cache, as the daemon runs it: BF16 products and a BF16
// cache for a BF16 checkpoint) are from those the trainer computes for the
// same weights and tokens (dense attention over whole samples; F32 master
// weights with full fine-tuning, the BF16 base with LoRA). PPO's
// importance ratio exp(new − old) reads the one against the other, so the
// gap is a floor under the ratios of an unchanged policy: it must stay far
// inside the clip range (ε 0.2 is a log-ratio of about 0.18).
//
// The bounds are about three times what was measured when the test was
// written (printed with -v), so that a change that widens the gap (a
// kernel that rounds more, a cache that stores less) fails here. The gap
// grows with the scale of the logits: these weights give logits of a few
// units; with weights twice as large the BF16 gap reached 0.09 (max) and
// 0.015 (mean), about half the clip range at worst.
func TestServingTrainingGap(t *testing.T) {
	spec := tiny(ArchQwen3)
	spec.Layers = 4
	spec.MaxPositions = 256
	spec.DType = "bfloat16"
	for _, tc := range []struct {
		name    string
		prec    kernels.Precision
		kv      compute.DType
		train   TrainOptions
		max     float64 // bound on the largest |Δ log p|
		mean    float64 // bound on the mean |Δ log p|
		minMean float64 // the mean |Δ| is at least this: the serving path really rounds
	}{
		// F32 products and cache: the two paths differ only in summation order.
		{"f32/full", kernels.PrecisionF32, compute.F32, TrainOptions{}, 6e-6, 1.5e-6, 0},
		{"f32/lora", kernels.PrecisionF32, compute.F32, TrainOptions{LoRA: &LoRAConfig{Rank: 4, Seed: 3}}, 6e-6, 1.5e-6, 0},
		// What the daemon serves a BF16 checkpoint with. Measured: max
		// 0.027, mean 0.0056 (the gap grows with the logits' scale).
		{"bf16/full", kernels.PrecisionBF16, compute.BF16, TrainOptions{}, 0.08, 0.017, 1e-4},
		{"bf16/lora", kernels.PrecisionBF16, compute.BF16, TrainOptions{LoRA: &LoRAConfig{Rank: 4, Seed: 3}}, 0.08, 0.017, 1e-4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := writeAndLoadOn(t, spec, cpu.NewWithOptions(cpu.Options{Precision: tc.prec}))
			samples := []TrainSample{
				{Prompt: tokensFrom(40, spec.Vocab, 1), Response: tokensFrom(60, spec.Vocab, 2)},
				{Prompt: tokensFrom(7, spec.Vocab, 3), Response: tokensFrom(90, spec.Vocab, 4)},
			}
			served, err := m.LogProbsBatch(newCacheOf(t, m, 16, 32, tc.kv), scoreRequests(samples), 0)
			if err != nil {
				t.Fatal(err)
			}
			trained := forwardLogProbs(t, newTrainable(t, m, tc.train), samples)
			var worst, sum float64
			n := 0
			for i := range trained {
				for j, lp := range trained[i] {
					d := math.Abs(float64(lp - served[i].LogProbs[j]))
					if !(d <= math.Inf(1)) {
						t.Fatalf("sample %d token %d: trained %v, served %v", i, j, lp, served[i].LogProbs[j])
					}
					worst = max(worst, d)
					sum += d
					n++
				}
			}
			mean := sum / float64(n)
			t.Logf("%s: |Δ log p| max %.3g, mean %.3g over %d tokens", tc.name, worst, mean, n)
			if worst > tc.max || mean > tc.mean || mean < tc.minMean {
				t.Errorf("serving vs training log-probs: max |Δ| %.3g (bound %.3g), mean %.3g (bounds %.3g to %.3g)", worst, tc.max, mean, tc.minMean, tc.mean)
			}
		})
	}
}
