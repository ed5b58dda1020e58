package compute

import "testing"

type fake struct {
	dt    DType
	shape []int
}

func (f fake) DType() DType { return f.dt }
func (f fake) Shape() []int { return f.shape }

func TestShapeHelpers(t *testing.T) {
	for _, tt := range []struct {
		t               Tensor
		len, rows, cols int
		str             string
	}{
		{fake{F32, []int{3, 4}}, 12, 3, 4, "[3 4]"},
		{fake{I32, []int{5}}, 5, 5, 1, "[5]"},
		{fake{BF16, []int{2, 3, 4}}, 24, 2, 12, "[2 3 4]"},
		{fake{F16, []int{0, 7}}, 0, 0, 7, "[0 7]"},
	} {
		if got := Len(tt.t); got != tt.len {
			t.Errorf("Len(%v) = %d, want %d", tt.t.Shape(), got, tt.len)
		}
		if got := Rows(tt.t); got != tt.rows {
			t.Errorf("Rows(%v) = %d, want %d", tt.t.Shape(), got, tt.rows)
		}
		if got := Cols(tt.t); got != tt.cols {
			t.Errorf("Cols(%v) = %d, want %d", tt.t.Shape(), got, tt.cols)
		}
		if got := ShapeString(tt.t.Shape()); got != tt.str {
			t.Errorf("ShapeString = %q, want %q", got, tt.str)
		}
	}
}

func TestDType(t *testing.T) {
	for _, tt := range []struct {
		d    DType
		size int
		name string
	}{{F32, 4, "F32"}, {BF16, 2, "BF16"}, {F16, 2, "F16"}, {I32, 4, "I32"}, {DType(99), 0, "DType(99)"}} {
		if tt.d.Size() != tt.size || tt.d.String() != tt.name {
			t.Errorf("%v: size %d, name %q", tt.d, tt.d.Size(), tt.d.String())
		}
	}
}

// TestKVIndex pins the cache layout: blocks of slots, head-major inside a
// block, every element of the cache used once.
func TestKVIndex(t *testing.T) {
	for _, geo := range []Attention{
		{KVHeads: 1, HeadDim: 4, BlockSize: 1},
		{KVHeads: 2, HeadDim: 8, BlockSize: 4},
		{KVHeads: 8, HeadDim: 128, BlockSize: 16},
	} {
		bs, kvh, hd := geo.BlockSize, geo.KVHeads, geo.HeadDim
		seen := make([]bool, 3*bs*kvh*hd)
		for s := range 3 * bs {
			for g := range kvh {
				at := geo.KVIndex(s, g)
				for d := range hd {
					if seen[at+d] {
						t.Fatalf("%+v: element %d used twice", geo, at+d)
					}
					seen[at+d] = true
				}
			}
		}
		for _, c := range []struct{ slot, g, want int }{
			{0, 0, 0},
			{1, 0, hd},                        // the next slot's vector follows
			{0, kvh - 1, (kvh - 1) * bs * hd}, // after the block's rows of the heads before
			{bs + 1, 0, bs*kvh*hd + hd},       // block 1 follows block 0 whole
		} {
			if got := geo.KVIndex(c.slot, c.g); got != c.want {
				t.Errorf("%+v: KVIndex(%d, %d) = %d, want %d", geo, c.slot, c.g, got, c.want)
			}
		}
	}
}
