package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The fork-join pool behind ParallelFor.
//
// Workers are goroutines owned by a Pool, started lazily (Threads()−1 of
// them) and stopped by Close (the default pool's never are). A call to
// ParallelFor publishes one job, offers it to idle workers through a
// buffered channel without ever blocking, and then claims chunks of it
// itself, one at a time, from an atomic counter; a worker that picks the
// job up claims chunks from the same counter. The caller
// therefore never waits for a worker to start: if every worker is busy (other
// goroutines are calling kernels at the same time, or this call is nested
// inside another ParallelFor body) it simply runs all the chunks itself, and
// it waits only for chunks that a worker has already claimed and is running.
// Such a worker was idle when it claimed the chunk, so waits form a tree that
// follows the nesting of calls, and there is no deadlock whatever the callers
// do.
//
// A worker that runs out of work keeps polling the channel for spinFor before
// it parks, yielding the processor every few polls (every poll was slower:
// each Gosched goes through the scheduler's locks; ~20M decode ran about
// 10% faster yielding every fourth, in alternating runs). A decode step calls
// ParallelFor a few hundred times in quick succession; the spinning keeps the
// hand-off to a worker well under a microsecond, where waking a parked
// goroutine costs several. Likewise, a caller that has run out of chunks
// spins for up to joinSpin while workers finish theirs before it parks (see
// forChunks).

const spinFor = 50 * time.Microsecond

// joinSpin is how long a caller of ParallelFor that has run out of chunks
// spins waiting for the workers' last chunks before it parks (see
// forChunks). It covers the usual wait at the end of a matrix-vector
// product, at most a block of forStealing (about 10 µs); a longer one is a
// worker that lost its processor, which spinning would only keep from it.
const joinSpin = 50 * time.Microsecond

// nanotime is a monotonic clock in nanoseconds.
func nanotime() int64 { return int64(time.Since(epoch)) }

var epoch = time.Now()

// job is one ParallelFor call: chunks [0, chunks) of body, claimed through next.
type job struct {
	body   func(c int)
	chunks int64
	next   atomic.Int64 // next chunk to claim
	left   atomic.Int64 // chunks not yet finished
	done   chan struct{}
}

// run claims and runs chunks until none are left. It reports whether this
// goroutine finished the job's last chunk.
func (j *job) run() (last bool) {
	for {
		c := j.next.Add(1) - 1
		if c >= j.chunks {
			return false
		}
		j.body(int(c))
		if j.left.Add(-1) == 0 {
			return true
		}
	}
}

// Pool is a set of persistent worker goroutines that kernels spread their
// work over, with a thread budget: a call through the pool runs on at most
// Threads() goroutines, the caller's included. The package-level kernels
// (Sgemm, ParallelFor, ...) use Default(); a stage that owns a share of the
// machine (the daemon's devices groups: serving, judge, trainer) makes its
// own with NewPool and calls the same kernels as methods of it, so that one
// stage's products never take another's threads. A budget bounds how many
// goroutines run kernel work at once; it does not pin them to particular
// cores (the Go scheduler places goroutines on its threads).
//
// A Pool is safe for concurrent use. Its workers start lazily and run until
// Close.
type Pool struct {
	threads atomic.Int32
	work    chan *job
	quit    chan struct{}
	mu      sync.Mutex
	workers atomic.Int32
	closed  atomic.Bool
}

// NewPool returns a pool with a budget of threads goroutines (at least 1).
func NewPool(threads int) *Pool {
	p := &Pool{work: make(chan *job, 1024), quit: make(chan struct{})}
	p.SetThreads(threads)
	return p
}

var defaultPool = NewPool(runtime.GOMAXPROCS(0))

// Default is the pool of the package-level kernels: GOMAXPROCS threads at
// start, SetThreads to change it. It is never closed.
func Default() *Pool { return defaultPool }

// SetThreads sets how many goroutines a call through p may spread over (at
// least 1).
func (p *Pool) SetThreads(n int) { p.threads.Store(int32(max(n, 1))) }

// Threads is p's thread budget; 1 once p is closed.
func (p *Pool) Threads() int {
	if p.closed.Load() {
		return 1
	}
	return int(p.threads.Load())
}

// Workers is how many worker goroutines p has started (at most Threads()−1
// of the largest budget it has had).
func (p *Pool) Workers() int { return int(p.workers.Load()) }

