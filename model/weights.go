package model

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/clawrl/clawrl/compute"
)

// The weights of the model, as fields tagged with the checkpoint's tensor
// names. A tag reads
//
//	hf:"NAME" shape:"DIM,DIM" if:"FLAG" sandwich:"NAME"
//
// NAME is the Hugging Face tensor name (relative to "model.layers.N." for a
// layer's fields), each DIM is a symbol resolved from the config (see
// Config.dims), and the optional FLAG names a config switch (see
// Config.flags) without which the tensor is not loaded and the field stays
// nil. A sandwich name replaces hf in a model with sandwich norms
// (Gemma's names, where post_attention_layernorm is the attention
// output's norm).

// weights are the tensors shared by all layers.
type weights struct {
	Embed  compute.Tensor `hf:"model.embed_tokens.weight" shape:"vocab,hidden"`
	Norm   compute.Tensor `hf:"model.norm.weight" shape:"hidden"`
	Output compute.Tensor `hf:"lm_head.weight" shape:"vocab,hidden" if:"untied"`
	Layers []layer

	// lora are LoRA adapters that the set serves unmerged, over quantized
	// matrices (see Trainable.Snapshot): lora[l][i] adapts target i of
	// layer l (nil where none), adding loraScale·(x·Aᵀ)·Bᵀ to its product.
	// nil for a set without any. Not checkpoint tensors: walkWeights does
	// not visit them.
	lora      [][numTargets]*adapter
	loraScale float32
}

// layer is one transformer block.
type layer struct {
	AttnNorm compute.Tensor `hf:"input_layernorm.weight" shape:"hidden" if:"pre_norms"`
	Q        compute.Tensor `hf:"self_attn.q_proj.weight" shape:"qdim,hidden"`
	QBias    compute.Tensor `hf:"self_attn.q_proj.bias" shape:"qdim" if:"qkv_bias"`
	K        compute.Tensor `hf:"self_attn.k_proj.weight" shape:"kvdim,hidden"`
	KBias    compute.Tensor `hf:"self_attn.k_proj.bias" shape:"kvdim" if:"qkv_bias"`
	V        compute.Tensor `hf:"self_attn.v_proj.weight" shape:"kvdim,hidden"`
	VBias    compute.Tensor `hf:"self_attn.v_proj.bias" shape:"kvdim" if:"qkv_bias"`
	QNorm    compute.Tensor `hf:"self_attn.q_norm.weight" shape:"qnorm" if:"qk_norm"`
	KNorm    compute.Tensor `hf:"self_attn.k_norm.weight" shape:"knorm" if:"qk_norm"`
	O        compute.Tensor `hf:"self_attn.o_proj.weight" shape:"hidden,qdim"`
	OBias    compute.Tensor `hf:"self_attn.o_proj.bias" shape:"hidden" if:"o_bias"`
	// PostAttnNorm normalises the attention's output (Gemma).
	PostAttnNorm compute.Tensor `hf:"post_attention_layernorm.weight" shape:"hidden" if:"sandwich"`
	MLPNorm      compute.Tensor `hf:"post_attention_layernorm.weight" shape:"hidden" sandwich:"pre_feedforward_layernorm.weight" if:"pre_norms"`
	Gate         compute.Tensor `hf:"mlp.gate_proj.weight" shape:"inter,hidden"`
	GateBias     compute.Tensor `hf:"mlp.gate_proj.bias" shape:"inter" if:"mlp_bias"`
	Up           compute.Tensor `hf:"mlp.up_proj.weight" shape:"inter,hidden"`
	UpBias       compute.Tensor `hf:"mlp.up_proj.bias" shape:"inter" if:"mlp_bias"`
	Down         compute.Tensor `hf:"mlp.down_proj.weight" shape:"hidden,inter"`
	DownBias     compute.Tensor `hf:"mlp.down_proj.bias" shape:"hidden" if:"mlp_bias"`
	// PostMLPNorm normalises the MLP's output (Gemma).
	PostMLPNorm compute.Tensor `hf:"post_feedforward_layernorm.weight" shape:"hidden" if:"sandwich"`
}

