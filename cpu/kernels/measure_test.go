package kernels

import (
	"testing"
	"time"
)

// TestPeakLoops checks that the peak measurements run and agree with the
// kernel set: the BF16 dot peak is measured exactly where the products use
// the instruction, and there it is within a plausible factor of the FMA
// peak: twice it on AMD Zen 4/5, where VDPBF16PS issues as often as an
// FMA and does twice the work; half of it on Intel Sapphire Rapids-class
// Xeons, where it issues on one port where FMAs have two (measured:
// 116-118 against 227-235 GFLOP/s on one core).
func TestPeakLoops(t *testing.T) {
	for _, set := range AvailableKernels() {
		t.Run(set, func(t *testing.T) {
			old := Kernels()
			if err := SetKernels(set); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = SetKernels(old) }()
			fma := PeakGFLOPS(1, 20*time.Millisecond)
			dot := PeakBF16DotGFLOPS(1, 20*time.Millisecond)
			if fma <= 0 {
				t.Fatalf("FMA peak %v", fma)
			}
			switch {
			case !HasBF16Dot() && dot != 0:
				t.Fatalf("BF16 dot peak %v without the instruction in use", dot)
			case HasBF16Dot() && (dot < fma/4 || dot > 8*fma):
				t.Fatalf("BF16 dot peak %v against an FMA peak of %v", dot, fma)
			}
			t.Logf("FMA %.1f GFLOP/s, BF16 dot %.1f GFLOP/s", fma, dot)
		})
	}
}