// Close stops p's workers once they finish the chunks they hold. Calls
// through p after Close run on the calling goroutine alone. Close must not
// be called on Default().
func (p *Pool) Close() {
	if p == defaultPool {
		panic("kernels: Close of the default pool")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed.Swap(true) {
		close(p.quit)
	}
}

// ensureWorkers starts workers until there are at least n.
func (p *Pool) ensureWorkers(n int) {
	if int(p.workers.Load()) >= n {
		return
	}
	p.mu.Lock()
	for !p.closed.Load() && int(p.workers.Load()) < n && n <= cap(p.work) {
		p.workers.Add(1)
		go p.worker()
	}
	p.mu.Unlock()
}

func (p *Pool) worker() {
	defer p.workers.Add(-1)
	for {
		var j *job
		select {
		case j = <-p.work:
		default:
			if j = p.spinThenPark(); j == nil {
				return
			}
		}
		if j.run() {
			j.done <- struct{}{}
		}
	}
}

// spinThenPark polls for a job for spinFor, yielding between polls, then
// blocks until one arrives; nil once the pool is closed.
func (p *Pool) spinThenPark() *job {
	deadline := time.Now().Add(spinFor)
	for i := 0; ; i++ {
		// Poll the queue's length (a plain load) between receives, and
		// yield the processor only every few polls.
		for range 64 {
			if len(p.work) > 0 {
				break
			}
		}
		select {
		case j := <-p.work:
			return j
		case <-p.quit:
			return nil
		default:
		}
		if i&15 == 15 && time.Now().After(deadline) {
			select {
			case j := <-p.work:
				return j
			case <-p.quit:
				return nil
			}
		}
		if i&3 == 3 {
			runtime.Gosched()
		}
	}
}

// forChunks runs body(c) for every c in [0, chunks), spread over up to
// p.Threads() goroutines including the caller, and returns when all are done.
func (p *Pool) forChunks(chunks int, body func(c int)) {
	t := min(p.Threads(), chunks)
	if t <= 1 {
		for c := 0; c < chunks; c++ {
			body(c)
		}
		return
	}
	p.ensureWorkers(t - 1)
	j := &job{body: body, chunks: int64(chunks), done: make(chan struct{}, 1)}
	j.left.Store(int64(chunks))
offer:
	for i := 0; i < t-1; i++ {
		select {
		case p.work <- j:
		default:
			break offer
		}
	}
	if j.run() {
		return // this goroutine finished the last chunk
	}
	// Workers are finishing the last chunks, which take about as long as
	// the ones this goroutine ran: spin until they are done before
	// parking. Parking here is what made a decode step slow: the worker's
	// final signal then readies this goroutine on the worker's P, the two
	// goroutines trade processors through OS-level wake-ups (tens of
	// microseconds on a virtual machine), and the worker, no longer on a
	// processor when the next job comes, leaves its chunks to the caller.
	// Measured on the development machines with back-to-back two-chunk
	// jobs of 30 µs chunks: parking here, the caller ran the second chunk
	// itself, after the first, in 2989 of 3000 jobs; spinning, a worker
	// starts it 0.4 µs after the fork at the median (1.1 µs at p90).
	deadline := int64(0)
	for i := 0; j.left.Load() != 0; i++ {
		if i&63 != 63 {
			continue
		}
		now := nanotime()
		if deadline == 0 {
			deadline = now + int64(joinSpin)
		} else if now > deadline {
			<-j.done
			return
		}
	}
	// Done (a worker's signal lands in the buffered channel).
}

// ParallelFor is Default().For.
func ParallelFor(n, grain int, fn func(lo, hi int)) { defaultPool.For(n, grain, fn) }

// For splits [0,n) into contiguous chunks of at least grain items and
// runs fn on them over up to p.Threads() goroutines, returning when all are
// done.
//
// The calling goroutine runs chunks itself and the rest go to the package's
// persistent workers, so a call costs about a microsecond. It is safe to call
// from several goroutines at once and from inside another ParallelFor body
// (the inner call then mostly runs inline, on the goroutine that made it).
func (p *Pool) For(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	chunks := min(p.Threads(), n/grain)
	if chunks <= 1 {
		fn(0, n)
		return
	}
	// Even split: every chunk has ⌊n/chunks⌋ ≥ grain items or one more.
	p.forChunks(chunks, func(c int) {
		fn(c*n/chunks, (c+1)*n/chunks)
	})
}

// forStealing runs body over [0, n) in blocks of at most blk items, on up
// to t goroutines (t ≥ 2). Slot i of t owns a contiguous range of blocks,
// about an equal share, and runs it front to back; a slot that has run out
// of its own takes blocks from the back of another slot's range, until
// none are left.
//
// A decode step is a chain of matrix-vector products, each of which every
// thread must finish before the next can start. With a fixed share each,
// the first thread to finish waits for the last: for the matrices of a
// Qwen3-0.6B layer (4 to 12 MB), two threads streaming from memory
// finished 19 µs apart at the median and over 130 µs apart one time in ten
// (a thread descheduled by the OS), where a product took 170 µs at the
// median. Taking blocks from the back of the late thread's range keeps
// both streaming to within a block of the end, while each still reads its
// own range as one forward stream.
func (p *Pool) forStealing(t, n, blk int, body func(lo, hi int)) {
	nb := (n + blk - 1) / blk
	t = min(t, nb)
	if t <= 1 {
		body(0, n)
		return
	}
	// bounds[i] packs the front (low 32 bits) and back (high 32 bits)
	// blocks of slot i's remaining range [front, back).
	bounds := make([]atomic.Uint64, t)
	for i := range bounds {
		lo, hi := uint64(nb*i/t), uint64(nb*(i+1)/t)
		bounds[i].Store(hi<<32 | lo)
	}
	run := func(b int) { body(b*blk, min(n, (b+1)*blk)) }
	p.forChunks(t, func(i int) {
		own := &bounds[i]
		for {
			v := own.Load()
			lo, hi := v&(1<<32-1), v>>32
			if lo >= hi {
				break
			}
			if own.CompareAndSwap(v, hi<<32|(lo+1)) {
				run(int(lo))
			}
		}
		for j := 1; j < t; j++ {
			other := &bounds[(i+j)%t]
			for {
				v := other.Load()
				lo, hi := v&(1<<32-1), v>>32
				if lo >= hi {
					break
				}
				if other.CompareAndSwap(v, (hi-1)<<32|lo) {
					run(int(hi - 1))
				}
			}
		}
	})
}
