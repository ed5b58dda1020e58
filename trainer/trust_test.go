package trainer

import (
	"math"
	"slices"
	"testing"

	"github.com/clawrl/clawrl/model"
)

// TestImportanceWeightOfTheSampler: the hand-computed example of
// sample/behaviour_test.go, in the loss. The model's distribution at
// each position is π = (0.4, 0.3, 0.2, 0.1) and the proximal policy is
// the behaviour version (no version drift), so the weight min(π/q, 2) is
// the sampler's correction alone:
//
//	token 0, temperature 0.7 and top-p 0.8: q = 0.49152, w = 0.4/0.49152 = 0.81380
//	token 2, the same:                       q = 0.18260, w = 0.2/0.18260 = 1.09529
//	token 1, a grammar refusing token 0,
//	then temperature 0.7 and top-p 0.8:      q = 0.64089, w = 0.3/0.64089 = 0.46810
//	token 3, the grammar's only choice:      forced, masked out of the loss
//
// With reward −1 (advantage −1) and ρ = 1, each unmasked token's loss is
// w and its gradient w/3 (the token mean over the three); the sample's
// loss is (0.81380 + 1.09529 + 0.46810)/3 = 0.79240. Recorded as before
// (the model's own log-probs as the behaviour), every weight is 1 and the
// forced token takes a third of the push.
func TestImportanceWeightOfTheSampler(t *testing.T) {
	ln := func(x float64) float32 { return float32(math.Log(x)) }
	prox := []float32{ln(0.4), ln(0.2), ln(0.3), ln(0.1)}
	s := &Sample{Prompt: []int32{1}, Response: []int32{0, 2, 1, 3}, Reward: -1,
		RolloutLogProbs: []float32{ln(0.49152), ln(0.18260), ln(0.64089), 0},
		Mask:            []bool{true, true, true, false}}
	ac := advantageConfig{rlWeight: 1, opdWeight: 1}
	st := sampleLoss(testClip, ac, 2, s, prox, prox, nil, 1)
	wantW := []float64{0.81380, 1.09529, 0.46810}
	for i, w := range wantW {
		if got := lossWeight(s, i, float64(prox[i]), 2); math.Abs(got-w) > 1e-4 {
			t.Errorf("token %d: weight %.5f, want %.5f", i, got, w)
		}
		if g := float64(st.grad[i]); math.Abs(g-w/3) > 1e-4 {
			t.Errorf("token %d: gradient %.5f, want %.5f", i, g, w/3)
		}
	}
	if st.grad[3] != 0 || st.tokens != 3 || math.Abs(st.loss-0.79240) > 1e-4 {
		t.Errorf("forced token's gradient %v, %d tokens, loss %.5f; want 0, 3, 0.79240", st.grad[3], st.tokens, st.loss)
	}
	// As recorded before: the model's own log-probs, nothing masked.
	before := &Sample{Prompt: s.Prompt, Response: s.Response, Reward: -1, RolloutLogProbs: prox}
	st = sampleLoss(testClip, ac, 2, before, prox, prox, nil, 1)
	if st.tokens != 4 || math.Abs(st.wSum-4) > 1e-6 || math.Abs(float64(st.grad[3])-0.25) > 1e-6 {
		t.Errorf("recorded as before: %d tokens, Σw %v, forced token's gradient %v", st.tokens, st.wSum, st.grad[3])
	}
}

// TestKLWeights: the KL to the reference is estimated on the tokens the
// policy drew, each weighted by how likely the policy was to draw it
// against the distribution that did. A teacher's token the policy has
// learnt to avoid (logπ −12, reference −1: k3 = e^11 − 12 ≈ 59862) counts
// e^(−12+0.5) times (the teacher drew it with log-prob −0.5): about 0.61,
// instead of making the batch's mean 3·10^4. A replay (Supervised) token
// is left out; a sample with no record counts as the policy's own.
func TestKLWeights(t *testing.T) {
	ref := []float32{-1, -1}
	logp := []float32{-12, -1.2}
	k3 := func(r, l float64) float64 { return math.Exp(r-l) - (r - l) - 1 }
	ac := advantageConfig{rlWeight: 1, opdWeight: 1}
	cc := clipConfig{epsLow: 0.2, epsHigh: 0.28, klCoef: 0.1}
	teacher := &Sample{Prompt: []int32{1}, Response: []int32{2, 3}, TeacherDrawn: true, TeacherLogProbs: []float32{-0.5, -1.2}}
	plain := &Sample{Prompt: []int32{1}, Response: []int32{2, 3}, TeacherLogProbs: []float32{-0.5, -1.2}}
	replay := &Sample{Prompt: []int32{1}, Response: []int32{2, 3}, Supervised: true, Advantages: []float32{1, 1}}
	w0 := math.Exp(-12 + 0.5)
	for _, tt := range []struct {
		name   string
		s      *Sample
		klSum  float64
		klW    float64
		lossW1 float64 // the loss weight of token 0
	}{
		{"teacher's rollout", teacher, w0*k3(-1, -12) + k3(-1, -1.2), w0 + 1, 1},
		{"no record", plain, k3(-1, -12) + k3(-1, -1.2), 2, 1},
		{"replay", replay, 0, 0, 1},
	} {
		st := sampleLoss(cc, ac, 2, tt.s, logp, logp, ref, 1)
		if math.Abs(st.klSum-tt.klSum) > 1e-6*math.Max(1, tt.klSum) || math.Abs(st.klW-tt.klW) > 1e-9 {
			t.Errorf("%s: Σ kw·k3 %g over Σ kw %g; want %g over %g", tt.name, st.klSum, st.klW, tt.klSum, tt.klW)
		}
		if w := lossWeight(tt.s, 0, -12, 2); w != tt.lossW1 {
			t.Errorf("%s: loss weight %g, want %g (a teacher's tokens take none)", tt.name, w, tt.lossW1)
		}
	}
	if got := (w0*k3(-1, -12) + k3(-1, -1.2)) / (w0 + 1); got > 1 {
		t.Errorf("the weighted mean %g", got)
	}
}

