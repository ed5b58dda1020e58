package model

import (
	"fmt"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// Training benchmarks: one step is a forward and backward pass over the
// batch and an AdamW update of every trainable tensor.
//
//	go test -run '^$' -bench 'Train/.*/.*512' -benchtime 3x ./model/
//	go test -run '^$' -bench 'Train/.*16k' -benchtime 1x -timeout 30m ./model/
//
// Metrics:
//
//   - tok/s: positions trained per second (prompt and response);
//   - GFLOP/s and %peak: the step's matrix arithmetic as it is executed,
//     per second and as a fraction of the FP32 FMA peak (kernels.PeakGFLOPS,
//     measured in the same run): every linear layer forward and backward
//     (6 FLOPs per weight per position when the weights train, 4 when they
//     are frozen: no weight gradient), the adapters, the output projection
//     at response positions only (forward, recomputed in backward, and its
//     two gradients), attention (two products forward, five backward), and
//     the layer forward again with checkpointing;
//   - 6ND-GFLOP/s: the customary 6·params·tokens convention for full
//     fine-tuning (2·params·tokens forward + 2 backward activations for LoRA
//     with frozen params), which counts the output projection at every
//     position and leaves attention out;
//   - peakMiB and KiB/tok: the peak Go heap above the level before the
//     first step (activations, gradients, optimizer state, scratch), and
//     per position of the batch.

type trainBench struct {
	name     string
	ckpt     string
	spec     func() RandomSpec
	opts     TrainOptions
	samples  int
	prompt   int
	response int
}

var trainBenches = []trainBench{
	{"llama-20M-full/4x512", "llama-20M-bf16", SpecLlama20M, TrainOptions{}, 4, 384, 128},
	{"qwen3-0.6B-lora16/1x512", "qwen3-0.6B-bf16", SpecQwen3_0_6B, TrainOptions{LoRA: &LoRAConfig{Rank: 16, Alpha: 32, Seed: 1}}, 1, 384, 128},
	{"qwen3-0.6B-lora16-ckpt/1x512", "qwen3-0.6B-bf16", SpecQwen3_0_6B, TrainOptions{LoRA: &LoRAConfig{Rank: 16, Alpha: 32, Seed: 1}, Checkpointing: true}, 1, 384, 128},
	{"llama-20M-full-ckpt/16k+300", "llama-20M-bf16", SpecLlama20M, TrainOptions{Checkpointing: true}, 1, 16384, 300},
}

// stepFLOPs is the matrix arithmetic of one training step as executed.
func stepFLOPs(c *Config, opts TrainOptions, samples []TrainSample) float64 {
	h, q, kv, in, v := float64(c.HiddenSize), float64(c.QDim()), float64(c.KVDim()), float64(c.IntermediateSize), float64(c.VocabSize)
	layerW := h*q + 2*h*kv + q*h + 3*h*in
	var pos, resp, attn float64
	for _, s := range samples {
		n := float64(len(s.Prompt) + len(s.Response) - 1)
		pos += n
		resp += float64(len(s.Response))
		attn += n * n * q // one causal product: 2·(n²/2)·qdim
	}
	perPos := 6 * layerW // forward, input gradient, weight gradient
	fwd := 2 * layerW
	if opts.LoRA != nil {
		r := float64(opts.LoRA.Rank)
		adapters := r * ((h + q) + 2*(h+kv) + (q + h) + 2*(h+in) + (in + h)) // Σ rank·(in+out) over the targets
		perPos = 4*layerW + 6*adapters                                       // no weight gradients; adapters: 2 forward, 4 backward
		fwd += 2 * adapters
	}
	layers := float64(c.NumLayers)
	total := layers*(perPos*pos+7*attn) + 8*v*h*resp
	if opts.Checkpointing {
		total += layers * (fwd*pos + 2*attn)
	}
	return total
}

// conventionalFLOPs is 6·params·positions (full) or 4·params·positions
// (LoRA: no weight gradients).
func conventionalFLOPs(c *Config, opts TrainOptions, positions int) float64 {
	k := 6.0
	if opts.LoRA != nil {
		k = 4
	}
	return k * float64(c.NumParams()) * float64(positions)
}

func BenchmarkTrain(b *testing.B) {
	for _, tb := range trainBenches {
		b.Run(tb.name, func(b *testing.B) {
			dir := benchCheckpoint(b, tb.ckpt, tb.spec())
			m, err := Load(cpu.New(), dir)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			c := m.Config
			var samples []TrainSample
			positions := 0
			for i := range tb.samples {
				samples = append(samples, TrainSample{Prompt: tokensFrom(tb.prompt, c.VocabSize, 2*i), Response: tokensFrom(tb.response, c.VocabSize, 2*i+1)})
				positions += tb.prompt + tb.response - 1
			}
			_, peak := ceilings()
			d := make([][]float32, len(samples))
			for i := range d {
				d[i] = make([]float32, tb.response)
				for j := range d[i] {
					d[i][j] = -1 / float32(tb.response*tb.samples)
				}
			}
			var tr *Trainable
			var state []compute.Tensor
			trainer := m.Backend().(compute.Trainer)
			step := func(n int) {
				p, err := tr.Forward(samples)
				if err != nil {
					b.Fatal(err)
				}
				tr.ZeroGrad()
				if err := p.Backward(d); err != nil {
					b.Fatal(err)
				}
				p.Free()
				hp := compute.AdamW{LR: 1e-5, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: n}
				for i, pr := range tr.Params() {
					trainer.AdamW(pr.Value, pr.Grad, state[2*i], state[2*i+1], hp)
				}
			}
			heap := peakHeap(func() {
				if tr, err = m.NewTrainable(nil, tb.opts); err != nil {
					b.Fatal(err)
				}
				for _, pr := range tr.Params() {
					for range 2 {
						s, err := trainer.NewTensor(compute.F32, pr.Value.Shape()...)
						if err != nil {
							b.Fatal(err)
						}
						state = append(state, s)
					}
				}
				step(1) // warm-up: activation memory allocated
			})
			defer tr.Free()
			b.ResetTimer()
			for i := range b.N {
				step(i + 2)
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			flops := stepFLOPs(c, tb.opts, samples)
			b.ReportMetric(float64(positions)/sec, "tok/s")
			b.ReportMetric(flops/sec/1e9, "GFLOP/s")
			b.ReportMetric(100*flops/sec/1e9/peak, "%peak")
			b.ReportMetric(conventionalFLOPs(c, tb.opts, positions)/sec/1e9, "6ND-GFLOP/s")
			b.ReportMetric(float64(heap)/(1<<20), "peakMiB")
			b.ReportMetric(float64(heap)/1024/float64(positions), "KiB/tok")
			b.ReportMetric(sec, "s/step")
			b.ReportMetric(0, "ns/op")
			b.Logf("%s: %d threads, FP32 peak %.0f GFLOP/s, %s of trainable parameters, step %.2f s",
				tb.name, kernels.Threads(), peak, fmt.Sprintf("%.1fM", float64(trainableCount(tr))/1e6), sec)
		})
	}
}

func trainableCount(tr *Trainable) int {
	n := 0
	for _, p := range tr.Params() {
		n += compute.Len(p.Value)
	}
	return n
}
