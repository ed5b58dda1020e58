//go:build amd64 && !purego

package cpu

// haveFlashAsm reports whether this build has the AVX-512 kernels of
// attention_amd64.s; they run when kernels.Kernels() is KernelsAVX512.
const haveFlashAsm = true

//go:noescape
func flashQK512(st, qt *float32, mp int, k, v *float32, offs *int64, nk, hd int, cmax *float32)

//go:noescape
func flashSoftmax512(st *float32, mp, nk int, lim *int32, mx, l, alpha, cmax *float32)

//go:noescape
func flashPV512(ot, pt *float32, mp int, v *float32, offs *int64, nk, hd int, alpha *float32)

//go:noescape
func flashDecQK512(s *float32, lds int, q *float32, hd int, k *float32, offs *int64, nk int)

//go:noescape
func flashDecPV512(o *float32, hd int, p *float32, ldp int, v *float32, offs *int64, nk int, alpha *float32)

//go:noescape
func flashDecQK512BF16(s *float32, lds int, q *float32, hd int, k *uint16, offs *int64, nk int)

//go:noescape
func flashDecPV512BF16(o *float32, hd int, p *float32, ldp int, v *uint16, offs *int64, nk int, alpha *float32)

//go:noescape
func flashDecQK512x2(s *float32, lds int, q *float32, hd int, k *float32, offs *int64, nk int)

//go:noescape
func flashDecQK512x2BF16(s *float32, lds int, q *float32, hd int, k *uint16, offs *int64, nk int)

//go:noescape
func flashDecPV512x2(o *float32, hd int, p *float32, ldp int, v *float32, offs *int64, nk int, alpha *float32)

//go:noescape
func flashDecPV512x2BF16(o *float32, hd int, p *float32, ldp int, v *uint16, offs *int64, nk int, alpha *float32)

//go:noescape
func flashQK512BF16(st *float32, qt *uint32, mp int, k, v *uint16, offs *int64, nk, hd int, cmax *float32, scale float32)
