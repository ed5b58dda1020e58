//go:build amd64 && !purego

package kernels

// dequantQ8Asm runs dequantQ8_512 when the AVX-512 kernels are active
// (F16C comes with every AVX-512 CPU); it reports whether it did.
func dequantQ8Asm(dst []float32, src []byte, nb int) bool {
	if nb == 0 || active.Load().name != KernelsAVX512 {
		return nb == 0
	}
	dequantQ8_512(&dst[0], &src[0], nb)
	return true
}

//go:noescape
func dequantQ8_512(dst *float32, src *byte, nb int)

// Prefetch asks for the memory of b to be brought into the caches, line
// by line (PREFETCHT0): the next rows of a Q8_0 KV cache that attention
// will dequantize, which lie in scattered cache blocks the hardware
// prefetchers do not follow.
func Prefetch(b []byte) {
	if len(b) > 0 {
		prefetchLines(&b[0], len(b))
	}
}

//go:noescape
func prefetchLines(p *byte, n int)
