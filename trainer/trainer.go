package trainer

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/weights"
)

// Trainer updates a model's parameters from batches of samples. It owns a
// trainable copy of the weights (every parameter, or LoRA adapters over a
// frozen base), their gradients and the AdamW moments, all on the model's
// backend; the served weights are separate immutable versions that Publish
// makes.
//
// Its methods may be called from one goroutine at a time; they also lock,
// so a stray concurrent call waits instead of corrupting state. Step,
// Publish and Save run on the backend alongside serving (compute.Trainer
// allows one serving and one training goroutine).
type Trainer struct {
	mu   sync.Mutex
	m    *model.Model
	b    compute.Trainer
	opts Options
	base *model.Weights // frozen: the LoRA base and the KL reference
	tr   *model.Trainable

	params []model.Param
	mom    []moments // AdamW first and second moments, per parameter

	step     int64  // optimizer steps applied
	version  uint64 // version of the current parameters (see Version)
	dirty    bool   // parameters changed since the last Publish or Restore
	restored *weights.Info
	samples  int64 // trained on, in total
	tokens   int64
	skipped  int64
	lastLoss float64
	lrScale  float64 // times the scheduled learning rate (ScaleLR); 1 at start

	refCache  *model.KVCache // for reference log-probs (KL), made on first use
	refTokens int            // tokens refCache holds
	lineage   *Lineage
	start     []compute.Tensor // the parameters at a step's start (trust region), made on first use
	closed    bool

	baseline  rewardMean // running mean of binary rewards (Options.BaselineWindow)
	baselines []float64  // per sample of a Step's keep: the baseline of its reward (nil: none)
}

type moments struct{ m, v compute.Tensor }

// New makes a trainer for m, starting from base, which it keeps as the
// frozen reference for the KL penalty and, with LoRA, as the weights the
// adapters sit on: base must stay valid until Close. The model's backend
// must implement compute.Trainer. The trainer starts at version 0; call
// SetVersion when base is a published version.
func New(m *model.Model, base *model.Weights, opts Options) (*Trainer, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	b, ok := m.Backend().(compute.Trainer)
	if !ok {
		return nil, fmt.Errorf("trainer: backend %s cannot train (no compute.Trainer)", m.Backend().Name())
	}
	to := model.TrainOptions{Checkpointing: opts.Checkpointing}
	if opts.LoRARank > 0 {
		to.LoRA = &model.LoRAConfig{
			Rank: opts.LoRARank, Alpha: float32(opts.LoRAAlpha),
			Targets: append([]string(nil), opts.LoRATargets...), Seed: opts.LoRASeed,
			MergeDType: compute.F32,
		}
		if opts.LoRAMergeDType == "bfloat16" {
			to.LoRA.MergeDType = compute.BF16
		}
	}
	tr, err := m.NewTrainable(base, to)
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	t := &Trainer{m: m, b: b, opts: opts, base: base, tr: tr, params: tr.Params(), lrScale: 1, lineage: NewLineage()}
	t.opts.LoRATargets = append([]string(nil), opts.LoRATargets...)
	for _, p := range t.params {
		var mm moments
		if mm.m, err = b.NewTensor(compute.F32, p.Value.Shape()...); err == nil {
			mm.v, err = b.NewTensor(compute.F32, p.Value.Shape()...)
		}
		if err != nil {
			if mm.m != nil {
				b.Free(mm.m)
			}
			t.Close()
			return nil, fmt.Errorf("trainer: optimizer state for %s: %w", p.Name, err)
		}
		t.mom = append(t.mom, mm)
	}
	return t, nil
}

// Options returns the trainer's options.
func (t *Trainer) Options() Options {
	o := t.opts
	o.LoRATargets = append([]string(nil), o.LoRATargets...)
	return o
}

// Version is the number of the weight version the trainer's parameters
// are: the last one it published or restored, or the one set by
// SetVersion. A sample's staleness is Staleness(Sample.Version).
func (t *Trainer) Version() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.version
}

// SetVersion tells the trainer which published version its parameters
// are (the store's version of the base weights, at start). The lineage
// records it, at the trainer's step count, unless it knows it already.
func (t *Trainer) SetVersion(n uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.version = n
	if !t.lineage.Known(n) {
		t.lineage.Add(n, 0, t.step)
	}
}

// Lineage is the version tree staleness is measured on. The trainer adds
// the versions it publishes and restores; add the ones published before a
// restart (the store's record) before the first Step.
func (t *Trainer) Lineage() *Lineage { return t.lineage }

