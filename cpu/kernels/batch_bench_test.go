package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// BenchmarkLinearBatch runs the linear layers of the ~20M model with BF16
// weights at the row counts of batched decoding (m = 1 … 64), through the
// path LinearBF16 picks ("auto") and through each path forced ("gemv",
// "gemm"), so that the threshold between them (gemvArch.maxM) can be
// checked against this machine; "dot" is "auto" at PrecisionBF16.
func BenchmarkLinearBatch(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, s := range linearShapes {
		if s.n > 10000 || s.name[:3] != "20m" {
			continue
		}
		wh := AllocBF16(s.n * s.k)
		fillBF16(wh)
		for _, m := range []int{1, 8, 16, 24, 32, 48, 64, 128, 512} {
			a, c := randF32(r, m*s.k), make([]float32, m*s.n)
			for _, path := range []string{"auto", "gemv", "gemm", "dot"} {
				b.Run(fmt.Sprintf("%s/m%d/%s", s.name, m, path), func(b *testing.B) {
					im := active.Load()
					if im.gemv == nil {
						b.Skip("no matrix-vector kernels on this CPU")
					}
					old := im.gemv.maxM
					switch path {
					case "gemv":
						im.gemv.maxM = 1 << 20
					case "gemm":
						im.gemv.maxM = 0
					}
					defer func() { im.gemv.maxM = old }()
					prec := PrecisionF32
					if path == "dot" {
						prec = PrecisionBF16
						im.gemv.maxM = 1 << 20
					}
					for i := 0; i < b.N; i++ {
						LinearBF16Prec(c, a, wh, m, s.n, s.k, false, prec)
					}
					reportGFLOPS(b, 2*float64(m*s.n*s.k))
				})
			}
		}
	}
}

// versusRead alternates, for b.N rounds of about 0.2 s each, the read
// bandwidth loop over a buffer of the given size and run (which reads that
// many bytes of weights per call), and reports the median over rounds of
// run's rate over the read loop's. The machines this runs on are shared,
// and their memory bandwidth changes from one second to the next (by up to
// 2× here); only a ratio taken within each round says how close the
// kernels come to the memory.
func versusRead(b *testing.B, bytes float64, run func()) {
	var ratios, rates []float64
	for i := 0; i < b.N; i++ {
		rd := ReadBandwidthGBs(int(bytes), Threads(), 200*time.Millisecond)
		t0 := time.Now()
		n := 0
		for time.Since(t0) < 200*time.Millisecond {
			run()
			n++
		}
		g := bytes * float64(n) / time.Since(t0).Seconds() / 1e9
		rates = append(rates, g)
		ratios = append(ratios, g/rd)
	}
	slices.Sort(ratios)
	slices.Sort(rates)
	b.ReportMetric(100*ratios[len(ratios)/2], "%read-median")
	b.ReportMetric(rates[len(rates)/2], "GB/s-median")
	b.ReportMetric(0, "ns/op")
}

// stepLin is one linear layer of a decode step: BF16 weights n×k.
type stepLin struct {
	w    []uint16
	n, k int
}

// stepLinears allocates the linear layers of a decode step of ms with
// random BF16 weights: per layer q, k and v as one matrix, o, gate and up as
// one, down; then the LM head.
func stepLinears(ms modelShape) []stepLin {
	var lins []stepLin
	add := func(n, k int) {
		w := AllocBF16(n * k)
		fillBF16(w)
		lins = append(lins, stepLin{w, n, k})
	}
	h := ms.hidden
	for range ms.layers {
		add(ms.qDim+2*ms.kvDim, h)
		add(h, ms.qDim)
		add(2*ms.ffn, h)
		add(h, ms.ffn)
	}
	add(ms.vocab, h)
	return lins
}

// BenchmarkDecodeStepVsRead runs the linear layers of Qwen3-0.6B decode
// steps of m rows (BF16; q, k and v as one matrix, gate and up as one; the
// LM head) against the read loop over the same number of bytes, in
// alternating rounds (see versusRead), at both precisions. Use -benchtime
// 10x: b.N is rounds.
func BenchmarkDecodeStepVsRead(b *testing.B) {
	if testing.Short() {
		b.Skip("1.2 GB of weights")
	}
	ms := decodeModels[0]
	lins := stepLinears(ms)
	var bytes float64
	for _, l := range lins {
		bytes += 2 * float64(l.n*l.k)
	}
	h := ms.hidden
	for _, m := range []int{1, 4} {
		for _, prec := range []Precision{PrecisionF32, PrecisionBF16} {
			b.Run(fmt.Sprintf("m%d/%v", m, prec), func(b *testing.B) {
				x := randF32(rand.New(rand.NewPCG(5, 5)), 4*h*m)
				y := make([]float32, ms.vocab*m)
				versusRead(b, bytes, func() {
					for _, l := range lins {
						LinearBF16Prec(y[:l.n*m], x[:l.k*m], l.w, m, l.n, l.k, false, prec)
					}
				})
			})
		}
	}
}

// BenchmarkDecodeStepPrecision runs the linear layers of a Qwen3-0.6B
// batch-1 decode step (as BenchmarkDecodeStepVsRead) at PrecisionF32 and at
// PrecisionBF16 in alternating rounds of 0.3 s and reports the median of
// the rounds' speed ratios, bf16 over f32: on a shared machine only a ratio
// taken within a round compares the two. b.N is rounds (-benchtime 12x).
func BenchmarkDecodeStepPrecision(b *testing.B) {
	if testing.Short() {
		b.Skip("1.2 GB of weights")
	}
	ms := decodeModels[0]
	lins, h := stepLinears(ms), ms.hidden
	x := randF32(rand.New(rand.NewPCG(5, 5)), 4*h)
	y := make([]float32, ms.vocab)
	run := func(p Precision) float64 {
		t0 := time.Now()
		n := 0
		for time.Since(t0) < 300*time.Millisecond {
			for _, l := range lins {
				LinearBF16Prec(y[:l.n], x[:l.k], l.w, 1, l.n, l.k, false, p)
			}
			n++
		}
		return float64(n) / time.Since(t0).Seconds()
	}
	var ratios []float64
	for i := 0; i < b.N; i++ {
		f := run(PrecisionF32)
		ratios = append(ratios, run(PrecisionBF16)/f)
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "bf16/f32-median")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLMHeadVsRead is BenchmarkDecodeStepVsRead at m = 1 for one
// large matrix, Qwen3-0.6B's LM head (311 MB of BF16): no fork-join per
// matrix, only the kernel streaming.
func BenchmarkLMHeadVsRead(b *testing.B) {
	if testing.Short() {
		b.Skip("311 MB of weights")
	}
	n, k := 151936, 1024
	w := AllocBF16(n * k)
	fillBF16(w)
	x := randF32(rand.New(rand.NewPCG(5, 5)), k)
	y := make([]float32, n)
	versusRead(b, 2*float64(n*k), func() { LinearBF16(y, x, w, 1, n, k, false) })
}
