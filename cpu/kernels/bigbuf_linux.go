//go:build linux

package kernels

import "golang.org/x/sys/unix"

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
