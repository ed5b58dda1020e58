package kernels

import (
	"sync"
	"unsafe"
)

// Weights are read in long streams at every decode step. Backed by 4 KiB
// pages, such a stream misses the TLB every 4 KiB and the hardware
// prefetchers stop at every page boundary; backed by 2 MiB pages it runs at
// the memory's bandwidth (measured on the development machines: the BF16
// matrix-vector product of 1024-wide rows reads 20-25% faster). Go does not
// ask for huge pages itself, so these allocators do.

// hugeMin is the size from which an allocation is advised to use huge pages.
const hugeMin = 4 << 20

// AllocF32 returns a zeroed []float32 of length n from the Go heap (it is
// garbage collected as usual). On Linux, when it is large, it is advised to
// use transparent huge pages before it is first touched, which makes reading
// it in streams faster, and page faults on first touch far fewer. Use it for
// weights and other large, long-lived buffers.
func AllocF32(n int) []float32 {
	s := make([]float32, n)
	if n*4 >= hugeMin {
		adviseHuge(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), n*4))
	}
	return s
}

// AllocBytes is AllocF32 for bytes (a Q8_0 KV cache).
func AllocBytes(n int) []byte {
	s := make([]byte, n)
	if n >= hugeMin {
		adviseHuge(s)
	}
	return s
}

// AllocBF16 is AllocF32 for BF16 (or any 16-bit) values.
func AllocBF16(n int) []uint16 {
	s := make([]uint16, n)
	if n*2 >= hugeMin {
		adviseHuge(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), n*2))
	}
	return s
}

// slab hands out 64-byte aligned buffers carved one after another from
// shared chunks of slabChunk bytes, each advised to use huge pages: a
// matrix smaller than hugeMin, or than a huge page, gets none of its own
// (madvise applies to whole 2 MiB pages inside the buffer). The matrices of
// a decode step are mostly such (a Qwen3-0.6B layer's Q4_0 matrices are
// 0.6 to 1.7 MB): carved from a slab, its products streamed 54-56 GB/s
// against 45-51 (BenchmarkDecodeProducts with and without, alternating, on
// the development machine). A chunk is Go memory, freed by the collector
// once no buffer carved from it is referenced; a buffer of at least
// slabChunk/4 gets an allocation of its own.
type slab struct {
	mu  sync.Mutex
	buf []byte
	off int
}

// slabChunk is the size of a slab's chunks.
const slabChunk = 32 << 20

// panelSlab holds the panels of quantized matrices (NewQMatrix, PackQuant).
var panelSlab slab

// alloc returns n zero bytes at a 64-byte aligned address.
func (s *slab) alloc(n int) []byte {
	if n >= slabChunk/4 {
		return allocAligned(n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buf == nil || s.off+n > len(s.buf) {
		s.buf, s.off = allocAligned(slabChunk), 0
	}
	out := s.buf[s.off : s.off+n : s.off+n]
	s.off += (n + 63) &^ 63
	return out
}