// Staleness is how far behind the trainer's parameters the weights of
// version v are: the optimizer steps between them along the lineage, or,
// when the lineage does not know v, the difference of the version numbers
// (0 for a version ahead of the trainer's).
func (t *Trainer) Staleness(v uint64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stalenessLocked(v)
}

func (t *Trainer) stalenessLocked(v uint64) int {
	if n, ok := t.lineage.Steps(v, t.version); ok {
		return n
	}
	if v >= t.version {
		return 0
	}
	return int(min(t.version-v, uint64(math.MaxInt32)))
}

// ScaleLR multiplies the learning rate of every later step by f (the
// guard lowers it after a rollback) and returns the resulting scale of
// the configured rate.
func (t *Trainer) ScaleLR(f float64) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f > 0 && !math.IsInf(f, 0) {
		t.lrScale *= f
	}
	return t.lrScale
}

// LRScale is the scale of the configured learning rate (1 unless ScaleLR
// lowered it).
func (t *Trainer) LRScale() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lrScale
}

// StepCount is the number of optimizer steps applied.
func (t *Trainer) StepCount() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.step
}

// Params are the trained parameters (with their gradients), for tests and
// inspection; they belong to the trainer.
func (t *Trainer) Params() []model.Param { return t.params }

// Close frees the trainable parameters, gradients and optimizer state.
// It does not free base.
func (t *Trainer) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.closed = true
	for _, mm := range t.mom {
		t.b.Free(mm.m)
		t.b.Free(mm.v)
	}
	t.mom = nil
	if t.tr != nil {
		t.tr.Free()
	}
	if t.refCache != nil {
		t.refCache.Close()
	}
	for _, x := range t.start {
		t.b.Free(x)
	}
	t.start = nil
}

// MergeForServing sets how Publish makes LoRA versions from now on
// (model.Trainable.SetMergeDType): merged into matrices of dtype dt, or,
// with dt 0, with the adapters unmerged. Options.LoRAMergeDType, which
// checkpoints record, does not change: this is a choice of where versions
// are served (the engine's: BF16 for GPU replicas of BF16 weights,
// unmerged for the CPU's), not of the lineage.
func (t *Trainer) MergeForServing(dt compute.DType) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.tr.SetMergeDType(dt); err != nil {
		return fmt.Errorf("trainer: %w", err)
	}
	return nil
}

// SetSlicer makes training passes share the machine with serving through
// s (priority.Gate), a layer at a time; nil: not at all.
func (t *Trainer) SetSlicer(s model.Slicer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tr.SetSlicer(s)
}

// errSkip marks a step abandoned by the non-finite guard.
var errSkip = errors.New("non-finite")

