//go:build amd64 && !purego

package kernels

// peakLoop returns the register-only FMA loop of the widest vectors this CPU
// runs and the float32 lanes one iteration multiplies-adds.
func peakLoop() (loop func(n int), lanesPerIter int) {
	if _, ok := sets[KernelsAVX512]; ok {
		return fmaLoop512, 12 * 16
	}
	if _, ok := sets[KernelsAVX2]; ok {
		return fmaLoop256, 12 * 8
	}
	return fmaLoopGo, fmaLoopGoLanes
}

// dotPeakLoop returns the register-only VDPBF16PS loop and the flops of
// one iteration: 16 instructions of 16 lanes, two products and two adds
// each.
func dotPeakLoop() (loop func(n int), flopsPerIter float64) {
	if _, ok := sets[KernelsAVX512]; ok {
		return dpLoop512, 16 * 16 * 4
	}
	return nil, 0
}

// readSum sums b (a multiple of 256 bytes) as float32.
func readSum(b []byte) float32 {
	if _, ok := sets[KernelsAVX2]; ok {
		return readSum256(&b[0], len(b))
	}
	return readSumGo(b)
}

//go:noescape
func fmaLoop512(n int)

//go:noescape
func dpLoop512(n int)

//go:noescape
func fmaLoop256(n int)

//go:noescape
func readSum256(p *byte, n int) float32
