package weights

import (
	"fmt"
	"io"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/safetensors"
)

// WeightsFile is the checkpoint file model.safetensors holding w's tensors
// under their Hugging Face names, as model.Weights.FileTensors gives them:
// each in the dtype it has on the backend (F32, or BF16 as the base
// checkpoint had it), except that over a quantized base the quantized
// matrices are written dequantized and the LoRA adapters merged, in F32,
// so the file loads with model.Load and with other tools. Tensors are
// copied to the host one at a time while the file is written. Anything but
// F32 tensors needs a backend that implements compute.Trainer; the set is
// read on its own model's backend, which the first argument names (kept
// for the callers' clarity).
func WeightsFile(_ compute.Backend, w *model.Weights) File {
	return File{Name: ModelFile, Create: func(path string) error {
		params := w.FileTensors()
		tensors := make([]safetensors.WriteTensor, 0, len(params))
		for _, p := range params {
			var dt safetensors.DType
			switch p.DType {
			case compute.F32:
				dt = safetensors.F32
			case compute.BF16:
				dt = safetensors.BF16
			default:
				return fmt.Errorf("tensor %q: cannot write dtype %v", p.Name, p.DType)
			}
			tensors = append(tensors, safetensors.WriteTensor{
				Name: p.Name, DType: dt, Shape: p.Shape, Stream: streamTensor(p),
			})
		}
		return safetensors.WriteFile(path, tensors, map[string]string{"format": "pt"})
	}}
}

// streamTensor writes one tensor's little-endian bytes.
func streamTensor(p model.FileTensor) func(io.Writer) error {
	return func(w io.Writer) error {
		vals, err := p.Read()
		if err != nil {
			return err
		}
		if p.DType == compute.F32 {
			_, err = w.Write(safetensors.EncodeFloat32(vals))
			return err
		}
		bits := make([]uint16, len(vals))
		for i, v := range vals {
			bits[i] = safetensors.Float32ToBF16(v) // exact: v came from BF16
		}
		_, err = w.Write(safetensors.EncodeUint16(bits))
		return err
	}
}
