// Package compute is the small interface the transformer is written over.
//
// The model package describes the forward pass as a sequence of operations on
// opaque tensors (embedding lookup, linear layers, RMSNorm, RoPE, paged
// attention, SiLU gating, residual adds, log-softmax); a Backend carries them
// out on some device. The model never sees device memory: tensors are handles
// allocated by the backend, and every copy between host and device is an
// explicit Backend call. The CPU backend (package cpu) keeps tensors in Go
// slices; a CUDA backend keeps them in GPU memory behind the same interface,
// so model code does not change when the device does.
//
// Conventions:
//
//   - Tensors are dense and row-major. Shape[0] is the row count; an op that
//     talks about "rows" means the leading dimension and treats the rest as a
//     flat row.
//   - A linear layer's weight is stored as checkpoints store it, [out, in], so
//     Linear computes y = x·Wᵀ (+ b).
//   - Activations are F32. Weights are F32 or BF16 (F16 checkpoints are
//     widened to F32 when loaded), or block-quantized (Q8_0, Q4_0, Q4_1) on a
//     backend that implements QuantBackend. Token ids, positions and
//     attention metadata are I32 tensors, uploaded once per forward step,
//     so a device backend does not copy them again for every layer.
//   - Ops do not return errors: a shape or dtype mismatch is a programming
//     error and panics with a message naming the op. Errors that only a
//     device can report (a failed kernel launch, a lost GPU) surface at the
//     next Synchronize or Read.
//   - A Backend is not safe for concurrent use unless its documentation says
//     so; the model serialises its forward passes.
//
// Quantized weights: Q8_0, Q4_0, Q4_1, Q5_1 and IQ4_NL are the block formats of ggml
// (GGUF files, llama.cpp), bit for bit, so that a GGUF tensor can be
// handed to a backend as the raw bytes of its blocks; Q6_16 is the one
// block format of this package's own (below). A tensor of these types has
// rows whose length is a multiple of 32, cut into blocks of 32 elements;
// block j of row r holds elements 32j..32j+31 and the blocks of a row
// follow each other, rows after rows, with no padding:
//
//	Q8_0, 34 bytes a block: d (IEEE half, little-endian), then qs[32]
//	      (int8); element i = d·qs[i].
//	Q4_0, 18 bytes a block: d (IEEE half, little-endian), then qs[16];
//	      element i < 16 = d·((qs[i] & 0x0F) − 8), element i+16 =
//	      d·((qs[i] >> 4) − 8).
//	Q4_1, 20 bytes a block: d, then m (IEEE halves), then qs[16];
//	      element i < 16 = d·(qs[i] & 0x0F) + m, element i+16 =
//	      d·(qs[i] >> 4) + m, computed in float32.
//	Q5_1, 24 bytes a block: d, m, qh (uint32, little-endian), qs[16]:
//	      as Q4_1 with a fifth bit, bit i of qh, above element i's
//	      nibble (values 0..31).
//	IQ4_NL, 18 bytes a block: d, then qs[16] placed as Q4_0's; element
//	      i = d·IQ4NLLevels[nibble], a non-uniform grid of 16 int8
//	      levels, denser near zero.
//	Q6_16, 28 bytes a block: d0, d1 (IEEE halves), ql[16], qh[8]; q
//	      (0..63) of element i has its low four bits placed as Q4_0's
//	      nibbles in ql and its high two at bits 2(i/8), 2(i/8)+1 of
//	      qh[i%8]; element i = d0·(q − 32) for i < 16, d1·(q − 32) after.
//
// The first five are ggml's block_q8_0, block_q4_0, block_q4_1,
// block_q5_1 and block_iq4_nl (ggml-common.h). Q6_16 is not a ggml
// block: it holds the values of ggml's Q6_K (a super-block of 256 in 16
// sub-blocks of 16, each scale an int8 times the super-block's half d)
// with each sub-block's scale d·sc rounded to a half, 32 values a block
// as the others, so that a GGUF file's Q6_K matrices (the output matrix
// of the common Q4_K_M and Q5_K_M mixes) and Q3_K ones run as 6-bit
// values rather than requantized to Q8_0. A backend
// is free to keep the blocks in another layout inside (the CPU backend
// interleaves them for its kernels); what goes in is this one.
//
// The products with quantized weights (Linear, LinearMulti) work as
// llama.cpp's do: each row of x is quantized to Q8_0 blocks along k (d =
// max|x|/127 in float32, q = x·(1/d) rounded to nearest even; d = 0 and
// q = 0 for a block of zeros; d is kept in float32, not rounded to half)
// and the product of a block is the integer Σ qw·qx, scaled by dw·dx
// (for Q4_1, plus m·dx·Σqx, as llama.cpp's Q4_1 product with Q8_1
// activations; for IQ4_NL qw is the nibble's level); the blocks' results
// are summed in float32. Dequantizing (Embedding, a Trainer's Convert and
// LinearBackwardInput) is exact for Q8_0, Q4_0, IQ4_NL and Q6_16 (dw·q
// fits a float32) and ggml's float32 d·q + m for Q4_1 and Q5_1. Q6_16's
// product is two: each half block's integer sum scaled by its own d.
//
// Training: the backward kernels form a second interface, Trainer, which
// embeds Backend. Code that only runs the forward pass depends on Backend
// alone and keeps compiling when Trainer grows; code that trains asks for a
// Trainer (or type-asserts one) and gets a clear error from a backend that
// cannot train. Trainer also carries the optimizer's arithmetic (AdamW, the
// sum of squares for the global gradient norm, scaling, zeroing, adding),
// so that a device backend keeps parameters, gradients and optimizer state
// on the device for the whole step.
package compute

