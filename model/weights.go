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
//	hf:"NAME" shape:"DIM,DIM" if:"FLAG"
//
// NAME is the Hugging Face tensor name (relative to "model.layers.N." for a
// layer's fields), each DIM is a symbol resolved from the config (see
// Config.dims), and the optional FLAG names a config switch (see
// Config.flags) without which the tensor is not loaded and the field stays
// nil.

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
	AttnNorm compute.Tensor `hf:"input_layernorm.weight" shape:"hidden"`
	Q        compute.Tensor `hf:"self_attn.q_proj.weight" shape:"qdim,hidden"`
	QBias    compute.Tensor `hf:"self_attn.q_proj.bias" shape:"qdim" if:"qkv_bias"`
	K        compute.Tensor `hf:"self_attn.k_proj.weight" shape:"kvdim,hidden"`
	KBias    compute.Tensor `hf:"self_attn.k_proj.bias" shape:"kvdim" if:"qkv_bias"`
	V        compute.Tensor `hf:"self_attn.v_proj.weight" shape:"kvdim,hidden"`
	VBias    compute.Tensor `hf:"self_attn.v_proj.bias" shape:"kvdim" if:"qkv_bias"`
	QNorm    compute.Tensor `hf:"self_attn.q_norm.weight" shape:"head_dim" if:"qk_norm"`
	KNorm    compute.Tensor `hf:"self_attn.k_norm.weight" shape:"head_dim" if:"qk_norm"`
	O        compute.Tensor `hf:"self_attn.o_proj.weight" shape:"hidden,qdim"`
	OBias    compute.Tensor `hf:"self_attn.o_proj.bias" shape:"hidden" if:"o_bias"`
	MLPNorm  compute.Tensor `hf:"post_attention_layernorm.weight" shape:"hidden"`
	Gate     compute.Tensor `hf:"mlp.gate_proj.weight" shape:"inter,hidden"`
	GateBias compute.Tensor `hf:"mlp.gate_proj.bias" shape:"inter" if:"mlp_bias"`
	Up       compute.Tensor `hf:"mlp.up_proj.weight" shape:"inter,hidden"`
	UpBias   compute.Tensor `hf:"mlp.up_proj.bias" shape:"inter" if:"mlp_bias"`
	Down     compute.Tensor `hf:"mlp.down_proj.weight" shape:"hidden,inter"`
	DownBias compute.Tensor `hf:"mlp.down_proj.bias" shape:"hidden" if:"mlp_bias"`
}

// dims resolves the shape symbols of the weight tags.
func (c *Config) dims() map[string]int {
	return map[string]int{
		"vocab": c.VocabSize, "hidden": c.HiddenSize, "inter": c.IntermediateSize,
		"qdim": c.QDim(), "kvdim": c.KVDim(), "head_dim": c.HeadDim,
	}
}

// flags resolves the conditions of the weight tags.
func (c *Config) flags() map[string]bool {
	return map[string]bool{
		"untied": !c.TieWordEmbeddings, "qkv_bias": c.QKVBias, "o_bias": c.OBias,
		"mlp_bias": c.MLPBias, "qk_norm": c.QKNorm,
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

var tensorType = reflect.TypeFor[compute.Tensor]()

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
			if err := fn(prefix+f.Tag.Get("hf"), shape, field); err != nil {
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
// quantized) are widened to F32; vectors (norms, biases) are always F32.
//
// With copyHost, the host data is copied out of the mapped files before it
// goes to the backend, so the checkpoint can be closed at once even when
// the backend uses host data in place.
func loadWeights(b compute.Backend, c *Config, src Source, copyHost bool) (*weights, []compute.Tensor, error) {
	w := &weights{Layers: make([]layer, c.NumLayers)}
	var made []compute.Tensor
	err := walkWeights(c, w, func(name string, shape []int, field *compute.Tensor) error {
		st, err := src.Tensor(name)
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
		} else {
			vals, view, ferr := st.Float32()
			if ferr != nil {
				return ferr
			}
			if copyHost && view {
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
