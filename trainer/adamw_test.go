package trainer

import (
	"math"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/model"
)

// TestAdamWDecaysMatricesOnly applies one step with a zero gradient, so
// that only the weight decay moves anything: every matrix shrinks by
// 1 − lr·wd, every norm weight (Qwen3's q_norm and k_norm included) stays.
func TestAdamWDecaysMatricesOnly(t *testing.T) {
	m, _ := loadTiny(t, tinySpec())
	tr := newTrainer(t, m, testOptions(false))
	b := tr.b
	const lr, wd = 0.1, 0.5
	opt := AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: wd, GradClip: 1}
	tr.tr.ZeroGrad()
	norms, matrices := 0, 0
	for i, p := range tr.params {
		before, err := model.ReadTensor(b, p.Value)
		if err != nil {
			t.Fatal(err)
		}
		opt.Update(b, p, tr.mom[i].m, tr.mom[i].v, 1, lr, 0)
		after, err := model.ReadTensor(b, p.Value)
		if err != nil {
			t.Fatal(err)
		}
		decays := DecaysWeight(p)
		if isNorm := strings.HasSuffix(p.Name, "norm.weight"); isNorm == decays {
			t.Errorf("%s (shape %v): DecaysWeight = %v", p.Name, p.Value.Shape(), decays)
		}
		if decays {
			matrices++
		} else {
			norms++
		}
		f := float32(1)
		if decays {
			f = float32(1 - lr*wd)
		}
		for j := range before {
			if want := before[j] * f; math.Abs(float64(after[j]-want)) > 1e-6*math.Abs(float64(want)) {
				t.Fatalf("%s[%d] = %g, want %g (decay %v)", p.Name, j, after[j], want, decays)
			}
		}
	}
	if norms == 0 || matrices == 0 {
		t.Fatalf("%d norm weights and %d matrices: the model should have both", norms, matrices)
	}
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

func TestAdamWClipScale(t *testing.T) {
	for _, tt := range []struct{ clip, norm, want float64 }{
		{1, 0.5, 1}, {1, 1, 1}, {1, 4, 0.25}, {0, 100, 1}, {-1, 100, 1}, {2, 0, 1},
	} {
		if got := (AdamW{GradClip: tt.clip}).ClipScale(tt.norm); got != tt.want {
			t.Errorf("GradClip %g, norm %g: ClipScale %g, want %g", tt.clip, tt.norm, got, tt.want)
		}
	}
}
