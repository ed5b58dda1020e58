package priority

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Serving and training never hold the gate together, and under a constant
// stream of serving steps a training pass that yields at each slice
// boundary alternates with them: every serving step waits for at most one
// slice, and training still advances.
func TestGateAlternates(t *testing.T) {
	var g Gate
	var inServe, inTrain atomic.Int32
	var overlap atomic.Bool
	var log []byte // 's' per serving step, 't' per slice, in order
	var logMu sync.Mutex
	note := func(c byte) {
		logMu.Lock()
		log = append(log, c)
		logMu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a busy scheduler: serving steps back to back
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			rel := g.Serve()
			inServe.Add(1)
			if inTrain.Load() > 0 {
				overlap.Store(true)
			}
			note('s')
			time.Sleep(100 * time.Microsecond)
			inServe.Add(-1)
			rel()
		}
	}()
	const slices = 50
	rel := g.Train()
	for i := range slices {
		if i > 0 {
			rel = g.Yield(rel)
		}
		inTrain.Add(1)
		if inServe.Load() > 0 {
			overlap.Store(true)
		}
		note('t')
		time.Sleep(100 * time.Microsecond)
		inTrain.Add(-1)
	}
	rel()
	close(stop)
	wg.Wait()
	if overlap.Load() {
		t.Error("a serving step and a training slice ran together")
	}
	// Between the first and the last slice, never two slices in a row
	// while serving kept asking, and never more than one serving step
	// between two slices (the scheduler asks again at once: it is owed
	// nothing more).
	logMu.Lock()
	defer logMu.Unlock()
	first, last := -1, -1
	for i, c := range log {
		if c == 't' {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	s := log[first : last+1]
	ts, ss := 0, 0
	for i, c := range s {
		if c == 't' {
			ts++
		} else {
			ss++
		}
		if i > 0 && c == 's' && s[i-1] == 's' {
			t.Fatalf("two serving steps in a row between training slices: %s", s)
		}
	}
	if ts != slices || ss < slices/2 {
		t.Errorf("%d slices and %d serving steps interleaved (%s); want %d slices and about as many steps", ts, ss, s, slices)
	}
	if st := g.Stats(); st.Yields < slices/2 || st.TrainingSlices < slices/2 {
		t.Errorf("stats %+v", st)
	}
}

// With nobody serving, training slices never wait; a nil gate lets
// everything through.
func TestGateIdle(t *testing.T) {
	var g Gate
	rel := g.Train()
	for range 100 {
		rel = g.Yield(rel)
	}
	rel()
	if st := g.Stats(); st.Yields != 0 || st.TrainingSlices != 1 {
		t.Errorf("stats %+v: an idle gate made training yield", st)
	}
	var nilGate *Gate
	nilGate.Serve()()
	nilGate.Yield(nilGate.Train())()
	if nilGate.Stats() != (Stats{}) {
		t.Error("nil gate stats")
	}
}

// A serving step that arrives while a slice runs waits for that slice
// only.
func TestGateServingWaitsOneSlice(t *testing.T) {
	var g Gate
	rel := g.Train()
	got := make(chan struct{})
	go func() {
		r := g.Serve()
		close(got)
		r()
	}()
	select {
	case <-got:
		t.Fatal("a serving step ran during a training slice")
	case <-time.After(20 * time.Millisecond):
	}
	rel = g.Yield(rel) // the boundary: the waiting step goes first
	<-got
	rel()
}
