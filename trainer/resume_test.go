package trainer

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/weights"
)

// TestResumeBitIdentical trains N steps straight, and k steps + save +
// (a new process: fresh model, fresh trainer) restore + N−k steps, and
// requires bit-identical parameters and optimizer state; it also checks
// that the checkpoint loads as a model that scores exactly like the
// version published from the restored trainer.
func TestResumeBitIdentical(t *testing.T) {
	const n, k = 4, 2
	for _, tt := range []struct {
		name  string
		dtype string
		lora  bool
		quant compute.DType // the base quantized on load (LoRA over it, as QLoRA)
	}{
		{"full f32", "float32", false, 0},
		{"full bf16", "bfloat16", false, 0},
		{"lora bf16", "bfloat16", true, 0},
		{"lora over q4_0", "bfloat16", true, compute.Q4_0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := tinySpec()
			spec.DType = tt.dtype
			m, dir := loadTiny(t, spec)
			if tt.quant != 0 {
				m = loadQuantized(t, dir, tt.quant)
			}
			o := testOptions(tt.lora)
			o.WarmupSteps, o.WeightDecay = 3, 0.1 // exercise the schedule and decay across the restart
			var batches [][]Sample
			for i := range n {
				batches = append(batches, mixedBatch(uint64(20+i), 5))
			}
			stepAll := func(tr *Trainer, bs [][]Sample) {
				for _, b := range bs {
					if met, err := tr.Step(b); err != nil || !met.Applied {
						t.Fatalf("step: %+v, %v", met, err)
					}
				}
			}
			state := func(tr *Trainer) [][]float32 {
				out := paramValues(t, tr)
				for _, mm := range tr.mom {
					out = append(out, slices.Clone(cpu.Float32s(mm.m)), slices.Clone(cpu.Float32s(mm.v)))
				}
				return out
			}

			straight := newTrainer(t, m, o)
			stepAll(straight, batches)
			want := state(straight)

			// First run: k steps, publish, checkpoint, stop.
			root := t.TempDir()
			cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			first := newTrainer(t, m, o)
			stepAll(first, batches[:k])
			store := weights.NewStore(weights.StoreOptions{})
			v, err := first.Publish(store)
			if err != nil {
				t.Fatal(err)
			}
			reqs := reqsOf(batches[0])
			fromFirst := newScorer(t, m).logProbs(t, v.Weights(), reqs, 0)
			ck, err := first.Save(store, CheckpointOptions{Root: root, Keep: 2, ConfigJSON: cfg, ExtraFiles: map[string][]byte{"tokenizer.json": []byte("{}")}})
			if err != nil {
				t.Fatal(err)
			}
			first.Close()
			store.Close()

			// Second run: the base model again, the newest checkpoint.
			var m2 *model.Model
			if tt.quant != 0 {
				m2 = loadQuantized(t, dir, tt.quant)
			} else {
				m2, err = model.Load(cpu.New(), dir)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m2.Close() })
			}
			got, refused, err := weights.OpenLatest(root)
			if err != nil || len(refused) != 0 || got.Dir() != ck.Dir() {
				t.Fatalf("OpenLatest: %v, %v, %v", got, refused, err)
			}
			second := newTrainer(t, m2, o)
			if err := second.Restore(got); err != nil {
				t.Fatal(err)
			}
			if second.StepCount() != k || second.Version() != v.Number() {
				t.Fatalf("restored step %d version %d, want %d %d", second.StepCount(), second.Version(), k, v.Number())
			}
			store2 := weights.NewStore(weights.StoreOptions{})
			t.Cleanup(store2.Close)
			v2, err := second.Publish(store2)
			if err != nil {
				t.Fatal(err)
			}
			if v2.Number() != v.Number() || v2.Parent() != v.Parent() {
				t.Fatalf("republished as %v, want %v", v2, v)
			}

			// The restored trainer's version serves what the first one
			// published, bit for bit.
			fromVersion := newScorer(t, m2).logProbs(t, v2.Weights(), reqs, 0)
			for i := range reqs {
				if !slices.Equal(fromFirst[i].LogProbs, fromVersion[i].LogProbs) {
					t.Fatalf("request %d: the restored version scores %v, the first %v", i, fromVersion[i].LogProbs, fromFirst[i].LogProbs)
				}
			}
			// The checkpoint is a model: it scores like the published
			// version, bit for bit; over a quantized base it holds the
			// dequantized matrices with the adapters merged in F32, and
			// scores like the version up to the rounding of the inputs of
			// the version's quantized products.
			m3, err := model.Load(cpu.New(), got.Dir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m3.Close() })
			fromFile := newScorer(t, m3).logProbs(t, m3.Weights(), reqs, 0)
			worst := 0.0
			for i := range reqs {
				for j := range fromFile[i].LogProbs {
					worst = math.Max(worst, math.Abs(float64(fromFile[i].LogProbs[j]-fromVersion[i].LogProbs[j])))
				}
				if tt.quant == 0 && !slices.Equal(fromFile[i].LogProbs, fromVersion[i].LogProbs) {
					t.Fatalf("request %d: checkpoint scores %v, published version %v", i, fromFile[i].LogProbs, fromVersion[i].LogProbs)
				}
			}
			if tt.quant != 0 {
				// Training moved the version's log-probs by far more.
				base := newScorer(t, m2).logProbs(t, m2.Weights(), reqs, 0)
				moved := 0.0
				for i := range reqs {
					for j := range base[i].LogProbs {
						moved = math.Max(moved, math.Abs(float64(base[i].LogProbs[j]-fromVersion[i].LogProbs[j])))
					}
				}
				t.Logf("checkpoint (merged, F32) vs the version (quantized, adapters unmerged): max |Δ log p| %.3g; training moved them by %.3g", worst, moved)
				if !(worst < 0.1 && worst < moved/4) {
					t.Errorf("the checkpoint scores the version's tokens off by up to %.3g (training moved them by %.3g)", worst, moved)
				}
			}

			stepAll(second, batches[k:])
			if !equalBits(want, state(second)) {
				d, _ := maxAbsDiff(want, state(second))
				t.Fatalf("resumed run differs from the straight run by up to %g", d)
			}
			if second.StepCount() != straight.StepCount() {
				t.Fatalf("step counts %d and %d", second.StepCount(), straight.StepCount())
			}
		})
	}
}

