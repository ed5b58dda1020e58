package trainer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/weights"
)

// tinySpec is a model small enough to train in milliseconds: two layers,
// grouped-query attention, a vocabulary of 64. InitStd is large enough
// that the random model has peaked, prompt-dependent distributions.
func tinySpec() model.RandomSpec {
	return model.RandomSpec{
		Arch: model.ArchQwen3, Hidden: 32, Intermediate: 64, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 16,
		Vocab: 64, MaxPositions: 128, DType: "float32", Seed: 7, InitStd: 0.2, Tied: true,
	}
}

// loadTiny writes spec into a temporary directory and loads it on the CPU
// backend.
func loadTiny(t *testing.T, spec model.RandomSpec) (*model.Model, string) {
	t.Helper()
	dir := t.TempDir()
	if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, dir
}

// testOptions are fast-learning options for tiny models.
func testOptions(lora bool) Options {
	o := DefaultOptions()
	o.LR, o.WarmupSteps, o.WeightDecay = 3e-3, 0, 0
	o.TargetKL = 0 // the trust region has tests of its own (trust_test.go)
	if lora {
		o.LoRARank, o.LoRAAlpha, o.LR = 4, 8, 1e-2
	}
	return o
}

func newTrainer(t *testing.T, m *model.Model, o Options) *Trainer {
	t.Helper()
	tr, err := New(m, m.Weights(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// randomTokens returns n tokens in [lo, hi).
func randomTokens(r *rand.Rand, n int, lo, hi int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = lo + r.Int32N(hi-lo)
	}
	return out
}

// snapshot publishes the trainer's parameters into a fresh store and
// returns the weights (freed at cleanup).
func snapshot(t *testing.T, tr *Trainer) *model.Weights {
	t.Helper()
	s := weights.NewStore(weights.StoreOptions{})
	t.Cleanup(s.Close)
	v, err := tr.Publish(s)
	if err != nil {
		t.Fatal(err)
	}
	return v.Weights()
}

// scorer computes log-probs with any weight set of a model.
type scorer struct {
	m  *model.Model
	kv *model.KVCache
}

func newScorer(t *testing.T, m *model.Model) *scorer {
	t.Helper()
	kv, err := m.NewKVCache(model.KVCacheOptions{Budget: m.Config.KVBytesPerToken(compute.F32) * 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	return &scorer{m, kv}
}

func (s *scorer) logProbs(t *testing.T, w *model.Weights, reqs []model.ScoreRequest, topK int) []model.Scored {
	t.Helper()
	out, err := s.m.LogProbsWith(w, s.kv, reqs, topK)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sample draws a response of n tokens from w after each prompt
// (temperature 1), decoding all prompts as one batch.
func (s *scorer) sample(t *testing.T, w *model.Weights, r *rand.Rand, prompts [][]int32, n int) [][]int32 {
	t.Helper()
	steps := make([]model.Step, len(prompts))
	for i, p := range prompts {
		steps[i] = model.Step{Seq: s.kv.NewSequence(), Tokens: p}
	}
	defer func() {
		for _, st := range steps {
			st.Seq.Free()
		}
	}()
	out := make([][]int32, len(prompts))
	var logits []float32
	vocab := s.m.Config.VocabSize
	for range n {
		var err error
		if logits, err = s.m.Run(w, steps, model.LastLogits, logits); err != nil {
			t.Fatal(err)
		}
		for i := range steps {
			tok := drawSoftmax(r, logits[i*vocab:(i+1)*vocab])
			out[i] = append(out[i], tok)
			steps[i].Tokens = []int32{tok}
		}
	}
	return out
}

func drawSoftmax(r *rand.Rand, logits []float32) int32 {
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, float64(l))
	}
	var z float64
	for _, l := range logits {
		z += math.Exp(float64(l) - mx)
	}
	u := r.Float64() * z
	for i, l := range logits {
		u -= math.Exp(float64(l) - mx)
		if u <= 0 {
			return int32(i)
		}
	}
	return int32(len(logits) - 1)
}

// paramValues copies every parameter of the trainer to the host.
func paramValues(t *testing.T, tr *Trainer) [][]float32 {
	t.Helper()
	var out [][]float32
	for _, p := range tr.Params() {
		v := make([]float32, len(cpu.Float32s(p.Value)))
		copy(v, cpu.Float32s(p.Value))
		out = append(out, v)
	}
	return out
}
