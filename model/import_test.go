package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/safetensors"
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

// loraOnReplica loads a tiny BF16 checkpoint twice (the trainer's model
// and a replica's) and trains LoRA adapters on the first for two steps.
func loraOnReplica(t *testing.T) (RandomSpec, *Model, *Model, *Trainable) {
	t.Helper()
	spec := tiny(ArchQwen3)
	spec.DType = "bfloat16"
	trainer, dir := writeAndLoad(t, spec)
	replica, err := Load(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { replica.Close() })
	tr := newTrainable(t, trainer, TrainOptions{LoRA: &LoRAConfig{Rank: 4, Seed: 2}})
	adamSteps(t, tr, trainBatch(spec.Vocab), 2, 0.05)
	return spec, trainer, replica, tr
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
			got, err := replica.Import(snap, ImportOptions{})
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
	// RoundToBase: an F32 LoRA merge lands as BF16 where the checkpoint
	// is BF16, each weight rounded to nearest even.
	t.Run("round to base", func(t *testing.T) {
		_, trainer, replica, tr := loraOnReplica(t)
		snap, err := tr.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		defer snap.Free()
		got, err := replica.Import(snap, ImportOptions{RoundToBase: true})
		if err != nil {
			t.Fatal(err)
		}
		defer got.Free()
		src, dst := byName(trainer.Config, snap.w), byName(replica.Config, got.w)
		tb := trainer.Backend().(compute.Trainer)
		checked := 0
		for name, st := range src {
			dt := dst[name]
			if st.DType() != compute.F32 || !strings.Contains(name, "proj") {
				continue
			}
			if dt.DType() != compute.BF16 {
				t.Fatalf("%s: %v after RoundToBase, want BF16", name, dt.DType())
			}
			want := make([]float32, compute.Len(st))
			if err := trainer.Backend().Read(want, st); err != nil {
				t.Fatal(err)
			}
			wide, _ := tb.NewTensor(compute.F32, dt.Shape()...)
			tb.Convert(wide, dt)
			gotV := make([]float32, len(want))
			if err := tb.Read(gotV, wide); err != nil {
				t.Fatal(err)
			}
			tb.Free(wide)
			for i := range want {
				if safetensors.BF16ToFloat32(safetensors.Float32ToBF16(want[i])) != gotV[i] {
					t.Fatalf("%s[%d] = %v, want %v rounded to BF16", name, i, gotV[i], want[i])
				}
			}
			checked++
		}
		if checked == 0 {
			t.Fatal("no F32 merged matrix to check")
		}
	})

	// A trainable switched to BF16 merges (SetMergeDType, as the engine
	// does for GPU replicas of a BF16 checkpoint) makes the versions an
	// F32 merge rounded in the copy makes: a replica computes the same
	// logits from either.
	t.Run("merge in bf16 = round to base", func(t *testing.T) {
		spec, _, replica, tr := loraOnReplica(t)
		var logits [2][]float32
		for i, dt := range []compute.DType{compute.F32, compute.BF16} {
			if err := tr.SetMergeDType(dt); err != nil {
				t.Fatal(err)
			}
			snap, err := tr.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			for _, nt := range snap.Params() {
				if strings.HasSuffix(nt.Name, "q_proj.weight") && nt.T.DType() != dt {
					t.Fatalf("merge %v: %s is %v", dt, nt.Name, nt.T.DType())
				}
			}
			got, err := replica.Import(snap, ImportOptions{RoundToBase: true})
			snap.Free()
			if err != nil {
				t.Fatal(err)
			}
			logits[i] = runWith(t, replica, got, testTokens(20, spec.Vocab))
			got.Free()
		}
		if !slices.Equal(logits[0], logits[1]) {
			t.Fatal("a BF16 merge and an F32 merge rounded in the copy compute other logits")
		}
		if err := tr.SetMergeDType(compute.F16); err == nil {
			t.Error("an F16 merge was accepted")
		}
	})
	t.Run("refused", func(t *testing.T) {
		m, dir := writeAndLoad(t, tiny(ArchQwen3))
		if _, err := m.Import(m.Weights(), ImportOptions{}); err == nil {
			t.Error("import into the same model accepted")
		}
		other, _ := writeAndLoad(t, tiny(ArchLlama))
		if _, err := other.Import(m.Weights(), ImportOptions{}); err == nil || !strings.Contains(err.Error(), "different shapes") {
			t.Errorf("import between shapes: %v", err)
		}
		m2, err := Load(cpu.New(), dir)
		if err != nil {
			t.Fatal(err)
		}
		defer m2.Close()
		w, err := m2.Import(m.Weights(), ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.Free()
		c, _ := m.Weights().Clone()
		c.Free()
		if _, err := m2.Import(c, ImportOptions{}); err == nil || !strings.Contains(err.Error(), "freed") {
			t.Errorf("import of a freed set: %v", err)
		}
	})
}
