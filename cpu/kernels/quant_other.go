//go:build !amd64 || purego

package kernels

// call is never reached: off amd64 (or with the purego tag) no kernel
// table is registered and the quantized products run in Go.
func (k qKernel) call(p *qArgs) { panic("kernels: no quantized kernel " + k.String()) }
