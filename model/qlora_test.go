package model

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/safetensors"
)

// Tests of LoRA over a quantized base (as QLoRA): the gradient of the
// whole model against the float64 reference with the exactly dequantized
// weights, snapshots that serve the adapters unmerged, the checkpoint
// file's merge, and what stays refused.

// qloraSpec is a model whose every matrix has rows of a multiple of 32
// values, so that all of them quantize.
func qloraSpec(arch string, tied bool) RandomSpec {
	return RandomSpec{
		Arch: arch, Hidden: 64, Intermediate: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
		Vocab: 97, MaxPositions: 64, DType: "float32", Seed: 7, InitStd: 0.15, Tied: tied,
	}
}

// writeQuantized writes a random checkpoint of spec and loads it quantized
// to dt.
func writeQuantized(t *testing.T, spec RandomSpec, dt compute.DType) (*Model, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ck")
	if err := WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	return loadQuantized(t, dir, dt), dir
}

// dequantizedRef is the reference model of the checkpoint in dir with the
// values of m's quantized tensors (dequantized exactly) in place of the
// checkpoint's, and the products with them quantizing their inputs as the
// engine's do.
func dequantizedRef(t *testing.T, m *Model, dir string) *refModel {
	t.Helper()
	ref := loadRef(t, dir)
	ref.quant = map[string]bool{}
	for _, p := range m.Weights().Params() {
		if !p.T.DType().Quantized() {
			continue
		}
		vals, err := ReadTensor(m.Backend(), p.T)
		if err != nil {
			t.Fatal(err)
		}
		w := ref.w[p.Name]
		for i, v := range vals {
			w[i] = float64(v) // in place: a tied lm_head shares the slice
		}
		ref.quant[p.Name] = true
	}
	if m.Config.TieWordEmbeddings {
		ref.quant["lm_head.weight"] = ref.quant["model.embed_tokens.weight"]
	}
	return ref
}

// withAdapters gives ref the Trainable's adapters, reading their values
// from vals (float64 copies by parameter name, which the gradient check
// perturbs).
func withAdapters(ref *refModel, vals map[string][]float64, scale float64) {
	ref.lora = map[string]refAdapter{}
	for name := range vals {
		prefix, ok := strings.CutSuffix(name, ".lora_A.weight")
		if !ok {
			continue
		}
		wname := strings.TrimPrefix(prefix, "base_model.model.") + ".weight"
		ref.lora[wname] = refAdapter{A: vals[name], B: vals[prefix+".lora_B.weight"], scale: scale}
	}
}

