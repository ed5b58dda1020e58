package rollout

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/clawrl/clawrl/weights"
)

// A frozen generation runs on the checkpoint's weights whatever version is
// current: the judge's verdicts do not move with the policy it trains.
func TestFrozenIgnoresPublishedVersions(t *testing.T) {
	m := tinyModel(t)
	w2 := otherWeights(t, m, 77)
	store := weights.NewStore(weights.StoreOptions{})
	t.Cleanup(store.Close)
	v1, _ := store.Publish(m.Weights(), 0, weights.Meta{})
	s := startScheduler(t, Options{Model: m, Cache: newCache(t, m, 256), Versions: store})
	p := prompt(10, 7)
	run := func(frozen bool) collected {
		req := greedyReq(p, 8)
		req.Frozen, req.Background = frozen, frozen
		ch, err := s.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return collect(t, ch)
	}
	before := run(true)
	if _, err := store.Publish(w2, v1.Number(), weights.Meta{Step: 1}); err != nil {
		t.Fatal(err)
	}
	after, policy := run(true), run(false)
	base := greedyRefOn(t, m, m.Weights(), p, 8)
	if !slices.Equal(before.tokens, base) || !slices.Equal(after.tokens, base) {
		t.Errorf("frozen generations %v / %v, want the checkpoint's %v both times", before.tokens, after.tokens, base)
	}
	if want := greedyRefOn(t, m, w2, p, 8); !slices.Equal(policy.tokens, want) {
		t.Errorf("the policy generation %v, want the new version's %v", policy.tokens, want)
	}
	for _, ev := range after.events {
		if ev.Version != 0 {
			t.Fatalf("a frozen generation reports version %d, want 0 (the checkpoint)", ev.Version)
		}
	}
}

