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