// TestQLoRAGradientsMatchReference checks the adapters' gradients over a
// quantized base against central differences of the float64 reference
// whose weights are the exactly dequantized ones, with the forward's
// rounding of each quantized product's input kept fixed at the point
// (recorded, then added as a constant): the derivative the engine's
// backward computes (LinearBackwardInput through the dequantized
// matrices). The log-probs are checked against the reference's quantized
// forward. As a control, the same gradients against the checkpoint's
// unquantized weights are off by far more than the tolerance, so the
// check sees which matrices the backward went through.
func TestQLoRAGradientsMatchReference(t *testing.T) {
	for _, tt := range []struct {
		name string
		arch string
		tied bool
		dt   compute.DType
		// logits in chunks of rows (forward) and tiles of the quantized
		// output matrix (Backward)
		tiled bool
	}{
		{"qwen3 tied q4_0", ArchQwen3, true, compute.Q4_0, false},
		{"qwen3 tied q4_0, logits in tiles", ArchQwen3, true, compute.Q4_0, true},
		{"llama untied q8_0", ArchLlama, false, compute.Q8_0, false},
		{"llama untied q8_0, logits in tiles", ArchLlama, false, compute.Q8_0, true},
		{"llama untied q4_1 (a GGUF file's Q4_K)", ArchLlama, false, compute.Q4_1, false},
		{"qwen3 tied q5_1 (a GGUF file's Q5_K)", ArchQwen3, true, compute.Q5_1, false},
		{"qwen3 tied iq4_nl (a GGUF file's IQ4_NL or IQ4_XS)", ArchQwen3, true, compute.IQ4_NL, false},
		{"llama untied q6_16 (a GGUF file's Q6_K or Q3_K)", ArchLlama, false, compute.Q6_16, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.tiled {
				forceLogitTiles(t)
			}
			spec := qloraSpec(tt.arch, tt.tied)
			m, dir := writeQuantized(t, spec, tt.dt)
			quantized := 0
			for _, p := range m.Weights().Params() {
				if p.T.DType() == tt.dt {
					quantized++
				}
			}
			if quantized < 7*spec.Layers {
				t.Fatalf("%d matrices at %v, want the %d layer matrices at least", quantized, tt.dt, 7*spec.Layers)
			}
			ref := dequantizedRef(t, m, dir)
			samples := trainBatch(spec.Vocab)
			c32, c64 := coefficients(samples, 2)
			const rank, alpha = 3, 6
			tr := newTrainable(t, m, TrainOptions{LoRA: &LoRAConfig{Rank: rank, Alpha: alpha, Seed: 3}})
			r := rand.New(rand.NewPCG(7, 8))
			vals := map[string][]float64{}
			for _, p := range tr.Params() {
				if strings.HasSuffix(p.Name, "lora_B.weight") {
					setRandom(m.b, p.Value, r, 0.2)
				}
				for _, v := range cpu.Float32s(p.Value) {
					vals[p.Name] = append(vals[p.Name], float64(v))
				}
			}
			if len(tr.Params()) != 2*7*spec.Layers {
				t.Fatalf("%d LoRA parameters, want %d", len(tr.Params()), 2*7*spec.Layers)
			}
			withAdapters(ref, vals, alpha/rank)
			lps, grads := gradients(t, tr, samples, c32)

			// The forward is the quantized one: the reference records its
			// rounding here.
			ref.replay = false
			want := ref.logProbs(samples)
			worst := 0.0
			for i := range want {
				for j := range want[i] {
					worst = math.Max(worst, math.Abs(float64(lps[i][j])-want[i][j]))
				}
			}
			t.Logf("log-probs: max |Δ| %.2g against the reference's quantized forward", worst)
			if !(worst < 1e-4) {
				t.Errorf("log-probs differ from the reference's quantized forward by up to %.3g", worst)
			}
			ref.loss(samples, c64) // record the residuals of the point the gradient is at
			ref.replay = true
			checkAgainstReference(t, ref, samples, c64, grads, func(name string, i int, delta float64) {
				vals[name][i] += delta
			})

			// Control: the checkpoint's own (unquantized) weights.
			orig := loadRef(t, dir)
			withAdapters(orig, vals, alpha/rank)
			ge := gradientErrors(orig, samples, c64, grads, func(name string, i int, delta float64) { vals[name][i] += delta })
			worstOrig := 0.0
			for _, e := range ge.tensor {
				worstOrig = math.Max(worstOrig, e)
			}
			t.Logf("control, against the unquantized weights: worst relative error %.2g, directional %.2g", worstOrig, ge.directional)
			if !(worstOrig > 1e-2) {
				t.Errorf("the gradients agree with the unquantized model's within %.2g: the check cannot tell the matrices apart", worstOrig)
			}
		})
	}
}