// Background requests have their own queue, so a full one never refuses a
// foreground request, and they give their batch slots up to foreground
// requests; they still all finish.
func TestBackgroundYields(t *testing.T) {
	m := tinyModel(t)
	// Held at the first pass with both slots the background's.
	var s *Scheduler
	hold := newHoldGateWhen(func(int) bool { return s.Stats().Background >= 2 }, nil)
	s = startScheduler(t, Options{Model: m, Cache: newCache(t, m, 256), MaxBatch: 2, QueueSize: 4,
		MaxBackground: 2, BackgroundQueue: 3, Gate: hold})
	ctx := context.Background()
	var bg []<-chan Event
	var bgPrompt []int
	full := false
	for i := range 8 {
		req := greedyReq(prompt(6, i), 60)
		req.Background = true
		ch, err := s.Generate(ctx, req)
		if errors.Is(err, ErrQueueFull) {
			full = true
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		bg, bgPrompt = append(bg, ch), append(bgPrompt, i)
	}
	if !full {
		t.Fatal("8 background requests on a queue of 3 and 2 slots never filled it (test is vacuous)")
	}
	// Both slots are the background's now; a foreground request still
	// gets in, at once, and runs ahead. The scheduler is held while they
	// arrive, so that both background requests are still running when it
	// sees them (a fast machine could otherwise finish them in between).
	hold.wait(t)
	if st := s.Stats(); st.Background < 2 {
		close(hold.release)
		t.Fatalf("only %d background requests running before the foreground ones arrive", st.Background)
	}
	fg := make([]<-chan Event, 3)
	for i := range fg {
		ch, err := s.Generate(ctx, greedyReq(prompt(5, 100+i), 4))
		if err != nil {
			t.Fatalf("foreground request refused while background work waits: %v", err)
		}
		fg[i] = ch
	}
	close(hold.release)
	for i, ch := range fg {
		if c := collect(t, ch); c.finish != FinishLength || len(c.tokens) != 4 {
			t.Errorf("foreground %d: %+v", i, c)
		}
	}
	if s.Stats().Preemptions == 0 {
		t.Error("no background request was preempted for the foreground ones")
	}
	for i, ch := range bg {
		want := greedyRef(t, m, prompt(6, bgPrompt[i]), 60, nil)
		if c := collect(t, ch); c.finish != FinishLength || !slices.Equal(c.tokens, want) {
			t.Errorf("background %d after preemption: %v (%s), want %v", i, c.tokens, c.finish, want)
		}
	}
}

// Under a sustained foreground load, background work keeps its one slot
// (MinBackground) and finishes early; with strict priority it waits until
// no foreground request is queued.
func TestBackgroundNotStarved(t *testing.T) {
	for _, strict := range []bool{false, true} {
		m := tinyModel(t)
		// The order is the scheduler's: at each forward pass the gate notes
		// how many generations had completed when the background one left
		// the batch. (The order in which goroutines collecting the events
		// see their channels close is not: without -race the tiny model can
		// finish every request before any collector runs.) The scheduler is
		// held at its first pass until every request is queued.
		var s *Scheduler
		sawBg, before := false, -1
		hold := newHoldGate(1, func() {
			st := s.Stats()
			switch {
			case st.Background > 0:
				sawBg = true
			case sawBg && before < 0:
				before = int(st.Completed) - 1 // the foreground ones done with it
			}
		})
		opts := Options{Model: m, Cache: newCache(t, m, 256), MaxBatch: 2, QueueSize: 8, Gate: hold}
		if strict {
			opts.MinBackground = -1
		}
		s = startScheduler(t, opts)
		ctx := context.Background()
		var chans []<-chan Event
		run := func(req Request) {
			ch, err := s.Generate(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			chans = append(chans, ch)
		}
		for i := range 6 {
			run(greedyReq(prompt(5, 200+i), 60))
		}
		req := greedyReq(prompt(5, 300), 4)
		req.Background = true
		run(req)
		hold.wait(t)
		close(hold.release)
		for _, ch := range chans {
			collect(t, ch)
		}
		if before < 0 { // it finished last: no pass came after it
			before = int(s.Stats().Completed) - 1
		}
		t.Logf("strict %v: the background request finished after %d foreground ones", strict, before)
		switch {
		case !sawBg:
			t.Fatal("the background request never ran")
		case !strict && before > 2:
			t.Errorf("with a guaranteed slot the background request finished after %d foreground ones", before)
		case strict && before < 4:
			t.Errorf("strict priority: the background request finished after only %d foreground ones", before)
		}
	}
}

// startBackground queues n greedy background requests, prompt(promptLen,
// seed+i) with maxTokens each, and returns their event channels.
func startBackground(t *testing.T, s *Scheduler, n, promptLen, seed, maxTokens int) []<-chan Event {
	t.Helper()
	var chans []<-chan Event
	for i := range n {
		req := greedyReq(prompt(promptLen, seed+i), maxTokens)
		req.Background = true
		ch, err := s.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	return chans
}

// holdGate is a Gate that stops the scheduler before the first forward
// pass for which when (given the pass number, 1-based) holds, until the
// test releases it, so that a test can queue requests at a known point
// however fast the machine runs the tiny model; look, if set, sees the
// scheduler at every pass.
type holdGate struct {
	when    func(pass int) bool
	n       int           // passes begun (the scheduler's goroutine only)
	held    bool          // the hold has happened (the scheduler's goroutine only)
	reached chan struct{} // closed when the scheduler is held
	release chan struct{} // closed by the test
	look    func()
}

// newHoldGate holds before pass number at.
func newHoldGate(at int, look func()) *holdGate {
	return newHoldGateWhen(func(pass int) bool { return pass == at }, look)
}

func newHoldGateWhen(when func(pass int) bool, look func()) *holdGate {
	return &holdGate{when: when, reached: make(chan struct{}), release: make(chan struct{}), look: look}
}

func (g *holdGate) Serve() func() {
	g.n++
	if !g.held && g.when(g.n) {
		g.held = true
		close(g.reached)
		<-g.release
	}
	if g.look != nil {
		g.look()
	}
	return func() {}
}

// wait blocks until the scheduler is held (failing after 10 s).
func (g *holdGate) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the scheduler never reached its hold")
	}
}

// gateProbe is a Gate that looks at the scheduler at every forward pass.
type gateProbe struct{ look func() }

func (g *gateProbe) Serve() func() { g.look(); return func() {} }

// Background requests together hold at most their share of the KV cache
// (BackgroundKV) beyond one request's own growth, so users always find the
// rest; with the whole cache allowed, more of them run at once.
func TestBackgroundKVShare(t *testing.T) {
	maxRunning := map[float64]int{}
	for _, share := range []float64{0.25, 1} {
		m := tinyModel(t)
		kv := newCache(t, m, 200)
		var s *Scheduler
		most, over := 0, 0
		probe := &gateProbe{look: func() {
			used := kv.NumBlocks() - kv.FreeBlocks()
			if float64(used) > share*float64(kv.NumBlocks())+20 { // one request grows to 20 blocks
				over = max(over, used)
			}
			most = max(most, s.Stats().Background)
		}}
		s = startScheduler(t, Options{Model: m, Cache: kv, MaxBatch: 8, MaxBackground: 8, QueueSize: 16, BackgroundQueue: 16,
			NoPrefixCache: true, BackgroundKV: share, Gate: probe})
		chans := startBackground(t, s, 8, 60, 400, 20)
		for _, ch := range chans {
			if c := collect(t, ch); c.finish != FinishLength {
				t.Fatalf("share %v: finish %s", share, c.finish)
			}
		}
		if over > 0 {
			t.Errorf("share %v: background requests held %d of %d blocks", share, over, kv.NumBlocks())
		}
		maxRunning[share] = most
	}
	if maxRunning[0.25] < 2 || maxRunning[1] <= maxRunning[0.25] {
		t.Errorf("background requests running at once: %v (want at least 2 within a quarter, more with the whole cache)", maxRunning)
	}
	if _, err := New(Options{Model: tinyModel(t), Cache: newCache(t, tinyModel(t), 8), BackgroundKV: 1.5}); err == nil {
		t.Error("BackgroundKV 1.5 accepted")
	}
}
