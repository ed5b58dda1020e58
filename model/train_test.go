package model

import (
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cpu/kernels"
	"github.com/clawrl/clawrl/safetensors"
)

// Tests of the training engine: gradients of the whole model against the
// float64 reference model of reference_test.go, LoRA, checkpointing,
// snapshots and weight sets.

// tokensFrom is a deterministic token sequence, different per seed.
func tokensFrom(n, vocab, seed int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32((i*37 + seed*17 + 11) % vocab)
	}
	return toks
}

// trainBatch is two samples of different lengths.
func trainBatch(vocab int) []TrainSample {
	return []TrainSample{
		{Prompt: tokensFrom(5, vocab, 1), Response: tokensFrom(4, vocab, 2)},
		{Prompt: tokensFrom(3, vocab, 3), Response: tokensFrom(6, vocab, 4)},
	}
}

// coefficients returns dL/dlogp per response token: random, so that every
// position matters differently.
func coefficients(samples []TrainSample, seed uint64) ([][]float32, [][]float64) {
	r := rand.New(rand.NewPCG(seed, 99))
	c32, c64 := make([][]float32, len(samples)), make([][]float64, len(samples))
	for i, s := range samples {
		for range s.Response {
			v := float32(r.Float64()*2 - 1)
			c32[i] = append(c32[i], v)
			c64[i] = append(c64[i], float64(v))
		}
	}
	return c32, c64
}

// loss is Σ coef·log p(response | prompt) under the reference model.
func (r *refModel) loss(samples []TrainSample, coef [][]float64) float64 {
	r.call = 0
	if !r.replay {
		r.resid = r.resid[:0]
	}
	total := 0.0
	for i, s := range samples {
		toks := append(append([]int32(nil), s.Prompt...), s.Response[:len(s.Response)-1]...)
		logits := r.forward(toks)
		for j, tok := range s.Response {
			row := logits[len(s.Prompt)-1+j]
			m := math.Inf(-1)
			for _, v := range row {
				m = math.Max(m, v)
			}
			z := 0.0
			for _, v := range row {
				z += math.Exp(v - m)
			}
			total += coef[i][j] * (row[tok] - m - math.Log(z))
		}
	}
	return total
}

// refLogProbs is the reference's log-probabilities of each response token.
func (r *refModel) logProbs(samples []TrainSample) [][]float64 {
	out := make([][]float64, len(samples))
	for i, s := range samples {
		for j := range s.Response {
			coef := make([][]float64, len(samples))
			for k := range samples {
				coef[k] = make([]float64, len(samples[k].Response))
			}
			coef[i][j] = 1
			out[i] = append(out[i], r.loss(samples, coef))
		}
	}
	return out
}

func newTrainable(t *testing.T, m *Model, opts TrainOptions) *Trainable {
	t.Helper()
	tr, err := m.NewTrainable(nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Free)
	return tr
}

// gradients runs one forward and backward with coefficients c and returns
// the pass's log-probs and a copy of every gradient by name.
func gradients(t *testing.T, tr *Trainable, samples []TrainSample, c [][]float32) ([][]float32, map[string][]float32) {
	t.Helper()
	tr.ZeroGrad()
	p, err := tr.Forward(samples)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	if err := p.Backward(c); err != nil {
		t.Fatal(err)
	}
	g := map[string][]float32{}
	for _, pr := range tr.Params() {
		g[pr.Name] = slices.Clone(cpu.Float32s(pr.Grad))
	}
	return p.LogProbs, g
}

// probe picks element indices of a tensor of n elements to differentiate
// numerically: a few at random and, for the embedding, a few in rows of
// tokens the samples use (the only rows with an input gradient).
func probe(r *rand.Rand, name string, n, cols int, used []int32) []int {
	idx := []int{}
	for range min(n, 6) {
		idx = append(idx, r.IntN(n))
	}
	if name == "model.embed_tokens.weight" {
		for range 6 {
			idx = append(idx, int(used[r.IntN(len(used))])*cols+r.IntN(cols))
		}
	}
	return idx
}

// checkAgainstReference compares analytic gradients with central
// differences of the reference's loss over the probed elements of each
// tensor, and a directional derivative over all parameters.
func checkAgainstReference(t *testing.T, ref *refModel, samples []TrainSample, c64 [][]float64, grads map[string][]float32, perturb func(name string, i int, delta float64)) {
	t.Helper()
	ge := gradientErrors(ref, samples, c64, grads, perturb)
	worst := 0.0
	for _, name := range slices.Sorted(maps.Keys(ge.tensor)) {
		e := ge.tensor[name]
		worst = math.Max(worst, e)
		if !(e < 1e-3) {
			t.Errorf("%s: relative error %.3g of the analytic gradient against central differences (scale %.3g)", name, e, ge.scale[name])
		}
	}
	t.Logf("worst relative error over %d tensors: %.2g", len(ge.tensor), worst)
	if e := ge.directional; !(e < 1e-4) {
		t.Errorf("directional derivative: analytic %.8g, numeric %.8g (relative error %.3g)", ge.analytic, ge.numeric, e)
	} else {
		t.Logf("directional derivative: relative error %.2g", e)
	}
}

// gradErrors are the errors of analytic gradients against the reference's
// central differences (gradientErrors).
type gradErrors struct {
	tensor, scale     map[string]float64 // per tensor: max |analytic − numeric| / max |numeric| over the probes
	directional       float64            // relative error of the directional derivative
	analytic, numeric float64            // the directional derivative both ways
}