// Step trains on one batch: PPOEpochs optimizer updates (default one)
// over all of its samples that are fresh enough and carry a signal.
//
// The PPO ratio is taken against the proximal policy, as in AReaL's
// decoupled PPO: the parameters when the step begins. The first update's
// forward pass is that policy, so the trainer takes its own log-probs,
// detached, as logπ_old (no extra forward): ρ is 1 there and the clip
// decides nothing. Later updates (PPOEpochs > 1) reuse those log-probs, so
// ρ moves away from 1 and the clip bounds how far one batch moves a token
// (Metrics.ClipFraction reports those updates). The behaviour policy (the
// distribution the rollout really drew each token from: the generating
// version's, tempered, truncated and masked) enters through the truncated
// importance weight from behaviour to proximal, which corrects for the
// versions between the rollout and now and for the sampler; MaxStaleness
// bounds the gap, in optimizer steps of the lineage (Staleness).
//
// With TargetKL > 0 every update stays inside a trust region: after it, a
// forward pass over the batch estimates the KL from the step's start to
// the new parameters (k3, importance-weighted as the KL to the reference
// is, see klWeight), and while it exceeds TargetKL the update is scaled
// back (the same AdamW step at a lower learning rate: by 0.9·√(target/KL),
// at most ½, as KL grows as the square of a small step), at most
// maxBacktracks times, then undone; a step that had to shrink makes no
// further updates (PPO's early stop at target_kl). Metrics.StepKL,
// Backtracks and TrustScale report it.
//
// Samples are processed in micro-batches of at most MicroBatchTokens
// tokens; each micro-batch's gradient is scaled so that their sum is the
// gradient of the whole batch's loss (the mean over samples of each
// sample's token-mean). The step is all-or-nothing: if any loss or
// gradient of the first update is NaN or infinite, the gradients are
// dropped, nothing else changes (parameters, moments, step count) and
// Metrics.Skipped is set; a non-finite later update is dropped with the
// rest, the earlier ones standing (Metrics.SkipReason says so).
//
// An invalid sample (empty, a token outside the vocabulary, a per-token
// slice of the wrong length) fails the call before anything changes.
func (t *Trainer) Step(batch []Sample) (Metrics, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	met := Metrics{Step: t.step, SkippedTotal: t.skipped, Staleness: make([]int, t.opts.MaxStaleness+1), TrustScale: 1}
	if t.closed {
		return met, errors.New("trainer: closed")
	}
	c := t.m.Config
	for i := range batch {
		if err := batch[i].validate(c.VocabSize, c.MaxPositions); err != nil {
			return met, fmt.Errorf("trainer: %s: %w", batch[i].describe(i), err)
		}
	}

	// Keep the samples that can train.
	var keep []*Sample
	for i := range batch {
		s := &batch[i]
		stale := t.stalenessLocked(s.Version)
		switch {
		case !s.hasSignal():
			met.NoSignal++
		case stale > t.opts.MaxStaleness:
			met.Stale++
		case s.unmasked() == 0:
			met.Empty++
		default:
			met.Staleness[stale]++
			keep = append(keep, s)
		}
	}
	met.Dropped = met.NoSignal + met.Stale + met.Empty
	if len(keep) == 0 {
		return met, nil
	}

	// Each binary reward is measured against the rewards before it.
	t.baselines = t.baseline.assign(keep, t.opts.BaselineWindow, &met)
	defer func() { t.baselines = nil }()

	// The first update's forward pass is the proximal policy; later
	// updates (PPOEpochs > 1) take their ratio and importance weight
	// against its log-probs.
	var prox [][]float32
	for epoch := range max(t.opts.PPOEpochs, 1) {
		acc, err := t.accumulate(keep, prox)
		if epoch == 0 {
			met.MicroBatches, met.PassTokens = acc.microBatches, acc.passTokens
		}
		switch {
		case errors.Is(err, errSkip) && epoch == 0:
			return t.skip(met, acc.reason), nil
		case errors.Is(err, errSkip):
			// Earlier updates stand; this one and the rest are dropped.
			t.tr.ZeroGrad()
			met.SkipReason = fmt.Sprintf("update %d of %d: %s", epoch+1, t.opts.PPOEpochs, acc.reason)
			return met, nil
		case err != nil:
			t.tr.ZeroGrad()
			return met, err
		}
		if epoch == 0 {
			acc.fill(&met)
			prox = acc.logps
			met.ClipFraction = 0
		} else {
			// The clip can bind from the second update on: report it there.
			met.ClipFraction += float64(acc.clipped) / float64(max(acc.tokens, 1)) / float64(t.opts.PPOEpochs-1)
		}
		if t.opts.TargetKL > 0 {
			if err := t.saveStart(); err != nil {
				t.tr.ZeroGrad()
				return met, err
			}
		}
		applied, err := t.update(&met)
		if err != nil || !applied {
			return met, err
		}
		if t.opts.TargetKL > 0 {
			within, err := t.trustRegion(keep, prox, &met)
			if err != nil {
				return met, err
			}
			if !within {
				break // the update had to shrink: no further updates on this batch
			}
		}
	}
	return met, nil
}

// maxBacktracks is how many times the trust region shrinks an update
// before it undoes it.
const maxBacktracks = 5

// saveStart copies the parameters before an update, for the trust region.
func (t *Trainer) saveStart() error {
	if t.start == nil {
		for _, p := range t.params {
			c, err := t.b.NewTensor(compute.F32, p.Value.Shape()...)
			if err != nil {
				for _, x := range t.start {
					t.b.Free(x)
				}
				t.start = nil
				return fmt.Errorf("trainer: trust region: a copy of %s: %w", p.Name, err)
			}
			t.start = append(t.start, c)
		}
	}
	for i, p := range t.params {
		t.b.Copy(t.start[i], p.Value)
	}
	return nil
}

