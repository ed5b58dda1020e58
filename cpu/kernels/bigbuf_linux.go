//go:build linux

package kernels

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// bigBuffer maps n bytes of anonymous memory, asking for transparent huge
// pages (first-touch page faults dominate the setup of a large measurement
// buffer otherwise), and returns it with the function that unmaps it.
func bigBuffer(n int) ([]byte, func()) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n), func() {}
	}
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // a hint; fine if refused
	return b, func() { _ = unix.Munmap(b) }
}

// adviseHuge asks the kernel to back the whole 2 MiB pages inside b with
// transparent huge pages. It is a hint: refused, it changes nothing.
func adviseHuge(b []byte) {
	const huge = 2 << 20
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start := (p + huge - 1) &^ (huge - 1)
	end := (p + uintptr(len(b))) &^ (huge - 1)
	if end <= start {
		return
	}
	inner := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), start-p)), end-start)
	_ = unix.Madvise(inner, unix.MADV_HUGEPAGE)
}
