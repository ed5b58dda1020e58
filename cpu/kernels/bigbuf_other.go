//go:build !linux

package kernels

// bigBuffer allocates n bytes from the Go heap.
func bigBuffer(n int) ([]byte, func()) { return make([]byte, n), func() {} }

// adviseHuge does nothing off Linux.
func adviseHuge([]byte) {}
