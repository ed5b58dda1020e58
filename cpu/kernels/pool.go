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
// it parks, yielding the processor on every poll. A decode step calls
// ParallelFor a few hundred times in quick succession; the spinning keeps the
// hand-off to a worker well under a microsecond, where waking a parked
// goroutine costs several.

const spinFor = 50 * time.Microsecond

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
		select {
		case j := <-pool.work:
			return j
		default:
		}
		if i&15 == 15 && time.Now().After(deadline) {
			return <-pool.work
		}
		runtime.Gosched()
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
	if j.left.Load() == 0 {
		return // a worker finished it; its signal lands in the buffered channel
	}
	<-j.done
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