// gradientErrors computes central differences of the reference's loss over
// the probed elements of each tensor, and a directional derivative over
// all parameters, and their errors against the analytic gradients.
func gradientErrors(ref *refModel, samples []TrainSample, c64 [][]float64, grads map[string][]float32, perturb func(name string, i int, delta float64)) gradErrors {
	const h = 1e-5
	r := rand.New(rand.NewPCG(5, 6))
	var used []int32
	for _, s := range samples {
		used = append(append(used, s.Prompt...), s.Response...)
	}
	names := slices.Sorted(maps.Keys(grads))
	num := func(name string, i int) float64 {
		perturb(name, i, h)
		lp := ref.loss(samples, c64)
		perturb(name, i, -2*h)
		lm := ref.loss(samples, c64)
		perturb(name, i, h)
		return (lp - lm) / (2 * h)
	}
	ge := gradErrors{tensor: map[string]float64{}, scale: map[string]float64{}}
	for _, name := range names {
		g := grads[name]
		cols := ref.hidden
		var diff, scale float64
		for _, i := range probe(r, name, len(g), cols, used) {
			n := num(name, i)
			diff = math.Max(diff, math.Abs(float64(g[i])-n))
			scale = math.Max(scale, math.Abs(n))
		}
		if scale < 1e-6 { // all probes in a zero-gradient region
			scale = 1e-6
		}
		ge.tensor[name], ge.scale[name] = diff/scale, scale
	}

	// Directional derivative along a random direction over all parameters.
	dir := map[string][]float64{}
	for _, name := range names {
		d := make([]float64, len(grads[name]))
		for i := range d {
			d[i] = r.Float64()*2 - 1
			ge.analytic += d[i] * float64(grads[name][i])
		}
		dir[name] = d
	}
	move := func(s float64) {
		for _, name := range names {
			for i, d := range dir[name] {
				perturb(name, i, s*d)
			}
		}
	}
	move(h)
	lp := ref.loss(samples, c64)
	move(-2 * h)
	lm := ref.loss(samples, c64)
	move(h)
	ge.numeric = (lp - lm) / (2 * h)
	ge.directional = math.Abs(ge.analytic-ge.numeric) / math.Abs(ge.numeric)
	return ge
}

var gradSpecs = []struct {
	name    string
	edit    func(*RandomSpec)
	chunked bool // logits in chunks of 3 rows, recomputed in Backward in tiles (forceLogitTiles)
}{
	{"llama untied gqa", func(s *RandomSpec) {}, false},
	{"llama tied mha biases", func(s *RandomSpec) { s.Tied, s.KVHeads, s.AttentionBias, s.MLPBias = true, 4, true, true }, false},
	{"qwen2 untied biases", func(s *RandomSpec) { s.Arch = ArchQwen2 }, true},
	{"qwen3 tied qk-norm", func(s *RandomSpec) { s.Arch, s.Tied = ArchQwen3, true }, true},
	{"qwen3 untied mqa", func(s *RandomSpec) { s.Arch, s.KVHeads = ArchQwen3, 1 }, false},
	{"phi3 fused", func(s *RandomSpec) { s.Arch = ArchPhi3 }, false},
	{"mistral sliding window 3", func(s *RandomSpec) { s.Arch, s.SlidingWindow = ArchMistral, 3 }, true},
	{"phi4-mini partial rotary", func(s *RandomSpec) { s.Arch, s.PartialRotary = ArchPhi3, 0.5 }, false},
	{"gemma3 tied window 3 pattern 2", func(s *RandomSpec) {
		s.Arch, s.Tied, s.SlidingWindow, s.SlidingPattern, s.QueryPreAttnScalar, s.LocalRopeTheta = ArchGemma3, true, 3, 2, 12, 50
	}, true},
	{"granite tied multipliers", func(s *RandomSpec) {
		s.Arch, s.Tied, s.EmbeddingMultiplier, s.AttentionMultiplier, s.ResidualMultiplier, s.LogitsScaling = ArchGranite, true, 3, 0.3, 0.5, 4
	}, true},
	{"olmo2 untied", func(s *RandomSpec) { s.Arch = ArchOlmo2 }, true},
	{"gemma2 tied window 3 softcaps", func(s *RandomSpec) {
		s.Arch, s.Tied, s.SlidingWindow, s.AttnSoftcap, s.FinalSoftcap = ArchGemma2, true, 3, 1.5, 3
	}, true},
	{"gemma2 untied softcaps", func(s *RandomSpec) {
		s.Arch, s.SlidingWindow, s.AttnSoftcap, s.FinalSoftcap = ArchGemma2, 4, 2, 2.5
	}, false},
	{"smollm3 tied nope layer", func(s *RandomSpec) { s.Arch, s.Tied, s.Layers = ArchSmolLM3, true, 4 }, false},
	{"olmo2 tied mqa", func(s *RandomSpec) { s.Arch, s.Tied, s.KVHeads = ArchOlmo2, true, 1 }, false},
	{"granite untied multipliers", func(s *RandomSpec) {
		s.Arch, s.EmbeddingMultiplier, s.AttentionMultiplier, s.ResidualMultiplier, s.LogitsScaling = ArchGranite, 2, 0.25, 0.7, 3
	}, false},
}

// forceLogitTiles makes the training forward compute the logits 3 rows at
// a time and Backward recompute them in tiles of 2 rows by 32 columns
// (the last tile of a vocabulary of 97 one column wide), until t ends.
func forceLogitTiles(t *testing.T) {
	rows, tr, tc, tf := maxLogitRows, logitTileRows, logitTileCols, logitTileFloats
	t.Cleanup(func() { maxLogitRows, logitTileRows, logitTileCols, logitTileFloats = rows, tr, tc, tf })
	maxLogitRows, logitTileRows, logitTileCols, logitTileFloats = 3, 2, 32, 64
}

