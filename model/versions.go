package model

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/safetensors"
)

// Weights is one immutable set of parameter tensors of a model on its
// backend: one version of the model. The model's checkpoint is one
// (Model.Weights); Weights.Clone and Trainable.Snapshot make others.
//
// Ownership rules:
//
//   - A set's tensors are never modified after the set is made. Several
//     sets may share tensors (a LoRA snapshot shares every tensor it did not
//     merge with the set it was trained over); each tensor is reference
//     counted and its device memory goes back when the last set holding it
//     is freed. A Trainable holds references to its base set's tensors too.
//   - Free releases the set's references. Call it once no Run or
//     LogProbsWith will use the set any more; a call in progress finishes
//     first (Free waits for it), and later calls return an error. Freeing
//     twice is harmless.
//   - The checkpoint's set (Model.Weights) is owned by the model: its Free
//     does nothing, and Model.Close releases it. Close unmaps the checkpoint
//     files, which a CPU backend with ZeroCopyWeights reads the base
//     tensors from: free every other set and Trainable before Close.
//   - Params returns the set's tensors themselves, for reading (saving a
//     checkpoint, copying to the host): writing into them breaks the rule
//     above for every holder.
//
// A Weights is safe for concurrent use.
type Weights struct {
	m    *Model
	w    *weights
	refs []*tensorRef // one reference to every distinct tensor of w
	base bool         // the checkpoint's set

	mu    sync.RWMutex // read-held by each forward pass using the set
	freed bool
}

// tensorRef counts the weight sets (and Trainables) holding a tensor.
type tensorRef struct {
	t compute.Tensor
	n atomic.Int32
}

// NamedTensor is a tensor with its Hugging Face name.
type NamedTensor struct {
	Name string
	T    compute.Tensor
}

// setBuilder assembles the tensors of a new weight set.
type setBuilder struct {
	w    *weights
	refs []*tensorRef
}

// own adds a new tensor that the set being built holds alone.
func (sb *setBuilder) own(t compute.Tensor) compute.Tensor {
	r := &tensorRef{t: t}
	r.n.Store(1)
	sb.refs = append(sb.refs, r)
	return t
}

// share adds a reference to a tensor of another set.
func (sb *setBuilder) share(r *tensorRef) compute.Tensor {
	r.n.Add(1)
	sb.refs = append(sb.refs, r)
	return r.t
}

// abort releases what the builder holds (after an error).
func (sb *setBuilder) abort(b compute.Backend) {
	for _, r := range sb.refs {
		r.release(b)
	}
	sb.refs = nil
}

func (r *tensorRef) release(b compute.Backend) {
	if r.n.Add(-1) == 0 {
		b.Free(r.t)
	}
}

func newBaseWeights(m *Model, w *weights, made []compute.Tensor) *Weights {
	sb := setBuilder{w: w}
	for _, t := range made {
		sb.own(t)
	}
	return &Weights{m: m, w: w, refs: sb.refs, base: true}
}

func (sb *setBuilder) done(m *Model) *Weights {
	if m.Config.TieWordEmbeddings {
		sb.w.Output = sb.w.Embed
	}
	return &Weights{m: m.owner(), w: sb.w, refs: sb.refs}
}

// refMap maps each tensor of the set to its reference count.
func (w *Weights) refMap() map[compute.Tensor]*tensorRef {
	rm := make(map[compute.Tensor]*tensorRef, len(w.refs))
	for _, r := range w.refs {
		rm[r.t] = r
	}
	return rm
}

// Weights returns the checkpoint's weight set, which lives until Close.
func (m *Model) Weights() *Weights { return m.base }

// acquire resolves w (nil: the checkpoint's set), checks that it belongs
// to m, and read-locks it for a forward pass; unlock it after.
func (m *Model) acquire(w *Weights) (*Weights, error) {
	if w == nil {
		w = m.base
		if w == nil {
			return nil, errors.New("model: model is closed")
		}
	}
	if w.m != m.owner() {
		return nil, errors.New("model: the weight set belongs to another model")
	}
	w.mu.RLock()
	if w.freed {
		w.mu.RUnlock()
		return nil, errors.New("model: the weight set was freed")
	}
	return w, nil
}

