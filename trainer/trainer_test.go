package trainer

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/weights"
)

// mixedBatch is a batch of samples of different lengths with rewards and
// teacher log-probs, so every term of the advantage is exercised.
func mixedBatch(seed uint64, n int) []Sample {
	r := rand.New(rand.NewPCG(seed, 99))
	var batch []Sample
	for i := range n {
		resp := randomTokens(r, 2+r.IntN(5), 0, 64)
		s := Sample{Prompt: randomTokens(r, 2+r.IntN(6), 0, 64), Response: resp, Reward: float32(1 - 2*(i%2))}
		if i%3 == 0 {
			s.TeacherLogProbs = make([]float32, len(resp))
			for j := range resp {
				s.TeacherLogProbs[j] = -float32(r.Float64() * 6)
			}
		}
		if i%4 == 1 {
			s.Mask = make([]bool, len(resp))
			for j := range resp {
				s.Mask[j] = j != 0
			}
		}
		batch = append(batch, s)
	}
	return batch
}

func ptrs(batch []Sample) []*Sample {
	out := make([]*Sample, len(batch))
	for i := range batch {
		out[i] = &batch[i]
	}
	return out
}

// gradValues copies every gradient of the trainer to the host.
func gradValues(tr *Trainer) [][]float32 {
	var out [][]float32
	for _, p := range tr.Params() {
		out = append(out, slices.Clone(cpu.Float32s(p.Grad)))
	}
	return out
}

func maxAbsDiff(a, b [][]float32) (diff, scale float64) {
	for i := range a {
		for j := range a[i] {
			diff = math.Max(diff, math.Abs(float64(a[i][j]-b[i][j])))
			scale = math.Max(scale, math.Abs(float64(a[i][j])))
		}
	}
	return diff, scale
}

func equalBits(a, b [][]float32) bool {
	for i := range a {
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return true
}

// TestGradAccumulationEquivalence: splitting a batch into micro-batches
// by a token budget gives the same gradient and the same update as one
// pass over the whole batch.
func TestGradAccumulationEquivalence(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			m, _ := loadTiny(t, tinySpec())
			batch := mixedBatch(1, 7)
			whole := testOptions(mode.lora)
			whole.MicroBatchTokens = 1000
			// Adam's first step is lr·g/(|g|+eps): with the usual tiny eps
			// it is ±lr wherever g is not exactly zero, so rounding noise in
			// a near-zero gradient flips whole updates. A large eps makes
			// the update proportional to the gradient, which is what this
			// test compares.
			whole.AdamEps = 1
			split := whole
			split.MicroBatchTokens = 12
			a, b := newTrainer(t, m, whole), newTrainer(t, m, split)
			accA, err := a.accumulate(ptrs(batch), nil)
			if err != nil {
				t.Fatal(err)
			}
			accB, err := b.accumulate(ptrs(batch), nil)
			if err != nil {
				t.Fatal(err)
			}
			if accA.microBatches != 1 || accB.microBatches < 4 {
				t.Fatalf("micro-batches: %d and %d, want 1 and ≥ 4", accA.microBatches, accB.microBatches)
			}
			if d, s := maxAbsDiff(gradValues(a), gradValues(b)); d > 1e-5*math.Max(1, s) {
				t.Fatalf("gradients differ by %g (largest %g)", d, s)
			}
			if math.Abs(accA.loss-accB.loss) > 1e-6*math.Abs(accA.loss) {
				t.Fatalf("losses %g and %g", accA.loss, accB.loss)
			}
			a.tr.ZeroGrad()
			b.tr.ZeroGrad()
			before := paramValues(t, a)
			ma, err := a.Step(batch)
			if err != nil {
				t.Fatal(err)
			}
			mb, err := b.Step(batch)
			if err != nil {
				t.Fatal(err)
			}
			delta := func(after [][]float32) [][]float32 {
				out := make([][]float32, len(after))
				for i := range after {
					out[i] = make([]float32, len(after[i]))
					for j := range after[i] {
						out[i][j] = after[i][j] - before[i][j]
					}
				}
				return out
			}
			// Within 1e-5, and within 0.1% of the largest update (the
			// parameters themselves round at float32 precision).
			if d, s := maxAbsDiff(delta(paramValues(t, a)), delta(paramValues(t, b))); d > 1e-5 || d > 1e-3*s || s < 1e-4 {
				t.Fatalf("updates differ by %g (largest %g)", d, s)
			}
			if math.Abs(ma.GradNorm-mb.GradNorm) > 1e-5*ma.GradNorm || math.Abs(ma.Loss-mb.Loss) > 1e-6*math.Abs(ma.Loss) {
				t.Fatalf("metrics differ: %+v vs %+v", ma, mb)
			}
		})
	}
}

