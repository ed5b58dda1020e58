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
//
// # Paths
//
// Sgemm, LinearF32 and LinearBF16 pick a path by shape:
//
//   - few rows of A against a transposed B (a linear layer at decode, or a
//     query against cached keys): a streaming matrix-vector kernel that reads
//     each weight once, widening BF16 in registers, bound by memory
//     bandwidth (gemv.go); LinearMulti runs several such products over the
//     same A as one pass;
//   - few rows of A against B not transposed (attention weights times cached
//     values): a kernel that reads B in place, with no packing (kernn_amd64.s);
//   - everything else: a blocked matrix multiply in the GotoBLAS/BLIS style,
//     packing panels of A and B and running a register-tiled micro-kernel
//     (14×32 with AVX-512, 6×16 with AVX2), bound by the FMA units (gemm.go).
//
// At PrecisionBF16 (LinearMultiPrec, LinearBF16Prec), the products with
// BF16 weights round A to BF16 first; on a CPU with AVX512_BF16 they then
// run, at every m, the matrix-vector kernels' structure with VDPBF16PS
// (gemvdot_amd64.h), which multiplies 32 pairs of BF16 per instruction:
// twice the arithmetic of an FMA, and no widening of the weights. The Go
// assembler does not know the instruction; gen_dpbf16.go writes its
// encodings as bytes (dpbf16_amd64.h).
//
// # Quantized weights
//
// LinearQuant (and LinearMulti with a Q out) multiplies by weights in
// ggml's Q8_0, Q4_0, Q4_1, Q5_1 and IQ4_NL formats and compute's Q6_16, repacked by PackQuant
// into panels of 32 rows (quant.go). A is quantized to int8 blocks of 32 with a float32
// scale each (QuantizeRows), as llama.cpp quantizes its activations, and
// the products are integer: VPDPBUSD (AVX-512 VNNI) multiplies 64 bytes of
// weights by 4 bytes of a row of A broadcast to every lane, and an
// outer-product kernel of up to 7 rows of A × 32 weight rows
// (quant_amd64.s, written by gen_quant.go) scales each block's integer
// sums into float32 sums. The same kernel at one row of A is the decode
// product, which streams the panels as one sequence. Measured on the
// development machines (EPYC, 2 threads, Qwen3-0.6B's shapes, alternating
// rounds against the BF16 kernels at BF16 precision): decode products
// 1.8-2.1× (Q8_0) and 3.3-4.0× (Q4_0) faster, about the ratio of bytes
// read; prefill products (512 rows) 1.6-2.3× faster, both types. Without
// VNNI (the AVX2 set, or AVX-512 without VNNI) a kernel of one row of A
// at a time runs with VPMADDUBSW: Q4_0's nibbles as the unsigned operand,
// Q8_0's weights through the sign trick (their magnitudes against the
// activations given the weights' signs), so that no pair of products
// overflows int16; it is measured correct, not tuned. With AVX-VNNI
// (Intel's client cores since Alder Lake, which have no AVX-512; the
// avxvnni set) the same kernel multiplies with VPDPBUSD on ymm registers,
// as the AVX-512 kernels do on zmm, straight into int32 sums with no sign
// trick (gen_quant.go writes its VEX encoding as bytes: the Go assembler
// would encode the mnemonic as EVEX, which such a CPU faults on); on this
// project's Zen 5 host it ran 512-row products 1.6-1.85× (Q8_0) and
// 1.08-1.19× (Q4_0) as fast as the AVX2 kernel, and decode products
// 1.15× (Q8_0) and up to 1.14× (the other types); not measured on an
// Intel CPU. Other CPUs run the products in Go.
//
// # Kernel sets
//
// The package starts with the best set this CPU supports (KernelsAVX512,
// KernelsAVXVNNI, KernelsAVX2, else KernelsGeneric). The environment
// variable CLAWRL_KERNELS=generic|avx2|avxvnni|avx512, read once at start, or SetKernels
// chooses another, so that tests and benchmarks can exercise every path on
// one machine. Building with the tag purego leaves the assembly out.
//
// # Threads
//
// Kernels spread over the threads of a Pool of persistent workers. The
// package-level functions use Default(), with Threads() goroutines
// (GOMAXPROCS at start; SetThreads changes it); the parallel kernels
// (Sgemm, the Linear family, For) are also methods of a Pool, so that a
// stage of the daemon with a thread budget of its own (a devices group)
// computes on its own workers and never takes another stage's. Every
// exported function is safe for concurrent use, including from inside a
// ParallelFor body.
//
// # Memory
//
// Weights are read in long streams; AllocF32 and AllocBF16 return slices
// advised to use transparent huge pages (Linux), which the matrix-vector
// path reads markedly faster than memory in 4 KiB pages.
//
// # Measuring
//
// PeakGFLOPS, ReadBandwidthGBs and CopyBandwidthGBs measure the machine's
// ceilings, so that benchmarks can state their speed as a fraction of what
// the hardware does.
package kernels