// TestFullGradientsMatchReference checks every parameter's gradient of a
// full fine-tune against the float64 reference model's numerical gradient.
func TestFullGradientsMatchReference(t *testing.T) {
	for _, tt := range gradSpecs {
		t.Run(tt.name, func(t *testing.T) {
			spec := tiny(ArchLlama)
			tt.edit(&spec)
			if tt.chunked {
				forceLogitTiles(t)
			}
			m, dir := writeAndLoad(t, spec)
			ref := loadRef(t, dir)
			samples := trainBatch(spec.Vocab)
			c32, c64 := coefficients(samples, 1)
			tr := newTrainable(t, m, TrainOptions{})
			lps, grads := gradients(t, tr, samples, c32)
			want := ref.logProbs(samples)
			for i := range want {
				for j := range want[i] {
					if d := math.Abs(float64(lps[i][j]) - want[i][j]); d > 1e-4 {
						t.Fatalf("log-prob %d/%d: %v, reference %v", i, j, lps[i][j], want[i][j])
					}
				}
			}
			if len(grads) != len(m.Config.TensorSpecs()) {
				t.Fatalf("%d trainable tensors, checkpoint has %d", len(grads), len(m.Config.TensorSpecs()))
			}
			checkAgainstReference(t, ref, samples, c64, grads, func(name string, i int, delta float64) {
				if rows := m.Config.headRows(name); rows != nil {
					// The model keeps a query or key head's dimensions
					// reordered (partial rotary); the reference, as
					// Hugging Face has them.
					cols := len(ref.w[name]) / len(rows)
					i = rows[i/cols]*cols + i%cols
				}
				ref.w[name][i] += delta // a tied lm_head shares the embedding's slice
			})
		})
	}
}

// setRandom fills an F32 tensor with N(0, std²).
func setRandom(b compute.Backend, x compute.Tensor, r *rand.Rand, std float64) {
	v := make([]float32, compute.Len(x))
	for i := range v {
		v[i] = float32(r.NormFloat64() * std)
	}
	b.Write(x, v)
}

// TestLoRAGradientsMatchReference checks the adapters' gradients (with B
// made non-zero, so that A has a gradient too) against the reference model
// with the adapters merged into its weights.
func TestLoRAGradientsMatchReference(t *testing.T) {
	for _, tt := range []struct {
		name    string
		arch    string
		targets []string
	}{
		{"qwen3 all targets", ArchQwen3, nil},
		{"qwen2 q,v,down", ArchQwen2, []string{"q_proj", "v", "down"}},
		{"gemma3 all targets", ArchGemma3, nil},
		{"granite all targets", ArchGranite, nil},
		{"olmo2 all targets", ArchOlmo2, nil},
		{"gemma2 all targets", ArchGemma2, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := tiny(tt.arch)
			if tt.arch == ArchGemma3 {
				spec.SlidingWindow, spec.SlidingPattern = 3, 2
			}
			if tt.arch == ArchGranite {
				spec.EmbeddingMultiplier, spec.AttentionMultiplier, spec.ResidualMultiplier, spec.LogitsScaling = 3, 0.3, 0.5, 4
			}
			if tt.arch == ArchGemma2 {
				spec.SlidingWindow, spec.AttnSoftcap, spec.FinalSoftcap = 3, 1.5, 3
			}
			m, dir := writeAndLoad(t, spec)
			ref := loadRef(t, dir)
			samples := trainBatch(spec.Vocab)
			c32, c64 := coefficients(samples, 2)
			const rank, alpha = 3, 6
			tr := newTrainable(t, m, TrainOptions{LoRA: &LoRAConfig{Rank: rank, Alpha: alpha, Targets: tt.targets, Seed: 3}})
			r := rand.New(rand.NewPCG(7, 8))
			vals := map[string][]float64{} // float64 copies, perturbed by the check
			for _, p := range tr.Params() {
				if strings.HasSuffix(p.Name, "lora_B.weight") {
					setRandom(m.b, p.Value, r, 0.2)
				}
				for _, v := range cpu.Float32s(p.Value) {
					vals[p.Name] = append(vals[p.Name], float64(v))
				}
			}
			wantParams := 2 * m.Config.NumLayers * 7
			if tt.targets != nil {
				wantParams = 2 * m.Config.NumLayers * len(tt.targets)
			}
			if len(tr.Params()) != wantParams {
				t.Fatalf("%d LoRA parameters, want %d", len(tr.Params()), wantParams)
			}
			// The reference gets W + (alpha/rank)·B·A in every adapted matrix.
			base := map[string][]float64{}
			merge := func(name string) {
				prefix := strings.TrimSuffix(strings.TrimSuffix(name, ".lora_A.weight"), ".lora_B.weight")
				wname := strings.TrimPrefix(prefix, "base_model.model.") + ".weight"
				if base[wname] == nil {
					base[wname] = slices.Clone(ref.w[wname])
				}
				A, B := vals[prefix+".lora_A.weight"], vals[prefix+".lora_B.weight"]
				w := ref.w[wname]
				in := len(A) / rank
				for o := range len(B) / rank {
					for i := range in {
						s := 0.0
						for k := range rank {
							s += B[o*rank+k] * A[k*in+i]
						}
						w[o*in+i] = base[wname][o*in+i] + alpha/rank*s
					}
				}
			}
			for name := range vals {
				merge(name)
			}
			lps, grads := gradients(t, tr, samples, c32)
			want := ref.logProbs(samples)
			for i := range want {
				for j := range want[i] {
					if d := math.Abs(float64(lps[i][j]) - want[i][j]); d > 1e-4 {
						t.Fatalf("log-prob %d/%d: %v, reference %v", i, j, lps[i][j], want[i][j])
					}
				}
			}
			checkAgainstReference(t, ref, samples, c64, grads, func(name string, i int, delta float64) {
				vals[name][i] += delta
				merge(name)
			})
		})
	}
}