// TestQLoRASnapshot: over a quantized base, a snapshot shares every
// quantized matrix with the base and serves the adapters unmerged, giving
// the Trainable's own log-probs; it outlives the Trainable, clones, and
// its checkpoint tensors (FileTensors) are the dequantized matrices with
// the adapters merged in F32, which loaded unquantized serve the same
// log-probs up to the rounding of the quantized products' inputs; Import
// into another model merges the adapters.
func TestQLoRASnapshot(t *testing.T) {
	for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_1, compute.Q5_1, compute.IQ4_NL, compute.Q6_16} {
		t.Run(dt.String(), func(t *testing.T) {
			spec := qloraSpec(ArchQwen3, true)
			m, dir := writeQuantized(t, spec, dt)
			samples := trainBatch(spec.Vocab)
			targets := []string{"q", "v", "o", "up", "down"}
			tr, err := m.NewTrainable(nil, TrainOptions{LoRA: &LoRAConfig{Rank: 4, Alpha: 16, Targets: targets, Seed: 4}})
			if err != nil {
				t.Fatal(err)
			}
			losses := adamSteps(t, tr, samples, 4, 1e-2)
			t.Logf("−mean log p over a %v base: %.4f", dt, losses)
			for i := 1; i < len(losses); i++ {
				if !(losses[i] < losses[i-1]) {
					t.Errorf("loss rose at step %d: %.5f → %.5f", i, losses[i-1], losses[i])
				}
			}
			own := forwardLogProbs(t, tr, samples)
			snap, err := tr.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			defer snap.Free()
			tr.Free()
			sharesBase(t, m, snap, len(targets)*spec.Layers)
			if extra := snap.Bytes() - m.Weights().Bytes(); extra <= 0 || extra > int64(spec.Layers*len(targets)*2*4*4*spec.Intermediate) {
				t.Errorf("the snapshot holds %d bytes beyond the base's", extra)
			}

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
				t.Errorf("training moved the served log-probs by at most %.2g", moved)
			}
			// Decode steps of one token each (LinearMulti with the adapters
			// at one row) give what scoring gives.
			decodeMatchesScoring(t, m, snap, kv, samples[0], served[0].LogProbs)
			// A clone serves the same.
			clone, err := snap.Clone()
			if err != nil {
				t.Fatal(err)
			}
			cloned, err := m.LogProbsWith(clone, kv, scoreRequests(samples), 0)
			clone.Free()
			if err != nil {
				t.Fatal(err)
			}
			for i := range served {
				if !equalBits(served[i].LogProbs, cloned[i].LogProbs) {
					t.Errorf("sample %d: the clone serves %v, the snapshot %v", i, cloned[i].LogProbs, served[i].LogProbs)
				}
			}

			// The checkpoint's tensors, written and loaded unquantized.
			for _, ft := range snap.FileTensors() {
				if ft.DType != compute.F32 {
					t.Errorf("%s: written as %v, want F32", ft.Name, ft.DType)
				}
			}
			out := writeFileTensors(t, snap, dir)
			merged := loadQuantized(t, out, 0)
			// Every matrix: the dequantized base plus scale·B·A.
			mp := merged.Weights().Params()
			for i, p := range m.Weights().Params() {
				got, err := ReadTensor(merged.Backend(), mp[i].T)
				if err != nil {
					t.Fatal(err)
				}
				orig, err := ReadTensor(m.Backend(), p.T)
				if err != nil {
					t.Fatal(err)
				}
				adapted := false
				for _, tg := range targets {
					adapted = adapted || strings.Contains(p.Name, "."+tg+"_proj.")
				}
				same := equalBits(got, orig)
				if same == adapted {
					t.Errorf("%s: the file's values equal the dequantized base's = %v, adapted = %v", p.Name, same, adapted)
				}
			}
			lps, err := merged.LogProbsBatch(newCache(t, merged, 4, 16), scoreRequests(samples), 0)
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for i := range lps {
				for j := range lps[i].LogProbs {
					worst = math.Max(worst, math.Abs(float64(lps[i].LogProbs[j]-served[i].LogProbs[j])))
				}
			}
			t.Logf("merged F32 checkpoint vs served (quantized, unmerged): max |Δ log p| %.3g (training moved them by %.3g)", worst, moved)
			if !(worst < moved/4) {
				t.Errorf("the merged checkpoint's log-probs differ from the served ones by %.3g, training moved them by %.3g", worst, moved)
			}

			// Import into a model of the dequantized base (a GPU replica
			// of a quantized GGUF file holds its matrices widened): the
			// adapters arrive merged, the rest is shared with its base,
			// and it scores as the merged checkpoint does, bit for bit.
			deq := loadQuantized(t, writeFileTensors(t, m.Weights(), dir), 0)
			imp, err := deq.Import(snap, ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer imp.Free()
			dp := deq.Weights().Params()
			for i, p := range imp.Params() {
				adapted := false
				for _, tg := range targets {
					adapted = adapted || strings.Contains(p.Name, "."+tg+"_proj.")
				}
				if shared := p.T == dp[i].T; shared == adapted {
					t.Errorf("import: %s shared with the base = %v, adapted = %v", p.Name, shared, adapted)
				}
			}
			got, err := deq.LogProbsWith(imp, newCache(t, deq, 4, 16), scoreRequests(samples), 0)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if !equalBits(got[i].LogProbs, lps[i].LogProbs) {
					t.Errorf("sample %d: the imported set scores %v, the merged checkpoint %v", i, got[i].LogProbs, lps[i].LogProbs)
				}
			}
		})
	}
}

