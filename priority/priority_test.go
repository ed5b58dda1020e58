package priority

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock that only the holder of the gate advances, so the
// durations the gate measures are exactly the work done.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Duration       { return time.Duration(c.ns.Load()) }
func (c *fakeClock) work(d time.Duration)     { c.ns.Add(int64(d)) }
func (c *fakeClock) gate(share float64) *Gate { return newGate(share, c.now) }

// recorder logs who held the gate, in order, and catches overlap.
type recorder struct {
	mu               sync.Mutex
	log              []byte // 's' per serving step, 't' per training slice
	inServe, inTrain atomic.Int32
	overlap          atomic.Bool
}

func (r *recorder) enter(c byte) {
	mine, other := &r.inServe, &r.inTrain
	if c == 't' {
		mine, other = other, mine
	}
	mine.Add(1)
	if other.Load() > 0 {
		r.overlap.Store(true)
	}
	r.mu.Lock()
	r.log = append(r.log, c)
	r.mu.Unlock()
}

func (r *recorder) leave(c byte) {
	if c == 't' {
		r.inTrain.Add(-1)
	} else {
		r.inServe.Add(-1)
	}
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.log)
}

// busyServer runs serving steps back to back until stop closes, each
// doing step of (fake) work, then reports Idle.
func busyServer(g *Gate, clk *fakeClock, rec *recorder, step time.Duration, steps int, stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; steps <= 0 || i < steps; i++ {
			select {
			case <-stop:
				g.Idle()
				return
			default:
			}
			rel := g.Serve()
			rec.enter('s')
			clk.work(step)
			time.Sleep(20 * time.Microsecond) // real time, so the trainer gets to ask
			rec.leave('s')
			rel()
		}
		g.Idle()
	}()
	return done
}

// trainPass runs a training pass of n slices of (fake) work slice each.
func trainPass(g *Gate, clk *fakeClock, rec *recorder, slice time.Duration, n int) {
	rel := g.Train()
	for i := range n {
		if i > 0 {
			rel = g.Yield(rel)
		}
		rec.enter('t')
		clk.work(slice)
		time.Sleep(20 * time.Microsecond)
		rec.leave('t')
	}
	rel()
}

// With share 0, training never runs while serving is busy: a pass that
// asks during a burst of serving steps starts only once the scheduler
// reports Idle, and then runs without yielding.
func TestGateServingFirst(t *testing.T) {
	clk := &fakeClock{}
	g := clk.gate(0)
	rec := &recorder{}
	// The scheduler is busy from its first step.
	rel := g.Serve()
	rel()
	done := busyServer(g, clk, rec, 10*time.Millisecond, 200, nil)
	trainPass(g, clk, rec, 10*time.Millisecond, 20)
	<-done
	log := rec.String()
	if rec.overlap.Load() {
		t.Fatal("a serving step and a training slice ran together")
	}
	want := ""
	for range 200 {
		want += "s"
	}
	for range 20 {
		want += "t"
	}
	if log != want {
		t.Errorf("order %s\nwant every serving step before any training slice", log)
	}
	if st := g.Stats(); st.BusyTraining != 0 || st.Yields != 0 {
		t.Errorf("stats %+v: training ran while serving was busy", st)
	}
}

// With a share s, training under a constant stream of serving steps gets
// about s of the (fake) time, one slice at a time: never two slices in a
// row while serving waits, so a serving step waits for at most one.
func TestGateShare(t *testing.T) {
	for _, tc := range []struct {
		share       float64
		step, slice time.Duration
	}{
		{0.2, 10 * time.Millisecond, 10 * time.Millisecond},
		{0.05, 10 * time.Millisecond, 5 * time.Millisecond},
		{0.5, 4 * time.Millisecond, 4 * time.Millisecond},
	} {
		clk := &fakeClock{}
		g := clk.gate(tc.share)
		rec := &recorder{}
		stop := make(chan struct{})
		rel := g.Serve()
		rel()
		done := busyServer(g, clk, rec, tc.step, 0, stop)
		trainDone := make(chan struct{})
		var slices atomic.Int64
		go func() {
			defer close(trainDone)
			rel := g.Train()
			for {
				select {
				case <-stop:
					rel()
					return
				default:
				}
				rec.enter('t')
				clk.work(tc.slice)
				time.Sleep(20 * time.Microsecond)
				rec.leave('t')
				slices.Add(1)
				rel = g.Yield(rel)
			}
		}()
		for g.Stats().ServingSteps < 600 {
			time.Sleep(time.Millisecond)
		}
		close(stop)
		<-done
		<-trainDone
		if rec.overlap.Load() {
			t.Fatalf("share %v: a serving step and a training slice ran together", tc.share)
		}
		st := g.Stats()
		busyFake := time.Duration(st.ServingSteps)*tc.step + st.BusyTraining
		got := st.BusyTraining.Seconds() / busyFake.Seconds()
		if got < tc.share*0.7 || got > tc.share*1.3 {
			t.Errorf("share %v: training took %.3f of the busy time (%+v)", tc.share, got, st)
		}
		// Before the last serving step, two slices in a row only where the
		// credit allows it (a share of a half with equal work never does).
		log := rec.String()
		last := 0
		for i := range log {
			if log[i] == 's' {
				last = i
			}
		}
		for i := 1; i < last; i++ {
			if log[i] == 't' && log[i-1] == 't' && tc.share < 0.5 {
				t.Errorf("share %v: two training slices in a row while serving was busy: %s", tc.share, log[max(0, i-20):min(len(log), i+20)])
				break
			}
		}
	}
}

// With nobody serving, training slices never wait or yield; a nil gate
// lets everything through.
func TestGateIdle(t *testing.T) {
	g := New(0)
	rel := g.Train()
	for range 100 {
		rel = g.Yield(rel)
	}
	rel()
	if st := g.Stats(); st.Yields != 0 || st.TrainingSlices != 101 || st.BusyTraining != 0 {
		t.Errorf("stats %+v: an idle gate made training yield", st)
	}
	// Busy, then idle again: training is free once more.
	g.Serve()()
	g.Idle()
	rel = g.Train()
	rel = g.Yield(rel)
	rel()
	if st := g.Stats(); st.Yields != 0 {
		t.Errorf("stats %+v: training yielded after Idle", st)
	}
	var nilGate *Gate
	nilGate.Serve()()
	nilGate.Idle()
	nilGate.Yield(nilGate.Train())()
	if nilGate.Stats() != (Stats{}) {
		t.Error("nil gate stats")
	}
}

// A pass holding the gate gives it up at its next boundary once serving
// becomes busy (share 0), and the serving step runs before the pass's
// next slice.
func TestGateYieldsToNewWork(t *testing.T) {
	clk := &fakeClock{}
	g := clk.gate(0)
	rel := g.Train()
	served := make(chan struct{})
	go func() {
		r := g.Serve() // waits for the slice in progress
		close(served)
		r()
		g.Idle()
	}()
	for {
		g.mu.Lock()
		w := g.waitServ
		g.mu.Unlock()
		if w > 0 {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	rel = g.Yield(rel)
	select {
	case <-served:
	default:
		t.Fatal("the pass took its next slice before the waiting serving step")
	}
	rel()
	if st := g.Stats(); st.Yields != 1 {
		t.Errorf("stats %+v, want one yield", st)
	}
}
