package gguf

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/clawrl/clawrl/model"
)

// Mix is the types a model's tensors are written in (WriteModelMix):
// every matrix in one type, or one of llama-quantize's K-quant mixes,
// which give some matrices more bits than the rest.
//
// Q4_K_M and Q5_K_M follow llama.cpp's llama_tensor_get_type for those
// file types: every matrix Q4_K (Q5_K), except Q6_K for the output
// matrix (the token embedding too when it is tied, as it is then the
// output matrix), and for the value projection and the MLP's down
// projection of the layers use_more_bits picks: the first eighth, the
// last eighth, and every third layer between them. On the Qwen3-0.6B
// shape that is 29 matrices at Q6_K and 168 at Q4_K, tensor for tensor
// what llama-quantize --allow-requantize gave from the same model
// (checked by hand, 2026-12-07; TestLlamaCppReadsExport checks it on the
// bundled model where llama.cpp is built). A matrix whose rows are not
// whole super-blocks of 256 falls back as llama.cpp's
// tensor_type_fallback does: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0,
// and to F16 when the rows are not whole blocks of 32 either.
type Mix struct {
	base     TensorType
	more     bool   // the _M mixes: Q6_K where llama.cpp gives more bits
	name     string // "Q4_K_M"; "" for one type
	fileType uint32 // general.file_type
}

// Uniform is the mix of every matrix in t.
func Uniform(t TensorType) Mix { return Mix{base: t, fileType: fileTypes[t]} }

// The K-quant mixes of llama-quantize (LLAMA_FTYPE_MOSTLY_Q4_K_M = 15,
// LLAMA_FTYPE_MOSTLY_Q5_K_M = 17).
var (
	MixQ4KM = Mix{base: Q4_K, more: true, name: "Q4_K_M", fileType: 15}
	MixQ5KM = Mix{base: Q5_K, more: true, name: "Q5_K_M", fileType: 17}
)

// ParseMix reads a mix by name: q4_k_m, q5_k_m, or a tensor type that
// every matrix takes (q8_0, q4_k, bf16, ...), in any case.
func ParseMix(s string) (Mix, error) {
	for _, m := range []Mix{MixQ4KM, MixQ5KM} {
		if strings.EqualFold(s, m.name) {
			return m, nil
		}
	}
	t, err := ParseTensorType(s)
	if err != nil {
		return Mix{}, fmt.Errorf("gguf: unknown type %q (a tensor type such as q8_0, q4_k or bf16, or the mix q4_k_m or q5_k_m)", s)
	}
	if _, ok := quantizers[t]; !ok {
		return Mix{}, fmt.Errorf("gguf: cannot write %s tensors", t)
	}
	return Uniform(t), nil
}

// String names the mix: its name, or the type every matrix takes.
func (m Mix) String() string {
	if m.name != "" {
		return m.name
	}
	return m.base.String()
}

// Base is the type most matrices take.
func (m Mix) Base() TensorType { return m.base }

// matrixType is the type of the matrix hfName (a Hugging Face tensor
// name) of a model of config c, with rows of cols elements.
func (m Mix) matrixType(c *model.Config, hfName string, cols int) TensorType {
	if !m.more {
		return matrixType(m.base, cols)
	}
	t := m.base
	switch {
	case moreBits(c, hfName):
		t = Q6_K
	case strings.HasSuffix(hfName, ".self_attn.qkv_proj.weight"):
		// Phi-3's fused projections: one K-quant step up, as llama.cpp
		// gives attn_qkv.
		t = map[TensorType]TensorType{Q4_K: Q5_K, Q5_K: Q6_K}[m.base]
	}
	if cols%t.BlockSize() == 0 {
		return t
	}
	if fb := map[TensorType]TensorType{Q4_K: Q5_0, Q5_K: Q5_1, Q6_K: Q8_0}[t]; fb != 0 && cols%32 == 0 {
		return fb
	}
	return F16
}

// moreBits reports whether an _M mix gives the matrix hfName Q6_K.
func moreBits(c *model.Config, hfName string) bool {
	switch {
	case hfName == "lm_head.weight", hfName == "model.embed_tokens.weight" && c.TieWordEmbeddings:
		return true
	case strings.HasSuffix(hfName, ".self_attn.v_proj.weight"), strings.HasSuffix(hfName, ".mlp.down_proj.weight"):
		rest, ok := strings.CutPrefix(hfName, "model.layers.")
		if !ok {
			return false
		}
		i, err := strconv.Atoi(rest[:strings.IndexByte(rest, '.')])
		return err == nil && useMoreBits(i, c.NumLayers)
	}
	return false
}

// useMoreBits is llama.cpp's use_more_bits: layer i of n is among the
// first eighth, the last eighth, or every third layer between them.
func useMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}
