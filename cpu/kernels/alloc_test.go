package kernels

import (
	"testing"
	"unsafe"
)

// TestSlab: buffers carved from a slab are zeroed, 64-byte aligned, of the
// length and capacity asked, and never overlap; a large one gets an
// allocation of its own, and a chunk that is full gives way to a new one.
func TestSlab(t *testing.T) {
	var s slab
	var bufs [][]byte
	for _, n := range []int{1, 63, 64, 65, 4096, 1 << 20, 3 << 20, slabChunk / 4, 5 << 20, 7 << 20, 0, 100} {
		b := s.alloc(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("alloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		if n > 0 && uintptr(unsafe.Pointer(&b[0]))%64 != 0 {
			t.Fatalf("alloc(%d) at %p: not 64-byte aligned", n, &b[0])
		}
		for i, v := range b {
			if v != 0 {
				t.Fatalf("alloc(%d)[%d] = %d, not zeroed", n, i, v)
			}
		}
		for i := range b {
			b[i] = byte(len(bufs) + 1)
		}
		bufs = append(bufs, b)
	}
	for i, b := range bufs {
		for j, v := range b {
			if v != byte(i+1) {
				t.Fatalf("buffer %d byte %d = %d: another buffer overlaps it", i, j, v)
			}
		}
	}
}
