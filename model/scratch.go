package model

import (
	"math/bits"

	"github.com/clawrl/clawrl/compute"
)

// buffer is a scratch tensor that grows (to a power of two of rows) and is
// used through views of the rows a call needs.
type buffer struct {
	t    compute.Tensor
	rows int
	cols int // 0 for a vector
	dt   compute.DType

	v     compute.Tensor // the last view handed out, reused for the same size
	vrows int
}

func (bf *buffer) view(b compute.Backend, dt compute.DType, rows, cols int) (compute.Tensor, error) {
	if bf.t == nil || bf.rows < rows || bf.cols != cols || bf.dt != dt {
		if bf.t != nil {
			b.Free(bf.t)
			bf.t = nil
		}
		n := max(rows, 16)
		n = 1 << bits.Len(uint(n-1))
		var t compute.Tensor
		var err error
		if cols == 0 {
			t, err = b.NewTensor(dt, n)
		} else {
			t, err = b.NewTensor(dt, n, cols)
		}
		if err != nil {
			return nil, err
		}
		*bf = buffer{t: t, rows: n, cols: cols, dt: dt}
	}
	if bf.v == nil || bf.vrows != rows {
		bf.v, bf.vrows = b.Slice(bf.t, 0, rows), rows
	}
	return bf.v, nil
}

// scratch holds the activations and metadata of one forward pass, sized
// for the largest batch seen so far, and host staging slices.
type scratch struct {
	x, h, q, k, v, att, out, gate, up buffer
	ids, pos, slots, qstart, ctx, tab buffer
	final, rows, logits, logp, target buffer
	lora                              [3]buffer // x·Aᵀ of unmerged LoRA adapters, one per product of a call

	attn  compute.Attention
	outs  [6]compute.LinearOut // the products of one LinearMulti call (and their adapters' x·Aᵀ)
	projs [3]proj              // the products of one block step

	hIDs, hPos, hSlots, hQStart, hCtx, hTable, hRows []int32
	hReserved                                        []int
	hLogits                                          []float32
}

// views are the scratch tensors of one forward pass, cut to its size.
type views struct {
	x, h, q, k, v, att, out, gate, up compute.Tensor    // activations
	ids, pos, slots                   compute.Tensor    // I32 per token
	qstart, ctx, table                compute.Tensor    // I32 per sequence
	lora                              [3]compute.Tensor // [tokens, rank]: x·Aᵀ of unmerged adapters (nil without)
}

// views cuts the scratch to a pass of tokens new tokens in seqs
// sequences; with rank > 0, also the products of unmerged LoRA adapters
// of that rank.
func (s *scratch) views(b compute.Backend, c *Config, tokens, seqs, maxBlocks, rank int) (views, error) {
	var v views
	var err error
	for _, a := range []struct {
		dst  *compute.Tensor
		buf  *buffer
		dt   compute.DType
		rows int
		cols int
	}{
		{&v.x, &s.x, compute.F32, tokens, c.HiddenSize},
		{&v.h, &s.h, compute.F32, tokens, c.HiddenSize},
		{&v.q, &s.q, compute.F32, tokens, c.QDim()},
		{&v.k, &s.k, compute.F32, tokens, c.KVDim()},
		{&v.v, &s.v, compute.F32, tokens, c.KVDim()},
		{&v.att, &s.att, compute.F32, tokens, c.QDim()},
		{&v.out, &s.out, compute.F32, tokens, c.HiddenSize},
		{&v.gate, &s.gate, compute.F32, tokens, c.IntermediateSize},
		{&v.up, &s.up, compute.F32, tokens, c.IntermediateSize},
		{&v.ids, &s.ids, compute.I32, tokens, 0},
		{&v.pos, &s.pos, compute.I32, tokens, 0},
		{&v.slots, &s.slots, compute.I32, tokens, 0},
		{&v.qstart, &s.qstart, compute.I32, seqs + 1, 0},
		{&v.ctx, &s.ctx, compute.I32, seqs, 0},
		{&v.table, &s.tab, compute.I32, seqs * maxBlocks, 0},
	} {
		if *a.dst, err = a.buf.view(b, a.dt, a.rows, a.cols); err != nil {
			return views{}, err
		}
	}
	if rank > 0 {
		for i := range v.lora {
			if v.lora[i], err = s.lora[i].view(b, compute.F32, tokens, rank); err != nil {
				return views{}, err
			}
		}
	}
	return v, nil
}

func (s *scratch) free(b compute.Backend) {
	for _, bf := range []*buffer{&s.x, &s.h, &s.q, &s.k, &s.v, &s.att, &s.out, &s.gate, &s.up,
		&s.ids, &s.pos, &s.slots, &s.qstart, &s.ctx, &s.tab, &s.final, &s.rows, &s.logits, &s.logp, &s.target,
		&s.lora[0], &s.lora[1], &s.lora[2]} {
		if bf.t != nil {
			b.Free(bf.t)
		}
		*bf = buffer{}
	}
}