// trustRegion measures the KL from the proximal policy (prox, the step's
// start) to the parameters after an update and, while it exceeds
// TargetKL, shrinks the update (at most maxBacktracks times, then undoes
// it). It reports whether the update stood whole.
func (t *Trainer) trustRegion(keep []*Sample, prox [][]float32, met *Metrics) (bool, error) {
	kl, err := t.stepKL(keep, prox)
	if err != nil {
		return false, err
	}
	scale := 1.0
	for kl > t.opts.TargetKL {
		if met.Backtracks == maxBacktracks {
			// Undo it: the parameters are the step's start again (the
			// moments keep the gradient).
			for i, p := range t.params {
				t.b.Copy(p.Value, t.start[i])
			}
			if err := t.b.Synchronize(); err != nil {
				return false, fmt.Errorf("trainer: trust region: %w", err)
			}
			scale, kl = 0, 0
			break
		}
		// θ ← start + f·(θ − start): the AdamW step at f times the rate
		// (it is linear in the rate for given moments). KL grows as the
		// square of a small step, so f = 0.9·√(target/KL) should land
		// inside; at most ½, so that a step far from quadratic still
		// shrinks fast.
		f := min(0.5, 0.9*math.Sqrt(t.opts.TargetKL/kl))
		for i, p := range t.params {
			t.b.AddScaled(p.Value, t.start[i], -1)
			t.b.Scale(p.Value, float32(f))
			t.b.AddScaled(p.Value, t.start[i], 1)
		}
		if err := t.b.Synchronize(); err != nil {
			return false, fmt.Errorf("trainer: trust region: %w", err)
		}
		met.Backtracks++
		scale *= f
		if kl, err = t.stepKL(keep, prox); err != nil {
			return false, err
		}
	}
	met.StepKL, met.TrustScale = kl, met.TrustScale*scale
	return scale == 1, nil
}

// stepKL runs a forward pass over keep with the current parameters and
// returns the k3 estimate of KL(π_start‖π) per trained token, where
// π_start's log-probs are start (per sample of keep), each token weighted
// by klWeight against π_start. Supervised samples are left out; 0 when
// nothing is measured.
func (t *Trainer) stepKL(keep []*Sample, start [][]float32) (float64, error) {
	var sum, wsum float64
	bounds := microBatches(keep, t.opts.MicroBatchTokens)
	for g := 0; g+1 < len(bounds); g++ {
		mb := keep[bounds[g]:bounds[g+1]]
		ts := make([]model.TrainSample, len(mb))
		for i, s := range mb {
			ts[i] = model.TrainSample{Prompt: s.Prompt, Response: s.Response}
		}
		pass, err := t.tr.Forward(ts)
		if err != nil {
			return 0, fmt.Errorf("trainer: trust region: forward pass: %w", err)
		}
		for i, s := range mb {
			logp, old := pass.LogProbs[i], start[bounds[g]+i]
			for k := range s.Response {
				if s.Mask != nil && !s.Mask[k] {
					continue
				}
				w, ok := klWeight(s, k, float64(old[k]), t.opts.ImportanceCap)
				if !ok {
					continue
				}
				d := float64(logp[k]) - float64(old[k]) // log(π/π_start)
				sum += w * (math.Expm1(d) - d)
				wsum += w
			}
		}
		pass.Free()
	}
	switch {
	case math.IsNaN(sum):
		return math.Inf(1), nil // broken parameters: as far as can be
	case wsum == 0:
		return 0, nil
	}
	return sum / wsum, nil
}

// update takes the optimizer step on the gradients accumulated in the
// parameters, after the global-norm check; false (and a skipped step)
// when the norm is not finite.
func (t *Trainer) update(met *Metrics) (bool, error) {
	grads := make([]compute.Tensor, len(t.params))
	for i, p := range t.params {
		grads[i] = p.Grad
	}
	ss, err := t.b.SumSquares(grads...)
	if err != nil {
		t.tr.ZeroGrad()
		return false, fmt.Errorf("trainer: gradient norm: %w", err)
	}
	met.GradNorm = math.Sqrt(ss)
	if math.IsNaN(met.GradNorm) || math.IsInf(met.GradNorm, 0) {
		if met.Applied { // a later update of a step: the earlier ones stand
			t.tr.ZeroGrad()
			met.SkipReason = fmt.Sprintf("a later update's gradient norm %g", met.GradNorm)
			return false, nil
		}
		*met = t.skip(*met, fmt.Sprintf("gradient norm %g", met.GradNorm))
		return false, nil
	}

	next := t.step + 1
	lr := t.opts.LearningRate(int(next)) * t.lrScale
	opt := t.opts.AdamW()
	for i, p := range t.params {
		opt.Update(t.b, p, t.mom[i].m, t.mom[i].v, int(next), lr, met.GradNorm)
	}
	if err := t.b.Synchronize(); err != nil {
		// A device error midway leaves the parameters undefined; the
		// caller must restore from a checkpoint.
		return false, fmt.Errorf("trainer: optimizer step: %w", err)
	}
	t.tr.ZeroGrad()
	t.step = next
	t.dirty = true
	if !met.Applied { // samples and tokens count once per batch
		t.samples += int64(met.Samples)
		t.tokens += int64(met.Tokens)
	}
	t.lastLoss = met.Loss
	met.Step, met.Applied, met.LR = t.step, true, lr
	return true, nil
}

