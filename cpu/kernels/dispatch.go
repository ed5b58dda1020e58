package kernels

import (
	"fmt"
	"os"
	"sync/atomic"
)

// Kernel sets. Each exported kernel dispatches, on every call, through the
// table of the active set; SetKernels swaps the table atomically.
const (
	KernelsGeneric = "generic" // pure Go, every GOARCH
	KernelsAVX2    = "avx2"    // amd64 with AVX2 and FMA
	KernelsAVXVNNI = "avxvnni" // the avx2 set, its quantized products by AVX-VNNI's VPDPBUSD
	KernelsAVX512  = "avx512"  // amd64 with AVX-512 F, BW, DQ and VL
)

// impls is the dispatch table of one kernel set. Every field is set.
type impls struct {
	name string

	dot   func(x, y []float32) float32
	axpy  func(alpha float32, x, y []float32)
	scale func(alpha float32, x []float32)
	max   func(x []float32) float32
	exp   func(dst, src []float32, shift float32) float32
	silu  func(dst, gate, up []float32)
	mul   func(dst, x, w []float32, s float32)
	bf16  func(dst []float32, src []uint16)
	tobf  func(dst []uint16, src []float32)

	gemm *gemmArch // nil: the pure-Go reference Sgemm
	gemv *gemvArch // nil: pure-Go matrix-vector products

	quant    *quantArch                                                 // nil: the quantized products in Go
	quantRow func(qa *int8, da *float32, sa *int32, x *float32, nb int) // nil: QuantizeRows in Go
}

var active atomic.Pointer[impls]

// sets lists the kernel sets this CPU can run, best last; set by the
// architecture's init.
var sets = map[string]*impls{KernelsGeneric: &genericImpls}

var best = KernelsGeneric

func init() {
	registerArch() // adds the assembly sets this CPU supports
	name := best
	if env := os.Getenv("CLAWRL_KERNELS"); env != "" {
		if _, ok := sets[env]; ok {
			name = env
		} else {
			fmt.Fprintf(os.Stderr, "clawrl/kernels: CLAWRL_KERNELS=%q is not available on this CPU (have %v); using %s\n", env, AvailableKernels(), best)
		}
	}
	active.Store(sets[name])
}

// SetKernels selects the kernel set by name (KernelsGeneric, KernelsAVX2,
// KernelsAVXVNNI or KernelsAVX512). It fails, changing nothing, when this CPU or build cannot
// run that set. It is meant for tests and benchmarks that compare the paths;
// at start the package picks the best set, or the one named by the
// environment variable CLAWRL_KERNELS.
func SetKernels(name string) error {
	s, ok := sets[name]
	if !ok {
		return fmt.Errorf("kernels: set %q is not available on this CPU (have %v)", name, AvailableKernels())
	}
	active.Store(s)
	return nil
}

// Kernels reports the name of the kernel set in use.
func Kernels() string { return active.Load().name }

// AvailableKernels lists the kernel sets this CPU can run, generic first and
// the best last.
func AvailableKernels() []string {
	out := []string{KernelsGeneric}
	for _, n := range []string{KernelsAVX2, KernelsAVXVNNI, KernelsAVX512} {
		if _, ok := sets[n]; ok {
			out = append(out, n)
		}
	}
	return out
}
