// Package trainertest helps tests that need a trained weight version: it
// steps a trainer through batches of random tokens with alternating
// rewards.
package trainertest

import (
	"math/rand/v2"
	"testing"

	"github.com/clawrl/clawrl/trainer"
)

// Steps applies steps optimizer steps to tr, each on 4 samples of random
// tokens below vocab (prompts of promptLen, responses of respLen) with
// rewards +1 and −1 alternating, drawn from seed; it fails t if a step
// errs or is not applied.
func Steps(t testing.TB, tr *trainer.Trainer, steps, vocab, promptLen, respLen int, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed+1))
	toks := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = r.Int32N(int32(vocab))
		}
		return out
	}
	for step := range steps {
		var batch []trainer.Sample
		for i := range 4 {
			batch = append(batch, trainer.Sample{Prompt: toks(promptLen), Response: toks(respLen), Reward: float32(1 - 2*((i+step)%2))})
		}
		if met, err := tr.Step(batch); err != nil || !met.Applied {
			t.Fatalf("training step %d: %+v %v", step, met, err)
		}
	}
}