import (
	"fmt"
	"strings"
)

// DType is the element type of a tensor.
type DType uint8

// Element types a tensor can hold.
const (
	F32    DType = iota + 1 // IEEE float32
	BF16                    // bfloat16 bits (upper half of a float32), stored as uint16
	F16                     // IEEE half bits, stored as uint16
	I32                     // int32 (ids, positions, attention metadata)
	Q8_0                    // ggml's Q8_0 blocks: 32 int8 and a half scale (see the package doc)
	Q4_0                    // ggml's Q4_0 blocks: 32 4-bit values and a half scale (see the package doc)
	Q4_1                    // ggml's Q4_1 blocks: 32 4-bit values, a half scale and a half minimum (see the package doc)
	Q5_1                    // ggml's Q5_1 blocks: 32 5-bit values, a half scale and a half minimum (see the package doc)
	IQ4_NL                  // ggml's IQ4_NL blocks: 32 4-bit indices into 16 int8 levels and a half scale (see the package doc)
	Q6_16                   // Q6_K's values, 32 6-bit values and a half scale for each 16 (see the package doc)
)

// QK is the number of elements in a block of Q8_0, Q4_0 and Q4_1.
const QK = 32

// Size is the number of bytes one element of d occupies; 0 for the
// block-quantized types, whose elements are not whole bytes (see Bytes).
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case BF16, F16:
		return 2
	}
	return 0
}

// Quantized reports whether d is a block-quantized type (Q8_0, Q4_0,
// Q4_1, Q5_1, IQ4_NL, Q6_16).
func (d DType) Quantized() bool {
	return d == Q8_0 || d == Q4_0 || d == Q4_1 || d == Q5_1 || d == IQ4_NL || d == Q6_16
}

// BlockSize is the number of elements of a block of d: QK for the
// quantized types, 1 for the others.
func (d DType) BlockSize() int {
	if d.Quantized() {
		return QK
	}
	return 1
}

// BlockBytes is the size of one block of d in bytes: 34 for Q8_0, 18 for
// Q4_0, 20 for Q4_1, Size for the element types.
func (d DType) BlockBytes() int {
	switch d {
	case Q8_0:
		return 2 + QK
	case Q4_0, IQ4_NL:
		return 2 + QK/2
	case Q4_1:
		return 4 + QK/2
	case Q5_1:
		return 8 + QK/2
	case Q6_16:
		return 4 + QK/2 + QK/4
	}
	return d.Size()
}

// Bytes is the storage of n elements of d in the layout of the package
// doc (n a multiple of BlockSize).
func (d DType) Bytes(n int) int { return n / d.BlockSize() * d.BlockBytes() }