// TestCheckpointingIsExact: recomputing activations in Backward gives the
// same log-probs and gradients, bit for bit.
func TestCheckpointingIsExact(t *testing.T) {
	for _, tt := range []struct {
		name string
		arch string
		lora *LoRAConfig
	}{
		{"qwen3 full", ArchQwen3, nil},
		{"llama lora", ArchLlama, &LoRAConfig{Rank: 4, Alpha: 8, Seed: 1}},
		{"gemma3 full", ArchGemma3, nil},
		{"gemma3 lora", ArchGemma3, &LoRAConfig{Rank: 4, Alpha: 8, Seed: 1}},
		{"granite full", ArchGranite, nil},
		{"olmo2 full", ArchOlmo2, nil},
		{"olmo2 lora", ArchOlmo2, &LoRAConfig{Rank: 4, Alpha: 8, Seed: 1}},
		{"gemma2 full", ArchGemma2, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := tiny(tt.arch)
			spec.DType = "bfloat16"
			if tt.arch == ArchGemma3 {
				spec.SlidingWindow, spec.SlidingPattern = 3, 2
			}
			if tt.arch == ArchGemma2 {
				spec.SlidingWindow, spec.AttnSoftcap, spec.FinalSoftcap = 3, 1.5, 3
			}
			m, _ := writeAndLoad(t, spec)
			samples := trainBatch(spec.Vocab)
			c32, _ := coefficients(samples, 3)
			var lps [2][][]float32
			var grads [2]map[string][]float32
			for i, ckpt := range []bool{false, true} {
				tr := newTrainable(t, m, TrainOptions{LoRA: tt.lora, Checkpointing: ckpt})
				if tt.lora != nil { // non-zero B, so that every adapter gradient is non-zero
					r := rand.New(rand.NewPCG(1, 1))
					for _, p := range tr.Params() {
						if strings.HasSuffix(p.Name, "lora_B.weight") {
							setRandom(m.b, p.Value, r, 0.1)
						}
					}
				}
				// Twice, so that reused activation memory is exercised.
				gradients(t, tr, samples, c32)
				lps[i], grads[i] = gradients(t, tr, samples, c32)
			}
			for i := range lps[0] {
				if !equalBits(lps[0][i], lps[1][i]) {
					t.Errorf("sample %d: log-probs differ with checkpointing", i)
				}
			}
			nonzero := 0
			for name, g := range grads[0] {
				if !equalBits(g, grads[1][name]) {
					t.Errorf("%s: gradient differs with checkpointing", name)
				}
				for _, v := range g {
					if v != 0 {
						nonzero++
						break
					}
				}
			}
			if nonzero != len(grads[0]) {
				t.Errorf("%d of %d gradients are all zero", len(grads[0])-nonzero, len(grads[0]))
			}
		})
	}
}

func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// scoreRequests turns samples into LogProbs requests.
func scoreRequests(samples []TrainSample) []ScoreRequest {
	reqs := make([]ScoreRequest, len(samples))
	for i, s := range samples {
		reqs[i] = ScoreRequest{s.Prompt, s.Response}
	}
	return reqs
}

func forwardLogProbs(t *testing.T, tr *Trainable, samples []TrainSample) [][]float32 {
	t.Helper()
	p, err := tr.Forward(samples)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	return p.LogProbs
}

// closeLogProbs fails unless got and want (from a Scored batch) agree
// within tol.
func closeLogProbs(t *testing.T, what string, got [][]float32, want []Scored, tol float64) {
	t.Helper()
	for i := range got {
		for j := range got[i] {
			if d := math.Abs(float64(got[i][j] - want[i].LogProbs[j])); !(d <= tol) {
				t.Fatalf("%s: sample %d token %d: %v, want %v", what, i, j, got[i][j], want[i].LogProbs[j])
			}
		}
	}
}

// TestFreshTrainableMatchesModel: a new Trainable computes the base
// model's log-probs: LoRA with B = 0 exactly those of a full master copy
// (an F32 checkpoint), and both those of the serving path (paged cache)
// within float32 rounding.
func TestFreshTrainableMatchesModel(t *testing.T) {
	for _, dtype := range []string{"float32", "bfloat16"} {
		t.Run(dtype, func(t *testing.T) {
			spec := tiny(ArchQwen3)
			spec.DType = dtype
			m, _ := writeAndLoad(t, spec)
			samples := trainBatch(spec.Vocab)
			base, err := m.LogProbsBatch(newCache(t, m, 4, 16), scoreRequests(samples), 0)
			if err != nil {
				t.Fatal(err)
			}
			full := forwardLogProbs(t, newTrainable(t, m, TrainOptions{}), samples)
			lora := forwardLogProbs(t, newTrainable(t, m, TrainOptions{LoRA: &LoRAConfig{Rank: 4, Seed: 9}}), samples)
			closeLogProbs(t, "full vs model", full, base, 1e-5)
			closeLogProbs(t, "lora vs model", lora, base, 1e-5)
			if dtype == "float32" {
				for i := range full {
					if !equalBits(full[i], lora[i]) {
						t.Errorf("sample %d: LoRA with B = 0 %v, base %v", i, lora[i], full[i])
					}
				}
			}
		})
	}
}

