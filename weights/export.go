package weights

import (
	"fmt"
	"io"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/safetensors"
)

// WeightsFile is the checkpoint file model.safetensors holding w's tensors
// under their Hugging Face names, each in the dtype it has on the backend
// (F32, or BF16 as the base checkpoint had it), so the file loads with
// model.Load and with other tools. Tensors are copied to the host one at a
// time while the file is written. Reading BF16 tensors needs a backend that
// implements compute.Trainer (for Convert, an exact widening).
func WeightsFile(b compute.Backend, w *model.Weights) File {
	return File{Name: ModelFile, Create: func(path string) error {
		params := w.Params()
		tensors := make([]safetensors.WriteTensor, 0, len(params))
		for _, p := range params {
			var dt safetensors.DType
			switch p.T.DType() {
			case compute.F32:
				dt = safetensors.F32
			case compute.BF16:
				dt = safetensors.BF16
			default:
				return fmt.Errorf("tensor %q: cannot write dtype %v", p.Name, p.T.DType())
			}
			tensors = append(tensors, safetensors.WriteTensor{
				Name: p.Name, DType: dt, Shape: append([]int(nil), p.T.Shape()...), Stream: streamTensor(b, p.T),
			})
		}
		return safetensors.WriteFile(path, tensors, map[string]string{"format": "pt"})
	}}
}

// streamTensor writes one F32 or BF16 device tensor's little-endian bytes.
func streamTensor(b compute.Backend, t compute.Tensor) func(io.Writer) error {
	return func(w io.Writer) error {
		n := compute.Len(t)
		vals := make([]float32, n)
		if t.DType() == compute.F32 {
			if err := b.Read(vals, t); err != nil {
				return err
			}
			_, err := w.Write(safetensors.EncodeFloat32(vals))
			return err
		}
		tb, ok := b.(compute.Trainer)
		if !ok {
			return fmt.Errorf("backend %s cannot read BF16 tensors back (no compute.Trainer)", b.Name())
		}
		wide, err := b.NewTensor(compute.F32, t.Shape()...)
		if err != nil {
			return err
		}
		defer b.Free(wide)
		tb.Convert(wide, t) // BF16 → F32 is exact
		if err := b.Read(vals, wide); err != nil {
			return err
		}
		bits := make([]uint16, n)
		for i, v := range vals {
			bits[i] = safetensors.Float32ToBF16(v) // exact: v came from BF16
		}
		_, err = w.Write(safetensors.EncodeUint16(bits))
		return err
	}
}