func (w *Weights) unlock() { w.mu.RUnlock() }

// Model is the model the set belongs to.
func (w *Weights) Model() *Model { return w.m }

// Params lists the set's tensors with their Hugging Face names
// (model.embed_tokens.weight, model.norm.weight, lm_head.weight unless the
// embeddings are tied, then model.layers.N.… layer by layer) in the order
// of Config.TensorSpecs. The tensors are the set's own: read, do not write.
func (w *Weights) Params() []NamedTensor {
	var out []NamedTensor
	walkWeights(w.m.Config, w.w, func(name string, _ []int, f *compute.Tensor) error {
		out = append(out, NamedTensor{name, *f})
		return nil
	})
	return out
}

// Bytes is the memory of the set's tensors, shared ones included.
func (w *Weights) Bytes() int64 {
	var n int64
	for _, r := range w.refs {
		n += int64(r.t.DType().Bytes(compute.Len(r.t)))
	}
	return n
}

// Clone returns a deep copy of the set on the backend, every tensor new
// and with its dtype kept (unmerged LoRA adapters included).
func (w *Weights) Clone() (*Weights, error) {
	m := w.m
	if _, err := m.acquire(w); err != nil {
		return nil, err
	}
	defer w.unlock()
	b := m.b
	sb := setBuilder{w: &weights{Layers: make([]layer, m.Config.NumLayers)}}
	src := map[string]compute.Tensor{}
	walkWeights(m.Config, w.w, func(name string, _ []int, f *compute.Tensor) error {
		src[name] = *f
		return nil
	})
	err := walkWeights(m.Config, sb.w, func(name string, shape []int, f *compute.Tensor) error {
		s := src[name]
		t, err := b.NewTensor(s.DType(), shape...)
		if err != nil {
			return fmt.Errorf("model: cloning %s: %w", name, err)
		}
		b.Copy(t, s)
		*f = sb.own(t)
		return nil
	})
	if err == nil && w.w.lora != nil {
		sb.w.lora, sb.w.loraScale = make([][numTargets]*adapter, len(w.w.lora)), w.w.loraScale
	adapters:
		for l, ads := range w.w.lora {
			for i, ad := range ads {
				if ad == nil {
					continue
				}
				c := &adapter{}
				for _, x := range []struct{ dst, src *compute.Tensor }{{&c.A, &ad.A}, {&c.B, &ad.B}} {
					var t compute.Tensor
					if t, err = copyF32(b, *x.src); err != nil {
						err = fmt.Errorf("model: cloning a LoRA adapter: %w", err)
						break adapters
					}
					*x.dst = sb.own(t)
				}
				sb.w.lora[l][i] = c
			}
		}
	}
	if err != nil {
		sb.abort(b)
		return nil, err
	}
	return sb.done(m), nil
}

// Free releases the set's tensors (those no other set or Trainable holds
// go back to the backend). It waits for forward passes using the set to
// finish; later ones return an error. Free of the checkpoint's set does
// nothing.
func (w *Weights) Free() {
	if w == nil || w.base {
		return
	}
	w.release()
}

// release drops the checkpoint's set (Model.Close).
func (w *Weights) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.freed {
		return
	}
	w.freed = true
	for _, r := range w.refs {
		r.release(w.m.b)
	}
	w.refs = nil
}

// retain adds a reference to every tensor of the set (for a Trainable
// built over it) and returns them, to release later.
func (w *Weights) retain() ([]*tensorRef, error) {
	if _, err := w.m.acquire(w); err != nil {
		return nil, err
	}
	defer w.unlock()
	refs := append([]*tensorRef(nil), w.refs...)
	for _, r := range refs {
		r.n.Add(1)
	}
	return refs, nil
}

