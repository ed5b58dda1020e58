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

// While a user's request runs, a background request's long prompt is
// computed at most BackgroundPrefill tokens per step (a judge prompt does
// not make one step of users' decoding many times longer); with no limit
// it takes the whole step budget.
func TestBackgroundPrefillBounded(t *testing.T) {
	for _, limit := range []int{0, -1} { // 0: the default, 64
		m := tinyModel(t)
		var s *Scheduler
		var last uint64
		most := uint64(0)
		var userRunning atomic.Bool
		// The scheduler is held before its second pass (the user's prompt
		// done, its decoding begun) while the background request arrives.
		hold := newHoldGate(2, func() {
			st := s.Stats()
			if d := st.PromptTokens - last; userRunning.Load() && d > most {
				most = d
			}
			last = st.PromptTokens
		})
		s = startScheduler(t, Options{Model: m, Cache: newCache(t, m, 64), MaxBatch: 4, QueueSize: 4, StepTokens: 256,
			NoPrefixCache: true, BackgroundPrefill: limit, Gate: hold})
		user, err := s.Generate(context.Background(), greedyReq(prompt(10, 1), 40))
		if err != nil {
			t.Fatal(err)
		}
		hold.wait(t)
		userRunning.Store(true)
		req := greedyReq(prompt(200, 2), 2)
		req.Background = true
		bg, err := s.Generate(context.Background(), req)
		close(hold.release)
		if err != nil {
			t.Fatal(err)
		}
		if c := collect(t, bg); c.finish != FinishLength {
			t.Fatalf("background finish %s", c.finish)
		}
		if c := collect(t, user); c.finish != FinishLength {
			t.Fatalf("user finish %s", c.finish)
		}
		switch {
		case limit == 0 && most > 64:
			t.Errorf("default limit: a step computed %d background prompt tokens beside a user's request", most)
		case limit == -1 && most <= 64:
			t.Errorf("no limit: the most background prompt tokens in a step was %d, want the step budget", most)
		}
	}
}

// While a user's request decodes, at most BackgroundRows background
// sequences advance per step, taking turns: all of them finish, and no
// step generates more than the user's token plus BackgroundRows.
func TestBackgroundRowsBounded(t *testing.T) {
	for _, limit := range []int{0, -1} { // 0: the default, 2
		m := tinyModel(t)
		var s *Scheduler
		var last, lastPrompt uint64
		most := uint64(0)
		var userRunning atomic.Bool
		// The scheduler is held before its second pass (the user's prompt
		// done, its decoding begun) while the background requests arrive.
		hold := newHoldGate(2, func() {
			st := s.Stats()
			// Decode-only steps (a prompt's last chunk also yields a token).
			if d := st.GeneratedTokens - last; userRunning.Load() && st.PromptTokens == lastPrompt && d > most {
				most = d
			}
			last, lastPrompt = st.GeneratedTokens, st.PromptTokens
		})
		s = startScheduler(t, Options{Model: m, Cache: newCache(t, m, 128), MaxBatch: 8, MaxBackground: 6, QueueSize: 8, BackgroundQueue: 8,
			NoPrefixCache: true, BackgroundKV: 1, BackgroundRows: limit, Gate: hold})
		// The user's request outlasts the background ones: 100 tokens
		// against 5 × 12 at 2 a step.
		user, err := s.Generate(context.Background(), greedyReq(prompt(10, 1), 100))
		if err != nil {
			t.Fatal(err)
		}
		hold.wait(t)
		userRunning.Store(true)
		bgs := startBackground(t, s, 5, 8, 10, 12)
		close(hold.release)
		for i, ch := range bgs {
			if c := collect(t, ch); c.finish != FinishLength || len(c.tokens) != 12 {
				t.Fatalf("background %d: finish %s after %d tokens", i, c.finish, len(c.tokens))
			}
		}
		userRunning.Store(false)
		collect(t, user)
		switch {
		case limit == 0 && most > 3:
			t.Errorf("default limit: a step generated %d tokens beside one user (want at most 1 + 2)", most)
		case limit == -1 && most <= 3:
			t.Errorf("no limit: at most %d tokens per step with 5 background sequences", most)
		}
	}
}