// TestRestoreRefusesMismatch: a checkpoint saved with other trainable
// parameters (LoRA against full fine-tuning, another rank) is refused and
// the trainer is unchanged; Save refuses a version that is not the
// trainer's current state.
func TestRestoreRefusesMismatch(t *testing.T) {
	m, dir := loadTiny(t, tinySpec())
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	root := t.TempDir()
	full := newTrainer(t, m, testOptions(false))
	store := weights.NewStore(weights.StoreOptions{})
	t.Cleanup(store.Close)
	if _, err := full.Publish(store); err != nil {
		t.Fatal(err)
	}
	if _, err := full.Step(mixedBatch(1, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := full.Save(store, CheckpointOptions{Root: root, ConfigJSON: cfg}); err == nil {
		t.Fatal("Save after a step without Publish succeeded")
	}
	if _, err := full.Publish(store); err != nil {
		t.Fatal(err)
	}
	ck, err := full.Save(store, CheckpointOptions{Root: root, ConfigJSON: cfg})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{testOptions(true), func() Options { o := testOptions(true); o.LoRARank = 2; return o }()} {
		tr := newTrainer(t, m, o)
		before := paramValues(t, tr)
		if err := tr.Restore(ck); err == nil {
			t.Fatalf("restore of a full fine-tuning checkpoint into LoRA rank %d succeeded", o.LoRARank)
		}
		if !equalBits(before, paramValues(t, tr)) || tr.StepCount() != 0 {
			t.Fatal("a refused restore changed the trainer")
		}
	}
}

// loadQuantized loads the checkpoint in dir on the CPU backend with its
// matrices quantized to dt (model.Quantize).
func loadQuantized(t *testing.T, dir string, dt compute.DType) *model.Model {
	t.Helper()
	src, err := model.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if src, err = model.Quantize(src, dt); err != nil {
		t.Fatal(err)
	}
	m, err := model.LoadFrom(cpu.New(), src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