// dims resolves the shape symbols of the weight tags.
func (c *Config) dims() map[string]int {
	return map[string]int{
		"vocab": c.VocabSize, "hidden": c.HiddenSize, "inter": c.IntermediateSize,
		"qdim": c.QDim(), "kvdim": c.KVDim(), "head_dim": c.HeadDim,
		"qnorm": c.qNormWidth(), "knorm": c.kNormWidth(),
	}
}

// flags resolves the conditions of the weight tags.
func (c *Config) flags() map[string]bool {
	return map[string]bool{
		"untied": !c.TieWordEmbeddings, "qkv_bias": c.QKVBias, "o_bias": c.OBias,
		"mlp_bias": c.MLPBias, "qk_norm": c.QKNorm, "sandwich": c.SandwichNorms,
		"pre_norms": !c.PostNormsOnly,
	}
}

// TensorSpec is one tensor a checkpoint for a config must hold.
type TensorSpec struct {
	Name  string
	Shape []int
}

// TensorSpecs lists the tensors, with their shapes, that a checkpoint for c
// must hold: embedding, final norm and output first, then layer by layer.
func (c *Config) TensorSpecs() []TensorSpec {
	var specs []TensorSpec
	walkWeights(c, &weights{Layers: make([]layer, c.NumLayers)}, func(name string, shape []int, _ *compute.Tensor) error {
		specs = append(specs, TensorSpec{name, shape})
		return nil
	})
	return specs
}

// fusedInto says where the tensor name (of TensorSpecs) lives in a file
// of c: the file tensor's name and the rows [lo, hi) that are name's.
// ok is false for a tensor the file holds as it is.
func (c *Config) fusedInto(name string) (file string, lo, hi int, ok bool) {
	if c.Architecture != ArchPhi3 {
		return "", 0, 0, false
	}
	prefix, suffix, found := strings.Cut(name, ".self_attn.")
	if found {
		suffix = "self_attn." + suffix
	} else if prefix, suffix, found = strings.Cut(name, ".mlp."); found {
		suffix = "mlp." + suffix
	} else {
		return "", 0, 0, false
	}
	q, kv, inter := c.QDim(), c.KVDim(), c.IntermediateSize
	switch suffix {
	case "self_attn.q_proj.weight":
		return prefix + ".self_attn.qkv_proj.weight", 0, q, true
	case "self_attn.k_proj.weight":
		return prefix + ".self_attn.qkv_proj.weight", q, q + kv, true
	case "self_attn.v_proj.weight":
		return prefix + ".self_attn.qkv_proj.weight", q + kv, q + 2*kv, true
	case "mlp.gate_proj.weight":
		return prefix + ".mlp.gate_up_proj.weight", 0, inter, true
	case "mlp.up_proj.weight":
		return prefix + ".mlp.gate_up_proj.weight", inter, 2 * inter, true
	}
	return "", 0, 0, false
}

// FileTensorSpecs lists the tensors as a checkpoint file for c holds them,
// in TensorSpecs' order: TensorSpecs itself, but that a Phi-3 file holds
// each layer's query, key and value projections as one matrix
// (self_attn.qkv_proj.weight, their rows one after the other) and its
// gate and up projections as another (mlp.gate_up_proj.weight), each where
// its first part would be.
func (c *Config) FileTensorSpecs() []TensorSpec {
	var out []TensorSpec
	for _, s := range c.TensorSpecs() {
		file, lo, _, ok := c.fusedInto(s.Name)
		switch {
		case !ok:
			out = append(out, s)
		case lo == 0:
			rows := 0
			for _, p := range c.FileParts(file) {
				_, a, b, _ := c.fusedInto(p)
				rows += b - a
			}
			out = append(out, TensorSpec{Name: file, Shape: []int{rows, s.Shape[1]}})
		}
	}
	return out
}