// adamSteps trains tr for steps AdamW steps on −mean log p of samples and
// returns the loss before each step and after the last.
func adamSteps(t *testing.T, tr *Trainable, samples []TrainSample, steps int, lr float32) []float64 {
	t.Helper()
	tb := tr.Model().Backend().(compute.Trainer)
	type state struct{ m, v compute.Tensor }
	st := make([]state, len(tr.Params()))
	for i, p := range tr.Params() {
		var err error
		if st[i].m, err = tb.NewTensor(compute.F32, p.Value.Shape()...); err != nil {
			t.Fatal(err)
		}
		if st[i].v, err = tb.NewTensor(compute.F32, p.Value.Shape()...); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, s := range samples {
		n += len(s.Response)
	}
	var losses []float64
	for step := 1; ; step++ {
		p, err := tr.Forward(samples)
		if err != nil {
			t.Fatal(err)
		}
		loss := 0.0
		d := make([][]float32, len(samples))
		for i, lp := range p.LogProbs {
			for _, v := range lp {
				loss -= float64(v) / float64(n)
				d[i] = append(d[i], -1/float32(n))
			}
		}
		losses = append(losses, loss)
		if step > steps {
			p.Free()
			return losses
		}
		tr.ZeroGrad()
		if err := p.Backward(d); err != nil {
			t.Fatal(err)
		}
		p.Free()
		hp := compute.AdamW{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: step}
		for i, pr := range tr.Params() {
			tb.AdamW(pr.Value, pr.Grad, st[i].m, st[i].v, hp)
		}
	}
}

func TestTrainingLowersLoss(t *testing.T) {
	for _, tt := range []struct {
		name string
		arch string
		opts TrainOptions
		lr   float32
	}{
		{"llama full", ArchLlama, TrainOptions{}, 3e-3},
		{"qwen3 full checkpointing", ArchQwen3, TrainOptions{Checkpointing: true}, 3e-3},
		{"qwen2 lora", ArchQwen2, TrainOptions{LoRA: &LoRAConfig{Rank: 4, Alpha: 8, Seed: 2}}, 1e-2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := tiny(tt.arch)
			spec.DType = "bfloat16"
			m, _ := writeAndLoad(t, spec)
			losses := adamSteps(t, newTrainable(t, m, tt.opts), trainBatch(spec.Vocab), 5, tt.lr)
			t.Logf("−mean log p: %.4f", losses)
			for i := 1; i < len(losses); i++ {
				if !(losses[i] < losses[i-1]) {
					t.Errorf("loss rose at step %d: %.5f → %.5f", i, losses[i-1], losses[i])
				}
			}
			if !(losses[len(losses)-1] < 0.9*losses[0]) {
				t.Errorf("loss %.4f → %.4f: less than 10%% lower", losses[0], losses[len(losses)-1])
			}
		})
	}
	t.Run("sgd", func(t *testing.T) {
		m, _ := writeAndLoad(t, tiny(ArchLlama))
		tr := newTrainable(t, m, TrainOptions{})
		tb := m.Backend().(compute.Trainer)
		samples := trainBatch(97)
		var prev float64
		for step := range 4 {
			tr.ZeroGrad()
			p, err := tr.Forward(samples)
			if err != nil {
				t.Fatal(err)
			}
			loss := 0.0
			d := make([][]float32, len(samples))
			for i, lp := range p.LogProbs {
				for _, v := range lp {
					loss -= float64(v)
					d[i] = append(d[i], -1)
				}
			}
			if step > 0 && !(loss < prev) {
				t.Errorf("SGD step %d: loss %.4f after %.4f", step, loss, prev)
			}
			prev = loss
			if err := p.Backward(d); err != nil {
				t.Fatal(err)
			}
			p.Free()
			for _, pr := range tr.Params() {
				tb.AddScaled(pr.Value, pr.Grad, -0.02)
			}
		}
	})
}

// TestLoRASnapshot: after some training, the merged snapshot serves the
// Trainable's own log-probs, shares every unadapted tensor with the base,
// and outlives its Trainable.
func TestLoRASnapshot(t *testing.T) {
	for _, dtype := range []string{"float32", "bfloat16"} {
		t.Run(dtype, func(t *testing.T) {
			spec := tiny(ArchQwen3)
			spec.DType = dtype
			m, _ := writeAndLoad(t, spec)
			samples := trainBatch(spec.Vocab)
			tr, err := m.NewTrainable(nil, TrainOptions{LoRA: &LoRAConfig{Rank: 4, Alpha: 16, Targets: []string{"q", "v", "o", "up", "down"}, Seed: 4}})
			if err != nil {
				t.Fatal(err)
			}
			adamSteps(t, tr, samples, 3, 1e-2)
			own := forwardLogProbs(t, tr, samples)
			snap, err := tr.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			defer snap.Free()
			tr.Free() // the snapshot holds its own references

			kv := newCache(t, m, 4, 16)
			served, err := m.LogProbsWith(snap, kv, scoreRequests(samples), 0)
			if err != nil {
				t.Fatal(err)
			}
			closeLogProbs(t, "snapshot vs trainable", own, served, 1e-5)
			base, err := m.LogProbsBatch(kv, scoreRequests(samples), 0)
			if err != nil {
				t.Fatal(err)
			}
			moved := 0.0
			for i := range base {
				for j := range base[i].LogProbs {
					moved = math.Max(moved, math.Abs(float64(base[i].LogProbs[j]-served[i].LogProbs[j])))
				}
			}
			if moved < 1e-3 {
				t.Errorf("training moved log-probs by at most %.2g", moved)
			}
			bp := m.Weights().Params()
			for i, p := range snap.Params() {
				adapted := strings.Contains(p.Name, "q_proj") || strings.Contains(p.Name, "v_proj") || strings.Contains(p.Name, "o_proj") ||
					strings.Contains(p.Name, "up_proj") || strings.Contains(p.Name, "down_proj")
				if shared := p.T == bp[i].T; shared == adapted {
					t.Errorf("%s: shared with the base = %v", p.Name, shared)
				}
				if adapted && p.T.DType() != compute.F32 {
					t.Errorf("%s: merged into %v, want F32", p.Name, p.T.DType())
				}
			}
		})
	}
}