// writeFileTensors writes w's checkpoint tensors (FileTensors) with the
// config.json of dir into a new directory, and returns it.
func writeFileTensors(t *testing.T, w *Weights, dir string) string {
	t.Helper()
	var tensors []safetensors.WriteTensor
	for _, ft := range w.FileTensors() {
		vals, err := ft.Read()
		if err != nil {
			t.Fatal(err)
		}
		if ft.DType != compute.F32 {
			t.Fatalf("%s: %v", ft.Name, ft.DType)
		}
		tensors = append(tensors, safetensors.WriteTensor{Name: ft.Name, DType: safetensors.F32, Shape: ft.Shape, Data: safetensors.EncodeFloat32(vals)})
	}
	out := filepath.Join(t.TempDir(), "ck")
	copyConfig(t, dir, out)
	if err := safetensors.WriteFile(filepath.Join(out, "model.safetensors"), tensors, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// copyConfig makes the directory out holding the config.json of dir.
func copyConfig(t *testing.T, dir, out string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestQLoRARefusals: full fine-tuning over a quantized base is refused and
// says to use LoRA; so is training over a set that serves unmerged
// adapters.
func TestQLoRARefusals(t *testing.T) {
	m, _ := writeQuantized(t, qloraSpec(ArchQwen3, true), compute.Q4_0)
	if _, err := m.NewTrainable(nil, TrainOptions{}); err == nil || !strings.Contains(err.Error(), "full fine-tuning over a quantized base") || !strings.Contains(err.Error(), "LoRA") {
		t.Errorf("full fine-tuning over Q4_0: %v", err)
	}
	tr := newTrainable(t, m, TrainOptions{LoRA: &LoRAConfig{Rank: 2, Seed: 1}})
	snap, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Free()
	if _, err := m.NewTrainable(snap, TrainOptions{LoRA: &LoRAConfig{Rank: 2}}); err == nil || !strings.Contains(err.Error(), "unmerged") {
		t.Errorf("training over a snapshot with unmerged adapters: %v", err)
	}
}

// TestUnmergedOverBF16: with LoRAConfig.Unmerged a snapshot over BF16
// weights shares every matrix with the base and serves the adapters
// unmerged, as over a quantized base: the Trainable's own log-probs, in
// scoring and in decode steps, the same as an F32 merge's up to float32
// rounding, for the base's memory plus the adapters'.
func TestUnmergedOverBF16(t *testing.T) {
	spec := qloraSpec(ArchQwen3, true)
	spec.DType = "bfloat16"
	m, _ := writeAndLoad(t, spec)
	samples := trainBatch(spec.Vocab)
	targets := []string{"q", "k", "v", "o", "gate", "up", "down"}
	tr, err := m.NewTrainable(nil, TrainOptions{LoRA: &LoRAConfig{Rank: 4, Alpha: 16, Targets: targets, Seed: 4, Unmerged: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Free()
	adamSteps(t, tr, samples, 3, 1e-2)
	own := forwardLogProbs(t, tr, samples)
	snap, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Free()
	sharesBase(t, m, snap, len(targets)*spec.Layers)
	kv := newCache(t, m, 4, 16)
	served, err := m.LogProbsWith(snap, kv, scoreRequests(samples), 0)
	if err != nil {
		t.Fatal(err)
	}
	closeLogProbs(t, "unmerged snapshot vs trainable", own, served, 1e-5)
	if err := tr.SetMergeDType(compute.F32); err != nil {
		t.Fatal(err)
	}
	mergedSet, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer mergedSet.Free()
	if mergedSet.Adapters() != 0 {
		t.Errorf("the F32 merge carries %d unmerged adapters", mergedSet.Adapters())
	}
	merged, err := m.LogProbsWith(mergedSet, kv, scoreRequests(samples), 0)
	if err != nil {
		t.Fatal(err)
	}
	mergedLP := make([][]float32, len(merged))
	for i := range merged {
		mergedLP[i] = merged[i].LogProbs
	}
	closeLogProbs(t, "unmerged vs merged in F32", mergedLP, served, 1e-5)
	// Decode steps of one token (LinearMulti with the adapters at one row)
	// give what scoring gives.
	decodeMatchesScoring(t, m, snap, kv, samples[0], served[0].LogProbs)
}

// sharesBase checks that set w of m carries n unmerged adapters and
// shares every tensor with m's checkpoint set.
func sharesBase(t *testing.T, m *Model, w *Weights, n int) {
	t.Helper()
	if got := w.Adapters(); got != n {
		t.Errorf("%d unmerged adapters, want %d", got, n)
	}
	bp := m.Weights().Params()
	for i, p := range w.Params() {
		if p.T != bp[i].T {
			t.Errorf("%s: not shared with the base", p.Name)
		}
	}
}

// decodeMatchesScoring runs sample through set w of m one token per
// decode step and checks each response token's log-prob against scored,
// the log-probs scoring gave it.
func decodeMatchesScoring(t *testing.T, m *Model, w *Weights, kv *KVCache, sample TrainSample, scored []float32) {
	t.Helper()
	seq := kv.NewSequence()
	defer seq.Free()
	toks := append(append([]int32(nil), sample.Prompt...), sample.Response...)
	for i := range len(toks) - 1 {
		logits, err := m.Run(w, []Step{{Seq: seq, Tokens: toks[i : i+1]}}, LastLogits, nil)
		if err != nil {
			t.Fatal(err)
		}
		j := i - (len(sample.Prompt) - 1)
		if j < 0 {
			continue
		}
		mx, z := math.Inf(-1), 0.0
		for _, v := range logits {
			mx = math.Max(mx, float64(v))
		}
		for _, v := range logits {
			z += math.Exp(float64(v) - mx)
		}
		lp := float64(logits[toks[i+1]]) - mx - math.Log(z)
		if d := math.Abs(lp - float64(scored[j])); !(d < 1e-4) {
			t.Errorf("decode step %d: log p %.6f, scoring %.6f", i, lp, scored[j])
		}
	}
}
