package cpu

import (
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/compute/computetest"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// TestConformance runs the backend conformance suite (every op, forward
// and backward, against the float64 reference) on the CPU backend, at both
// precisions of its products.
func TestConformance(t *testing.T) {
	for _, p := range []kernels.Precision{kernels.PrecisionF32, kernels.PrecisionBF16} {
		t.Run(p.String(), func(t *testing.T) {
			computetest.Trainer(t, NewWithOptions(Options{Precision: p}), computetest.Options{BF16Products: p == kernels.PrecisionBF16})
		})
	}
	// The forward checks through the Backend interface alone, as a
	// backend that cannot train runs them.
	t.Run("backend-only", func(t *testing.T) {
		computetest.Backend(t, struct{ compute.Backend }{New()}, computetest.Options{})
	})
}

// TestConformanceVariants runs the suite again on the other ways the CPU
// backend can compute: every kernel set this machine has (and the Sgemm
// path of attention beside the AVX-512 tile kernels), tiles and query
// blocks small enough that attention splits even the suite's short
// sequences, weights used in place, and a pool of three threads (uneven
// splits).
func TestConformanceVariants(t *testing.T) {
	if testing.Short() {
		t.Skip("TestConformance runs the suite on the default kernels")
	}
	type variant struct {
		name string
		opts Options
		set  func(t *testing.T)
	}
	var vs []variant
	for _, v := range attnVariants() {
		if v.set == kernels.Kernels() && v.asm == (flashAsm && v.set == kernels.KernelsAVX512) {
			continue // TestConformance's
		}
		vs = append(vs, variant{name: v.name, set: v.use})
	}
	vs = append(vs,
		variant{name: "small-tiles", set: func(t *testing.T) {
			oldTiles, oldBlock := tiles, attnBlock
			tiles = flashTiles{rows: 5, keys: 8, minSplit: 8, pieces: 100}
			attnBlock = 4
			t.Cleanup(func() { tiles, attnBlock = oldTiles, oldBlock })
		}},
		variant{name: "zero-copy-weights", opts: Options{ZeroCopyWeights: true}},
		variant{name: "three-threads"},
	)
	for _, v := range vs {
		for _, p := range []kernels.Precision{kernels.PrecisionF32, kernels.PrecisionBF16} {
			t.Run(v.name+"/"+p.String(), func(t *testing.T) {
				if v.set != nil {
					v.set(t)
				}
				o := v.opts
				o.Precision = p
				if v.name == "three-threads" {
					o.Pool = kernels.NewPool(3)
					defer o.Pool.Close()
				}
				computetest.Trainer(t, NewWithOptions(o), computetest.Options{BF16Products: p == kernels.PrecisionBF16})
			})
		}
	}
}