// FileParts lists the tensors of TensorSpecs that the file tensor file
// (of FileTensorSpecs) is made of, in row order: itself when the file
// holds it as the model does.
func (c *Config) FileParts(file string) []string {
	if c.Architecture == ArchPhi3 {
		if prefix, ok := strings.CutSuffix(file, "self_attn.qkv_proj.weight"); ok {
			return []string{prefix + "self_attn.q_proj.weight", prefix + "self_attn.k_proj.weight", prefix + "self_attn.v_proj.weight"}
		}
		if prefix, ok := strings.CutSuffix(file, "mlp.gate_up_proj.weight"); ok {
			return []string{prefix + "mlp.gate_proj.weight", prefix + "mlp.up_proj.weight"}
		}
	}
	return []string{file}
}

// sourceTensor reads the tensor name (of TensorSpecs) from src, which
// holds tensors as FileTensorSpecs names them and in Hugging Face's
// order: a part of a fused tensor is its rows, and with partial rotary a
// query or key tensor's head dimensions are reordered (HeadPerm).
func sourceTensor(c *Config, src Source, name string) (SourceTensor, error) {
	st, err := fusedSourceTensor(c, src, name)
	if err != nil {
		return st, err
	}
	if rows := c.headRows(name); rows != nil {
		if len(st.Shape) == 0 || st.Shape[0] != len(rows) {
			return SourceTensor{}, fmt.Errorf("%s: tensor %q has shape %s, not %d rows", st.Path, name, compute.ShapeString(st.Shape), len(rows))
		}
		st = permuteRows(st, rows)
	}
	return st, nil
}

// headRows is, for a tensor whose rows (or elements) are query or key
// head dimensions, the order the model keeps them in, as indices into
// Hugging Face's: HeadPerm within each head. nil for any other tensor,
// and for every tensor without partial rotary.
func (c *Config) headRows(name string) []int {
	p := c.HeadPerm()
	if p == nil {
		return nil
	}
	heads := 0
	switch {
	case strings.HasSuffix(name, "self_attn.q_proj.weight"), strings.HasSuffix(name, "self_attn.q_proj.bias"):
		heads = c.NumHeads
	case strings.HasSuffix(name, "self_attn.k_proj.weight"), strings.HasSuffix(name, "self_attn.k_proj.bias"):
		heads = c.NumKVHeads
	case strings.HasSuffix(name, "self_attn.q_norm.weight"), strings.HasSuffix(name, "self_attn.k_norm.weight"):
		heads = 1
	default:
		return nil
	}
	rows := make([]int, 0, heads*len(p))
	for h := range heads {
		for _, i := range p {
			rows = append(rows, h*len(p)+i)
		}
	}
	return rows
}