// TestFullSnapshotRoundsMasterWeights: a full fine-tune's snapshot of a
// BF16 model holds the master weights rounded to BF16 (nearest even), in
// the base's dtypes.
func TestFullSnapshotRoundsMasterWeights(t *testing.T) {
	spec := tiny(ArchQwen2)
	spec.DType = "bfloat16"
	m, _ := writeAndLoad(t, spec)
	tr := newTrainable(t, m, TrainOptions{})
	adamSteps(t, tr, trainBatch(spec.Vocab), 2, 1e-2)
	snap, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Free()
	tb := m.Backend().(compute.Trainer)
	master := map[string][]float32{}
	for _, p := range tr.Params() {
		master[p.Name] = cpu.Float32s(p.Value)
	}
	bp := m.Weights().Params()
	changed := 0
	for i, p := range snap.Params() {
		if p.T.DType() != bp[i].T.DType() {
			t.Errorf("%s: snapshot dtype %v, base %v", p.Name, p.T.DType(), bp[i].T.DType())
		}
		wide, err := tb.NewTensor(compute.F32, p.T.Shape()...)
		if err != nil {
			t.Fatal(err)
		}
		tb.Convert(wide, p.T)
		got, want := cpu.Float32s(wide), master[p.Name]
		for j, v := range want {
			r := v
			if p.T.DType() == compute.BF16 {
				r = math.Float32frombits(uint32(kernels.F32ToBF16One(v)) << 16)
			}
			if got[j] != r {
				t.Fatalf("%s[%d] = %v, want %v (master %v)", p.Name, j, got[j], r, v)
			}
		}
		wide0, _ := tb.NewTensor(compute.F32, p.T.Shape()...)
		tb.Convert(wide0, bp[i].T)
		if !equalBits(cpu.Float32s(wide0), got) {
			changed++
		}
	}
	if changed == 0 {
		t.Error("no tensor of the snapshot differs from the base")
	}
	// The snapshot serves.
	if _, err := m.LogProbsWith(snap, newCache(t, m, 4, 16), scoreRequests(trainBatch(spec.Vocab)), 0); err != nil {
		t.Fatal(err)
	}
}

