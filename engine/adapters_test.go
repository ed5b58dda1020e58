package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/export"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/safetensors"
	"github.com/clawrl/clawrl/trainer"
	"github.com/clawrl/clawrl/trainer/trainertest"
	"github.com/clawrl/clawrl/weights"
	"github.com/rs/zerolog"
)

// trainedLoRA writes a random BF16 base at base (seed), loads it as
// model.quantize q says, trains LoRA adapters two steps over it, and saves
// the version twice: whole (model.safetensors) under full and as adapters
// only under lean. mergeDT is trainer.lora.merge_dtype.
func trainedLoRA(t *testing.T, base, q, mergeDT string, full, lean string) (whole, adapters *weights.Checkpoint) {
	t.Helper()
	spec := model.RandomSpec{Arch: model.ArchQwen3, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 32,
		Vocab: 96, MaxPositions: 128, DType: "bfloat16", Seed: 11, InitStd: 0.2,
		ExtraFiles: map[string][]byte{"tokenizer.json": []byte(`{"model":{}}`)}}
	if err := model.WriteRandomCheckpoint(base, spec); err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.Model.Quantize, cfg.Trainer.LoRARank = q, 4
	m, _, err := loadHostNoting(cfg, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	o := trainer.DefaultOptions()
	o.LR, o.WarmupSteps, o.WeightDecay = 3e-2, 0, 0
	o.LoRARank, o.LoRAAlpha, o.LoRAMergeDType = 4, 8, mergeDT
	tr, err := trainer.New(m, m.Weights(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	trainertest.Steps(t, tr, 2, 96, 6, 5, 5)
	store := weights.NewStore(weights.StoreOptions{})
	t.Cleanup(store.Close)
	if _, err := tr.Publish(store); err != nil {
		t.Fatal(err)
	}
	cfgJSON, err := os.ReadFile(filepath.Join(base, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	fp, err := BaseFingerprint(base)
	if err != nil {
		t.Fatal(err)
	}
	co := trainer.CheckpointOptions{Root: full, ConfigJSON: cfgJSON, Base: fp, ExtraFiles: spec.ExtraFiles}
	if whole, err = tr.Save(store, co); err != nil {
		t.Fatal(err)
	}
	co.Root, co.Adapters = lean, &weights.AdapterBase{Path: base, Quantize: q}
	if adapters, err = tr.Save(store, co); err != nil {
		t.Fatal(err)
	}
	return whole, adapters
}

// TestAdaptersOnlyCheckpoint: a LoRA checkpoint of adapters only holds no
// model.safetensors, and loading it (base as trained, adapters applied)
// gives bit for bit the tensors the whole checkpoint's model.safetensors
// holds, over a BF16 base, a Q8_0-quantized one (adapters unmerged while
// serving, merged in the file) and with BF16 merges; the model loaded from
// it scores as the whole one does; clawrl export writes the same merged
// weights; a base that is gone or changed is refused, naming it.
func TestAdaptersOnlyCheckpoint(t *testing.T) {
	for _, tc := range []struct{ name, quantize, merge string }{
		{"bf16 base", "none", "float32"},
		{"q8_0 base", "q8_0", "float32"},
		{"bf16 merge", "none", "bfloat16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "base")
			whole, lean := trainedLoRA(t, base, tc.quantize, tc.merge, filepath.Join(dir, "full"), filepath.Join(dir, "lean"))
			if !lean.AdaptersOnly() || lean.Has(weights.ModelFile) || !whole.Has(weights.ModelFile) {
				t.Fatalf("adapters only %v, lists model.safetensors %v; the whole one %v", lean.AdaptersOnly(), lean.Has(weights.ModelFile), whole.Has(weights.ModelFile))
			}
			reopened, err := weights.Open(lean.Dir())
			if err != nil || !reopened.AdaptersOnly() || reopened.Manifest.Adapters.Path != base || !weights.IsAdaptersOnly(lean.Dir()) {
				t.Fatalf("reopening: %v %+v", err, reopened)
			}

			src, err := OpenAdapted(lean)
			if err != nil {
				t.Fatal(err)
			}
			f, err := safetensors.Open(whole.Path(weights.ModelFile))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, spec := range src.Config().TensorSpecs() {
				st, err := src.Tensor(spec.Name)
				if err != nil {
					t.Fatal(err)
				}
				got, _, err := st.Float32()
				if err != nil {
					t.Fatal(err)
				}
				want, err := f.Float32(spec.Name)
				if err != nil {
					t.Fatal(err)
				}
				info, _ := f.Info(spec.Name)
				if (st.BF16 != nil) != (info.DType == safetensors.BF16) {
					t.Errorf("%s: BF16 %v, the whole checkpoint holds %s", spec.Name, st.BF16 != nil, info.DType)
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s[%d] = %v, the whole checkpoint holds %v", spec.Name, i, got[i], want[i])
					}
				}
			}
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}

			// Loaded as a model (serve/generate --model): it scores as the
			// whole checkpoint does.
			score := func(path string) []float32 {
				m, err := loadModel(hostBackend(Defaults()), path)
				if err != nil {
					t.Fatalf("loading %s: %v", path, err)
				}
				defer m.Close()
				kv, err := m.NewKVCache(model.KVCacheOptions{Budget: m.Config.KVBytesPerToken(compute.F32) * 256})
				if err != nil {
					t.Fatal(err)
				}
				defer kv.Close()
				out, err := m.LogProbsBatch(kv, []model.ScoreRequest{{Prompt: []int32{1, 5, 9, 12}, Response: []int32{3, 40, 7, 90}}}, 0)
				if err != nil {
					t.Fatal(err)
				}
				return out[0].LogProbs
			}
			a, b := score(whole.Dir()), score(lean.Dir())
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("log-probs from the adapters %v, from the whole checkpoint %v", b, a)
				}
			}

			// clawrl export: the merged model holds the same tensors.
			out := filepath.Join(dir, "export")
			res, err := export.Model(lean, out, export.Options{Merged: func() (model.Source, error) { return OpenAdapted(lean) }})
			if err != nil {
				t.Fatal(err)
			}
			wantOut := filepath.Join(dir, "export-whole")
			wres, err := export.Model(whole, wantOut, export.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.DType != wres.DType {
				t.Errorf("export torch_dtype %s, of the whole checkpoint %s", res.DType, wres.DType)
			}
			if c := score(out); !equal32(c, a) {
				t.Errorf("the export scores %v, the whole checkpoint %v", c, a)
			}
			if _, err := export.Model(lean, filepath.Join(dir, "no-merge"), export.Options{}); err == nil || !strings.Contains(err.Error(), "adapters only") {
				t.Errorf("export without a way to merge: %v", err)
			}
		})
	}

	t.Run("base changed or gone", func(t *testing.T) {
		dir := t.TempDir()
		base := filepath.Join(dir, "base")
		_, lean := trainedLoRA(t, base, "none", "float32", filepath.Join(dir, "full"), filepath.Join(dir, "lean"))
		spec := model.RandomSpec{Arch: model.ArchQwen3, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 32,
			Vocab: 96, MaxPositions: 128, DType: "bfloat16", Seed: 12, InitStd: 0.2}
		if err := model.WriteRandomCheckpoint(base, spec); err != nil {
			t.Fatal(err)
		}
		if _, err := loadModel(hostBackend(Defaults()), lean.Dir()); err == nil || !strings.Contains(err.Error(), "only to their own base") || !strings.Contains(err.Error(), base) {
			t.Errorf("over a changed base: %v", err)
		}
		if err := os.RemoveAll(base); err != nil {
			t.Fatal(err)
		}
		if _, err := loadModel(hostBackend(Defaults()), lean.Dir()); err == nil || !strings.Contains(err.Error(), "cannot be read") || !strings.Contains(err.Error(), base) {
			t.Errorf("with the base gone: %v", err)
		}
	})
}

func equal32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAdaptersOverBundled: a checkpoint of adapters over the bundled model
// loads where the bundled model's recorded path is gone (another cache,
// another machine): the binary's own copy is the base.
func TestAdaptersOverBundled(t *testing.T) {
	dir, err := ModelDir(Defaults(), "", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	m, err := loadHost(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	o := trainer.DefaultOptions()
	o.LoRARank, o.LoRAAlpha = 2, 4
	tr, err := trainer.New(m, m.Weights(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	store := weights.NewStore(weights.StoreOptions{})
	defer store.Close()
	if _, err := tr.Publish(store); err != nil {
		t.Fatal(err)
	}
	cfgJSON, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(t.TempDir(), "elsewhere", "clawrl-small")
	c, err := tr.Save(store, trainer.CheckpointOptions{Root: t.TempDir(), ConfigJSON: cfgJSON, Base: bundledFingerprint(),
		Adapters: &weights.AdapterBase{Path: gone, Quantize: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	lm, err := loadModel(hostBackend(cfg), c.Dir())
	if err != nil {
		t.Fatalf("adapters over the bundled model, its recorded path gone: %v", err)
	}
	lm.Close()
}
