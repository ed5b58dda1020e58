package trainer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clawrl/clawrl/model"
)

// The tests in this file show that training learns: each runs on a tiny
// random model with full fine-tuning and with LoRA and asserts a concrete
// improvement.

var modes = []struct {
	name string
	lora bool
}{{"full", false}, {"lora", true}}

// surrogate is the unclipped policy-gradient objective of batch against a
// fixed old policy: mean over samples of the token mean of −A·π/π_old.
// It is what a step descends, so on a fixed batch it must fall.
func surrogate(batch []Sample, logp, old [][]float32) float64 {
	var sum float64
	for i, s := range batch {
		var per float64
		for t := range s.Response {
			per += -float64(s.Reward) * math.Exp(float64(logp[i][t]-old[i][t]))
		}
		sum += per / float64(len(s.Response))
	}
	return sum / float64(len(batch))
}

func reqsOf(batch []Sample) []model.ScoreRequest {
	reqs := make([]model.ScoreRequest, len(batch))
	for i, s := range batch {
		reqs[i] = model.ScoreRequest{Prompt: s.Prompt, Response: s.Response}
	}
	return reqs
}

func logProbRows(sc []model.Scored) [][]float32 {
	out := make([][]float32, len(sc))
	for i, s := range sc {
		out[i] = s.LogProbs
	}
	return out
}

// TestFixedBatchLossFalls: repeated steps on one batch of rewarded samples
// lower the policy-gradient objective measured against the initial policy.
func TestFixedBatchLossFalls(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			m, _ := loadTiny(t, tinySpec())
			o := testOptions(mode.lora)
			o.LR /= 5
			tr := newTrainer(t, m, o)
			sc := newScorer(t, m)
			r := rand.New(rand.NewPCG(3, 4))
			var batch []Sample
			for i := range 6 {
				batch = append(batch, Sample{
					Prompt: randomTokens(r, 5, 0, 64), Response: randomTokens(r, 4, 0, 64),
					Reward: float32(1 - 2*(i%2)),
				})
			}
			old := logProbRows(sc.logProbs(t, m.Weights(), reqsOf(batch), 0))
			before := surrogate(batch, old, old)
			prev := before
			for step := range 10 {
				if _, err := tr.Step(batch); err != nil {
					t.Fatal(err)
				}
				now := surrogate(batch, logProbRows(sc.logProbs(t, snapshot(t, tr), reqsOf(batch), 0)), old)
				if now >= prev {
					t.Errorf("step %d: objective %.4f did not fall from %.4f", step+1, now, prev)
				}
				prev = now
			}
			t.Logf("objective %.4f → %.4f after 10 steps", before, prev)
			if prev > before-0.5 {
				t.Errorf("objective fell only from %.4f to %.4f", before, prev)
			}
		})
	}
}

// TestPreferenceLearned: reward +1 for responses that contain a chosen
// token and −1 for those that do not raises that token's log-probability,
// on held-out prompts, by at least 1 nat.
func TestPreferenceLearned(t *testing.T) {
	const chosen = 7
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			m, _ := loadTiny(t, tinySpec())
			tr := newTrainer(t, m, testOptions(mode.lora))
			sc := newScorer(t, m)
			r := rand.New(rand.NewPCG(5, 6))
			// Responses of 4 tokens from [10, 64); positives get the chosen
			// token at a random position.
			makeSample := func(positive bool) Sample {
				s := Sample{Prompt: randomTokens(r, 5, 10, 64), Response: randomTokens(r, 4, 10, 64), Reward: -1}
				if positive {
					s.Response[r.IntN(4)] = chosen
					s.Reward = 1
				}
				return s
			}
			var eval []Sample
			for range 8 {
				eval = append(eval, makeSample(true))
			}
			// Mean log-prob of the chosen token where it occurs.
			chosenLogProb := func(w *model.Weights) float64 {
				var sum float64
				var n int
				for i, s := range sc.logProbs(t, w, reqsOf(eval), 0) {
					for j, tok := range eval[i].Response {
						if tok == chosen {
							sum += float64(s.LogProbs[j])
							n++
						}
					}
				}
				return sum / float64(n)
			}
			before := chosenLogProb(m.Weights())
			for range 30 {
				var batch []Sample
				for i := range 8 {
					batch = append(batch, makeSample(i%2 == 0))
				}
				if _, err := tr.Step(batch); err != nil {
					t.Fatal(err)
				}
			}
			after := chosenLogProb(snapshot(t, tr))
			t.Logf("mean log p(chosen) on held-out prompts: %.3f → %.3f (p %.4f → %.4f)", before, after, math.Exp(before), math.Exp(after))
			if after-before < 1 {
				t.Errorf("log p(chosen) rose by %.3f nats, want ≥ 1", after-before)
			}
		})
	}
}