// LoadWeights reads the safetensors files of a checkpoint directory (a
// saved version of this model: the same tensor names and shapes) into a
// new weight set, copied into backend memory; the files are closed before
// it returns. Free the set when done.
func (m *Model) LoadWeights(dir string) (*Weights, error) {
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	src := &dirSource{c: m.Config, ck: ck}
	defer src.Close()
	w, made, err := loadWeights(m.b, m.Config, src, true)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	sb := setBuilder{w: w}
	for _, t := range made {
		sb.own(t)
	}
	return sb.done(m), nil
}

// ReadTensor copies a tensor of weights to the host as float32: F32 as it
// is, BF16 widened exactly and quantized ones dequantized (through
// compute.Trainer's Convert, so b must implement it). It is for saving checkpoints and for tests.
func ReadTensor(b compute.Backend, t compute.Tensor) ([]float32, error) {
	out := make([]float32, compute.Len(t))
	switch t.DType() {
	case compute.F32:
		if err := b.Read(out, t); err != nil {
			return nil, fmt.Errorf("model: reading a tensor: %w", err)
		}
		return out, nil
	case compute.BF16, compute.Q8_0, compute.Q4_0, compute.Q4_1, compute.Q5_1, compute.IQ4_NL, compute.Q6_16: // widened or dequantized (exactly, but for Q4_1's and Q5_1's float32 d·q + m)
		tb, ok := b.(compute.Trainer)
		if !ok {
			return nil, fmt.Errorf("model: backend %s cannot convert %v tensors", b.Name(), t.DType())
		}
		wide, err := b.NewTensor(compute.F32, t.Shape()...)
		if err != nil {
			return nil, fmt.Errorf("model: reading a tensor: %w", err)
		}
		defer b.Free(wide)
		tb.Convert(wide, t)
		if err := b.Read(out, wide); err != nil {
			return nil, fmt.Errorf("model: reading a tensor: %w", err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("model: reading a tensor of dtype %v", t.DType())
}

// FileTensor is one tensor of a weight set as a checkpoint file
// (model.safetensors) holds it.
type FileTensor struct {
	Name  string // Hugging Face name
	Shape []int
	// DType is F32 or BF16: the tensor's own, or F32 for a quantized
	// matrix (dequantized exactly) and for a matrix the set serves with an
	// unmerged LoRA adapter (merged into F32: dequant(W) + scale·B·A).
	DType compute.DType
	// Read returns the values (BF16 widened exactly). It fails once the
	// set is freed.
	Read func() ([]float32, error)
}

// FileTensors lists the set's tensors as a checkpoint file holds them
// (Config.FileTensorSpecs: a Phi-3 file's fused matrices joined from their
// parts), in the order of Params, so that the file loads as a plain model (here and
// in other tools): F32 and BF16 tensors as they are; over a quantized
// base, every quantized matrix dequantized to F32 and every adapter merged
// into its matrix in F32, exactly as the set serves it up to the rounding
// of the activations its quantized products do. Read computes one tensor
// at a time, in a temporary tensor of the backend, which must implement
// compute.Trainer for anything but F32.
func (w *Weights) FileTensors() []FileTensor {
	adapted := w.w.adaptedByName()
	var out []FileTensor
	walkWeights(w.m.Config, w.w, func(name string, _ []int, f *compute.Tensor) error {
		t, ad := *f, adapted[name]
		dt := t.DType()
		if dt.Quantized() || ad != nil {
			dt = compute.F32
		}
		read := func() ([]float32, error) { return w.readFile(t, ad) }
		if rows := w.m.Config.headRows(name); rows != nil {
			// Back to Hugging Face's order of head dimensions.
			inv := make([]int, len(rows))
			for i, r := range rows {
				inv[r] = i
			}
			cols := compute.Len(t) / len(rows)
			inner := read
			read = func() ([]float32, error) {
				vals, err := inner()
				if err != nil {
					return nil, err
				}
				return gatherRows(vals, inv, cols), nil
			}
		}
		if off := w.m.Config.normOffset(name); off != 0 {
			// Back to the checkpoint's w from the 1 + w the model holds.
			inner := read
			read = func() ([]float32, error) {
				vals, err := inner()
				if err != nil {
					return nil, err
				}
				return addTo(slices.Clone(vals), -off), nil
			}
		}
		out = append(out, FileTensor{Name: name, Shape: slices.Clone(t.Shape()), DType: dt, Read: read})
		return nil
	})
	return fuseFileTensors(w.m.Config, out)
}

// fuseFileTensors joins the tensors of ts (named as TensorSpecs names
// them) that a file of c holds fused into the file's tensors, each where
// its first part was: F32 when any part is, the parts' values one after
// the other.
func fuseFileTensors(c *Config, ts []FileTensor) []FileTensor {
	byName := make(map[string]FileTensor, len(ts))
	for _, t := range ts {
		byName[t.Name] = t
	}
	var out []FileTensor
	for _, t := range ts {
		file, lo, _, ok := c.fusedInto(t.Name)
		if !ok {
			out = append(out, t)
			continue
		}
		if lo != 0 {
			continue // joined with the first part
		}
		var parts []FileTensor
		fused := FileTensor{Name: file, DType: compute.BF16, Shape: []int{0, t.Shape[1]}}
		for _, name := range c.FileParts(file) {
			p := byName[name]
			parts = append(parts, p)
			fused.Shape[0] += p.Shape[0]
			if p.DType != compute.BF16 {
				fused.DType = compute.F32
			}
		}
		fused.Read = func() ([]float32, error) {
			vals := make([]float32, 0, fused.Shape[0]*fused.Shape[1])
			for _, p := range parts {
				v, err := p.Read()
				if err != nil {
					return nil, err
				}
				vals = append(vals, v...)
			}
			return vals, nil
		}
		out = append(out, fused)
	}
	return out
}

// readFile returns the values of t, with ad (if not nil) merged in.
func (w *Weights) readFile(t compute.Tensor, ad *adapter) ([]float32, error) {
	m := w.m
	if _, err := m.acquire(w); err != nil {
		return nil, err
	}
	defer w.unlock()
	if ad == nil {
		return ReadTensor(m.b, t)
	}
	return mergedValues(m.b, t, ad, w.w.loraScale)
}

// adaptedByName maps the Hugging Face name of every matrix with an
// unmerged adapter to it.
func (w *weights) adaptedByName() map[string]*adapter {
	adapted := map[string]*adapter{}
	for l, ads := range w.lora {
		for i, ad := range ads {
			if ad != nil {
				adapted[fmt.Sprintf("model.layers.%d.%s.weight", l, targetModules[i])] = ad
			}
		}
	}
	return adapted
}

// mergedValues returns the values of W + scale·B·A for the matrix t (any
// dtype Convert widens: F32, BF16, quantized) and its adapter, computed in
// F32 on b.
func mergedValues(b compute.Backend, t compute.Tensor, ad *adapter, scale float32) ([]float32, error) {
	tb, ok := b.(compute.Trainer)
	if !ok {
		return nil, fmt.Errorf("model: backend %s cannot merge LoRA adapters (no compute.Trainer)", b.Name())
	}
	f32, err := b.NewTensor(compute.F32, t.Shape()...)
	if err != nil {
		return nil, fmt.Errorf("model: merging a LoRA adapter: %w", err)
	}
	defer b.Free(f32)
	tb.Convert(f32, t)
	tb.MatMul(f32, ad.B, ad.A, false, false, scale, 1)
	out := make([]float32, compute.Len(f32))
	if err := b.Read(out, f32); err != nil {
		return nil, fmt.Errorf("model: merging a LoRA adapter: %w", err)
	}
	return out, nil
}
