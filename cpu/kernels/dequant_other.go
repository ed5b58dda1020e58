//go:build !amd64 || purego

package kernels

// dequantQ8Asm has no fast path on this build.
func dequantQ8Asm(dst []float32, src []byte, nb int) bool { return false }

// Prefetch does nothing on this build.
func Prefetch(b []byte) {}
