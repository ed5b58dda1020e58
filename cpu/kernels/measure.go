package kernels

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Measurement helpers: the machine's ceilings, so that benchmarks here and in
// other packages can state their speed as a fraction of what the hardware
// does. Each runs its loop on `threads` goroutines, each locked to an OS
// thread, for about the duration d (at least one pass), and reports the
// aggregate rate over the wall time of the slowest. GB means 10⁹ bytes.

// DefaultBandwidthBytes is the buffer ReadBandwidthGBs and CopyBandwidthGBs
// use when asked for bytes ≤ 0: 2 GiB. The machines this project runs on
// report up to ½ GiB of L3 (and 1 GiB buffers still read partly from it), so
// this is what it takes for the rate to be that of DRAM. Mapping and first
// touching the buffer takes seconds on some virtual machines; it is not timed.
// (On 32-bit platforms it is 1 GiB.)
const DefaultBandwidthBytes = 1 << (30 + ^uint(0)>>63)

// PeakGFLOPS measures the float32 multiply-add peak: a loop of independent
// fused multiply-adds on registers only, with the widest vectors this CPU
// supports (AVX-512, else AVX2; a scalar Go loop elsewhere), whichever
// kernel set is active. One FMA lane counts as 2 floating-point operations.
func PeakGFLOPS(threads int, d time.Duration) float64 {
	loop, lanes := peakLoop()
	return loopGFLOPS(threads, d, loop, 2*float64(lanes))
}

// PeakBF16DotGFLOPS measures the peak of the BF16 dot-product instruction
// that the products at PrecisionBF16 run on (VDPBF16PS, AVX512_BF16): a
// loop of independent ones on registers only, each counting 64
// floating-point operations (16 lanes of two products and two adds). It
// returns 0 where the active kernels do not use the instruction
// (HasBF16Dot).
func PeakBF16DotGFLOPS(threads int, d time.Duration) float64 {
	loop, flops := dotPeakLoop()
	if loop == nil || !HasBF16Dot() {
		return 0
	}
	return loopGFLOPS(threads, d, loop, flops)
}

// loopGFLOPS runs loop on threads goroutines for about d and returns the
// rate of flopsPerIter floating-point operations per iteration.
func loopGFLOPS(threads int, d time.Duration, loop func(n int), flopsPerIter float64) float64 {
	const iters = 1 << 16
	var total float64
	var mu sync.Mutex
	secs := runTimed(threads, d, func(_ int, deadline time.Time) {
		var n float64
		for {
			loop(iters)
			n += iters
			if time.Now().After(deadline) {
				break
			}
		}
		mu.Lock()
		total += n
		mu.Unlock()
	})
	return total * flopsPerIter / secs / 1e9
}

// ReadBandwidthGBs measures memory read bandwidth: each goroutine sums its
// share of a buffer of the given size (DefaultBandwidthBytes when bytes ≤ 0)
// as float32, over and over. The rate counts the bytes read.
func ReadBandwidthGBs(bytes, threads int, d time.Duration) float64 {
	m := NewBandwidthMeter(bytes, threads)
	defer m.Free()
	return m.Read(threads, d)
}

// CopyBandwidthGBs measures memory copy bandwidth: each goroutine copies its
// share of the first half of a buffer of the given size
// (DefaultBandwidthBytes when bytes ≤ 0) to the second half with the Go
// runtime's memmove (which streams large copies past the cache). The rate
// counts both the bytes read and the bytes written: a copy of N bytes is 2N
// (as STREAM's Copy does).
func CopyBandwidthGBs(bytes, threads int, d time.Duration) float64 {
	m := NewBandwidthMeter(bytes, threads)
	defer m.Free()
	return m.Copy(threads, d)
}

// BandwidthMeter holds the buffer of the bandwidth measurements, so that a
// benchmark can measure the bandwidth many times, between rounds of the
// work it compares with it, without mapping and touching the buffer each
// time. It is not safe for concurrent use.
type BandwidthMeter struct {
	buf  []byte
	free func()
}

