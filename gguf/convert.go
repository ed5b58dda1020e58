package gguf

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
)

// fileTypes are general.file_type's numbers (llama.cpp's llama_ftype) for
// a file whose matrices are all of one type.
var fileTypes = map[TensorType]uint32{
	F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q8_0: 7, Q5_0: 8, Q5_1: 9,
	Q2_K: 10, Q3_K: 12, Q4_K: 15, Q5_K: 17, Q6_K: 18, IQ4_NL: 25, IQ4_XS: 30, BF16: 32,
}

// matrixType is the type a matrix with rows of cols elements is written
// in: typ when its blocks fit the rows, else, as llama.cpp falls back,
// Q8_0 for a K-quant, else F16.
func matrixType(typ TensorType, cols int) TensorType {
	switch {
	case cols%typ.BlockSize() == 0:
		return typ
	case typ == IQ4_XS && cols%32 == 0:
		return IQ4_NL // as llama-quantize falls back
	case typ.BlockSize() == qk && cols%32 == 0:
		return Q8_0
	}
	return F16
}

// WriteModel writes the model of src, with its tokenizer, as a GGUF file
// that llama.cpp and this package load: the metadata llama.cpp's converter
// writes for the architecture, the tokenizer's vocabulary
// (TokenizerMetadata), vectors in F32 and matrices in typ (a matrix whose
// rows are not whole blocks of typ falls back to Q8_0, IQ4_XS's to IQ4_NL,
// then F16), llama's
// query and key projections permuted as the converter permutes them
// (PermuteRows), and Llama 3 rope scaling as rope_freqs.weight. Tensors
// are read, encoded and written one at a time; the file is written
// atomically (WriteFile).
func WriteModel(path string, src model.Source, tok *tokenizer.Tokenizer, typ TensorType) error {
	if _, ok := quantizers[typ]; !ok {
		return fmt.Errorf("gguf: %s: cannot write %s tensors", path, typ)
	}
	return WriteModelMix(path, src, tok, Uniform(typ))
}

// WriteModelMix is WriteModel with the matrices' types from mix (a
// K-quant mix gives some matrices more bits; see Mix).
func WriteModelMix(path string, src model.Source, tok *tokenizer.Tokenizer, mix Mix) error {
	return WriteModelAs(path, ModelName(src.String()), src, tok, mix)
}