// stepKLBetween is an independent estimate of what the trust region
// bounds: k3 of KL(π_before‖π_after) per token of batch (none masked,
// no behaviour record), by the serving path on published snapshots.
func stepKLBetween(t *testing.T, sc *scorer, before, after *model.Weights, batch []Sample) float64 {
	t.Helper()
	a := sc.logProbs(t, before, reqsOf(batch), 0)
	b := sc.logProbs(t, after, reqsOf(batch), 0)
	var sum float64
	n := 0
	for i := range batch {
		for j := range a[i].LogProbs {
			d := float64(b[i].LogProbs[j] - a[i].LogProbs[j])
			sum += math.Expm1(d) - d
			n++
		}
	}
	return sum / float64(n)
}

// TestTrustRegion: at a learning rate whose plain steps go far past the
// target, every step with target_kl stays within it (measured
// independently on the published weights), shrinking its update as often
// as needed; the parameters move by exactly the kept share of the plain
// update; a target only the start meets shrinks it to nothing.
func TestTrustRegion(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			m, _ := loadTiny(t, tinySpec())
			sc := newScorer(t, m)
			batch := mixedBatch(11, 6)
			for i := range batch {
				batch[i].Mask = nil
			}
			o := testOptions(mode.lora)
			o.LR = 0.05
			const target = 0.01
			plain := newTrainer(t, m, o)
			o.TargetKL = target
			tr := newTrainer(t, m, o)
			start := snapshot(t, tr)
			p0 := paramValues(t, tr)
			// The first step, against the plain one from the same start.
			mp, err := plain.Step(batch)
			if err != nil {
				t.Fatal(err)
			}
			far := stepKLBetween(t, sc, start, snapshot(t, plain), batch)
			met, err := tr.Step(batch)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("first step: plain KL %.4f (grad norm %.2f); with target %.2g: %.4f after %d shrinkings, %.4f of the update kept", far, mp.GradNorm, target, met.StepKL, met.Backtracks, met.TrustScale)
			if far < 4*target {
				t.Fatalf("the plain step's KL %.4f is too small to test a target of %g", far, target)
			}
			if met.Backtracks == 0 || !(met.TrustScale > 0 && met.TrustScale <= math.Pow(0.5, float64(met.Backtracks))) || !met.Applied {
				t.Fatalf("metrics %+v: want the update shrunk, at least halved each time", met)
			}
			// Exactly that share of the plain update.
			pp, pt := paramValues(t, plain), paramValues(t, tr)
			var worst float64
			for i := range p0 {
				for j := range p0[i] {
					want := float64(p0[i][j]) + met.TrustScale*float64(pp[i][j]-p0[i][j])
					worst = math.Max(worst, math.Abs(float64(pt[i][j])-want))
				}
			}
			if worst > 1e-6 {
				t.Errorf("parameters off the kept share of the plain update by %g", worst)
			}
			// Every step stays within the target.
			prev := snapshot(t, tr)
			for i := range 6 {
				met, err := tr.Step(batch)
				if err != nil {
					t.Fatal(err)
				}
				next := snapshot(t, tr)
				kl := stepKLBetween(t, sc, prev, next, batch)
				if kl > target*1.05 || met.StepKL > target || math.Abs(kl-met.StepKL) > 1e-3 {
					t.Errorf("step %d: KL %.5f (the trainer's estimate %.5f), target %g", i+2, kl, met.StepKL, target)
				}
				prev = next
			}
			// A target only the start meets: the update shrinks to nothing.
			o.TargetKL = 1e-12
			undo := newTrainer(t, m, o)
			met, err = undo.Step(batch)
			if err != nil {
				t.Fatal(err)
			}
			if d, _ := maxAbsDiff(paramValues(t, undo), p0); d > 1e-6 || met.TrustScale > 1e-5 || !met.Applied || met.StepKL > 1e-12 {
				t.Errorf("shrunk to nothing: parameters moved by %g, metrics %+v", d, met)
			}
		})
	}
}

// TestTrustRegionStopsEpochs: with ppo_epochs 3, a step whose update had
// to shrink makes no further updates (PPO's early stop at target_kl); a
// loose target lets all three run.
func TestTrustRegionStopsEpochs(t *testing.T) {
	m, _ := loadTiny(t, tinySpec())
	batch := mixedBatch(3, 6)
	for _, tt := range []struct {
		target  float64
		updates int64
	}{{0.005, 1}, {100, 3}} {
		o := testOptions(false)
		o.LR, o.PPOEpochs, o.TargetKL = 0.05, 3, tt.target
		tr := newTrainer(t, m, o)
		met, err := tr.Step(batch)
		if err != nil {
			t.Fatal(err)
		}
		if tr.StepCount() != tt.updates || (tt.updates == 1) != (met.Backtracks > 0) {
			t.Errorf("target %g: %d updates, %d halvings; want %d updates", tt.target, tr.StepCount(), met.Backtracks, tt.updates)
		}
	}
	if !slices.Contains([]string{"full", "lora"}, modes[0].name) {
		t.Fatal("modes changed")
	}
}
