package trainer

import (
	"math"
	"strings"
	"testing"
)

var testClip = clipConfig{epsLow: 0.2, epsHigh: 0.28}

// TestPPOTokenBranches pins the clipped objective's value, gradient and
// clip flag on each side of the clip range.
func TestPPOTokenBranches(t *testing.T) {
	for _, tt := range []struct {
		name        string
		logp, old   float64
		adv         float64
		wantLoss    float64
		wantGrad    float64
		wantClipped bool
	}{
		{"on-policy positive", 0, 0, 1, -1, -1, false},
		{"on-policy negative", -1, -1, -1, 1, 1, false},
		{"inside range", math.Log(1.1), 0, 2, -2.2, -2.2, false},
		{"above range, positive advantage: clipped", math.Log(1.5), 0, 1, -1.28, 0, true},
		{"above range, negative advantage: not clipped", math.Log(1.5), 0, -1, 1.5, 1.5, false},
		{"below range, negative advantage: clipped", math.Log(0.5), 0, -1, 0.8, 0, true},
		{"below range, positive advantage: not clipped", math.Log(0.5), 0, 1, -0.5, -0.5, false},
		{"zero advantage", 0.3, 0, 0, 0, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ppoToken(testClip, tt.logp, tt.old, tt.adv, 1, 1, 0, false)
			if math.Abs(got.loss-tt.wantLoss) > 1e-12 || math.Abs(got.grad-tt.wantGrad) > 1e-12 || got.clipped != tt.wantClipped {
				t.Errorf("got loss %g grad %g clipped %v, want %g %g %v", got.loss, got.grad, got.clipped, tt.wantLoss, tt.wantGrad, tt.wantClipped)
			}
		})
	}
}

// TestPPOGradientFiniteDifference checks the analytic d loss/d logπ against
// central differences of the loss, with importance weights and the KL
// term, away from the kinks at the clip boundaries.
func TestPPOGradientFiniteDifference(t *testing.T) {
	c := clipConfig{epsLow: 0.2, epsHigh: 0.28, klCoef: 0.3}
	const h = 1e-6
	for _, logp := range []float64{-3, -1.2, -0.7, -0.5, -0.3, -0.1} {
		for _, adv := range []float64{-1.5, -0.2, 0.4, 1} {
			for _, w := range []float64{0.5, 1, 2} {
				old, ref, kw := -0.6, -0.9, 0.7
				got := ppoToken(c, logp, old, adv, w, kw, ref, true)
				up := ppoToken(c, logp+h, old, adv, w, kw, ref, true).loss
				down := ppoToken(c, logp-h, old, adv, w, kw, ref, true).loss
				fd := (up - down) / (2 * h)
				if math.Abs(fd-got.grad) > 1e-6*math.Max(1, math.Abs(fd)) {
					t.Errorf("logp %g adv %g w %g: analytic %g, finite difference %g", logp, adv, w, got.grad, fd)
				}
			}
		}
	}
}

// TestSampleLossFiniteDifference checks a whole sample's token-mean loss
// (mask, advantages from reward and teacher, importance weights, KL)
// against finite differences in every token's log-prob.
func TestSampleLossFiniteDifference(t *testing.T) {
	s := &Sample{
		Prompt:          []int32{1},
		Response:        []int32{1, 2, 3, 4, 5},
		Reward:          -1,
		TeacherLogProbs: []float32{-0.5, -2, -0.1, -1, -3},
		RolloutLogProbs: []float32{-1, -1.5, -0.3, -0.2, -2},
		Mask:            []bool{true, true, false, true, true},
	}
	old := []float32{-0.9, -1.4, -0.2, -0.6, -2.5}
	ref := []float32{-1.1, -1.0, -0.3, -0.5, -2}
	logp := []float32{-0.7, -1.6, -0.2, -0.55, -2.2}
	cc := clipConfig{epsLow: 0.2, epsHigh: 0.28, klCoef: 0.1}
	ac := advantageConfig{rlWeight: 1, opdWeight: 0.5, clip: 1}
	const scale = 0.25
	base := sampleLoss(cc, ac, 2, s, logp, old, ref, scale)
	if base.tokens != 4 {
		t.Fatalf("%d unmasked tokens, want 4", base.tokens)
	}
	if base.grad[2] != 0 {
		t.Errorf("masked token has gradient %g", base.grad[2])
	}
	const h = 1e-3
	for i := range logp {
		p := append([]float32(nil), logp...)
		p[i] += h
		up := sampleLoss(cc, ac, 2, s, p, old, ref, scale).loss
		p[i] -= 2 * h
		down := sampleLoss(cc, ac, 2, s, p, old, ref, scale).loss
		fd := scale * (up - down) / (2 * h)
		if math.Abs(fd-float64(base.grad[i])) > 1e-4 {
			t.Errorf("token %d: analytic %g, finite difference %g", i, base.grad[i], fd)
		}
	}
}

