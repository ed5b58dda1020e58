package trainer

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

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
	}{
		{"full f32", "float32", false},
		{"full bf16", "bfloat16", false},
		{"lora bf16", "bfloat16", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := tinySpec()
			spec.DType = tt.dtype
			m, dir := loadTiny(t, spec)
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
			ck, err := first.Save(store, CheckpointOptions{Root: root, Keep: 2, ConfigJSON: cfg, ExtraFiles: map[string][]byte{"tokenizer.json": []byte("{}")}})
			if err != nil {
				t.Fatal(err)
			}
			first.Close()
			store.Close()

			// Second run: the base model again, the newest checkpoint.
			m2, err := model.Load(cpu.New(), dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m2.Close() })
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

			// The checkpoint is a model: it scores like the published
			// version, bit for bit.
			m3, err := model.Load(cpu.New(), got.Dir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m3.Close() })
			reqs := reqsOf(batches[0])
			fromFile := newScorer(t, m3).logProbs(t, m3.Weights(), reqs, 0)
			fromVersion := newScorer(t, m2).logProbs(t, v2.Weights(), reqs, 0)
			for i := range reqs {
				if !slices.Equal(fromFile[i].LogProbs, fromVersion[i].LogProbs) {
					t.Fatalf("request %d: checkpoint scores %v, published version %v", i, fromFile[i].LogProbs, fromVersion[i].LogProbs)
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