// TestDistillationLearned: on-policy distillation from the same model
// with a hint prepended to the prompt moves the student (no hint) toward
// the teacher: KL(teacher‖student) over the whole vocabulary at the
// response positions falls at least twofold.
func TestDistillationLearned(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			m, _ := loadTiny(t, tinySpec())
			o := testOptions(mode.lora)
			o.RLWeight = 0
			o.LR *= 0.5 // a sampled per-token signal: smaller, steadier steps
			tr := newTrainer(t, m, o)
			sc := newScorer(t, m)
			r := rand.New(rand.NewPCG(7, 8))
			hint := []int32{3, 1, 4, 1, 5}
			var prompts [][]int32
			for range 4 {
				prompts = append(prompts, randomTokens(r, 4, 0, 64))
			}
			withHint := func(p []int32) []int32 { return append(append([]int32(nil), hint...), p...) }
			vocab := m.Config.VocabSize
			// Evaluation responses: drawn from the teacher once, two per
			// prompt.
			var hinted, plain [][]int32
			for _, p := range prompts {
				hinted = append(hinted, withHint(p), withHint(p))
				plain = append(plain, p, p)
			}
			var evalReqs, teacherReqs []model.ScoreRequest
			for i, resp := range sc.sample(t, m.Weights(), r, hinted, 6) {
				evalReqs = append(evalReqs, model.ScoreRequest{Prompt: plain[i], Response: resp})
				teacherReqs = append(teacherReqs, model.ScoreRequest{Prompt: hinted[i], Response: resp})
			}
			teacher := sc.logProbs(t, m.Weights(), teacherReqs, vocab)
			kl := func(w *model.Weights) float64 {
				student := sc.logProbs(t, w, evalReqs, vocab)
				var sum float64
				var n int
				for i := range student {
					for j := range student[i].TopK {
						sum += klFull(teacher[i].TopK[j], student[i].TopK[j], vocab)
						n++
					}
				}
				return sum / float64(n)
			}
			before := kl(m.Weights())
			w := m.Weights()
			for range 60 {
				// On-policy: two responses per prompt sampled from the
				// student, scored by the teacher (the base model with the
				// hint).
				var student [][]int32
				for _, p := range prompts {
					student = append(student, p, p)
				}
				resps := sc.sample(t, w, r, student, 6)
				var treqs []model.ScoreRequest
				for i, resp := range resps {
					treqs = append(treqs, model.ScoreRequest{Prompt: withHint(student[i]), Response: resp})
				}
				var batch []Sample
				for i, tl := range sc.logProbs(t, m.Weights(), treqs, 0) {
					batch = append(batch, Sample{Prompt: student[i], Response: resps[i], TeacherLogProbs: tl.LogProbs})
				}
				if _, err := tr.Step(batch); err != nil {
					t.Fatal(err)
				}
				w = snapshot(t, tr)
			}
			after := kl(w)
			t.Logf("KL(teacher‖student) per response token: %.4f → %.4f (%.1f×)", before, after, before/after)
			if after > before/2 {
				t.Errorf("KL fell from %.4f to %.4f, want at least twofold", before, after)
			}
		})
	}
}

// klFull is KL(p‖q) from two full distributions given as token log-prob
// lists in any order.
func klFull(p, q []model.TokenLogProb, vocab int) float64 {
	lq := make([]float64, vocab)
	for _, e := range q {
		lq[e.Token] = float64(e.LogProb)
	}
	var kl float64
	for _, e := range p {
		lp := float64(e.LogProb)
		kl += math.Exp(lp) * (lp - lq[e.Token])
	}
	return kl
}