// skip abandons a step: gradients are zeroed, nothing else changes.
func (t *Trainer) skip(met Metrics, reason string) Metrics {
	t.tr.ZeroGrad()
	t.skipped++
	met.Skipped, met.SkippedTotal, met.SkipReason = true, t.skipped, reason
	met.Applied = false
	return met
}

// accumulation sums what the micro-batches of one step report.
type accumulation struct {
	microBatches, passTokens     int
	samples, tokens, clipped     int
	loss                         float64 // sum over samples of the token-mean loss
	klSum, entSum, lpSum, advSum float64
	wSum, klW                    float64
	reason                       string
	logps                        [][]float32 // per sample of keep: the pass's log-probs (the proximal policy's, on a first update)
}

func (a *accumulation) fill(m *Metrics) {
	m.Samples, m.Tokens = a.samples, a.tokens
	m.Loss = a.loss / float64(a.samples)
	if a.tokens > 0 {
		n := float64(a.tokens)
		m.ClipFraction = float64(a.clipped) / n
		m.Entropy = a.entSum / n
		m.LogProb = a.lpSum / n
		m.Advantage = a.advSum / n
		m.ImportanceWeight = a.wSum / n
	}
	if a.klW > 0 {
		m.KL = a.klSum / a.klW
	}
}

// accumulate runs forward and backward over keep in micro-batches,
// leaving the gradient of the batch loss in the parameters' Grad tensors.
// It returns an error wrapping errSkip when a loss or a loss gradient is
// not finite (the gradients are then partial and must be zeroed).
//
// prox, if not nil, holds per sample of keep the proximal policy's
// log-probs (the logπ_old of the ratio); nil takes the pass's own,
// detached, and returns copies of them in accumulation.logps.
func (t *Trainer) accumulate(keep []*Sample, prox [][]float32) (accumulation, error) {
	var acc accumulation
	if prox == nil {
		acc.logps = make([][]float32, len(keep))
	}
	cc := clipConfig{epsLow: t.opts.EpsLow, epsHigh: t.opts.EpsHigh, klCoef: t.opts.KLCoef}
	ac := advantageConfig{rlWeight: t.opts.RLWeight, opdWeight: t.opts.OPDWeight, clip: t.opts.AdvantageClip}
	scale := 1 / float64(len(keep)) // the batch loss is the mean over samples
	t.tr.ZeroGrad()
	bounds := microBatches(keep, t.opts.MicroBatchTokens)
	for g := 0; g+1 < len(bounds); g++ {
		mb := keep[bounds[g]:bounds[g+1]]
		bl := t.baselines
		refs, err := t.referenceLogProbs(mb)
		if err != nil {
			return acc, err
		}
		ts := make([]model.TrainSample, len(mb))
		for i, s := range mb {
			ts[i] = model.TrainSample{Prompt: s.Prompt, Response: s.Response}
			acc.passTokens += s.Tokens()
		}
		pass, err := t.tr.Forward(ts)
		if err != nil {
			return acc, fmt.Errorf("trainer: forward pass: %w", err)
		}
		acc.microBatches++
		dlogp := make([][]float32, len(mb))
		for i, s := range mb {
			logp := pass.LogProbs[i]
			old := logp // detached: see Step
			if prox != nil {
				old = prox[bounds[g]+i]
			} else {
				acc.logps[bounds[g]+i] = append([]float32(nil), logp...)
			}
			if bl != nil {
				ac.baseline = bl[bounds[g]+i]
			}
			st := sampleLoss(cc, ac, t.opts.ImportanceCap, s, logp, old, refs[i], scale)
			if math.IsNaN(st.loss) || math.IsInf(st.loss, 0) {
				pass.Free()
				acc.reason = fmt.Sprintf("%s: loss %g", s.describe(bounds[g]+i), st.loss)
				return acc, errSkip
			}
			for _, d := range st.grad {
				if math.IsNaN(float64(d)) || math.IsInf(float64(d), 0) {
					pass.Free()
					acc.reason = fmt.Sprintf("%s: loss gradient %g", s.describe(bounds[g]+i), d)
					return acc, errSkip
				}
			}
			dlogp[i] = st.grad
			acc.samples++
			acc.tokens += st.tokens
			acc.clipped += st.clipped
			acc.loss += st.loss
			acc.klSum += st.klSum
			acc.klW += st.klW
			acc.advSum += st.advSum
			acc.wSum += st.wSum
			for k := range s.Response {
				if s.Mask == nil || s.Mask[k] {
					acc.lpSum += float64(logp[k])
					if pass.Entropy != nil {
						acc.entSum += float64(pass.Entropy[i][k])
					}
				}
			}
		}
		err = pass.Backward(dlogp)
		pass.Free()
		if err != nil {
			return acc, fmt.Errorf("trainer: backward pass: %w", err)
		}
	}
	return acc, nil
}

