package model

import (
	"testing"
	"time"

	"github.com/clawrl/clawrl/compute"
)

// BenchmarkImport measures what a serving replica's copy of a trained
// version costs (Model.Import, as a GPU replica's mirror runs it, here onto
// a second CPU backend), and the trainer's snapshot that makes the version:
// a LoRA version of the Qwen3-0.6B shape over BF16 weights, whose seven
// adapted projections per layer are merged copies (about 440M values), in
// F32 (rounded to BF16 as they are copied) or in BF16.
//
//	go test -run '^$' -bench Import -benchtime 3x ./model/
func BenchmarkImport(b *testing.B) {
	for _, merge := range []compute.DType{compute.F32, compute.BF16} {
		b.Run("qwen3-0.6B-lora16-merged-"+merge.String(), func(b *testing.B) {
			m := loadBench(b, "qwen3-0.6B-bf16", SpecQwen3_0_6B(), false, 0)
			replica := loadBench(b, "qwen3-0.6B-bf16", SpecQwen3_0_6B(), false, 0)
			tr, err := m.NewTrainable(nil, TrainOptions{LoRA: &LoRAConfig{Rank: 16, Alpha: 32, Seed: 1, MergeDType: merge}})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Free()
			start := time.Now()
			snap, err := tr.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			snapTook := time.Since(start)
			defer snap.Free()
			b.ResetTimer()
			var took time.Duration
			for range b.N {
				start := time.Now()
				w, err := replica.Import(snap, ImportOptions{RoundToBase: true})
				if err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
				w.Free()
			}
			b.ReportMetric(took.Seconds()/float64(b.N), "s/import")
			b.ReportMetric(snapTook.Seconds(), "s/snapshot")
		})
	}
}
