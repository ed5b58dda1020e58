package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The fork-join pool behind ParallelFor.
//
// Workers are goroutines owned by the package, started lazily (Threads()−1 of
// them) and never stopped. A call to ParallelFor publishes one job, offers it
// to idle workers through a buffered channel without ever blocking, and then
// claims chunks of it itself, one at a time, from an atomic counter; a worker
// that picks the job up claims chunks from the same counter. The caller
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

var pool struct {
	work    chan *job
	mu      sync.Mutex
	workers atomic.Int32
}

func init() { pool.work = make(chan *job, 1024) }

// ensureWorkers starts workers until there are at least n.
func ensureWorkers(n int) {
	if int(pool.workers.Load()) >= n {
		return
	}
	pool.mu.Lock()
	for int(pool.workers.Load()) < n && n <= cap(pool.work) {
		pool.workers.Add(1)
		go worker()
	}
	pool.mu.Unlock()
}

func worker() {
	for {
		var j *job
		select {
		case j = <-pool.work:
		default:
			j = spinThenPark()
		}
		if j.run() {
			j.done <- struct{}{}
		}
	}
}

// spinThenPark polls for a job for spinFor, yielding between polls, then
// blocks until one arrives.
func spinThenPark() *job {
	deadline := time.Now().Add(spinFor)
	for i := 0; ; i++ {
		// Poll the queue's length (a plain load) between receives, and
		// yield the processor only every few polls.
		for range 64 {
			if len(pool.work) > 0 {
				break
			}
		}
		select {
		case j := <-pool.work:
			return j
		default:
		}
		if i&15 == 15 && time.Now().After(deadline) {
			return <-pool.work
		}
		if i&3 == 3 {
			runtime.Gosched()
		}
	}
}

// forChunks runs body(c) for every c in [0, chunks), spread over up to
// Threads() goroutines including the caller, and returns when all are done.
func forChunks(chunks int, body func(c int)) {
	t := min(Threads(), chunks)
	if t <= 1 {
		for c := 0; c < chunks; c++ {
			body(c)
		}
		return
	}
	ensureWorkers(t - 1)
	j := &job{body: body, chunks: int64(chunks), done: make(chan struct{}, 1)}
	j.left.Store(int64(chunks))
offer:
	for i := 0; i < t-1; i++ {
		select {
		case pool.work <- j:
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

// ParallelFor splits [0,n) into contiguous chunks of at least grain items and
// runs fn on them over up to Threads() goroutines, returning when all are done.
//
// The calling goroutine runs chunks itself and the rest go to the package's
// persistent workers, so a call costs about a microsecond. It is safe to call
// from several goroutines at once and from inside another ParallelFor body
// (the inner call then mostly runs inline, on the goroutine that made it).
func ParallelFor(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	chunks := min(Threads(), n/grain)
	if chunks <= 1 {
		fn(0, n)
		return
	}
	// Even split: every chunk has ⌊n/chunks⌋ ≥ grain items or one more.
	forChunks(chunks, func(c int) {
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
func forStealing(t, n, blk int, body func(lo, hi int)) {
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
	forChunks(t, func(i int) {
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
