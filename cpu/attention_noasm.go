//go:build !amd64 || purego

package cpu

const haveFlashAsm = false

func flashQK512(st, qt *float32, mp int, k, v *float32, offs *int64, nk, hd int, cmax *float32) {
	panic("cpu: flashQK512 without assembly")
}

func flashSoftmax512(st *float32, mp, nk int, lim *int32, mx, l, alpha, cmax *float32) {
	panic("cpu: flashSoftmax512 without assembly")
}

func flashPV512(ot, pt *float32, mp int, v *float32, offs *int64, nk, hd int, alpha *float32) {
	panic("cpu: flashPV512 without assembly")
}

func flashDecQK512(s *float32, lds int, q *float32, hd int, k *float32, offs *int64, nk int) {
	panic("cpu: flashDecQK512 without assembly")
}

func flashDecPV512(o *float32, hd int, p *float32, ldp int, v *float32, offs *int64, nk int, alpha *float32) {
	panic("cpu: flashDecPV512 without assembly")
}

func flashDecQK512BF16(s *float32, lds int, q *float32, hd int, k *uint16, offs *int64, nk int) {
	panic("cpu: flashDecQK512BF16 without assembly")
}

func flashDecPV512BF16(o *float32, hd int, p *float32, ldp int, v *uint16, offs *int64, nk int, alpha *float32) {
	panic("cpu: flashDecPV512BF16 without assembly")
}

func flashDecQK512x2(s *float32, lds int, q *float32, hd int, k *float32, offs *int64, nk int) {
	panic("cpu: flashDecQK512x2 without assembly")
}

func flashDecQK512x2BF16(s *float32, lds int, q *float32, hd int, k *uint16, offs *int64, nk int) {
	panic("cpu: flashDecQK512x2BF16 without assembly")
}

func flashDecPV512x2(o *float32, hd int, p *float32, ldp int, v *float32, offs *int64, nk int, alpha *float32) {
	panic("cpu: flashDecPV512x2 without assembly")
}

func flashDecPV512x2BF16(o *float32, hd int, p *float32, ldp int, v *uint16, offs *int64, nk int, alpha *float32) {
	panic("cpu: flashDecPV512x2BF16 without assembly")
}

func flashQK512BF16(st *float32, qt *uint32, mp int, k, v *uint16, offs *int64, nk, hd int, cmax *float32, scale float32) {
	panic("cpu: flashQK512BF16 without assembly")
}
