package kernels

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// withThreads runs f with SetThreads(n) and restores the old count.
func withThreads(n int, f func()) {
	old := Threads()
	SetThreads(n)
	defer SetThreads(old)
	f()
}

func TestParallelForCoverage(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		withThreads(threads, func() {
			for _, n := range []int{0, 1, 2, 5, 16, 17, 100, 1000} {
				for _, grain := range []int{0, 1, 3, 64} {
					visits := make([]int32, n)
					var mu sync.Mutex
					var chunks [][2]int
					ParallelFor(n, grain, func(lo, hi int) {
						for i := lo; i < hi; i++ {
							atomic.AddInt32(&visits[i], 1)
						}
						mu.Lock()
						chunks = append(chunks, [2]int{lo, hi})
						mu.Unlock()
					})
					for i, v := range visits {
						if v != 1 {
							t.Fatalf("threads=%d n=%d grain=%d: index %d visited %d times", threads, n, grain, i, v)
						}
					}
					if len(chunks) > max(threads, 1) {
						t.Errorf("threads=%d n=%d grain=%d: %d chunks", threads, n, grain, len(chunks))
					}
					short := 0
					for _, c := range chunks {
						if c[1]-c[0] < grain && len(chunks) > 1 {
							short++
						}
					}
					if short > 0 {
						t.Errorf("threads=%d n=%d grain=%d: %d chunks shorter than the grain: %v", threads, n, grain, short, chunks)
					}
				}
			}
		})
	}
}

// noDeadlock fails the test if f has not returned within a generous time.
func noDeadlock(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: no progress after 60s (deadlock?)", what)
	}
}

func TestParallelForNested(t *testing.T) {
	withThreads(4, func() {
		noDeadlock(t, "nested ParallelFor", func() {
			var count atomic.Int64
			ParallelFor(8, 1, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					ParallelFor(8, 1, func(lo, hi int) {
						for j := lo; j < hi; j++ {
							ParallelFor(8, 1, func(lo, hi int) { count.Add(int64(hi - lo)) })
						}
					})
				}
			})
			if got := count.Load(); got != 512 {
				t.Errorf("nested count %d, want 512", got)
			}
		})
		// A kernel inside a ParallelFor body: the model runs per-head
		// attention products in parallel this way.
		noDeadlock(t, "Sgemm inside ParallelFor", func() {
			r := rand.New(rand.NewPCG(13, 13))
			const m, n, k = 40, 70, 90
			a, b := randF32(r, m*k), randF32(r, k*n)
			want, bound := refGemm(false, false, m, n, k, 1, a, k, b, n, 0, nil, n)
			cs := make([][]float32, 6)
			ParallelFor(len(cs), 1, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					cs[i] = make([]float32, m*n)
					Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, cs[i], n)
				}
			})
			for i, c := range cs {
				checkC(t, "nested Sgemm "+string(rune('0'+i)), c, m, n, n, want, bound)
			}
		})
	})
}

// TestConcurrentCallers runs kernels from several goroutines at once, as
// the server's scheduler and the trainer do; run it with -race.
func TestConcurrentCallers(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 14))
	const m, n, k = 33, 130, 200
	a := randF32(r, m*k)
	wh := randBF16(r, n*k)
	wf := widenBF16(wh)
	want, bound := refLinear(m, n, k, a, wf, nil, false)
	want1, bound1 := refLinear(1, n, k, a, wf, nil, false)
	withThreads(3, func() {
		noDeadlock(t, "concurrent callers", func() {
			var wg sync.WaitGroup
			for g := 0; g < 6; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for it := 0; it < 20; it++ {
						c := make([]float32, m*n)
						switch (g + it) % 3 {
						case 0:
							LinearBF16(c, a, wh, m, n, k, false)
							checkC(t, "concurrent LinearBF16", c, m, n, n, want, bound)
						case 1:
							LinearF32(c, a, wf, m, n, k, false)
							checkC(t, "concurrent LinearF32", c, m, n, n, want, bound)
						default:
							LinearBF16(c[:n], a[:k], wh, 1, n, k, false)
							checkC(t, "concurrent decode", c[:n], 1, n, n, want1, bound1)
						}
					}
				}()
			}
			wg.Wait()
		})
	})
}

// TestForStealingCoverage: every item is run exactly once, in blocks of at
// most blk that do not straddle block boundaries, whatever the slots and
// threads; a slot that sleeps leaves its blocks to the others.
func TestForStealingCoverage(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		withThreads(threads, func() {
			for _, n := range []int{1, 2, 5, 16, 17, 100, 1000} {
				for _, blk := range []int{1, 3, 64} {
					for _, slots := range []int{2, 3, 5} {
						visits := make([]int32, n)
						Default().forStealing(slots, n, blk, func(lo, hi int) {
							if lo%blk != 0 || hi-lo > blk || hi > n || lo >= hi {
								t.Errorf("threads=%d n=%d blk=%d slots=%d: block [%d,%d)", threads, n, blk, slots, lo, hi)
							}
							if lo == 0 {
								time.Sleep(time.Millisecond) // the others take this slot's blocks
							}
							for i := lo; i < hi; i++ {
								atomic.AddInt32(&visits[i], 1)
							}
						})
						for i, v := range visits {
							if v != 1 {
								t.Fatalf("threads=%d n=%d blk=%d slots=%d: index %d visited %d times", threads, n, blk, slots, i, v)
							}
						}
					}
				}
			}
		})
	}
}

// A pool never runs more of a call's chunks at once than its budget, and
// two pools' budgets are their own: a 1-thread pool stays on the caller
// while a 3-thread pool spreads, whatever the default pool's count.
func TestPoolBudget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		threads int
	}{{"one", 1}, {"two", 2}, {"three", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPool(tc.threads)
			defer p.Close()
			withThreads(8, func() {
				var running, peak atomic.Int32
				p.For(64, 1, func(lo, hi int) {
					n := running.Add(1)
					for {
						old := peak.Load()
						if n <= old || peak.CompareAndSwap(old, n) {
							break
						}
					}
					time.Sleep(2 * time.Millisecond)
					running.Add(-1)
				})
				if got := int(peak.Load()); got > tc.threads {
					t.Errorf("pool of %d ran %d chunks at once", tc.threads, got)
				}
				if w := p.Workers(); w > tc.threads-1 {
					t.Errorf("pool of %d started %d workers", tc.threads, w)
				}
			})
		})
	}
}

// A product through a pool equals the package-level one, and a closed pool
// still computes it, on the caller alone; its workers exit.
func TestPoolProductsAndClose(t *testing.T) {
	const m, n, k = 37, 129, 96
	r := rand.New(rand.NewPCG(4, 4))
	a := make([]float32, m*k)
	w := make([]float32, n*k)
	for i := range a {
		a[i] = r.Float32() - 0.5
	}
	for i := range w {
		w[i] = r.Float32() - 0.5
	}
	want := make([]float32, m*n)
	LinearF32(want, a, w, m, n, k, false)
	p := NewPool(3)
	for round := range 2 {
		got := make([]float32, m*n)
		p.LinearF32(got, a, w, m, n, k, false)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("round %d: [%d] = %v, want %v", round, i, got[i], want[i])
			}
		}
		p.Close()
		p.Close() // twice is harmless
		if p.Threads() != 1 {
			t.Fatalf("closed pool has %d threads", p.Threads())
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Workers() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers still running after Close", p.Workers())
		}
		time.Sleep(time.Millisecond)
	}
}
