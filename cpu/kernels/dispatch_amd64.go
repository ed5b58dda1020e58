//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

//go:generate go run gen_dpbf16.go
//go:generate go run gen_quant.go

// registerArch adds the assembly kernel sets this CPU supports.
func registerArch() {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		return
	}
	sets[KernelsAVX2] = &avx2Impls
	best = KernelsAVX2
	avx2Impls.quant, avx2Impls.quantRow = &quantAVX2, quantRowAVX2
	x := cpu.X86
	if x.HasAVXVNNI {
		vnni := avx2Impls
		vnni.name, vnni.quant = KernelsAVXVNNI, &quantVNNI
		sets[KernelsAVXVNNI] = &vnni
		best = KernelsAVXVNNI
	}
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512DQ && x.HasAVX512VL {
		if x.HasAVX512BF16 {
			avx512Impls.gemv.dot = gemvDotBF16AVX512
		}
		avx512Impls.quant, avx512Impls.quantRow = &quantAVX2, quantRowAVX512
		if x.HasAVX512VNNI {
			avx512Impls.quant = &quantAVX512
		}
		sets[KernelsAVX512] = &avx512Impls
		best = KernelsAVX512
	}
}

var avx2Impls = impls{
	name:  KernelsAVX2,
	dot:   dotAVX2,
	axpy:  axpyAVX2,
	scale: scaleAVX2,
	max:   maxAVX2,
	exp:   expSubAVX2,
	silu:  siluMulAVX2,
	mul:   mulScaleAVX2,
	bf16:  bf16ToF32AVX2,
	tobf:  f32ToBF16AVX2,
	gemm: &gemmArch{
		mr: 6, nr: 16,
		mc: 516, kc: 256, nc: 2048,
		kernel:    kern6x16,
		packT:     packT,
		packTBF16: packTBF16,
		kernN:     kernN256,
		kernNMaxM: 8,
	},
	gemv: &gemvArch{maxM: 48, mp: 2, vlF32: 8, vlBF16: 16, f32: gemvF32AVX2, bf16: gemvBF16AVX2},
}

var avx512Impls = impls{
	name:  KernelsAVX512,
	dot:   dotAVX512,
	axpy:  axpyAVX512,
	scale: scaleAVX512,
	max:   maxAVX512,
	exp:   expSubAVX512,
	silu:  siluMulAVX512,
	mul:   mulScaleAVX512,
	bf16:  bf16ToF32AVX512,
	tobf:  f32ToBF16AVX512,
	gemm: &gemmArch{
		mr: 14, nr: 32,
		mc: 518, kc: 256, nc: 2048,
		kernel:    kern14x32,
		packT:     packT,
		packTBF16: packTBF16,
		kernN:     kernN512,
		kernNMaxM: 8,
	},
	gemv: &gemvArch{maxM: 64, mp: 4, vlF32: 16, vlBF16: 32, f32: gemvF32AVX512, bf16: gemvBF16AVX512, deint: deinterleave512},
}

//go:noescape
func kern14x32(k int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func kern6x16(k int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func kernN512(m, k int, a0, a1, a2, a3 *float32, aps int, b *float32, ldb int, c *float32, ldc, n int, alpha, beta float32)

//go:noescape
func kernN256(m, k int, a0, a1, a2, a3 *float32, aps int, b *float32, ldb int, c *float32, ldc, n int, alpha, beta float32)

//go:noescape
func packT(dst, src *float32, ld, rows, cols int)

//go:noescape
func packTBF16(dst *float32, src *uint16, ld, rows, cols int)

//go:noescape
func deinterleave512(dst, src *float32, blocks int)

//go:noescape
func gemvBF16AVX512(c *float32, ldc int, a *float32, lda int, w *uint16, ldw int, n, k, m int, alpha, beta float32, pf int)

//go:noescape
func gemvF32AVX512(c *float32, ldc int, a *float32, lda int, w *float32, ldw int, n, k, m int, alpha, beta float32, pf int)

//go:noescape
func gemvBF16AVX2(c *float32, ldc int, a *float32, lda int, w *uint16, ldw int, n, k, m int, alpha, beta float32, pf int)

//go:noescape
func gemvF32AVX2(c *float32, ldc int, a *float32, lda int, w *float32, ldw int, n, k, m int, alpha, beta float32, pf int)

//go:noescape
func gemvDotBF16AVX512(c *float32, ldc int, a *uint16, lda int, w *uint16, ldw int, n, k, m int, alpha, beta float32, pf int)
