package trainer

import "math"

// rewardMean is the running mean of binary rewards that Options.BaselineWindow
// subtracts from each reward: an exponential mean with decay d = 1 − 1/W
// that starts from one neutral reward (0) of prior weight, decaying as the
// rewards' weights do. Over rewards r₀ … rₙ₋₁ it is
//
//	Σ dⁿ⁻¹⁻ⁱ·rᵢ / (Σ dⁿ⁻¹⁻ⁱ + dⁿ)
//
// so a first step has baseline 0 (the first feedback a daemon gets trains
// as it would without a baseline), one earlier reward counts about half,
// and the prior fades as rewards come (Adam's bias correction, but towards
// 0 at the start).
type rewardMean struct {
	m float64 // (1−d)·Σ dⁿ⁻¹⁻ⁱ·rᵢ: the uncorrected exponential mean
	n int64   // rewards seen
}

// value is the baseline for window w.
func (r *rewardMean) value(w int) float64 {
	if r.n == 0 || w <= 0 {
		return 0
	}
	d := 1 - 1/float64(w)
	dn := math.Pow(d, float64(r.n))
	return r.m / (1 - dn + (1-d)*dn)
}

// add folds one reward in.
func (r *rewardMean) add(w int, x float64) {
	d := 1 - 1/float64(w)
	r.m = d*r.m + (1-d)*x
	r.n++
}

// assign returns the baseline of each sample of keep that has a binary
// reward (0 for the rest), or nil when the baseline is off or no sample
// has a reward, and then folds the batch's rewards into the mean: a
// sample is measured against the rewards of earlier steps, never its own
// or its batch's. met.Baseline gets the baseline the step used.
func (r *rewardMean) assign(keep []*Sample, w int, met *Metrics) []float64 {
	if w <= 0 {
		return nil
	}
	b := r.value(w)
	var out []float64
	for i, s := range keep {
		if s.Reward == 0 || s.Advantages != nil {
			continue
		}
		if out == nil {
			out = make([]float64, len(keep))
		}
		out[i] = b
	}
	if out == nil {
		return nil
	}
	met.Baseline = b
	for _, s := range keep {
		if s.Reward != 0 && s.Advantages == nil {
			r.add(w, float64(s.Reward))
		}
	}
	return out
}
