package model

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// A view computes what the loaded model computes, on its own pool, without
// taking the loaded model's lock; weight sets trained through it belong to
// the loaded model; closing it leaves the loaded model whole.
func TestView(t *testing.T) {
	spec := tiny(ArchQwen3)
	m, _ := writeAndLoad(t, spec)
	pool := kernels.NewPool(2)
	defer pool.Close()
	v := m.View(m.Backend().(*cpu.Backend).WithPool(pool))
	if v.Backend().(*cpu.Backend).Pool() != pool {
		t.Fatal("the view does not run on its pool")
	}
	toks := testTokens(20, spec.Vocab)
	want := fullLogits(t, m, toks)
	got := fullLogits(t, v, toks)
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5 {
			t.Fatalf("logit %d: view %v, model %v", i, got[i], want[i])
		}
	}

	t.Run("own lock", func(t *testing.T) {
		// A pass of the loaded model in progress (its lock held) does not
		// hold up the view.
		m.mu.Lock()
		done := make(chan error, 1)
		go func() {
			kv := newCache(t, v, 4, 16)
			seq := kv.NewSequence()
			defer seq.Free()
			_, err := v.Forward([]Step{{seq, toks}}, LastLogits, nil)
			done <- err
		}()
		select {
		case err := <-done:
			m.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			m.mu.Unlock()
			t.Fatal("the view waited for the loaded model's lock")
		}
	})

	t.Run("caches are the view's", func(t *testing.T) {
		kv := newCache(t, m, 4, 16)
		seq := kv.NewSequence()
		defer seq.Free()
		if _, err := v.Forward([]Step{{seq, toks[:3]}}, LastLogits, nil); err == nil {
			t.Fatal("the view ran on the loaded model's cache")
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		// Both at once, under -race: no shared scratch.
		var wg sync.WaitGroup
		for _, x := range []*Model{m, v} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					got := fullLogits(t, x, toks)
					if math.Abs(float64(got[7]-want[7])) > 1e-5 {
						t.Errorf("logit 7: %v, want %v", got[7], want[7])
					}
				}
			}()
		}
		wg.Wait()
	})

	t.Run("trained through the view", func(t *testing.T) {
		samples := trainBatch(spec.Vocab)
		tr, err := v.NewTrainable(m.Weights(), TrainOptions{LoRA: &LoRAConfig{Rank: 4, Alpha: 16, Targets: []string{"q", "v"}, Seed: 4}})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Free()
		adamSteps(t, tr, samples, 2, 1e-2)
		snap, err := tr.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		defer snap.Free()
		if snap.Model() != m {
			t.Fatal("a snapshot made through the view does not belong to the loaded model")
		}
		a, err := m.LogProbsWith(snap, newCache(t, m, 4, 16), scoreRequests(samples), 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := v.LogProbsWith(snap, newCache(t, v, 4, 16), scoreRequests(samples), 0)
		if err != nil {
			t.Fatal(err)
		}
		own := forwardLogProbs(t, tr, samples)
		closeLogProbs(t, "trainable vs model", own, a, 1e-5)
		closeLogProbs(t, "trainable vs view", own, b, 1e-5)
	})

	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	again := fullLogits(t, m, toks)
	if again[0] != want[0] {
		t.Fatalf("after the view closed: %v, want %v", again[0], want[0])
	}
}
