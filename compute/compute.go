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
//     widened to F32 when loaded). Token ids, positions and attention
//     metadata are I32 tensors, uploaded once per forward step, so a device
//     backend does not copy them again for every layer.
//   - Ops do not return errors: a shape or dtype mismatch is a programming
//     error and panics with a message naming the op. Errors that only a
//     device can report (a failed kernel launch, a lost GPU) surface at the
//     next Synchronize or Read.
//   - A Backend is not safe for concurrent use unless its documentation says
//     so; the model serialises its forward passes.
//
// Growth: the training engine adds backward kernels as a second interface,
// Trainer, which embeds Backend. Code that only runs the forward pass depends
// on Backend alone and keeps compiling when Trainer grows; code that trains
// asks for a Trainer (or type-asserts one) and gets a clear error from a
// backend that cannot train.
package compute

import (
	"fmt"
	"strings"
)

// DType is the element type of a tensor.
type DType uint8

// Element types a tensor can hold.
const (
	F32  DType = iota + 1 // IEEE float32
	BF16                  // bfloat16 bits (upper half of a float32), stored as uint16
	F16                   // IEEE half bits, stored as uint16
	I32                   // int32 (ids, positions, attention metadata)
)

// Size is the number of bytes one element of d occupies.
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case BF16, F16:
		return 2
	}
	return 0
}

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
	// table is F32 or BF16 (widened exactly); dst is F32 [len(ids), cols].
	// With an F32 activation table it also selects rows of activations.
	Embedding(dst, table, ids Tensor)
	// Linear computes dst[m,n] = x[m,k]·w[n,k]ᵀ + bias[n]. w is F32 or BF16;
	// bias is F32 or nil.
	Linear(dst, x, w, bias Tensor)
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
	// StoreKV writes the rows of k and v ([tokens, kvHeads·headDim]) into
	// the cache tensors kCache and vCache ([slots, kvHeads·headDim]) at the
	// I32 slot numbers in slots ([tokens]).
	StoreKV(kCache, vCache, k, v, slots Tensor)
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
// tensors, whose rows are KVHeads·HeadDim wide. Query head h reads key/value
// head h / (Heads/KVHeads) (grouped-query attention).
type Attention struct {
	Heads, KVHeads, HeadDim int
	Scale                   float32 // usually 1/sqrt(HeadDim)
	BlockSize               int     // tokens per cache block
	Seqs                    int     // sequences in the batch
	MaxBlocks               int     // row length of BlockTable
	QueryStart              Tensor  // I32 [Seqs+1]
	ContextLen              Tensor  // I32 [Seqs]
	BlockTable              Tensor  // I32 [Seqs·MaxBlocks]
}