// refBlock is the block size of the reference log-probs' KV cache.
const refBlock = 16

// referenceLogProbs returns, per sample of a micro-batch, the reference
// log-probs for the KL term: the sample's own, or, when the penalty is on
// and the sample has none, those of the frozen base weights. nil entries
// mean no KL term for that sample, as for a Supervised one.
func (t *Trainer) referenceLogProbs(mb []*Sample) ([][]float32, error) {
	refs := make([][]float32, len(mb))
	var need []model.ScoreRequest
	var idx []int
	for i, s := range mb {
		switch {
		case s.Supervised:
		case s.RefLogProbs != nil:
			refs[i] = s.RefLogProbs
		case t.opts.KLCoef > 0 || t.opts.MeasureKL:
			need = append(need, model.ScoreRequest{Prompt: s.Prompt, Response: s.Response})
			idx = append(idx, i)
		}
	}
	if len(need) == 0 {
		return refs, nil
	}
	// Cache room for every sequence, rounded up to whole blocks; a sample
	// larger than the micro-batch budget grows the cache.
	room := 0
	for _, r := range need {
		room += (len(r.Prompt)+len(r.Response)+refBlock-1)/refBlock*refBlock + refBlock
	}
	if t.refCache == nil || t.refTokens < room {
		if t.refCache != nil {
			t.refCache.Close()
			t.refCache = nil
		}
		tokens := max(room, t.opts.MicroBatchTokens+2*refBlock)
		kv, err := t.m.NewKVCache(model.KVCacheOptions{BlockSize: refBlock, Budget: t.m.Config.KVBytesPerToken(compute.F32) * int64(tokens)})
		if err != nil {
			return nil, fmt.Errorf("trainer: KV cache for reference log-probs: %w", err)
		}
		t.refCache, t.refTokens = kv, tokens
	}
	scored, err := t.m.LogProbsWith(t.base, t.refCache, need, 0)
	if err != nil {
		return nil, fmt.Errorf("trainer: reference log-probs: %w", err)
	}
	for j, i := range idx {
		refs[i] = scored[j].LogProbs
	}
	return refs, nil
}

// Publish makes the current parameters a new immutable version in store
// (full fine-tuning: a copy in the base dtype; LoRA: the base with the
// adapters merged) and makes it the trainer's version. Right after Restore
// the version keeps the checkpoint's number when the store has not
// numbered past it, so samples generated by it before a restart are not
// counted stale; otherwise (a rollback to an older checkpoint) it is a new
// number whose parent is the checkpoint's.
func (t *Trainer) Publish(store *weights.Store) (*weights.Version, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errors.New("trainer: closed")
	}
	w, err := t.tr.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("trainer: snapshot: %w", err)
	}
	meta := weights.Meta{Step: t.step, Samples: t.samples, Tokens: t.tokens, Loss: t.lastLoss}
	var v *weights.Version
	switch r := t.restored; {
	case r != nil && !t.dirty && r.Version > store.Last():
		meta.Note = r.Meta.Note
		v, err = store.PublishNumbered(w, r.Version, r.Parent, meta)
	case r != nil && !t.dirty:
		// The store has numbered past the checkpoint (it was not the
		// newest): publish the restored weights as a new version.
		meta.Note = r.Meta.Note
		v, err = store.Publish(w, r.Version, meta)
	default:
		v, err = store.Publish(w, t.version, meta)
	}
	if err != nil {
		w.Free()
		return nil, fmt.Errorf("trainer: %w", err)
	}
	t.lineage.Add(v.Number(), v.Parent(), t.step)
	t.version, t.dirty, t.restored = v.Number(), false, nil
	return v, nil
}