// NewBandwidthMeter allocates and touches (from threads goroutines) a
// measurement buffer of the given size (DefaultBandwidthBytes when
// bytes ≤ 0). Free releases it.
func NewBandwidthMeter(bytes, threads int) *BandwidthMeter {
	buf, free := bandwidthBuffer(bytes, threads)
	return &BandwidthMeter{buf: buf, free: free}
}

// Free unmaps the buffer; the meter must not be used after.
func (m *BandwidthMeter) Free() {
	if m.free != nil {
		m.free()
		m.free, m.buf = nil, nil
	}
}

// Read is ReadBandwidthGBs over the meter's buffer.
func (m *BandwidthMeter) Read(threads int, d time.Duration) float64 {
	buf := m.buf
	share := len(buf) / max(1, threads) &^ 255
	var total float64
	var mu sync.Mutex
	var sink float32
	secs := runTimed(threads, d, func(i int, deadline time.Time) {
		part := buf[i*share : (i+1)*share]
		var n float64
		var s float32
		for {
			s += readSum(part)
			n += float64(len(part))
			if time.Now().After(deadline) {
				break
			}
		}
		mu.Lock()
		total += n
		sink += s
		mu.Unlock()
	})
	_ = sink
	return total / secs / 1e9
}

// Copy is CopyBandwidthGBs over the meter's buffer.
func (m *BandwidthMeter) Copy(threads int, d time.Duration) float64 {
	buf := m.buf
	half := len(buf) / 2
	share := half / max(1, threads) &^ 255
	var total float64
	var mu sync.Mutex
	secs := runTimed(threads, d, func(i int, deadline time.Time) {
		src := buf[i*share : (i+1)*share]
		dst := buf[half+i*share : half+(i+1)*share]
		var n float64
		for {
			copy(dst, src)
			n += 2 * float64(len(src))
			if time.Now().After(deadline) {
				break
			}
		}
		mu.Lock()
		total += n
		mu.Unlock()
	})
	return total / secs / 1e9
}

// bandwidthBuffer allocates the measurement buffer and touches it from
// every thread, so that page faults are not timed. free releases it.
func bandwidthBuffer(bytes, threads int) (buf []byte, free func()) {
	if bytes <= 0 {
		bytes = DefaultBandwidthBytes
	}
	bytes = max(bytes, 512*max(1, threads)) &^ 255
	buf, free = bigBuffer(bytes)
	f := unsafe.Slice((*float32)(unsafe.Pointer(&buf[0])), len(buf)/4)
	ParallelFor(len(f), 1<<16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			f[i] = 1
		}
	})
	return buf, free
}

// runTimed starts threads goroutines locked to OS threads, releases them
// together, runs body(i, deadline) on each and returns the seconds from the
// release until the last one finished.
func runTimed(threads int, d time.Duration, body func(i int, deadline time.Time)) float64 {
	threads = max(1, threads)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(threads)
	done.Add(threads)
	var t0 time.Time
	for i := 0; i < threads; i++ {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ready.Done()
			<-start
			body(i, t0.Add(d))
		}()
	}
	ready.Wait()
	t0 = time.Now()
	close(start)
	done.Wait()
	return time.Since(t0).Seconds()
}

// fmaLoopGo is the portable peak loop: eight independent multiply-add chains.
const fmaLoopGoLanes = 8

var fmaSink atomic.Uint32

func fmaLoopGo(n int) {
	s := math.Float32frombits(fmaSink.Load())
	a0, a1, a2, a3, a4, a5, a6, a7 := s, s, s, s, s, s, s, s
	x, y := float32(0.999), float32(1e-3)
	for i := 0; i < n; i++ {
		a0 = a0*x + y
		a1 = a1*x + y
		a2 = a2*x + y
		a3 = a3*x + y
		a4 = a4*x + y
		a5 = a5*x + y
		a6 = a6*x + y
		a7 = a7*x + y
	}
	fmaSink.Store(math.Float32bits(a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7))
}

func readSumGo(b []byte) float32 {
	f := unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
	var s0, s1, s2, s3 float32
	for i := 0; i+4 <= len(f); i += 4 {
		s0 += f[i]
		s1 += f[i+1]
		s2 += f[i+2]
		s3 += f[i+3]
	}
	return s0 + s1 + s2 + s3
}
