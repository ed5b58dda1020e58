//go:build !amd64 || purego

package kernels

func peakLoop() (loop func(n int), lanesPerIter int) { return fmaLoopGo, fmaLoopGoLanes }

func readSum(b []byte) float32 { return readSumGo(b) }
