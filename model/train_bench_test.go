package model

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

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
	quant    compute.DType // the base quantized on load (LoRA over it), or 0
}

var trainBenches = []trainBench{
	{"llama-20M-full/4x512", "llama-20M-bf16", SpecLlama20M, TrainOptions{}, 4, 384, 128, 0},
	{"qwen3-0.6B-lora16/1x512", "qwen3-0.6B-bf16", SpecQwen3_0_6B, TrainOptions{LoRA: &LoRAConfig{Rank: 16, Alpha: 32, Seed: 1}}, 1, 384, 128, 0},
	{"qwen3-0.6B-lora16-ckpt/1x512", "qwen3-0.6B-bf16", SpecQwen3_0_6B, TrainOptions{LoRA: &LoRAConfig{Rank: 16, Alpha: 32, Seed: 1}, Checkpointing: true}, 1, 384, 128, 0},
	{"qwen3-0.6B-q4_0-lora16-ckpt/1x512", "qwen3-0.6B-bf16", SpecQwen3_0_6B, TrainOptions{LoRA: &LoRAConfig{Rank: 16, Alpha: 32, Seed: 1}, Checkpointing: true}, 1, 384, 128, compute.Q4_0},
	{"llama-20M-full-ckpt/16k+300", "llama-20M-bf16", SpecLlama20M, TrainOptions{Checkpointing: true}, 1, 16384, 300, 0},
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
			src, err := OpenDir(dir)
			if err == nil && tb.quant != 0 {
				src, err = Quantize(src, tb.quant)
			}
			if err != nil {
				b.Fatal(err)
			}
			m, err := LoadFrom(cpu.New(), src)
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
			step := func(n int) { benchStep(b, trainer, tr, samples, d, state, n) }
			heap := peakHeap(func() {
				if tr, err = m.NewTrainable(nil, tb.opts); err != nil {
					b.Fatal(err)
				}
				state = adamState(b, trainer, tr)
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

// BenchmarkTrainMemory measures the memory of training the Qwen3-0.6B
// shape (random weights, tied embeddings) one step of one 512-token sample
// (384 prompt, 128 response; activation checkpointing on, as the daemon's
// default), for full fine-tuning and LoRA rank 16 on all seven targets
// over BF16 weights and LoRA over Q8_0 and Q4_0 bases (quantized on load:
// layer matrices at the type, the tied embedding at Q8_0):
//
//	go test -run '^$' -bench 'TrainMemory' -benchtime 1x -timeout 30m ./model/
//
// Each case reports, in MiB: weights (the model's tensors: Weights.Bytes),
// step (the peak Go heap above the loaded model while the trainable
// parameters, their gradients, the AdamW moments and one step's
// activations exist: peakHeap), total (weights + step), and rss (the peak
// of the process's anonymous resident memory during the step above its
// level before the model was loaded, /proc/self/status RssAnon: the
// weights are copied into the heap, not mapped). Full fine-tuning of 28
// layers needs about 11 GiB, more than a shared development machine
// should lend a benchmark, so it runs at 1 and 2 layers of the same shape
// and is extrapolated linearly to 28 (memory is affine in the layer count:
// every layer holds the same tensors and, with checkpointing, the same
// activations); the LoRA cases run at 1, 2 and 28 layers, and the same
// extrapolation of their 1- and 2-layer runs is logged beside their
// measured 28-layer total, as a check of the method. The last lines log
// each total against full fine-tuning and against LoRA over BF16.
func BenchmarkTrainMemory(b *testing.B) {
	lora := &LoRAConfig{Rank: 16, Alpha: 32, Seed: 1}
	type result struct{ total, rss float64 }
	results := map[string]map[int]result{}
	cases := []struct {
		name   string
		quant  compute.DType
		opts   TrainOptions
		layers []int
	}{
		{"bf16-full", 0, TrainOptions{Checkpointing: true}, []int{1, 2}},
		{"bf16-lora16", 0, TrainOptions{LoRA: lora, Checkpointing: true}, []int{1, 2, 28}},
		{"q8_0-lora16", compute.Q8_0, TrainOptions{LoRA: lora, Checkpointing: true}, []int{1, 2, 28}},
		{"q4_0-lora16", compute.Q4_0, TrainOptions{LoRA: lora, Checkpointing: true}, []int{1, 2, 28}},
		// Q4_1, what a GGUF file's Q4_K matrices run as (model.quantize:
		// auto), with the output matrix at Q6_16, as a Q4_K_M file's Q6_K
		// one runs.
		{"q4_1-lora16", compute.Q4_1, TrainOptions{LoRA: lora, Checkpointing: true}, []int{1, 2, 28}},
	}
	for _, tc := range cases {
		results[tc.name] = map[int]result{}
		for _, layers := range tc.layers {
			b.Run(fmt.Sprintf("qwen3-0.6B-%s/%dL", tc.name, layers), func(b *testing.B) {
				spec := SpecQwen3_0_6B()
				spec.Layers = layers
				ckpt := fmt.Sprintf("qwen3-0.6B-%dL-bf16", layers)
				if layers == 28 {
					ckpt = "qwen3-0.6B-bf16" // BenchmarkDecode's
				}
				total, rss := measureTrainStep(b, ckpt, spec, tc.quant, tc.opts, tc.name)
				results[tc.name][layers] = result{total, rss}
			})
		}
	}
	// The 28-layer totals: measured, or extrapolated from 1 and 2 layers
	// (logged by a last sub-benchmark: a parent benchmark's own log is not
	// printed).
	b.Run("summary", func(b *testing.B) {
		at28 := func(name string) (total, rss float64, how string) {
			r := results[name]
			if v, ok := r[28]; ok {
				return v.total, v.rss, "measured"
			}
			r1, ok1 := r[1]
			r2, ok2 := r[2]
			if !ok1 || !ok2 {
				return 0, 0, ""
			}
			return r1.total + 27*(r2.total-r1.total), r1.rss + 27*(r2.rss-r1.rss), "extrapolated from 1 and 2 layers"
		}
		full, fullRSS, _ := at28("bf16-full")
		bf16, bf16RSS, _ := at28("bf16-lora16")
		for _, tc := range cases {
			total, rss, how := at28(tc.name)
			if how == "" {
				continue
			}
			line := fmt.Sprintf("28 layers, %s: total %.0f MiB, rss %.0f MiB (%s)", tc.name, total, rss, how)
			if r := results[tc.name]; how == "measured" && len(r) == 3 {
				line += fmt.Sprintf("; extrapolated from 1 and 2 layers it would read %.0f MiB", r[1].total+27*(r[2].total-r[1].total))
			}
			if full > 0 {
				line += fmt.Sprintf("; %.1f%% of full fine-tuning's total (rss %.1f%%)", 100*total/full, 100*rss/fullRSS)
			}
			if bf16 > 0 {
				line += fmt.Sprintf("; %.1f%% of LoRA over BF16 (rss %.1f%%)", 100*total/bf16, 100*rss/bf16RSS)
			}
			b.Log(line)
			if tc.name == "q4_0-lora16" && full > 0 && bf16 > 0 {
				b.ReportMetric(100*total/full, "%full-ft")
				b.ReportMetric(100*total/bf16, "%lora-bf16")
			}
		}
		b.ReportMetric(0, "ns/op")
	})
}

// peakHeapWith is peakHeap, also calling sample at every tick.
func peakHeapWith(fn, sample func()) uint64 {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	peak := peakHeap(fn)
	close(stop)
	<-done
	sample()
	return peak
}

// rssAnon is the process's anonymous resident memory in bytes
// (/proc/self/status RssAnon), 0 where it cannot be read.
func rssAnon() uint64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// measureTrainStep loads the checkpoint ckpt of spec (quantized to quant,
// or as stored) and measures one training step of opts on a 512-token
// sample (see BenchmarkTrainMemory), reporting and returning the total
// (weights + step) and the RssAnon peak above the start, in MiB.
func measureTrainStep(b *testing.B, ckpt string, spec RandomSpec, quant compute.DType, opts TrainOptions, name string) (total, rssMiB float64) {
	debug.FreeOSMemory()
	rss0 := rssAnon()
	m := loadBench(b, ckpt, spec, false, quant)
	debug.FreeOSMemory() // what loading left behind
	c := m.Config
	samples := []TrainSample{{Prompt: tokensFrom(384, c.VocabSize, 0), Response: tokensFrom(128, c.VocabSize, 1)}}
	d := [][]float32{make([]float32, 128)}
	for j := range d[0] {
		d[0][j] = -1.0 / 128
	}
	tb := m.Backend().(compute.Trainer)
	var tr *Trainable
	var state []compute.Tensor
	var rssPeak uint64
	heap := peakHeapWith(func() {
		var err error
		if tr, err = m.NewTrainable(nil, opts); err != nil {
			b.Fatal(err)
		}
		state = adamState(b, tb, tr)
		benchStep(b, tb, tr, samples, d, state, 1)
	}, func() { rssPeak = max(rssPeak, rssAnon()) })
	weights := float64(m.Weights().Bytes()) / (1 << 20)
	step := float64(heap) / (1 << 20)
	rss := float64(rssPeak-min(rssPeak, rss0)) / (1 << 20)
	b.ReportMetric(weights, "weightsMiB")
	b.ReportMetric(step, "stepMiB")
	b.ReportMetric(weights+step, "totalMiB")
	b.ReportMetric(rss, "rssMiB")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d layers, %s: weights %.0f MiB, step %.0f MiB (%.1fM trainable), total %.0f MiB, RssAnon peak %.0f MiB above the start",
		spec.Layers, name, weights, step, float64(trainableCount(tr))/1e6, weights+step, rss)
	tr.Free()
	for _, s := range state {
		tb.Free(s)
	}
	return weights + step, rss
}

// BenchmarkTrainMemoryScale measures BenchmarkTrainMemory's step for LoRA
// over BF16 and over Q4_0 at the shape of Qwen3-1.7B (1.7 billion
// parameters, 3.4 GB of BF16 weights; a 512-token step takes a few
// seconds to tens of seconds on 2 cores), where the base is a larger part
// of the step than at 0.6B: the ratio of the two totals is logged.
func BenchmarkTrainMemoryScale(b *testing.B) {
	lora := &LoRAConfig{Rank: 16, Alpha: 32, Seed: 1}
	totals := map[string]float64{}
	for _, tc := range []struct {
		name  string
		quant compute.DType
	}{{"bf16-lora16", 0}, {"q4_0-lora16", compute.Q4_0}} {
		b.Run("qwen3-1.7B-"+tc.name, func(b *testing.B) {
			totals[tc.name], _ = measureTrainStep(b, "qwen3-1.7B-bf16", SpecQwen3_1_7B(), tc.quant, TrainOptions{LoRA: lora, Checkpointing: true}, tc.name)
		})
	}
	b.Run("summary", func(b *testing.B) {
		if bf, q := totals["bf16-lora16"], totals["q4_0-lora16"]; bf > 0 && q > 0 {
			b.Logf("Qwen3-1.7B shape: LoRA over Q4_0 %.0f MiB, over BF16 %.0f MiB: %.1f%%", q, bf, 100*q/bf)
		}
		b.ReportMetric(0, "ns/op")
	})
}

// adamState makes the two AdamW moments of each of tr's parameters
// (F32, on tb), in the order m, v of parameter 0, then of 1, ...
func adamState(b *testing.B, tb compute.Trainer, tr *Trainable) []compute.Tensor {
	var state []compute.Tensor
	for _, pr := range tr.Params() {
		for range 2 {
			s, err := tb.NewTensor(compute.F32, pr.Value.Shape()...)
			if err != nil {
				b.Fatal(err)
			}
			state = append(state, s)
		}
	}
	return state
}

// benchStep runs training step n of tr on samples with the log-prob
// gradients d: forward, backward, and AdamW with the moments in state
// (adamState's order).
func benchStep(b *testing.B, tb compute.Trainer, tr *Trainable, samples []TrainSample, d [][]float32, state []compute.Tensor, n int) {
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
		tb.AdamW(pr.Value, pr.Grad, state[2*i], state[2*i+1], hp)
	}
}
