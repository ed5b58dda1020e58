package trainer

import (
	"math"
	"testing"
)

// refBaseline is the baseline after rewards rs with decay d, written out
// as rewardMean documents it: Σ dⁿ⁻¹⁻ⁱ·rᵢ / (Σ dⁿ⁻¹⁻ⁱ + dⁿ).
func refBaseline(d float64, rs ...float64) float64 {
	n := len(rs)
	var num, den float64
	for i, r := range rs {
		w := math.Pow(d, float64(n-1-i))
		num += w * r
		den += w
	}
	return num / (den + math.Pow(d, float64(n)))
}

// TestRewardMeanAssign checks the baselines of successive steps against
// the sums written out by hand (refBaseline, and for window 4 the numbers
// themselves).
func TestRewardMeanAssign(t *testing.T) {
	rw := func(rs ...float32) []*Sample {
		var out []*Sample
		for _, r := range rs {
			out = append(out, &Sample{Reward: r})
		}
		return out
	}
	// Window 4: d = 0.75. After the rewards +1, −1, −1, −1 their weights are
	// 0.421875, 0.5625, 0.75, 1 and the prior's 0.75⁴ = 0.31640625.
	after4 := (0.421875 - 0.5625 - 0.75 - 1) / (0.421875 + 0.5625 + 0.75 + 1 + 0.31640625)
	if r := refBaseline(0.75, 1, -1, -1, -1); math.Abs(r-after4) > 1e-15 {
		t.Fatalf("refBaseline %v, by hand %v", r, after4)
	}
	tests := []struct {
		name    string
		window  int
		batches [][]*Sample
		want    [][]float64 // per batch, per sample; nil: no baselines
		mean    []float64   // Metrics.Baseline per batch
	}{
		{"off", 0, [][]*Sample{rw(1, -1), rw(1)}, [][]float64{nil, nil}, []float64{0, 0}},
		{"none on the first step, then the running mean", 4,
			[][]*Sample{rw(1, -1, -1, -1), rw(-1, 1), rw(1)},
			[][]float64{{0, 0, 0, 0}, {after4, after4}, {refBaseline(0.75, 1, -1, -1, -1, -1, 1)}},
			[]float64{0, after4, refBaseline(0.75, 1, -1, -1, -1, -1, 1)}},
		{"one earlier reward counts about half", 16, [][]*Sample{rw(-1), rw(-1)}, [][]float64{{0}, {-16.0 / 31}}, []float64{0, -16.0 / 31}},
		{"unrewarded and explicit-advantage samples neither get nor give one", 4,
			[][]*Sample{{{Reward: 0}, {Reward: 1, Advantages: []float32{3}}, {Reward: -1}}, rw(1)},
			[][]float64{{0, 0, 0}, {-4.0 / 7}},
			[]float64{0, -4.0 / 7}},
		{"no rewards, no baselines", 4, [][]*Sample{rw(0, 0)}, [][]float64{nil}, []float64{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r rewardMean
			for i, b := range tt.batches {
				var met Metrics
				got := r.assign(b, tt.window, &met)
				if (got == nil) != (tt.want[i] == nil) || len(got) != len(tt.want[i]) {
					t.Fatalf("batch %d: baselines %v, want %v", i, got, tt.want[i])
				}
				for j := range got {
					if math.Abs(got[j]-tt.want[i][j]) > 1e-12 {
						t.Errorf("batch %d sample %d: baseline %v, want %v", i, j, got[j], tt.want[i][j])
					}
				}
				if math.Abs(met.Baseline-tt.mean[i]) > 1e-12 {
					t.Errorf("batch %d: Metrics.Baseline %v, want %v", i, met.Baseline, tt.mean[i])
				}
			}
		})
	}
}

// TestBaselineStopsBlanketRejection: a user who rejects every answer
// pushes every token the model wrote down at full weight without the
// baseline, step after step; with it the first step does, and each later
// one less, the advantage −1 − b going to 0 as the baseline learns that
// rejection is the rule. An answer accepted after them carries nearly the
// whole advantage, 1 − b ≈ 2.
func TestBaselineStopsBlanketRejection(t *testing.T) {
	m, _ := loadTiny(t, tinySpec())
	rejected := mixedBatch(11, 4)
	for i := range rejected {
		rejected[i].Reward, rejected[i].TeacherLogProbs, rejected[i].Mask = -1, nil, nil
	}
	const steps = 16
	for _, window := range []int{16, 0} {
		o := testOptions(true)
		o.BaselineWindow = window
		tr := newTrainer(t, m, o)
		d := 1 - 1/float64(window)
		var seen []float64
		for step := range steps {
			met, err := tr.Step(rejected)
			if err != nil {
				t.Fatal(err)
			}
			want := -1.0
			if window > 0 && step > 0 {
				want = -1 - refBaseline(d, seen...)
			}
			if math.Abs(met.Advantage-want) > 1e-9 {
				t.Errorf("window %d, step %d: mean advantage %v, want %v", window, step, met.Advantage, want)
			}
			if window > 0 && step == steps-1 && !(math.Abs(met.Advantage) < 0.02) {
				t.Errorf("window %d: advantage %v after %d rejections, want near 0", window, met.Advantage, len(seen))
			}
			seen = append(seen, -1, -1, -1, -1)
		}
		if window == 0 {
			continue
		}
		accepted := mixedBatch(12, 1)
		accepted[0].Reward, accepted[0].TeacherLogProbs, accepted[0].Mask = 1, nil, nil
		met, err := tr.Step(accepted)
		if err != nil {
			t.Fatal(err)
		}
		if want := 1 - refBaseline(d, seen...); math.Abs(met.Advantage-want) > 1e-9 || !(want > 1.95) {
			t.Errorf("an accepted answer after %d rejections: advantage %v, want %v (> 1.95)", len(seen), met.Advantage, want)
		}
	}
}
