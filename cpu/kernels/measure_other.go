//go:build !amd64 || purego

package kernels

func peakLoop() (loop func(n int), lanesPerIter int) { return fmaLoopGo, fmaLoopGoLanes }

func dotPeakLoop() (loop func(n int), flopsPerIter float64) { return nil, 0 }

func readSum(b []byte) float32 { return readSumGo(b) }
