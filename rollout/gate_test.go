package rollout

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clawrl/clawrl/priority"
)

// Serving first, end to end with the real scheduler: with a gate of share
// 0, a training loop that starts once a generation is under way runs no
// slice until the generation has finished (the scheduler reports Idle
// when it runs out of work), and then runs freely.
func TestGateServingFirstScheduler(t *testing.T) {
	m := tinyModel(t)
	gate := priority.New(0)
	s := startScheduler(t, Options{Model: m, Cache: newCache(t, m, 64), MaxBatch: 4, QueueSize: 4, NoPrefixCache: true, Gate: gate})
	ch, err := s.Generate(context.Background(), greedyReq(prompt(20, 1), 40))
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch // the scheduler is busy from its first step
	if !first.HasToken {
		t.Fatalf("first event %+v", first)
	}
	// Each slice notes how many serving steps had run when it began: all of
	// them, if none ran before the generation's last step.
	var minSteps atomic.Int64
	minSteps.Store(1 << 62)
	var after atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // a training pass: slices back to back
		defer close(done)
		rel := gate.Train()
		for {
			if n := gate.Stats().ServingSteps; n < minSteps.Load() {
				minSteps.Store(n)
			}
			after.Add(1)
			time.Sleep(50 * time.Microsecond)
			select {
			case <-stop:
				rel()
				return
			default:
			}
			rel = gate.Yield(rel)
		}
	}()
	c := collect(t, ch)
	if c.finish != FinishLength {
		t.Fatalf("finish %s", c.finish)
	}
	deadline := time.Now().Add(10 * time.Second)
	for after.Load() < 10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	<-done
	st := gate.Stats()
	if n := minSteps.Load(); n != st.ServingSteps {
		t.Errorf("a training slice began after %d serving steps, before the generation's last (%d)", n, st.ServingSteps)
	}
	if n := after.Load(); n < 10 {
		t.Errorf("only %d training slices once the scheduler was idle", n)
	}
	if st.ServingSteps < 39 {
		t.Errorf("gate stats %+v: want a serving step per token", st)
	}
}