func (d DType) String() string {
	switch d {
	case F32:
		return "F32"
	case BF16:
		return "BF16"
	case F16:
		return "F16"
	case I32:
		return "I32"
	case Q8_0:
		return "Q8_0"
	case Q4_0:
		return "Q4_0"
	case Q4_1:
		return "Q4_1"
	case Q5_1:
		return "Q5_1"
	case IQ4_NL:
		return "IQ4_NL"
	case Q6_16:
		return "Q6_16"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Tensor is an opaque handle to a dense row-major array owned by a Backend.
// Only the backend that made a tensor may operate on it.
type Tensor interface {
	// DType is the element type.
	DType() DType
	// Shape lists the dimensions, outermost first. The slice belongs to the
	// tensor and must not be modified.
	Shape() []int
}

// Len is the number of elements of t (the product of its shape).
func Len(t Tensor) int {
	n := 1
	for _, d := range t.Shape() {
		n *= d
	}
	return n
}

// Rows is t's leading dimension, and Cols the number of elements per row.
func Rows(t Tensor) int { return t.Shape()[0] }

// Cols is the number of elements in one row of t (Len / Rows).
func Cols(t Tensor) int {
	s := t.Shape()
	n := 1
	for _, d := range s[1:] {
		n *= d
	}
	return n
}

// ShapeString formats a shape as [a b c] for error messages.
func ShapeString(shape []int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range shape {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, d)
	}
	b.WriteByte(']')
	return b.String()
}

// Backend allocates tensors on one device and runs the forward operations of
// a decoder-only transformer on them.
//
// Unless an op says otherwise, dst must not alias an input. "rows" is the
// leading dimension (see the package doc).
type Backend interface {
	// Name identifies the backend and device in logs, e.g. "cpu (2 threads)".
	Name() string

	// NewTensor allocates a zero-filled tensor.
	NewTensor(dt DType, shape ...int) (Tensor, error)
	// WeightF32 makes a read-only F32 tensor from host data. The backend may
	// keep referring to data instead of copying it (the CPU backend does, so
	// that memory-mapped checkpoints are used in place): data must stay valid
	// and unchanged for the life of the tensor.
	WeightF32(data []float32, shape ...int) (Tensor, error)
	// WeightBF16 is WeightF32 for BF16 bits.
	WeightBF16(data []uint16, shape ...int) (Tensor, error)
	// Slice returns a view of rows [lo, hi) of t that shares its storage.
	Slice(t Tensor, lo, hi int) Tensor
	// Free releases t's device memory. Views of t and t itself must not be
	// used afterwards. Freeing a weight does not touch the host data it was
	// made from.
	Free(t Tensor)

	// Write copies host values into an F32 tensor; len(src) == Len(dst).
	Write(dst Tensor, src []float32)
	// WriteInt32 copies host values into an I32 tensor; len(src) == Len(dst).
	WriteInt32(dst Tensor, src []int32)
	// Read copies an F32 tensor to the host; len(dst) == Len(src). It waits
	// for pending work and reports any device error.
	Read(dst []float32, src Tensor) error
	// Synchronize waits until all queued work is done and reports any device
	// error raised since the last call.
	Synchronize() error
	// Copy copies src into dst on the device; both have the same dtype and
	// number of elements (use Slice to copy a range of rows).
	Copy(dst, src Tensor)

	// Embedding gathers rows: dst[i] = table[ids[i]] for an I32 ids vector.
	// table is F32 or BF16 (widened exactly), or quantized on a
	// QuantBackend (dequantized exactly); dst is F32 [len(ids), cols].
	// With an F32 activation table it also selects rows of activations.
	Embedding(dst, table, ids Tensor)
	// Linear computes dst[m,n] = x[m,k]·w[n,k]ᵀ + bias[n]. w is F32 or BF16
	// (or quantized on a QuantBackend, with x quantized as the package doc
	// says); bias is F32 or nil.
	Linear(dst, x, w, bias Tensor)
	// LinearMulti computes several linear layers over the same input x:
	// Linear(o.Dst, x, o.W, o.Bias) for every o of outs (the q, k and v
	// projections of attention, the gate and up projections of an MLP). A
	// backend may run them as one product: a decode step is bound by
	// reading weights, and one pass over all of them saves synchronising
	// its threads (and draining a memory stream) after each matrix.
	LinearMulti(x Tensor, outs []LinearOut)
	// RMSNorm normalises every consecutive group of len(w) elements of x:
	// dst = x / sqrt(mean(x²) + eps) · w. With len(w) equal to the row
	// length it is the usual layer norm; with len(w) equal to the head size
	// it normalises each attention head separately (Qwen3 q/k norms).
	// dst may be x.
	RMSNorm(dst, x, w Tensor, eps float32)
	// RoPE rotates x [tokens, heads·headDim] in place by the angles of each
	// token's position, pairing element j with j+headDim/2 of every head (the
	// "rotate half" convention of Hugging Face checkpoints). pos is I32
	// [tokens]; cos and sin are F32 [maxPositions, headDim/2] tables.
	RoPE(x, pos, cos, sin Tensor, headDim int)
	// StoreKV writes the rows of k and v (F32 [tokens, KVHeads·HeadDim])
	// into the cache tensors kCache and vCache (F32 or BF16 [slots,
	// KVHeads·HeadDim], slots a multiple of BlockSize; or Q8_0 on a
	// QuantKVBackend) at the I32 slot numbers in slots ([tokens]), in the
	// layout of Attention.KVIndex. A BF16 cache stores the values rounded
	// to nearest even; a Q8_0 cache stores each head's HeadDim values as
	// Q8_0 blocks quantized as Quantize does (see QuantKVBackend). Only the
	// cache geometry of a is read (HeadDim, KVHeads, BlockSize).
	StoreKV(kCache, vCache, k, v, slots Tensor, a *Attention)
	// Attention computes causal grouped-query attention over a paged KV
	// cache for a batch of sequences whose new tokens are packed one after
	// another in q. See Attention for the layout. The keys and values of the
	// new tokens must already be in the cache (StoreKV).
	Attention(dst, q, kCache, vCache Tensor, a *Attention)
	// SiLUMul computes dst = silu(gate)·up elementwise (the SwiGLU MLP
	// activation). dst may be gate or up.
	SiLUMul(dst, gate, up Tensor)
	// Add computes dst = a + b elementwise. dst may be a or b.
	Add(dst, a, b Tensor)
	// LogSoftmax computes dst = log softmax(x) for every row. dst may be x.
	LogSoftmax(dst, x Tensor)
	// Gather picks one element per row: dst[i] = x[i, idx[i]], for I32 idx
	// [rows] and F32 dst [rows].
	Gather(dst, x, idx Tensor)
}

// QuantBackend is a Backend that also takes block-quantized weights
// (Q8_0, Q4_0; see the package doc). It is an interface of its own, as
// Trainer is, so that a backend without quantized kernels (the CUDA
// backend today) keeps compiling and the model, which asks for it only
// when weights are quantized, can say which backend lacks it. On a
// QuantBackend, Linear, LinearMulti and Embedding accept quantized
// weights (w, the W of every LinearOut, table), and so do a Trainer's
// Convert (to F32, dequantizing) and LinearBackwardInput (dy·dequant(w)).
type QuantBackend interface {
	Backend
	// WeightQuant makes a read-only weight of the quantized dtype dt from
	// blocks, the bytes of its blocks in ggml's layout (the package doc):
	// dt.Bytes(n) bytes for n elements. The last dimension of shape must
	// be a multiple of QK. The backend copies what it needs: blocks may
	// be reused once it returns.
	WeightQuant(dt DType, blocks []byte, shape ...int) (Tensor, error)
}

// QuantKVBackend is a Backend whose paged KV cache can also be stored in
// ggml's Q8_0 blocks (34 bytes for 32 values, where BF16 takes 64): an
// interface of its own, as QuantBackend is, so that a backend without
// the kernels (the CUDA backend today) keeps compiling and the model can
// say which backend lacks them.
//
// A Q8_0 cache tensor [slots, KVHeads·HeadDim] (HeadDim a multiple of
// QK) holds its elements in the order of Attention.KVIndex, as an F32
// cache does, cut into blocks of QK: element i is value i%QK of block
// i/QK, at byte (i/QK)·34, so a head's HeadDim values of one slot are
// HeadDim/QK whole blocks. StoreKV quantizes them as Quantize does
// (ggml's quantize_row_q8_0_ref: d = max|x|/127 rounded to half, q =
// x·(1/d) rounded half away from zero), and Attention reads d·q (exact
// in float32). Slice, Copy and Free work on it as on any tensor, and a
// Trainer's Convert to F32 dequantizes it.
type QuantKVBackend interface {
	Backend
	// NewKVCacheTensor allocates a zero-filled cache tensor [slots,
	// width] of dtype dt, which is Q8_0 (width a multiple of QK).
	NewKVCacheTensor(dt DType, slots, width int) (Tensor, error)
}

// LinearOut is one linear layer of a LinearMulti call: Dst = x·Wᵀ + Bias,
// with W F32 or BF16 (or quantized on a QuantBackend) and Bias F32 or
// nil, as in Linear.
type LinearOut struct {
	Dst, W, Bias Tensor
}

// Scaler is implemented by a backend that multiplies a tensor by a
// constant (the embedding, residual and logit scales of Gemma and
// Granite); every Trainer does.
type Scaler interface {
	// Scale multiplies an F32 tensor by alpha in place.
	Scale(x Tensor, alpha float32)
}

// Gemma is implemented by a backend that runs the ops Gemma's blocks add
// to Llama's: the GELU-gated MLP and the embedding's scale.
type Gemma interface {
	Scaler
	// GELUMul computes dst = gelu(gate)·up elementwise with GELU's tanh
	// approximation, 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³))) (PyTorch's
	// gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh). dst may be
	// gate or up.
	GELUMul(dst, gate, up Tensor)
}

// GemmaTrainer is a Trainer that also runs the backward of Gemma's ops.
type GemmaTrainer interface {
	Gemma
	// GELUMulBackward computes dGate = ∂L/∂gate and dUp = ∂L/∂up of
	// GELUMul from dy = ∂L/∂dst. dGate may be gate and dUp may be up.
	GELUMulBackward(dGate, dUp, dy, gate, up Tensor)
}

// Softcap is implemented by a backend that soft-caps attention scores
// (Attention.Softcap, and a Trainer's DenseAttention) and logits, as
// Gemma 2 does: y = cap·tanh(x/cap).
type Softcap interface {
	// Softcap replaces every element x of an F32 tensor with
	// cap·tanh(x/cap).
	Softcap(x Tensor, cap float32)
	// SoftcapBackward multiplies dx by the derivative of Softcap at the
	// elements whose capped values are y: 1 − (y/cap)².
	SoftcapBackward(dx, y Tensor, cap float32)
}

// BF16Reader is implemented by a backend that copies a BF16 tensor's bits
// out as they are (the CPU's): a copy of BF16 weights to another backend
// (a version for a GPU replica) then moves two bytes a value, where
// widening on the device, reading F32 and rounding back moves ten.
type BF16Reader interface {
	ReadBF16(dst []uint16, src Tensor) error
}

// WidensToBF16 is implemented by a backend that multiplies BF16 matrices
// natively and has no products of block-quantized ones (the GPU's): a
// matrix a checkpoint stores in blocks (a GGUF file's Q8_0, Q4_0, K-quants)
// is loaded as its values rounded to BF16, half the memory of F32, rather
// than widened to F32. Quantized values carry errors far above BF16's
// rounding (a Q8_0 step is 1/127 of its block's largest value, a BF16
// step at most 1/128 of the value itself).
type WidensToBF16 interface {
	WidensToBF16() bool
}

// SlidingWindow is implemented by a backend whose Attention (and, for a
// Trainer, DenseAttention) honour a sliding window (Attention.Window).
// A model loaded on another backend caps its context to the window
// instead, where attending over every earlier position is the same.
type SlidingWindow interface {
	SlidingWindow() bool
}

// Attention describes one batched attention call.
//
// The batch holds Seqs sequences. Sequence s owns query rows
// QueryStart[s] ≤ r < QueryStart[s+1] of q and of dst (one row per new token,
// Heads·HeadDim wide), and after this step has ContextLen[s] tokens in the
// cache; its new tokens are the last QueryStart[s+1]−QueryStart[s] of those,
// so the query at row r sits at position ContextLen[s] − (QueryStart[s+1] − r)
// and attends to cache positions 0 through its own (causal mask).
//
// Cache position p of sequence s is stored in slot
// BlockTable[s·MaxBlocks + p/BlockSize]·BlockSize + p%BlockSize of the cache
// tensors (F32 or BF16, or Q8_0 on a QuantKVBackend; both of one dtype),
// which hold KVHeads·HeadDim
// values per slot, laid out as KVIndex says. Query head h reads key/value
// head h / (Heads/KVHeads) (grouped-query attention).
type Attention struct {
	Heads, KVHeads, HeadDim int
	Scale                   float32 // usually 1/sqrt(HeadDim)
	// Window, when positive, is a sliding window: the query at position p
	// attends to positions max(0, p−Window+1) through p only (Mistral's,
	// Phi-3's sliding_window). Only a backend that implements
	// SlidingWindow honours it; others refuse it.
	Window int
	// Softcap, when positive, caps the scaled scores s as
	// Softcap·tanh(s/Softcap) before the softmax (Gemma 2's
	// attn_logit_softcapping). Only a backend that implements Softcap
	// honours it; others refuse it.
	Softcap    float32
	BlockSize  int    // tokens per cache block
	Seqs       int    // sequences in the batch
	MaxBlocks  int    // row length of BlockTable
	QueryStart Tensor // I32 [Seqs+1]
	ContextLen Tensor // I32 [Seqs]
	BlockTable Tensor // I32 [Seqs·MaxBlocks]
}

// KVIndex is the element of a cache tensor at which key/value head g of
// slot starts (HeadDim values follow). The cache is a sequence of blocks of
// BlockSize slots, and inside a block it is head-major: the BlockSize
// vectors of head 0, then those of head 1, and so on. A sequence's keys of
// one head are then BlockSize·HeadDim contiguous values per block, which
// attention reads as one stream, where a slot-major layout would interleave
// the heads and read each at a stride of KVHeads·HeadDim.
func (a *Attention) KVIndex(slot, g int) int {
	bs, hd := a.BlockSize, a.HeadDim
	return ((slot/bs)*a.KVHeads+g)*bs*hd + (slot%bs)*hd
}

// Trainer is a Backend that can also run the backward pass of the
// transformer ops and the optimizer.
//
// Gradients are F32. An op whose doc says "dx +=" adds into its output,
// which the caller zeroes first (Zero); "dx =" overwrites it. Weights that
// gradients flow through (w of LinearBackwardInput) may be F32 or BF16: a
// frozen BF16 base under LoRA adapters is the usual case. Weights that
// receive gradients are F32.
//
// Gradient reductions (weight gradients, bias and norm-weight sums,
// embedding scatter-adds) are computed in a fixed order for a given
// backend, shapes and thread count, so the same inputs give bit-identical
// gradients: recomputing activations (gradient checkpointing) does not
// change the result.
//
// Concurrency: unlike a plain Backend, a Trainer must allow one goroutine
// to serve (forward ops) while another trains (any ops) on different
// tensors, since serving never waits for training. Ops on the same tensors
// must still be serialised by the caller.
type Trainer interface {
	Backend

	// MatMul computes dst = alpha·op(a)·op(b) + beta·dst for F32 matrices,
	// where op(x) is x or xᵀ (trans set). a, b and dst are 2-D as rows ×
	// Cols. With beta == 0, dst is overwritten. It serves the products that
	// are not a linear layer: LoRA adapters, their gradients, merges.
	MatMul(dst, a, b Tensor, transA, transB bool, alpha, beta float32)
	// Convert copies src into dst, which has the same number of elements and
	// possibly another dtype: F32→BF16 rounds to nearest even, BF16→F32 is
	// exact, equal dtypes copy.
	Convert(dst, src Tensor)

	// EmbeddingBackward scatter-adds rows: dTable[ids[i]] += dy[i]. dTable
	// is F32 [rows, cols], dy F32 [len(ids), cols]; repeated ids add up.
	EmbeddingBackward(dTable, dy, ids Tensor)
	// LinearBackwardInput computes dx = dy·w (dx += dy·w with accumulate),
	// the input gradient of Linear: dy [m, n], w [n, k] (F32 or BF16),
	// dx [m, k].
	LinearBackwardInput(dx, dy, w Tensor, accumulate bool)
	// LinearBackwardWeight computes dw += dyᵀ·x, the weight gradient of
	// Linear: dy [m, n], x [m, k], dw F32 [n, k].
	LinearBackwardWeight(dw, dy, x Tensor)
	// BiasBackward computes db += Σ_rows dy, the bias gradient of Linear.
	BiasBackward(db, dy Tensor)
	// RMSNormBackward is the gradient of RMSNorm(y, x, w, eps) for every
	// group of len(w) elements: dx = ∂L/∂x (dx += with accumulate) and,
	// unless dw is nil, dw += ∂L/∂w, given dy = ∂L/∂y. dx may be dy; it
	// must not be x.
	RMSNormBackward(dx, dw, dy, x, w Tensor, eps float32, accumulate bool)
	// RoPEBackward turns ∂L/∂(rotated x) into ∂L/∂x in place: the inverse
	// rotation of RoPE with the same arguments.
	RoPEBackward(dx, pos, cos, sin Tensor, headDim int)
	// DenseAttention is causal grouped-query attention of every sequence
	// over its own keys and values (no cache), for training: see
	// DenseAttention the type. It writes dst (like Attention) and lse [rows,
	// Heads], the log of each softmax denominator (scaled scores included),
	// which DenseAttentionBackward needs. It does not hold a score matrix of
	// a whole sequence per head at once.
	DenseAttention(dst, lse, q, k, v Tensor, a *DenseAttention)
	// DenseAttentionBackward computes dq, dk and dv (all overwritten) from
	// dOut = ∂L/∂dst and the forward's inputs and outputs.
	DenseAttentionBackward(dq, dk, dv, dOut, out, lse, q, k, v Tensor, a *DenseAttention)
	// SiLUMulBackward computes dGate = ∂L/∂gate and dUp = ∂L/∂up of
	// SiLUMul from dy = ∂L/∂dst. dGate may be gate and dUp may be up.
	SiLUMulBackward(dGate, dUp, dy, gate, up Tensor)
	// LogProbs reads every row of logits [rows, vocab] as unnormalised
	// log-probabilities and writes, per row, the log-probability of the
	// I32 target (logp), the entropy of the distribution (entropy, nil to
	// skip) and the log of its normaliser (lse, for LogProbsBackward), all
	// F32 [rows]. Sums are accumulated in float64.
	LogProbs(logp, entropy, lse, logits, targets Tensor)
	// LogProbsBackward computes dLogits = dLogp·(onehot(target) − softmax)
	// per row, the gradient of LogProbs' logp with upstream dLogp [rows].
	// dLogits may be logits. logits may be a tile of the vocabulary's
	// columns (with the whole rows' lse and the targets shifted to the
	// tile's first column): a target outside [0, cols) adds no one-hot
	// term.
	LogProbsBackward(dLogits, logits, lse, targets, dLogp Tensor)

	// AdamW updates an F32 parameter in place from its gradient and the
	// moment estimates m and v (updated in place): see AdamW the type.
	AdamW(param, grad, m, v Tensor, hp AdamW)
	// SumSquares returns Σ x² over all elements of the F32 tensors,
	// accumulated in float64 (for the global gradient norm). Like Read, it
	// waits for pending work and reports any device error.
	SumSquares(ts ...Tensor) (float64, error)
	// Scale multiplies an F32 tensor by alpha in place.
	Scale(x Tensor, alpha float32)
	// Zero sets every element of a tensor to zero.
	Zero(x Tensor)
	// AddScaled computes dst += alpha·x for F32 tensors of equal length.
	// (Backend.Add is the plain dst = a + b, which is also the backward of a
	// residual add: the gradient reaches both inputs unchanged.)
	AddScaled(dst, x Tensor, alpha float32)
}

// DenseAttention describes a DenseAttention call: Seqs sequences packed
// one after another in the rows of q, k, v and dst; sequence s owns rows
// SeqStart[s] ≤ r < SeqStart[s+1], at positions 0, 1, ... of that sequence,
// and its query at position p attends to its own keys at positions 0..p.
// q and dst rows are Heads·HeadDim wide, k and v rows KVHeads·HeadDim; query
// head h reads key/value head h / (Heads/KVHeads).
type DenseAttention struct {
	Heads, KVHeads, HeadDim int
	Scale                   float32 // usually 1/sqrt(HeadDim)
	Window                  int     // as Attention.Window
	Softcap                 float32 // as Attention.Softcap
	Seqs                    int
	SeqStart                Tensor // I32 [Seqs+1], SeqStart[0] = 0, SeqStart[Seqs] = rows
}

// AdamW holds the hyperparameters of one AdamW step (Loshchilov & Hutter,
// decoupled weight decay, as torch.optim.AdamW):
//
//	g = GradScale·grad
//	m = Beta1·m + (1−Beta1)·g
//	v = Beta2·v + (1−Beta2)·g²
//	param = param·(1 − LR·WeightDecay) − LR·(m/(1−Beta1^Step)) / (sqrt(v/(1−Beta2^Step)) + Eps)
type AdamW struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
	// Step is the 1-based number of this update (bias correction).
	Step int
	// GradScale multiplies the gradient before use (global-norm clipping
	// without a separate pass); 0 is taken as 1.
	GradScale float32
}