// permuteRows is the tensor whose row i is st's row rows[i] (of a
// matrix; the element, of a vector), in every form st comes in, copied.
func permuteRows(st SourceTensor, rows []int) SourceTensor {
	n := st.Shape[0]
	cols := 1
	for _, d := range st.Shape[1:] {
		cols *= d
	}
	out := st
	out.View = false
	if st.BF16 != nil {
		out.BF16 = gatherRows(st.BF16, rows, cols)
	}
	if st.Blocks != nil {
		out.Blocks = gatherRows(st.Blocks, rows, len(st.Blocks)/n)
	}
	if f := st.Float32; f != nil {
		out.Float32 = func() ([]float32, bool, error) {
			vals, _, err := f()
			if err != nil {
				return nil, false, err
			}
			return gatherRows(vals, rows, cols), false, nil
		}
	}
	if r := st.Reblock; r != nil {
		out.Reblock = func() (compute.DType, []byte, error) {
			dt, b, err := r()
			if err != nil {
				return dt, nil, err
			}
			return dt, gatherRows(b, rows, len(b)/n), nil
		}
	}
	if r := st.Rows; r != nil {
		out.Rows = func(dst []float32, lo, hi int) error {
			for i := lo; i < hi; i++ {
				if err := r(dst[(i-lo)*cols:(i-lo+1)*cols], rows[i], rows[i]+1); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return out
}

// gatherRows returns the rows of x (of width each) in the order rows.
func gatherRows[T any](x []T, rows []int, width int) []T {
	out := make([]T, 0, len(rows)*width)
	for _, r := range rows {
		out = append(out, x[r*width:(r+1)*width]...)
	}
	return out
}

// fusedSourceTensor is sourceTensor before the reordering of head
// dimensions.
func fusedSourceTensor(c *Config, src Source, name string) (SourceTensor, error) {
	file, lo, hi, ok := c.fusedInto(name)
	if !ok {
		return src.Tensor(name)
	}
	st, err := src.Tensor(file)
	if err != nil {
		return SourceTensor{}, err
	}
	if len(st.Shape) != 2 || st.Shape[0] != c.QDim()+2*c.KVDim() && st.Shape[0] != 2*c.IntermediateSize || hi > st.Shape[0] {
		return SourceTensor{}, fmt.Errorf("%s: tensor %q has shape %s, which does not hold %q's rows %d to %d", st.Path, file, compute.ShapeString(st.Shape), name, lo, hi)
	}
	return sliceRows(st, lo, hi), nil
}

// sliceRows is rows [lo, hi) of a matrix of a Source, in every form the
// tensor comes in (each row is whole blocks in a block format).
func sliceRows(st SourceTensor, lo, hi int) SourceTensor {
	rows, cols := st.Shape[0], st.Shape[1]
	out := st
	out.Shape = []int{hi - lo, cols}
	if st.BF16 != nil {
		out.BF16 = st.BF16[lo*cols : hi*cols]
	}
	if st.Blocks != nil {
		row := len(st.Blocks) / rows
		out.Blocks = st.Blocks[lo*row : hi*row]
	}
	if f := st.Float32; f != nil {
		out.Float32 = func() ([]float32, bool, error) {
			if st.Rows != nil { // decode only these rows
				dst := make([]float32, (hi-lo)*cols)
				return dst, false, st.Rows(dst, lo, hi)
			}
			vals, view, err := f()
			if err != nil {
				return nil, false, err
			}
			return vals[lo*cols : hi*cols], view, nil
		}
	}
	if r := st.Reblock; r != nil {
		out.Reblock = func() (compute.DType, []byte, error) {
			dt, b, err := r()
			if err != nil {
				return dt, nil, err
			}
			row := len(b) / rows
			return dt, b[lo*row : hi*row], nil
		}
	}
	if r := st.Rows; r != nil {
		out.Rows = func(dst []float32, a, b int) error { return r(dst, lo+a, lo+b) }
	}
	return out
}

var tensorType = reflect.TypeFor[compute.Tensor]()

// normOffset is what the model adds to the values of the checkpoint
// tensor name (Config.NormOffset, for a norm's weight), 0 for any other.
func (c *Config) normOffset(name string) float32 {
	if c.NormOffset == 0 || !strings.HasSuffix(name, "norm.weight") {
		return 0
	}
	return float32(c.NormOffset)
}

// addTo adds off to every value of x, in place, and returns x.
func addTo(x []float32, off float32) []float32 {
	for i := range x {
		x[i] += off
	}
	return x
}

// walkWeights calls fn for every tensor field of w that c needs, with its
// checkpoint name and expected shape.
func walkWeights(c *Config, w *weights, fn func(name string, shape []int, field *compute.Tensor) error) error {
	dims, flags := c.dims(), c.flags()
	visit := func(v reflect.Value, prefix string) error {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Type != tensorType {
				continue
			}
			if cond := f.Tag.Get("if"); cond != "" {
				on, ok := flags[cond]
				if !ok {
					panic("model: unknown weight condition " + strconv.Quote(cond))
				}
				if !on {
					continue
				}
			}
			var shape []int
			for _, sym := range strings.Split(f.Tag.Get("shape"), ",") {
				d, ok := dims[sym]
				if !ok {
					panic("model: unknown weight dimension " + strconv.Quote(sym))
				}
				shape = append(shape, d)
			}
			field := v.Field(i).Addr().Interface().(*compute.Tensor)
			name := f.Tag.Get("hf")
			if alt := f.Tag.Get("sandwich"); alt != "" && c.SandwichNorms {
				name = alt
			}
			if err := fn(prefix+name, shape, field); err != nil {
				return err
			}
		}
		return nil
	}
	top := reflect.ValueOf(w).Elem()
	// Embedding and final norm first, then the layers, then the output.
	if err := visit(top, ""); err != nil {
		return err
	}
	for i := range w.Layers {
		if err := visit(reflect.ValueOf(&w.Layers[i]).Elem(), fmt.Sprintf("model.layers.%d.", i)); err != nil {
			return err
		}
	}
	return nil
}

// loadWeights makes backend tensors for every weight c needs, from src.
// Matrices in F32 or BF16 go to the backend as views of the mapped file
// (which copies them or uses them in place); other matrices (F16,
// quantized) are widened to F32, but quantized ones a backend cannot
// multiply as blocks go as BF16 to one that asks for it
// (compute.WidensToBF16); vectors (norms, biases) are always F32.
//
// With copyHost, the host data is copied out of the mapped files before it
// goes to the backend, so the checkpoint can be closed at once even when
// the backend uses host data in place.
func loadWeights(b compute.Backend, c *Config, src Source, copyHost bool) (*weights, []compute.Tensor, error) {
	w := &weights{Layers: make([]layer, c.NumLayers)}
	var made []compute.Tensor
	err := walkWeights(c, w, func(name string, shape []int, field *compute.Tensor) error {
		st, err := sourceTensor(c, src, name)
		if err != nil {
			return err
		}
		if !slices.Equal(st.Shape, shape) {
			return fmt.Errorf("%s: tensor %q has shape %s, the config implies %s", st.Path, name, compute.ShapeString(st.Shape), compute.ShapeString(shape))
		}
		if t, ok, err := weightQuant(b, st, shape); ok { // Q8_0, Q4_0 blocks (quantize.go)
			if err != nil {
				return fmt.Errorf("%s: tensor %q: %w", st.Path, name, err)
			}
			made = append(made, t)
			*field = t
			return nil
		}
		var t compute.Tensor
		if len(shape) == 2 && st.BF16 != nil {
			bits := st.BF16
			if copyHost && st.View {
				bits = slices.Clone(bits)
			}
			t, err = b.WeightBF16(bits, shape...)
		} else if w, ok := b.(compute.WidensToBF16); ok && w.WidensToBF16() && len(shape) == 2 && st.Format != "" {
			vals, _, ferr := st.Float32()
			if ferr != nil {
				return ferr
			}
			bits := make([]uint16, len(vals))
			toBF16Bits(bits, vals)
			t, err = b.WeightBF16(bits, shape...)
		} else {
			vals, view, ferr := st.Float32()
			if ferr != nil {
				return ferr
			}
			if off := c.normOffset(name); off != 0 {
				vals = addTo(slices.Clone(vals), off)
			} else if copyHost && view {
				vals = slices.Clone(vals)
			}
			t, err = b.WeightF32(vals, shape...)
		}
		if err != nil {
			return fmt.Errorf("%s: tensor %q: %w", st.Path, name, err)
		}
		made = append(made, t)
		*field = t
		return nil
	})
	if err != nil {
		for _, t := range made {
			b.Free(t)
		}
		return nil, nil, err
	}
	if c.TieWordEmbeddings {
		w.Output = w.Embed
	}
	return w, made, nil
}
