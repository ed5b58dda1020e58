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