// ModelName is the general.name a GGUF file of the model at path gets: a
// GGUF file's own general.name, else the base name of the path
// ("Phi-3-mini-4k-instruct"). llama.cpp reads some models' tokenizers by
// it (Phi-3's special tokens swallow the whitespace after them when the
// name says phi3), so an export keeps its base model's.
func ModelName(path string) string {
	path = strings.TrimSuffix(path, "/")
	if strings.EqualFold(filepath.Ext(path), ".gguf") {
		if f, err := Open(path); err == nil {
			defer f.Close()
			if v, ok := f.Get("general.name"); ok {
				if s, ok := v.Str(); ok && s != "" {
					return s
				}
			}
		}
		return strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return filepath.Base(path)
}

// WriteModelAs is WriteModelMix with general.name set to name.
func WriteModelAs(path, name string, src model.Source, tok *tokenizer.Tokenizer, mix Mix) error {
	if _, ok := quantizers[mix.base]; !ok {
		return fmt.Errorf("gguf: %s: cannot write %s tensors", path, mix.base)
	}
	c := src.Config()
	var arch string
	for a, hf := range Architectures {
		if hf == c.Architecture {
			arch = a
		}
	}
	if arch == "" {
		return fmt.Errorf("gguf: %s: architecture %q has no GGUF name", path, c.Architecture)
	}
	k := func(s string) string { return arch + "." + s }
	kvs := []KV{
		{"general.architecture", String(arch)},
		{"general.name", String(name)},
		{"general.file_type", Uint32(mix.fileType)},
		{k("context_length"), Uint32(uint32(c.MaxPositions))},
		{k("embedding_length"), Uint32(uint32(c.HiddenSize))},
		{k("block_count"), Uint32(uint32(c.NumLayers))},
		{k("feed_forward_length"), Uint32(uint32(c.IntermediateSize))},
		{k("attention.head_count"), Uint32(uint32(c.NumHeads))},
		{k("attention.head_count_kv"), Uint32(uint32(c.NumKVHeads))},
		{k("attention.key_length"), Uint32(uint32(c.HeadDim))},
		{k("attention.value_length"), Uint32(uint32(c.HeadDim))},
		{k("rope.dimension_count"), Uint32(uint32(cmp.Or(c.RotaryDim, c.HeadDim)))},
		{k("rope.freq_base"), Float32(float32(c.RopeTheta))},
		{k("attention.layer_norm_rms_epsilon"), Float32(float32(c.RMSNormEps))},
	}
	if c.SlidingWindow > 0 && arch == "phi3" {
		kvs = append(kvs, KV{k("attention.sliding_window"), Uint32(uint32(c.SlidingWindow))})
	}
	if arch == "smollm3" {
		for l, off := range c.NoRopeLayers {
			if off != ((l+1)%4 == 0) {
				return fmt.Errorf("gguf: %s: layer %d's RoPE differs from llama.cpp's smollm3, which drops it in every fourth layer and no other", path, l)
			}
		}
	}
	if arch == "granite" {
		kvs = append(kvs,
			KV{k("logit_scale"), Float32(float32(c.LogitScale))},
			KV{k("embedding_scale"), Float32(float32(c.EmbedScale))},
			KV{k("residual_scale"), Float32(float32(c.ResidualScale))},
			KV{k("attention.scale"), Float32(float32(c.AttnMultiplier))})
	}
	if arch == "gemma2" {
		more, err := gemma2Keys(c, k)
		if err != nil {
			return fmt.Errorf("gguf: %s: %w", path, err)
		}
		kvs = append(kvs, more...)
	}
	if arch == "gemma3" {
		more, err := gemma3Keys(c, k)
		if err != nil {
			return fmt.Errorf("gguf: %s: %w", path, err)
		}
		kvs = append(kvs, more...)
	}
	if lr := c.LongRope; lr != nil {
		for i := range kvs {
			if kvs[i].Key == k("context_length") {
				kvs[i].Value = Uint32(uint32(lr.MaxPositions)) // the model's, before clawrl caps it
			}
		}
		kvs = append(kvs, KV{k("rope.scaling.original_context_length"), Uint32(uint32(lr.OriginalMaxPositions))},
			KV{k("rope.scaling.attn_factor"), Float32(float32(lr.AttnFactor))})
	}
	if c.RopeLinear > 1 {
		kvs = append(kvs, KV{k("rope.scaling.type"), String("linear")}, KV{k("rope.scaling.factor"), Float32(float32(c.RopeLinear))})
	}
	if tok != nil {
		v, err := tok.Vocab(c.VocabSize)
		if err != nil {
			return fmt.Errorf("gguf: %s: tokenizer: %w", path, err)
		}
		kvs = append(kvs, TokenizerMetadata(v)...)
	}
	var tensors []WriteTensor
	for _, spec := range c.FileTensorSpecs() {
		name, _ := TensorNameFor(c, spec.Name)
		var shift float32 // llama.cpp's Gemma files hold a norm's 1 + w
		if c.NormOffset != 0 && strings.HasSuffix(spec.Name, "norm.weight") {
			shift = float32(c.NormOffset)
		}
		tt := F32
		if len(spec.Shape) == 2 {
			tt = mix.matrixType(c, spec.Name, spec.Shape[1])
		}
		heads := 0
		if ggmlNormRope(arch) {
			switch {
			case strings.Contains(spec.Name, "self_attn.q_proj."):
				heads = c.NumHeads
			case strings.Contains(spec.Name, "self_attn.k_proj."):
				heads = c.NumKVHeads
			}
		}
		hf, shape := spec.Name, spec.Shape
		tensors = append(tensors, WriteTensor{Name: name, Type: tt, Shape: shape, Stream: func(w io.Writer) error {
			st, err := src.Tensor(hf)
			if err != nil {
				return err
			}
			vals, _, err := st.Float32()
			if err != nil {
				return err
			}
			if shift != 0 {
				shifted := make([]float32, len(vals))
				for i, x := range vals {
					shifted[i] = x + shift
				}
				vals = shifted
			}
			size, err := EncodedSize(tt, len(vals))
			if err != nil {
				return err
			}
			out := make([]byte, size)
			quantizers[tt](out, vals, nil)
			if heads > 0 {
				if out, err = PermuteRows(out, shape[0], heads); err != nil {
					return err
				}
			}
			_, err = w.Write(out)
			return err
		}})
	}
	if lr := c.LongRope; lr != nil {
		for _, f := range []struct {
			name string
			v    []float64
		}{{KeyRopeFactorsLong, lr.LongFactor}, {KeyRopeFactorsShort, lr.ShortFactor}} {
			data := make([]byte, 4*len(f.v))
			for i, x := range f.v {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(x)))
			}
			tensors = append(tensors, WriteTensor{Name: f.name, Type: F32, Shape: []int{len(f.v)}, Data: data})
		}
	}
	if c.RopeScaling != nil {
		f := llama3Divisors(c)
		data := make([]byte, 4*len(f))
		for i, x := range f {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
		}
		tensors = append(tensors, WriteTensor{Name: KeyRopeFreqs, Type: F32, Shape: []int{len(f)}, Data: data})
	}
	return WriteFile(path, kvs, tensors)
}