func TestAdvantage(t *testing.T) {
	ac := advantageConfig{rlWeight: 0.5, opdWeight: 2, clip: 0.3}
	for _, tt := range []struct {
		name string
		s    Sample
		old  float64
		want float64
	}{
		{"reward only", Sample{Reward: -1}, -1, -0.5},
		{"teacher only", Sample{TeacherLogProbs: []float32{-0.9}}, -1, 2 * 0.1},
		{"teacher clipped", Sample{TeacherLogProbs: []float32{-0.1}}, -1, 2 * 0.3},
		{"teacher clipped below", Sample{TeacherLogProbs: []float32{-3}}, -1, -2 * 0.3},
		{"both", Sample{Reward: 1, TeacherLogProbs: []float32{-1.2}}, -1, 0.5 - 2*0.2},
		{"explicit", Sample{Reward: 1, Advantages: []float32{7}}, -1, 7},
	} {
		got := advantage(ac, &tt.s, 0, tt.old)
		if math.Abs(got-tt.want) > 1e-6 {
			t.Errorf("%s: advantage %g, want %g", tt.name, got, tt.want)
		}
	}
}

func TestImportanceWeight(t *testing.T) {
	for _, tt := range []struct {
		old, rollout, cap, want float64
	}{
		{-1, -1, 2, 1},
		{-1, -1.5, 2, math.Exp(0.5)},
		{-1, -3, 2, 2},
		{-2, -1, 2, math.Exp(-1)},
		{-1, -3, 0, 1},
	} {
		if got := importanceWeight(tt.old, tt.rollout, tt.cap); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("importanceWeight(%g, %g, %g) = %g, want %g", tt.old, tt.rollout, tt.cap, got, tt.want)
		}
	}
}

func TestK3(t *testing.T) {
	c := clipConfig{epsLow: 0.2, epsHigh: 0.28, klCoef: 1}
	// k3 is zero where the policy equals the reference and positive
	// elsewhere.
	if got := ppoToken(c, -1, -1, 0, 1, 1, -1, true); got.kl != 0 || got.grad != 0 {
		t.Errorf("at the reference: kl %g grad %g, want 0 0", got.kl, got.grad)
	}
	for _, logp := range []float64{-3, -2, -0.5, -0.1} {
		if got := ppoToken(c, logp, logp, 0, 1, 1, -1, true); !(got.kl > 0) {
			t.Errorf("logp %g: kl %g, want > 0", logp, got.kl)
		}
	}
}

func TestMicroBatches(t *testing.T) {
	mk := func(sizes ...int) []*Sample {
		var ss []*Sample
		for _, n := range sizes {
			ss = append(ss, &Sample{Prompt: make([]int32, 1), Response: make([]int32, n-1)})
		}
		return ss
	}
	for _, tt := range []struct {
		name   string
		sizes  []int
		budget int
		want   []int
	}{
		{"empty", nil, 10, []int{0}},
		{"one fits", []int{5}, 10, []int{0, 1}},
		{"all fit", []int{3, 3, 4}, 10, []int{0, 3}},
		{"split", []int{3, 3, 5, 2}, 10, []int{0, 2, 4}},
		{"oversized alone", []int{3, 20, 3}, 10, []int{0, 1, 2, 3}},
		{"budget one each", []int{2, 2, 2}, 2, []int{0, 1, 2, 3}},
	} {
		got := microBatches(mk(tt.sizes...), tt.budget)
		if len(got) != len(tt.want) {
			t.Errorf("%s: bounds %v, want %v", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: bounds %v, want %v", tt.name, got, tt.want)
				break
			}
		}
	}
}