// TestWeightSets: clones and snapshots serve beside the checkpoint's set,
// consecutive batches may alternate between sets, and freeing follows the
// ownership rules.
func TestWeightSets(t *testing.T) {
	spec := tiny(ArchLlama)
	spec.DType = "bfloat16"
	m, _ := writeAndLoad(t, spec)
	base := m.Weights()

	var names []string
	for _, p := range base.Params() {
		names = append(names, p.Name)
	}
	var want []string
	for _, s := range m.Config.TensorSpecs() {
		want = append(want, s.Name)
	}
	if !slices.Equal(names, want) {
		t.Fatalf("Params names %v, want %v", names, want)
	}

	clone, err := base.Clone()
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range clone.Params() {
		if p.T == base.Params()[i].T || p.T.DType() != base.Params()[i].T.DType() {
			t.Fatalf("%s: clone shares the tensor or changed its dtype", p.Name)
		}
	}
	tr := newTrainable(t, m, TrainOptions{})
	adamSteps(t, tr, trainBatch(spec.Vocab), 2, 1e-2)
	snap, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}

	// Each version alone, then two generations decoding in alternation.
	toks := testTokens(12, spec.Vocab)
	alone := func(w *Weights) []float32 {
		kv := newCache(t, m, 4, 8)
		s := kv.NewSequence()
		defer s.Free()
		out, err := m.Run(w, []Step{{s, toks}}, AllLogits, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	wantBase, wantClone, wantSnap := alone(base), alone(clone), alone(snap)
	if !equalBits(wantBase, wantClone) {
		t.Error("the clone's logits differ from the checkpoint's")
	}
	if equalBits(wantBase, wantSnap) {
		t.Error("the snapshot's logits equal the checkpoint's")
	}
	kv := newCache(t, m, 4, 16)
	a, b := kv.NewSequence(), kv.NewSequence()
	vocab := spec.Vocab
	for i := range toks {
		for _, v := range []struct {
			w    *Weights
			s    *Sequence
			want []float32
		}{{base, a, wantBase}, {snap, b, wantSnap}} {
			out, err := m.Run(v.w, []Step{{v.s, toks[i : i+1]}}, LastLogits, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k := range vocab {
				if w := v.want[i*vocab+k]; math.Abs(float64(out[k]-w)) > 1e-5*(1+math.Abs(float64(w))) {
					t.Fatalf("alternating step %d: logit %d = %v, want %v", i, k, out[k], w)
				}
			}
		}
	}

	// Freeing: the checkpoint's set is never freed by Free; a freed set is
	// refused; a Trainable keeps its base's tensors alive.
	base.Free()
	if _, err := m.Forward([]Step{{kv.NewSequence(), toks[:2]}}, LastLogits, nil); err != nil {
		t.Fatalf("Forward after Free of the checkpoint's set: %v", err)
	}
	tr2, err := m.NewTrainable(clone, TrainOptions{LoRA: &LoRAConfig{Rank: 2, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	clone.Free()
	clone.Free()
	if _, err := m.Run(clone, []Step{{kv.NewSequence(), toks[:2]}}, LastLogits, nil); err == nil || !strings.Contains(err.Error(), "freed") {
		t.Fatalf("Run on a freed set: %v", err)
	}
	if _, err := clone.Clone(); err == nil {
		t.Fatal("Clone of a freed set succeeded")
	}
	if _, err := tr2.Forward(trainBatch(spec.Vocab)); err != nil {
		t.Fatalf("Trainable over a freed clone: %v", err)
	}
	tr2.Free()
	snap.Free()
	other, _ := writeAndLoad(t, tiny(ArchLlama))
	if _, err := other.Run(snap, []Step{{kv.NewSequence(), toks[:2]}}, LastLogits, nil); err == nil {
		t.Fatal("Run with another model's weights succeeded")
	}
}

// TestFreeWhileServing frees a set while another goroutine runs on it:
// every call either completes or reports the set freed.
func TestFreeWhileServing(t *testing.T) {
	m, _ := writeAndLoad(t, tiny(ArchQwen3))
	kv := newCache(t, m, 4, 64)
	clone, err := m.Weights().Clone()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		toks := testTokens(6, 97)
		for {
			s := kv.NewSequence()
			_, err := m.Run(clone, []Step{{s, toks}}, LastLogits, nil)
			s.Free()
			if err != nil {
				if strings.Contains(err.Error(), "freed") {
					err = nil
				}
				done <- err
				return
			}
		}
	}()
	clone.Free()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// forwardOnly hides the CPU backend's training ops.
type forwardOnly struct{ compute.Backend }

func TestTrainableErrors(t *testing.T) {
	spec := tiny(ArchLlama)
	dir := t.TempDir()
	if err := WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	fm, err := Load(forwardOnly{cpu.New()}, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	if _, err := fm.NewTrainable(nil, TrainOptions{}); err == nil || !strings.Contains(err.Error(), "cannot train") {
		t.Fatalf("NewTrainable on a forward-only backend: %v", err)
	}

	m, _ := writeAndLoad(t, spec)
	for _, tt := range []struct {
		name string
		cfg  LoRAConfig
		want string
	}{
		{"rank 0", LoRAConfig{Rank: 0}, "rank"},
		{"rank too large", LoRAConfig{Rank: 17}, "exceeds"},
		{"unknown target", LoRAConfig{Rank: 2, Targets: []string{"qkv"}}, "unknown LoRA target"},
		{"negative alpha", LoRAConfig{Rank: 2, Alpha: -1}, "alpha"},
		{"merge dtype", LoRAConfig{Rank: 2, MergeDType: compute.I32}, "merge dtype"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if _, err := m.NewTrainable(nil, TrainOptions{LoRA: &cfg}); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}

	tr := newTrainable(t, m, TrainOptions{})
	long := make([]int32, spec.MaxPositions)
	for _, tt := range []struct {
		name    string
		samples []TrainSample
		want    string
	}{
		{"no samples", nil, "no samples"},
		{"empty prompt", []TrainSample{{nil, []int32{1}}}, "non-empty"},
		{"empty response", []TrainSample{{[]int32{1}, nil}}, "non-empty"},
		{"token outside vocab", []TrainSample{{[]int32{1}, []int32{97}}}, "outside the vocabulary"},
		{"too long", []TrainSample{{long, []int32{1, 2}}}, "max_position_embeddings"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tr.Forward(tt.samples); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	// Exactly max_position_embeddings positions fit.
	p, err := tr.Forward([]TrainSample{{long, []int32{1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Backward([][]float32{{1, 2}}); err == nil {
		t.Error("Backward with the wrong number of gradients succeeded")
	}
	if err := p.Backward([][]float32{{1}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Backward([][]float32{{1}}); err == nil {
		t.Error("a second Backward succeeded")
	}
	p.Free()
	p.Free()
	if err := p.Backward([][]float32{{1}}); err == nil {
		t.Error("Backward after Free succeeded")
	}
}

// peakHeap runs fn while sampling the Go heap every millisecond and
// returns the peak of HeapAlloc above its level before fn (after a GC).
func peakHeap(fn func()) uint64 {
	// HeapAlloc counts garbage not yet collected, up to GOGC% of the live
	// heap; a low GOGC during the measurement keeps that small, so the peak
	// measures what fn holds rather than when the collector ran (with the
	// pure-Go kernels, which allocate per product, the peak of one case
	// varied from 13 to 33 MiB between runs at the default GOGC).
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	peak := before
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	fn()
	close(stop)
	<-done
	runtime.ReadMemStats(&ms)
	peak = max(peak, ms.HeapAlloc)
	return peak - before
}

// TestLongSampleMemory trains on a 4096-token prompt with a 16-token
// response over a vocabulary of 8192: the prompt's logits alone would take
// 128 MiB and one head's full attention score matrix 64 MiB; the pass must
// stay far below both.
func TestLongSampleMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("long sample")
	}
	spec := tiny(ArchQwen3)
	spec.Vocab, spec.MaxPositions = 8192, 8192
	m, _ := writeAndLoad(t, spec)
	prompt, response := 4096, 16
	if raceEnabled {
		prompt = 1024 // memory is not measured under the race detector; keep it quick
	}
	samples := []TrainSample{{Prompt: tokensFrom(prompt, spec.Vocab, 1), Response: tokensFrom(response, spec.Vocab, 2)}}
	d := [][]float32{make([]float32, response)}
	for i := range d[0] {
		d[0][i] = -1
	}
	for _, ckpt := range []bool{false, true} {
		tr := newTrainable(t, m, TrainOptions{LoRA: &LoRAConfig{Rank: 4, Seed: 1}, Checkpointing: ckpt})
		var lp []float32
		peak := peakHeap(func() {
			p, err := tr.Forward(samples)
			if err != nil {
				t.Fatal(err)
			}
			lp = p.LogProbs[0]
			if err := p.Backward(d); err != nil {
				t.Fatal(err)
			}
			p.Free()
		})
		tokens := prompt + response - 1
		t.Logf("checkpointing %v: peak heap %.1f MiB for %d tokens (%.1f KiB per token)", ckpt, float64(peak)/(1<<20), tokens, float64(peak)/1024/float64(tokens))
		if len(lp) != response {
			t.Fatalf("%d log-probs", len(lp))
		}
		limit := uint64(32 << 20) // with checkpointing: a layer's activations and scratch
		if !ckpt {
			limit = 64 << 20 // every layer's activations (~32 MiB) and scratch
		}
		if peak > limit && !raceEnabled {
			t.Errorf("peak heap %d MiB, want below %d MiB", peak>>20, limit>>20)
		}
		tr.Free()
	}
}

// TestSaveAndLoadVersion writes a snapshot to safetensors files with
// ReadTensor (as package weights does) and loads it back as a weight set of
// the same model with LoadWeights.
func TestSaveAndLoadVersion(t *testing.T) {
	spec := tiny(ArchQwen3)
	spec.DType = "bfloat16"
	m, _ := writeAndLoad(t, spec)
	tr := newTrainable(t, m, TrainOptions{LoRA: &LoRAConfig{Rank: 2, Seed: 5, MergeDType: compute.BF16}})
	adamSteps(t, tr, trainBatch(spec.Vocab), 2, 1e-1)
	tr.ReleaseActivations()
	snap, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Free()
	var tensors []safetensors.WriteTensor
	for _, p := range snap.Params() {
		vals, err := ReadTensor(m.Backend(), p.T)
		if err != nil {
			t.Fatal(err)
		}
		wt := safetensors.WriteTensor{Name: p.Name, DType: safetensors.F32, Shape: p.T.Shape()}
		if p.T.DType() == compute.BF16 {
			bits := make([]uint16, len(vals))
			for i, v := range vals {
				bits[i] = safetensors.Float32ToBF16(v) // exact: v came from BF16
			}
			wt.DType, wt.Data = safetensors.BF16, safetensors.EncodeUint16(bits)
		} else {
			wt.Data = safetensors.EncodeFloat32(vals)
		}
		tensors = append(tensors, wt)
	}
	dir := t.TempDir()
	if err := safetensors.WriteFile(filepath.Join(dir, safetensors.SingleFile), tensors, nil); err != nil {
		t.Fatal(err)
	}
	loaded, err := m.LoadWeights(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Free()
	toks := testTokens(9, spec.Vocab)
	run := func(w *Weights) []float32 {
		kv := newCache(t, m, 4, 8)
		s := kv.NewSequence()
		defer s.Free()
		out, err := m.Run(w, []Step{{s, toks}}, AllLogits, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if !equalBits(run(snap), run(loaded)) {
		t.Error("the loaded version's logits differ from the snapshot's")
	}
	if equalBits(run(snap), run(nil)) {
		t.Error("the snapshot's logits equal the base's")
	}
	if _, err := m.LoadWeights(t.TempDir()); err == nil {
		t.Error("LoadWeights of an empty directory succeeded")
	}
}

// TestTrainWhileServing trains (full and LoRA) in one goroutine while
// another serves the checkpoint's weights: serving never waits for a whole
// training step and always sees the frozen base.
func TestTrainWhileServing(t *testing.T) {
	spec := tiny(ArchQwen3)
	spec.DType = "bfloat16"
	m, _ := writeAndLoad(t, spec)
	toks := testTokens(10, spec.Vocab)
	kv := newCache(t, m, 4, 32)
	serve := func() []float32 {
		s := kv.NewSequence()
		defer s.Free()
		out, err := m.Forward([]Step{{s, toks}}, AllLogits, nil)
		if err != nil {
			t.Error(err)
		}
		return out
	}
	want := serve()
	for _, opts := range []TrainOptions{{}, {LoRA: &LoRAConfig{Rank: 2, Seed: 1}, Checkpointing: true}} {
		stop, done := make(chan struct{}), make(chan int)
		go func() { // serving: t.Error only, from this goroutine
			served := 0
			defer func() { done <- served }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if got := serve(); !equalBits(got, want) {
					t.Error("serving the base changed while training")
					return
				}
				served++
			}
		}()
		served := 0
		stopServing := sync.OnceFunc(func() { close(stop); served = <-done })
		defer stopServing() // also when training fails
		tr := newTrainable(t, m, opts)
		adamSteps(t, tr, trainBatch(spec.Vocab), 3, 1e-2)
		snap, err := tr.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		snap.Free()
		stopServing()
		t.Logf("%d forward passes served during training", served)
	}
}

// countingSlicer gives way at every boundary, counting.
type countingSlicer struct{ takes, yields int }

func (c *countingSlicer) Train() func() { c.takes++; return func() {} }
func (c *countingSlicer) Yield(release func()) func() {
	c.yields++
	release()
	return c.Train()
}

// A pass with a Slicer holds it a part of a layer at a time: four
// boundaries per layer in the forward pass (the last before the logits)
// and five per layer in the backward pass, and gives the same numbers as
// without one.
func TestTrainableSlices(t *testing.T) {
	spec := tiny(ArchQwen2)
	m, _ := writeAndLoad(t, spec)
	run := func(s Slicer) ([][]float32, *Trainable) {
		tr, err := m.NewTrainable(nil, TrainOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tr.Free)
		tr.SetSlicer(s)
		toks := testTokens(20, spec.Vocab)
		p, err := tr.Forward([]TrainSample{{Prompt: toks[:8], Response: toks[8:]}})
		if err != nil {
			t.Fatal(err)
		}
		d := make([]float32, 12)
		for i := range d {
			d[i] = 1
		}
		if err := p.Backward([][]float32{d}); err != nil {
			t.Fatal(err)
		}
		lp := p.LogProbs
		p.Free()
		return lp, tr
	}
	var c countingSlicer
	with, _ := run(&c)
	without, _ := run(nil)
	if L := spec.Layers; c.yields != 9*L || c.takes != 2+9*L {
		t.Errorf("%d layers: %d boundaries and %d takes; want %d and %d", L, c.yields, c.takes, 9*L, 2+9*L)
	}
	for j := range with[0] {
		if with[0][j] != without[0][j] {
			t.Fatalf("log-prob %d: %v with a slicer, %v without", j, with[0][j], without[0][j])
		}
	}
}