// gemma3Keys are the keys llama.cpp reads of a Gemma 3 file (see
// Model.gemma3): the sliding window, the period of the windowed layers
// and their rotary base. A config whose windowed layers follow no period,
// or whose attention scale llama.cpp would not derive, is refused.
func gemma3Keys(c *model.Config, k func(string) string) ([]KV, error) {
	want := float64(c.HeadDim)
	if c.NumLayers == 62 {
		want = float64(c.HiddenSize / c.NumHeads)
	}
	if c.QueryPreAttnScalar != 0 && c.QueryPreAttnScalar != want {
		return nil, fmt.Errorf("query_pre_attn_scalar %g: llama.cpp derives %g for this shape, and a GGUF file cannot say otherwise", c.QueryPreAttnScalar, want)
	}
	if c.AttnSoftcap > 0 {
		return nil, fmt.Errorf("attn_logit_softcapping %g: llama.cpp's gemma3 does not cap attention scores, and a GGUF file cannot ask it to", c.AttnSoftcap)
	}
	var kvs []KV
	if c.FinalSoftcap > 0 {
		kvs = append(kvs, KV{k("final_logit_softcapping"), Float32(float32(c.FinalSoftcap))})
	}
	if c.WindowLayers == nil {
		return kvs, nil
	}
	p, ok := SlidingPattern(c)
	if !ok {
		return nil, fmt.Errorf("the windowed layers follow no period of gemma3.attention.sliding_window_pattern")
	}
	w := c.SlidingWindow
	if w == 0 {
		w = c.MaxPositions // a window no shorter than the context
	}
	return append(kvs,
		KV{k("attention.sliding_window"), Uint32(uint32(w))},
		KV{k("attention.sliding_window_pattern"), Uint32(uint32(p))},
		KV{k("rope.freq_base_swa"), Float32(float32(c.LocalRopeTheta))},
	), nil
}

// gemma2Keys are the keys llama.cpp reads of a Gemma 2 file (see
// Model.gemma2): the soft-caps, the window and its period. A model
// without soft-caps, or whose windowed layers or attention scale a file
// cannot say, is refused: llama.cpp's gemma2 caps always and assumes a
// window.
func gemma2Keys(c *model.Config, k func(string) string) ([]KV, error) {
	if c.AttnSoftcap <= 0 || c.FinalSoftcap <= 0 {
		return nil, fmt.Errorf("a Gemma 2 model without soft-caps (attention %g, logits %g): llama.cpp's gemma2 always caps both", c.AttnSoftcap, c.FinalSoftcap)
	}
	want := float64(c.HeadDim)
	if c.NumLayers == 46 {
		want = float64(c.HiddenSize / c.NumHeads)
	}
	if c.QueryPreAttnScalar != 0 && c.QueryPreAttnScalar != want {
		return nil, fmt.Errorf("query_pre_attn_scalar %g: llama.cpp derives %g for this shape, and a GGUF file cannot say otherwise", c.QueryPreAttnScalar, want)
	}
	kvs := []KV{
		{k("attn_logit_softcapping"), Float32(float32(c.AttnSoftcap))},
		{k("final_logit_softcapping"), Float32(float32(c.FinalSoftcap))},
	}
	p, ok := SlidingPattern(c)
	if c.WindowLayers == nil {
		p, ok = 1, true // no windowed layer: every il % 1 is 0 = 1−1
	}
	if !ok {
		return nil, fmt.Errorf("the windowed layers follow no period of gemma2.attention.sliding_window_pattern")
	}
	w := c.SlidingWindow
	if w == 0 {
		w = c.MaxPositions // a window no shorter than the context
	}
	return append(kvs, KV{k("attention.sliding_window"), Uint32(uint32(w))}, KV{k("attention.sliding_window_pattern"), Uint32(uint32(p))}), nil
}

// llama3Divisors are the divisors of the rotary frequencies that Llama 3
// scaling applies, as llama.cpp's converter stores them in
// rope_freqs.weight.
func llama3Divisors(c *model.Config) []float32 {
	scaled := c.RopeFrequencies()
	out := make([]float32, len(scaled))
	for i, f := range scaled {
		out[i] = float32(math.Pow(c.RopeTheta, -float64(2*i)/float64(c.HeadDim)) / f)
	}
	return out
}
