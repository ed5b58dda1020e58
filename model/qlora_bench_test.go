package model

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/clawrl/clawrl/compute"
)

// BenchmarkDecodeAdapters measures what serving a LoRA version costs at
// decode, batch 1: over a quantized base, or a BF16 one unmerged, the
// version serves its rank-16 adapters on all seven targets unmerged, so
// every step also reads them (F32, 10.1M values for the Qwen3-0.6B shape:
// 40 MB beside 384-1,192 MB of weights) and runs their products; over a
// BF16 base merged in F32, every step reads the merged F32 matrices,
// twice the base's bytes. The base weights and the
// version alternate in 15 rounds of 32 steps (a shared machine's memory
// bandwidth moves from second to second), and the median of the rounds'
// ratios is reported, and the ratio of each one's best round (other load
// on the host slows a round, never speeds it up):
//
//	go test -run '^$' -bench 'DecodeAdapters' -benchtime 1x ./model/
func BenchmarkDecodeAdapters(b *testing.B) {
	for _, c := range []struct {
		dt       compute.DType // the base's quantization (0: BF16 as stored)
		unmerged bool          // over BF16: the adapters unmerged, not merged in F32
	}{{compute.Q8_0, false}, {compute.Q4_0, false}, {0, false}, {0, true}} {
		dt := c.dt
		name := fmt.Sprintf("qwen3-0.6B-%s-lora16/batch1", dt)
		if dt == 0 {
			name = "qwen3-0.6B-BF16-lora16-merged-F32/batch1"
			if c.unmerged {
				name = "qwen3-0.6B-BF16-lora16-unmerged/batch1"
			}
		}
		b.Run(name, func(b *testing.B) {
			m := loadBench(b, "qwen3-0.6B-bf16", SpecQwen3_0_6B(), false, dt)
			tr, err := m.NewTrainable(nil, TrainOptions{LoRA: &LoRAConfig{Rank: 16, Alpha: 32, Seed: 1, Unmerged: c.unmerged}})
			if err != nil {
				b.Fatal(err)
			}
			snap, err := tr.Snapshot()
			tr.Free()
			if err != nil {
				b.Fatal(err)
			}
			defer snap.Free()
			const prompt, steps, rounds = 32, 32, 15
			kv, err := m.NewKVCache(KVCacheOptions{BlockSize: 16, Budget: m.Config.KVBytesPerToken(benchKV()) * 2 * (prompt + steps + 16), DType: benchKV()})
			if err != nil {
				b.Fatal(err)
			}
			defer kv.Close()
			toks := testTokens(prompt, m.Config.VocabSize)
			sets := []*Weights{m.Weights(), snap}
			seqs := make([]*Sequence, len(sets))
			for i, w := range sets {
				seqs[i] = kv.NewSequence()
				if _, err := m.Run(w, []Step{{seqs[i], toks}}, LastLogits, nil); err != nil {
					b.Fatal(err)
				}
			}
			var logits []float32
			tokps := make([][]float64, len(sets))
			var ratios []float64
			b.ResetTimer()
			for range rounds {
				for i, w := range sets {
					seqs[i].Truncate(prompt)
					start := time.Now()
					for s := range steps {
						if logits, err = m.Run(w, []Step{{seqs[i], []int32{int32(s)}}}, LastLogits, logits); err != nil {
							b.Fatal(err)
						}
					}
					tokps[i] = append(tokps[i], steps/time.Since(start).Seconds())
				}
				ratios = append(ratios, tokps[1][len(tokps[1])-1]/tokps[0][len(tokps[0])-1])
			}
			med := func(x []float64) float64 { x = slices.Clone(x); slices.Sort(x); return x[len(x)/2] }
			b.ReportMetric(med(tokps[0]), "base-tok/s")
			b.ReportMetric(med(tokps[1]), "lora-tok/s")
			b.ReportMetric(med(ratios), "ratio")
			// The best round of each: what each reaches when the machine's
			// other load leaves it alone (a busy host slows rounds, never
			// speeds them up).
			b.ReportMetric(slices.Max(tokps[1])/slices.Max(tokps[0]), "best-ratio")
			b.ReportMetric(0, "ns/op")
			b.Logf("%v base %.0f MB, adapters %.0f MB; ratios per round %.2f", dt, float64(m.Weights().Bytes())/1e6,
				float64(snap.Bytes()-m.Weights().Bytes())/1e6, ratios)
		})
	}
}