// TestNonFiniteGuard: a NaN advantage or a gradient that overflows skips
// the step and leaves parameters, moments and the step count exactly as
// they were; the next good batch trains.
func TestNonFiniteGuard(t *testing.T) {
	m, _ := loadTiny(t, tinySpec())
	tr := newTrainer(t, m, testOptions(false))
	good := mixedBatch(2, 4)
	if _, err := tr.Step(good); err != nil {
		t.Fatal(err)
	}
	moments := func() [][]float32 {
		var out [][]float32
		for _, mm := range tr.mom {
			out = append(out, slices.Clone(cpu.Float32s(mm.m)), slices.Clone(cpu.Float32s(mm.v)))
		}
		return out
	}
	for _, tt := range []struct {
		name   string
		adv    float32
		reason string
	}{
		{"NaN advantage", float32(math.NaN()), "loss"},
		{"infinite advantage", float32(math.Inf(1)), "loss"},
		{"gradient overflow", 3e38, "gradient norm"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			params, mom, step := paramValues(t, tr), moments(), tr.StepCount()
			bad := mixedBatch(3, 4)
			bad[2].Advantages = make([]float32, len(bad[2].Response))
			for j := range bad[2].Advantages {
				bad[2].Advantages[j] = tt.adv
			}
			met, err := tr.Step(bad)
			if err != nil {
				t.Fatal(err)
			}
			if !met.Skipped || met.Applied || !strings.Contains(met.SkipReason, tt.reason) {
				t.Fatalf("metrics %+v: want a skipped step (%s)", met, tt.reason)
			}
			if !equalBits(params, paramValues(t, tr)) || !equalBits(mom, moments()) || tr.StepCount() != step {
				t.Fatal("a skipped step changed the trainer's state")
			}
			for _, g := range gradValues(tr) {
				for _, x := range g {
					if x != 0 {
						t.Fatal("gradients left behind by a skipped step")
					}
				}
			}
		})
	}
	met, err := tr.Step(good)
	if err != nil || !met.Applied || met.SkippedTotal != 3 || met.Step != 2 {
		t.Fatalf("good step after skips: %+v, %v", met, err)
	}
}

// TestStaleness: samples more than max_staleness versions old are
// dropped and counted; the rest are trained and binned by staleness.
func TestStaleness(t *testing.T) {
	m, _ := loadTiny(t, tinySpec())
	o := testOptions(false)
	o.MaxStaleness = 2
	tr := newTrainer(t, m, o)
	tr.SetVersion(5)
	batch := mixedBatch(4, 7)
	for i, v := range []uint64{5, 4, 3, 2, 1, 7, 5} {
		batch[i].Version = v
	}
	batch[6].Reward, batch[6].TeacherLogProbs = 0, nil // no signal
	met, err := tr.Step(batch)
	if err != nil {
		t.Fatal(err)
	}
	// Staleness 0: versions 5 and 7 (a version ahead counts as fresh);
	// 1: version 4; 2: version 3; dropped: 2 and 1.
	if !slices.Equal(met.Staleness, []int{2, 1, 1}) || met.Stale != 2 || met.NoSignal != 1 || met.Dropped != 3 || met.Samples != 4 {
		t.Fatalf("metrics %+v", met)
	}
	// A batch with nothing left to train changes nothing.
	for i := range batch {
		batch[i].Version = 0
	}
	met, err = tr.Step(batch)
	if err != nil || met.Applied || met.Skipped || met.Stale != 6 || tr.StepCount() != 1 {
		t.Fatalf("all stale: %+v, %v", met, err)
	}
}