func TestLearningRate(t *testing.T) {
	o := DefaultOptions()
	o.LR, o.WarmupSteps = 1e-4, 4
	for _, tt := range []struct {
		step int
		want float64
	}{{1, 0.25e-4}, {2, 0.5e-4}, {3, 0.75e-4}, {4, 1e-4}, {5, 1e-4}, {100, 1e-4}} {
		if got := o.LearningRate(tt.step); math.Abs(got-tt.want) > 1e-15 {
			t.Errorf("step %d: lr %g, want %g", tt.step, got, tt.want)
		}
	}
	o.WarmupSteps = 0
	if got := o.LearningRate(1); got != 1e-4 {
		t.Errorf("no warm-up: lr %g, want 1e-4", got)
	}
}

func TestValidateOptions(t *testing.T) {
	if err := func() error { o := DefaultOptions(); return o.Validate() }(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	for _, tt := range []struct {
		key string
		mod func(*Options)
	}{
		{"lr", func(o *Options) { o.LR = 0 }},
		{"adam_beta2", func(o *Options) { o.Beta2 = 1 }},
		{"clip_eps_low", func(o *Options) { o.EpsLow = 1 }},
		{"max_staleness", func(o *Options) { o.MaxStaleness = -1 }},
		{"micro_batch_tokens", func(o *Options) { o.MicroBatchTokens = 0 }},
		{"lora.targets", func(o *Options) { o.LoRARank = 4; o.LoRATargets = []string{"qq"} }},
		{"kl_coef", func(o *Options) { o.KLCoef = math.NaN() }},
		{"target_kl", func(o *Options) { o.TargetKL = -0.1 }},
	} {
		o := DefaultOptions()
		tt.mod(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), "trainer."+tt.key) {
			t.Errorf("%s: error %v, want one naming trainer.%s", tt.key, err, tt.key)
		}
	}
}

// Decoupled PPO by hand: behaviour (the rollout's version), proximal (the
// parameters when the step began) and current log-probs of three tokens,
// advantage 1 (reward +1), importance cap 2, clip [0.8, 1.28]:
//
//	token 0: w = min(0.6/0.5, 2) = 1.2, ρ = 0.66/0.6 = 1.1: −w·ρ = −1.32, d = −1.32
//	token 1: w = 1.2, ρ = 0.9/0.6 = 1.5 > 1.28: clipped, −1.2·1.28 = −1.536, d = 0
//	token 2: w = min(0.6/0.1, 2) = 2 (capped), ρ = 1: −2, d = −2
//
// The sample's loss is the token mean; its gradient per token is d/3.
func TestDecoupledPPOByHand(t *testing.T) {
	ln := func(x float64) float32 { return float32(math.Log(x)) }
	s := &Sample{Prompt: []int32{1}, Response: []int32{2, 3, 4}, Reward: 1,
		RolloutLogProbs: []float32{ln(0.5), ln(0.5), ln(0.1)}}
	prox := []float32{ln(0.6), ln(0.6), ln(0.6)}
	cur := []float32{ln(0.66), ln(0.9), ln(0.6)}
	ac := advantageConfig{rlWeight: 1, opdWeight: 1}
	st := sampleLoss(testClip, ac, 2, s, cur, prox, nil, 1)
	wantLoss := (-1.32 - 1.536 - 2) / 3
	wantGrad := []float64{-1.32 / 3, 0, -2.0 / 3}
	if math.Abs(st.loss-wantLoss) > 1e-5 || st.clipped != 1 || math.Abs(st.wSum-4.4) > 1e-5 {
		t.Errorf("loss %v (want %v), clipped %d (want 1), Σw %v (want 4.4)", st.loss, wantLoss, st.clipped, st.wSum)
	}
	for i, g := range st.grad {
		if math.Abs(float64(g)-wantGrad[i]) > 1e-5 {
			t.Errorf("token %d: gradient %v, want %v", i, g, wantGrad[i])
		}
	}
}
