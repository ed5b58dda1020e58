// Package kernels holds the CPU numeric kernels that the cpu backend is built
// from: matrix multiply in several layouts (float32 activations against
// float32 or BF16 weights), matrix-vector products for decode, vector helpers,
// numeric conversions, and a small fork-join pool that spreads work over all
// cores.
//
// The hot paths are written in Go assembly (AVX2+FMA and AVX-512, chosen at
// run time from CPUID) because the Go compiler does not vectorise: a plain Go
// loop reaches a few percent of the machine's FMA peak, a register-blocked
// micro-kernel most of it. Every assembly routine has a pure-Go twin used on
// other CPUs and as the reference in tests.
//
// Layout conventions: all matrices are row-major. A linear layer's weight is
// stored as Hugging Face stores it, [out, in], so y = x·Wᵀ.
package kernels