// TestImportanceWeights: rollout log-probs below the current policy's
// scale a sample's gradient by exp(old − rollout), truncated at the cap.
func TestImportanceWeights(t *testing.T) {
	m, _ := loadTiny(t, tinySpec())
	sc := newScorer(t, m)
	o := testOptions(false)
	o.ImportanceCap = 2
	tr := newTrainer(t, m, o)
	base := mixedBatch(5, 1)[:1]
	cur := sc.logProbs(t, m.Weights(), reqsOf(base), 0)[0].LogProbs
	grad := func(shift float64) ([][]float32, float64) {
		b := slices.Clone(base)
		if shift != 0 {
			b[0].RolloutLogProbs = make([]float32, len(cur))
			for j, x := range cur {
				b[0].RolloutLogProbs[j] = x - float32(shift)
			}
		}
		acc, err := tr.accumulate(ptrs(b), nil)
		if err != nil {
			t.Fatal(err)
		}
		g := gradValues(tr)
		tr.tr.ZeroGrad()
		return g, acc.wSum / float64(acc.tokens)
	}
	g1, w1 := grad(0)
	for _, tt := range []struct {
		shift, want float64
	}{{math.Log(1.5), 1.5}, {math.Log(4), 2}, {-math.Log(2), 0.5}} {
		g, w := grad(tt.shift)
		if math.Abs(w-tt.want) > 1e-4 || w1 != 1 {
			t.Errorf("shift %.3f: mean weight %g, want %g", tt.shift, w, tt.want)
		}
		// The gradient scales with the weight.
		var num, den float64
		for i := range g {
			for j := range g[i] {
				num += float64(g[i][j]) * float64(g1[i][j])
				den += float64(g1[i][j]) * float64(g1[i][j])
			}
		}
		if ratio := num / den; math.Abs(ratio-tt.want) > 1e-3 {
			t.Errorf("shift %.3f: gradient scaled by %g, want %g", tt.shift, ratio, tt.want)
		}
	}
}

// TestWarmup: the learning rate rises linearly over warmup_steps applied
// steps; a skipped step does not advance it.
func TestWarmup(t *testing.T) {
	m, _ := loadTiny(t, tinySpec())
	o := testOptions(false)
	o.LR, o.WarmupSteps = 1e-3, 4
	tr := newTrainer(t, m, o)
	batch := mixedBatch(6, 2)
	bad := mixedBatch(6, 2)
	bad[0].Advantages = make([]float32, len(bad[0].Response))
	bad[0].Advantages[0] = float32(math.NaN())
	var got []float64
	for i := range 6 {
		if i == 2 {
			if met, _ := tr.Step(bad); !met.Skipped {
				t.Fatal("NaN step not skipped")
			}
		}
		met, err := tr.Step(batch)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, met.LR)
	}
	want := []float64{0.25e-3, 0.5e-3, 0.75e-3, 1e-3, 1e-3, 1e-3}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Fatalf("learning rates %v, want %v", got, want)
		}
	}
}

// TestKLPenalty: with kl_coef > 0 and no reference log-probs in the
// samples, the trainer scores them with the frozen base; the KL starts at
// zero and the penalty keeps the policy closer to the base than training
// without it.
func TestKLPenalty(t *testing.T) {
	m, _ := loadTiny(t, tinySpec())
	batch := mixedBatch(7, 6)
	klAfter := func(coef float64) (first, last float64) {
		o := testOptions(false)
		o.KLCoef = coef
		tr := newTrainer(t, m, o)
		for i := range 12 {
			// The metric needs reference log-probs: supply the base's when
			// the penalty is off.
			b := batch
			if coef == 0 {
				b = withRef(t, m, batch)
			}
			met, err := tr.Step(b)
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = met.KL
			}
			last = met.KL
		}
		return first, last
	}
	f0, l0 := klAfter(0)
	f1, l1 := klAfter(1)
	t.Logf("KL to the base after 12 steps: %.4f without penalty, %.4f with kl_coef 1", l0, l1)
	if math.Abs(f0) > 1e-5 || math.Abs(f1) > 1e-5 {
		t.Errorf("KL at the first step %g, %g; want 0", f0, f1)
	}
	if !(l0 > 0 && l1 < l0*0.8) {
		t.Errorf("KL %g with the penalty, %g without: want clearly less", l1, l0)
	}
}

