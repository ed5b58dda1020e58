package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/clawrl/clawrl/cpu/kernels"
)

// The host: what the CPU backend runs on, for `clawrl version` and the
// machine and gemm sections of `clawrl bench`.

// Kernels names the CPU kernels in use (generic, avx2, avx512).
func Kernels() string { return kernels.Kernels() }

// AvailableKernels lists the CPU kernels this machine can run.
func AvailableKernels() string { return strings.Join(kernels.AvailableKernels(), ", ") }

// Threads is the serving pool's thread budget.
func Threads() int { return kernels.Threads() }

// SetThreads sets the serving pool's thread budget (n > 0).
func SetThreads(n int) { kernels.SetThreads(n) }

// DefaultBandwidthBytes is the buffer the bandwidth measurements stream
// through by default (well above the L3 cache).
const DefaultBandwidthBytes = kernels.DefaultBandwidthBytes

// Ceilings are the host's limits, measured on the serving pool's threads.
type Ceilings struct {
	Peak       float64 // FP32 FMA GFLOP/s
	Dot        float64 // BF16 dot-product GFLOP/s; 0 where the CPU lacks it
	Read, Copy float64 // memory GB/s
}

// MeasureCeilings measures the host's ceilings for about d each, streaming
// through buffers of bandwidthBytes.
func MeasureCeilings(bandwidthBytes int, d time.Duration) Ceilings {
	th := kernels.Threads()
	return Ceilings{
		Peak: kernels.PeakGFLOPS(th, d),
		Dot:  kernels.PeakBF16DotGFLOPS(th, d),
		Read: kernels.ReadBandwidthGBs(bandwidthBytes, th, d),
		Copy: kernels.CopyBandwidthGBs(bandwidthBytes, th, d),
	}
}

// BandwidthMeter measures copy and read bandwidth on a buffer allocated
// once, in rounds alternating with other measurements.
type BandwidthMeter struct{ m *kernels.BandwidthMeter }

// NewBandwidthMeter allocates a meter's buffers of bytes.
func NewBandwidthMeter(bytes int) BandwidthMeter {
	return BandwidthMeter{kernels.NewBandwidthMeter(bytes, kernels.Threads())}
}

// Copy measures the copy bandwidth for about d, in GB/s.
func (b BandwidthMeter) Copy(d time.Duration) float64 { return b.m.Copy(kernels.Threads(), d) }

// Read measures the read bandwidth for about d, in GB/s.
func (b BandwidthMeter) Read(d time.Duration) float64 { return b.m.Read(kernels.Threads(), d) }

// Free releases the buffers.
func (b BandwidthMeter) Free() { b.m.Free() }

// BenchGEMM measures the host's matrix kernels and calls row with (name,
// value, unit, ceiling) for each: square SGEMMs, a prefill-shaped BF16
// linear layer (also with BF16 products where the CPU has them) and a
// decode-shaped BF16 matrix-vector product at the daemon's precision
// (bf16Precision: model.precision, BF16Precision). The ceiling is "peak",
// "peak:bf16" or "read" (see the bench's ratio column).
func BenchGEMM(bf16Precision bool, row func(...string)) {
	prec := kernels.PrecisionF32
	if bf16Precision {
		prec = kernels.PrecisionBF16
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{512, 1024, 2048} {
		a, b, out := randVec(n*n, r), randVec(n*n, r), make([]float32, n*n)
		t := timeIt(func() { kernels.Sgemm(false, true, n, n, n, 1, a, n, b, n, 0, out, n) })
		gf := 2 * float64(n) * float64(n) * float64(n) / t.Seconds() / 1e9
		row(fmt.Sprintf("sgemm %d³", n), fmt.Sprintf("%.1f", gf), "GFLOP/s", "peak")
	}
	// Prefill-shaped products: 512 tokens through a 1024→3072 layer.
	{
		m, k, n := 512, 1024, 3072
		a, w, out := randVec(m*k, r), randVec(n*k, r), make([]float32, m*n)
		wb := make([]uint16, n*k)
		kernels.F32ToBF16(wb, w)
		t := timeIt(func() { kernels.LinearBF16(out, a, wb, m, n, k, false) })
		gf := 2 * float64(m*n*k) / t.Seconds() / 1e9
		row("linear bf16 512×1024→3072", fmt.Sprintf("%.1f", gf), "GFLOP/s", "peak")
		if kernels.HasBF16Dot() {
			t := timeIt(func() { kernels.LinearBF16Prec(out, a, wb, m, n, k, false, kernels.PrecisionBF16) })
			gf := 2 * float64(m*n*k) / t.Seconds() / 1e9
			row("  same, BF16 products (VDPBF16PS)", fmt.Sprintf("%.1f", gf), "GFLOP/s", "peak:bf16")
		}
	}
	// Decode-shaped: one token through the Qwen3-0.6B LM head (311 MB BF16),
	// at the daemon's precision, from huge-page memory as loaded weights are.
	{
		n, k := 151936, 1024
		a, out := randVec(k, r), make([]float32, n)
		wb := kernels.AllocBF16(n * k)
		for i := range wb {
			wb[i] = kernels.F32ToBF16One(float32(r.NormFloat64()) * 0.02)
		}
		t := timeIt(func() { kernels.LinearBF16Prec(out, a, wb, 1, n, k, false, prec) })
		gbs := float64(2*n*k) / t.Seconds() / 1e9
		row("gemv bf16 1024→151936", fmt.Sprintf("%.1f", gbs), "GB/s", "read")
	}
}

func randVec(n int, r *rand.Rand) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// timeIt runs fn at least twice and for about 300 ms, and returns the mean
// duration of the runs after the first.
func timeIt(fn func()) time.Duration {
	fn() // warm-up: packing buffers, page faults
	var total time.Duration
	n := 0
	for total < 300*time.Millisecond || n < 2 {
		t := time.Now()
		fn()
		total += time.Since(t)
		n++
	}
	return total / time.Duration(n)
}
