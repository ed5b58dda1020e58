package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/clawrl/clawrl/compute"
)

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func tensorOf(t *testing.T, b *Backend, v []float32, shape ...int) compute.Tensor {
	t.Helper()
	x, err := b.NewTensor(compute.F32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	b.Write(x, v)
	return x
}

func ints(t *testing.T, b *Backend, v []int32) compute.Tensor {
	t.Helper()
	x, err := b.NewTensor(compute.I32, len(v))
	if err != nil {
		t.Fatal(err)
	}
	b.WriteInt32(x, v)
	return x
}

func closeTo(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*(1+math.Abs(want[i])) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestWeightCopyOrAlias(t *testing.T) {
	for _, zero := range []bool{false, true} {
		b := NewWithOptions(Options{ZeroCopyWeights: zero})
		f := []float32{1, 2}
		h := []uint16{0x3f80, 0x4000}
		wf, err := b.WeightF32(f, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		wh, err := b.WeightBF16(h, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		f[0], h[0] = 5, 0x40a0 // 5
		dst := tensorOf(t, b, make([]float32, 2), 1, 2)
		ids := ints(t, b, []int32{0})
		for name, w := range map[string]compute.Tensor{"F32": wf, "BF16": wh} {
			b.Embedding(dst, w, ids)
			want := float32(1)
			if zero {
				want = 5
			}
			if got := Float32s(dst)[0]; got != want {
				t.Errorf("ZeroCopyWeights %v, %s: weight reads %v after the source changed, want %v", zero, name, got, want)
			}
		}
	}
}

// TestReadBF16 reads a BF16 tensor's bits back as they are, large enough to
// be copied in parallel chunks, and refuses a destination of another
// length.
func TestReadBF16(t *testing.T) {
	b := New()
	for _, n := range []int{7, 3<<20 + 5} {
		bits := make([]uint16, n)
		for i := range bits {
			bits[i] = uint16(i*2654435761>>7) | 1
		}
		w, err := b.WeightBF16(bits, n)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]uint16, n)
		if err := b.ReadBF16(got, w); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, bits) {
			t.Fatalf("n %d: the bits read back differ", n)
		}
		if err := b.ReadBF16(got[:n-1], w); err == nil {
			t.Errorf("n %d: a short destination was accepted", n)
		}
		b.Free(w)
	}
}