// TestSupervisedHasNoKL: a supervised (replay) sample adds no KL term and
// does not enter the KL metric, however far the policy is from the base on
// its tokens; it still trains.
func TestSupervisedHasNoKL(t *testing.T) {
	m, _ := loadTiny(t, tinySpec())
	batch := mixedBatch(7, 4)
	o := testOptions(false)
	o.KLCoef = 1
	// stepAfter moves a fresh trainer away from the base (8 steps on the
	// batch), then steps on b and returns that step's metrics.
	stepAfter := func(b []Sample) Metrics {
		t.Helper()
		tr := newTrainer(t, m, o)
		for range 8 {
			if _, err := tr.Step(batch); err != nil {
				t.Fatal(err)
			}
		}
		met, err := tr.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		return met
	}
	alone := stepAfter(batch[:2])
	// The same two samples beside a supervised example whose tokens the
	// policy now finds unlikely: the KL metric reads the same.
	sup := Sample{Prompt: batch[2].Prompt, Response: batch[2].Response, Supervised: true, Advantages: make([]float32, len(batch[2].Response))}
	for i := range sup.Advantages {
		sup.Advantages[i] = 0.5
	}
	with := stepAfter(append(slices.Clone(batch[:2]), sup))
	// Equal to F32 rounding: a pass over three samples tiles its products
	// differently from one over two (3e-8 relative seen).
	if !(alone.KL > 0) || math.Abs(with.KL-alone.KL) > 1e-6*math.Max(1, alone.KL) || with.Samples != 3 {
		t.Errorf("KL %g beside a supervised sample, %g without; %d samples", with.KL, alone.KL, with.Samples)
	}
	// Without the flag the same example enters the metric.
	sup.Supervised = false
	if plain := stepAfter(append(slices.Clone(batch[:2]), sup)); plain.KL == alone.KL {
		t.Errorf("an unflagged sample left the KL at %g", plain.KL)
	}
}

func withRef(t *testing.T, m *model.Model, batch []Sample) []Sample {
	sc := newScorer(t, m)
	out := slices.Clone(batch)
	for i, s := range sc.logProbs(t, m.Weights(), reqsOf(batch), 0) {
		out[i].RefLogProbs = s.LogProbs
	}
	return out
}

// TestInvalidSample: a malformed sample fails the step before anything
// changes, naming the sample.
func TestInvalidSample(t *testing.T) {
	m, _ := loadTiny(t, tinySpec())
	tr := newTrainer(t, m, testOptions(false))
	for _, tt := range []struct {
		name string
		mod  func(*Sample)
		msg  string
	}{
		{"token outside vocabulary", func(s *Sample) { s.Response[0] = 64 }, "outside the vocabulary"},
		{"empty response", func(s *Sample) { s.Response = nil }, "empty response"},
		{"short teacher", func(s *Sample) { s.TeacherLogProbs = []float32{1} }, "teacher log-probs"},
		{"too long", func(s *Sample) { s.Prompt = make([]int32, 200) }, "positions"},
	} {
		batch := mixedBatch(8, 3)
		batch[1].ResponseID = "resp-42"
		tt.mod(&batch[1])
		params := paramValues(t, tr)
		_, err := tr.Step(batch)
		if err == nil || !strings.Contains(err.Error(), tt.msg) || !strings.Contains(err.Error(), "resp-42") {
			t.Errorf("%s: error %v", tt.name, err)
		}
		if !equalBits(params, paramValues(t, tr)) || tr.StepCount() != 0 {
			t.Errorf("%s: parameters changed", tt.name)
		}
	}
}

