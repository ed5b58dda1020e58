package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
)

// runWith is the logits of toks under weight set w of m, all positions.
func runWith(t *testing.T, m *Model, w *Weights, toks []int32) []float32 {
	t.Helper()
	kv := newCacheOf(t, m, 4, 64, compute.F32)
	seq := kv.NewSequence()
	defer seq.Free()
	out, err := m.Run(w, []Step{{seq, toks}}, AllLogits, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImport moves trained versions from one loaded model (the trainer's)
// to another loaded from the same checkpoint on another backend (a serving
// replica's): they compute exactly what they computed where they were
// made, share what the version did not change with the replica's
// checkpoint set, and outlive the set they were copied from.
func TestImport(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dtype   string
		opts    TrainOptions
		shared  bool // unmerged tensors shared with the checkpoint set
		wantErr string
	}{
		{"lora bf16", "bfloat16", TrainOptions{LoRA: &LoRAConfig{Rank: 4, Seed: 2, Targets: []string{"q", "v", "down"}}}, true, ""},
		{"lora merged to bf16", "bfloat16", TrainOptions{LoRA: &LoRAConfig{Rank: 4, Seed: 2, MergeDType: compute.BF16}}, true, ""},
		{"full f32", "float32", TrainOptions{}, false, ""},
		{"full bf16", "bfloat16", TrainOptions{}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tiny(ArchQwen3)
			spec.DType = tc.dtype
			trainer, dir := writeAndLoad(t, spec)
			replica, err := Load(cpu.New(), dir)
			if err != nil {
				t.Fatal(err)
			}
			defer replica.Close()
			tr := newTrainable(t, trainer, tc.opts)
			adamSteps(t, tr, trainBatch(spec.Vocab), 2, 0.05)
			snap, err := tr.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			toks := testTokens(20, spec.Vocab)
			want := runWith(t, trainer, snap, toks)
			got, err := replica.Import(snap)
			if err != nil {
				t.Fatal(err)
			}
			snap.Free() // the copy does not depend on the source
			if out := runWith(t, replica, got, toks); !slices.Equal(out, want) {
				t.Fatalf("the imported version computes other logits")
			}
			if base := runWith(t, replica, nil, toks); slices.Equal(base, want) {
				t.Fatalf("training changed nothing: the test would not see a bad import")
			}
			// LoRA merges only the adapted matrices: the rest stay the
			// replica's own checkpoint tensors.
			baseT := byName(replica.Config, replica.Weights().w)
			sharedN, copiedN := 0, 0
			for name, tt := range byName(replica.Config, got.w) {
				if tt == baseT[name] {
					sharedN++
				} else {
					copiedN++
					if tc.shared && !strings.Contains(name, "q_proj") && !strings.Contains(name, "v_proj") && !strings.Contains(name, "down_proj") &&
						tc.opts.LoRA.Targets != nil {
						t.Errorf("%s copied, though LoRA did not adapt it", name)
					}
				}
			}
			if tc.shared != (sharedN > 0) || copiedN == 0 {
				t.Errorf("%d tensors shared with the checkpoint set, %d copied", sharedN, copiedN)
			}
			got.Free()
			if out := runWith(t, replica, nil, toks); slices.Equal(out, want) {
				t.Fatal("freeing the import changed the checkpoint set")
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		m, dir := writeAndLoad(t, tiny(ArchQwen3))
		if _, err := m.Import(m.Weights()); err == nil {
			t.Error("import into the same model accepted")
		}
		other, _ := writeAndLoad(t, tiny(ArchLlama))
		if _, err := other.Import(m.Weights()); err == nil || !strings.Contains(err.Error(), "different shapes") {
			t.Errorf("import between shapes: %v", err)
		}
		m2, err := Load(cpu.New(), dir)
		if err != nil {
			t.Fatal(err)
		}
		defer m2.Close()
		w, err := m2.Import(m.Weights())
		if err != nil {
			t.Fatal(err)
		}
		w.Free()
		c, _ := m.Weights().Clone()
		c.Free()
		if _, err := m2.Import(c); err == nil || !strings.Contains(err.Error(), "freed") {
			t.Errorf("import of a freed set: %v", err)
		}
	})
}
