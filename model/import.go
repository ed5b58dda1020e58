package model

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/safetensors"
)

// Import copies the weight set src of another model loaded from the same
// checkpoint, on another backend (the CPU trainer's versions into a GPU
// replica, say), onto m's backend, as a new set of m. Tensors src shares
// with its own model's checkpoint set (what a LoRA snapshot did not merge:
// norms, embeddings, unadapted matrices) are shared with m's checkpoint
// set instead of copied; the others are copied in their dtype. A BF16
// tensor is read back through its backend's compute.Trainer (Convert, an
// exact widening). A matrix that src serves with an unmerged LoRA adapter
// (over a quantized base) is merged into a copy, dequant(W) + scale·B·A,
// F32 (BF16 with RoundToBase where m's checkpoint holds it in BF16): m's
// backend may have no quantized products, and its checkpoint set holds
// that matrix as it does. src stays valid and unchanged.
func (m *Model) Import(src *Weights, opts ImportOptions) (*Weights, error) {
	dst := m.owner()
	if src == nil {
		return nil, errors.New("model: import of a nil weight set")
	}
	sm := src.m
	if sm == dst {
		return nil, errors.New("model: import of a set of the same model (use Clone)")
	}
	if err := sameShape(sm.Config, dst.Config); err != nil {
		return nil, fmt.Errorf("model: import: %w", err)
	}
	if _, err := sm.acquire(src); err != nil {
		return nil, fmt.Errorf("model: import: %w", err)
	}
	defer src.unlock()
	if dst.base == nil || sm.base == nil {
		return nil, errors.New("model: import: model is closed")
	}
	srcBase, dstBase := byName(sm.Config, sm.base.w), byName(dst.Config, dst.base.w)
	srcT := byName(sm.Config, src.w)
	adapted := src.w.adaptedByName()
	dstRefs := dst.base.refMap()
	sb := setBuilder{w: &weights{Layers: make([]layer, dst.Config.NumLayers)}}
	err := walkWeights(dst.Config, sb.w, func(name string, shape []int, f *compute.Tensor) error {
		t := srcT[name]
		if ad := adapted[name]; ad != nil {
			// An adapter served unmerged over a quantized matrix (src's
			// backend multiplies it quantized; m's may not): merged here.
			vals, err := mergedValues(sm.b, t, ad, src.w.loraScale)
			if err != nil {
				return fmt.Errorf("model: import: %s: %w", name, err)
			}
			var c compute.Tensor
			if opts.RoundToBase && dstBase[name].DType() == compute.BF16 {
				bits := make([]uint16, len(vals))
				toBF16Bits(bits, vals)
				c, err = dst.b.WeightBF16(bits, shape...)
			} else {
				c, err = dst.b.WeightF32(vals, shape...)
			}
			if err != nil {
				return fmt.Errorf("model: import: %s: %w", name, err)
			}
			*f = sb.own(c)
			return nil
		}
		if t == srcBase[name] {
			r := dstRefs[dstBase[name]]
			if r == nil {
				return fmt.Errorf("model: import: %s: the checkpoint's tensor is not counted", name)
			}
			*f = sb.share(r)
			return nil
		}
		round := opts.RoundToBase && t.DType() == compute.F32 && dstBase[name].DType() == compute.BF16
		c, err := copyTensor(dst.b, sm.b, t, round)
		if err != nil {
			return fmt.Errorf("model: import: %s: %w", name, err)
		}
		*f = sb.own(c)
		return nil
	})
	if err != nil {
		sb.abort(dst.b)
		return nil, err
	}
	return sb.done(dst), nil
}

// ImportOptions say how Import copies.
type ImportOptions struct {
	// RoundToBase stores a tensor that src holds in F32 and m's checkpoint
	// in BF16 (a LoRA merge in F32) as BF16, rounded to nearest even: half
	// the memory and the bytes each decode step reads, and the products
	// of BF16 weights (tensor cores on a GPU), for an error of at most half
	// a BF16 step per weight in the copy.
	RoundToBase bool
}

// byName maps each tensor of w to its Hugging Face name.
func byName(c *Config, w *weights) map[string]compute.Tensor {
	out := map[string]compute.Tensor{}
	walkWeights(c, w, func(name string, _ []int, f *compute.Tensor) error {
		out[name] = *f
		return nil
	})
	return out
}

// sameShape reports why models of configs a and b could not share weight
// sets (nil when they can).
func sameShape(a, b *Config) error {
	switch {
	case a.Architecture != b.Architecture, a.HiddenSize != b.HiddenSize, a.IntermediateSize != b.IntermediateSize,
		a.NumLayers != b.NumLayers, a.NumHeads != b.NumHeads, a.NumKVHeads != b.NumKVHeads, a.HeadDim != b.HeadDim,
		a.VocabSize != b.VocabSize, a.TieWordEmbeddings != b.TieWordEmbeddings, a.QKNorm != b.QKNorm:
		return fmt.Errorf("the models have different shapes (%s %d layers × %d, vocabulary %d; %s %d layers × %d, vocabulary %d)",
			a.Architecture, a.NumLayers, a.HiddenSize, a.VocabSize, b.Architecture, b.NumLayers, b.HiddenSize, b.VocabSize)
	}
	return nil
}

// copyTensor copies an F32 or BF16 tensor of backend from to a new weight
// tensor of backend to, through the host; with toBF16, an F32 tensor
// becomes BF16 (rounded to nearest even).
func copyTensor(to, from compute.Backend, t compute.Tensor, toBF16 bool) (compute.Tensor, error) {
	n, shape := compute.Len(t), t.Shape()
	switch t.DType() {
	case compute.F32:
		vals := make([]float32, n)
		if err := from.Read(vals, t); err != nil {
			return nil, err
		}
		if toBF16 {
			bits := make([]uint16, n)
			toBF16Bits(bits, vals)
			return to.WeightBF16(bits, shape...)
		}
		return to.WeightF32(vals, shape...)
	case compute.BF16:
		if r, ok := from.(compute.BF16Reader); ok {
			bits := make([]uint16, n)
			if err := r.ReadBF16(bits, t); err != nil {
				return nil, err
			}
			return to.WeightBF16(bits, shape...)
		}
		tb, ok := from.(compute.Trainer)
		if !ok {
			return nil, fmt.Errorf("backend %s cannot read BF16 tensors back (no compute.Trainer)", from.Name())
		}
		wide, err := from.NewTensor(compute.F32, shape...)
		if err != nil {
			return nil, err
		}
		defer from.Free(wide)
		tb.Convert(wide, t) // exact
		vals := make([]float32, n)
		if err := from.Read(vals, wide); err != nil {
			return nil, err
		}
		bits := make([]uint16, n)
		toBF16Bits(bits, vals) // exact: the values came from BF16
		return to.WeightBF16(bits, shape...)
	}
	return nil, fmt.Errorf("cannot copy a %v tensor", t.DType())
}

// toBF16Bits rounds src to BF16 bits in dst (nearest even), on every core:
// a version of a multi-billion-parameter model is gigabytes of them.
func toBF16Bits(dst []uint16, src []float32) {
	const chunk = 1 << 18
	parts := (len(src) + chunk - 1) / chunk
	workers := min(parts, runtime.GOMAXPROCS(0))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				p := int(next.Add(1)) - 1
				if p >= parts {
					return
				}
				lo, hi := p*chunk, min(len(src), (p+1)*chunk)
				for i, v := range src[lo:hi] {
					dst[lo+i] = safetensors.Float32ToBF16(v)
				}
			}
		})
	}
	wg.Wait()
}