// TestPublishVersions: Publish numbers versions in the store, links each
// to its parent, records training metadata, and the trainer's version
// follows (so staleness is measured against it).
func TestPublishVersions(t *testing.T) {
	m, _ := loadTiny(t, tinySpec())
	tr := newTrainer(t, m, testOptions(false))
	s := weights.NewStore(weights.StoreOptions{Keep: 1})
	defer s.Close()
	if _, err := s.Publish(m.Weights(), 0, weights.Meta{Note: "base"}); err != nil {
		t.Fatal(err)
	}
	tr.SetVersion(s.Current())
	batch := mixedBatch(9, 3)
	for i := range batch {
		batch[i].Version = 1
	}
	met, err := tr.Step(batch)
	if err != nil {
		t.Fatal(err)
	}
	v, err := tr.Publish(s)
	if err != nil {
		t.Fatal(err)
	}
	if v.Number() != 2 || v.Parent() != 1 || tr.Version() != 2 || s.Current() != 2 {
		t.Fatalf("published %v; trainer at %d, store at %d", v, tr.Version(), s.Current())
	}
	if meta := v.Meta(); meta.Step != 1 || meta.Samples != 3 || meta.Loss != met.Loss || meta.Tokens != int64(met.Tokens) {
		t.Fatalf("meta %+v for metrics %+v", meta, met)
	}
	// The published weights serve the trained parameters: they score
	// differently from the base.
	sc := newScorer(t, m)
	held, _ := s.Acquire()
	defer s.Release(held)
	a := sc.logProbs(t, m.Weights(), reqsOf(batch), 0)
	b := sc.logProbs(t, held.Weights(), reqsOf(batch), 0)
	if slices.Equal(a[0].LogProbs, b[0].LogProbs) {
		t.Fatal("published version scores like the base")
	}
	// Samples of version 1 are now one version stale.
	met, err = tr.Step(batch)
	if err != nil || met.Staleness[1] != 3 {
		t.Fatalf("staleness after publish: %+v, %v", met, err)
	}
}

// PPOEpochs 2: two optimizer updates on one batch, the second against the
// proximal policy (the parameters before the first), exactly as one
// update followed by an update whose ratio is taken against the first
// pass's log-probs; with a large learning rate the clip binds.
func TestPPOEpochsUseTheProximalPolicy(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			m, _ := loadTiny(t, tinySpec())
			batch := mixedBatch(3, 6)
			o := testOptions(mode.lora)
			o.LR, o.WarmupSteps = 0.05, 0
			two := o
			two.PPOEpochs = 2
			a, b := newTrainer(t, m, two), newTrainer(t, m, o)
			met, err := a.Step(batch)
			if err != nil {
				t.Fatal(err)
			}
			if !met.Applied || met.Step != 2 || a.StepCount() != 2 {
				t.Fatalf("metrics %+v, step count %d: want two applied updates", met, a.StepCount())
			}
			if !(met.ClipFraction > 0) {
				t.Errorf("clip fraction %v after a second update at lr %v: the clip never bound", met.ClipFraction, o.LR)
			}
			// The same by hand on b.
			first, err := b.accumulate(ptrs(batch), nil)
			if err != nil {
				t.Fatal(err)
			}
			b.tr.ZeroGrad()
			if _, err := b.Step(batch); err != nil {
				t.Fatal(err)
			}
			second, err := b.accumulate(ptrs(batch), first.logps)
			if err != nil {
				t.Fatal(err)
			}
			var mb Metrics
			mb.Applied = true
			if ok, err := b.update(&mb); err != nil || !ok {
				t.Fatal(ok, err)
			}
			if second.clipped == 0 {
				t.Error("the hand-made second update clipped nothing")
			}
			if d, s := maxAbsDiff(paramValues(t, a), paramValues(t, b)); d > 1e-6*math.Max(1, s) {
				t.Errorf("parameters differ by %g from one update plus one against the proximal log-probs", d)
			}
			// Against its own log-probs instead (the clip never binding),
			// the result differs: the test can tell.
			c := newTrainer(t, m, o)
			for range 2 {
				if _, err := c.Step(batch); err != nil {
					t.Fatal(err)
				}
			}
			if d, _ := maxAbsDiff(paramValues(t, a), paramValues(t, c)); d == 0 {
				t.Error("two epochs equal two independent steps")
			}
		})
	}
}
