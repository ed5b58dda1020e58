package model

import "github.com/clawrl/clawrl/compute"

// One transformer block, for serving and for training.
//
// block is the only forward pass of a layer in the package: Model.run
// (serving, over the paged KV cache) and Pass.forward (training, over
// whole samples, keeping what Backward needs) both call it, and differ
// only in where the block's tensors live (blockIO) and in the three
// things a blockPass decides: how the linear layers run (one LinearMulti
// over the base weights, or each product plus its LoRA adapter), how
// attention runs (StoreKV and paged Attention, or DenseAttention with the
// log-normalisers), and where a training pass may give the machine to
// serving. Pass.layerBackward is its backward, written once over the same
// ops.

// blockIO are the tensors one block reads and writes, [tokens, width].
// Serving points the residual stream (xin, xmid, xout) at one tensor and
// updates it in place, q and k at qpre and kpre, and act at gate; training
// gives each its own tensor when Backward needs to read it.
type blockIO struct {
	xin, xmid, xout compute.Tensor // the residual stream: input, after attention, output
	h1, h2          compute.Tensor // input_layernorm and post_attention_layernorm outputs
	qpre, kpre      compute.Tensor // the q and k projections (before the q/k norms)
	q, k, v         compute.Tensor // after the q/k norms and RoPE
	att             compute.Tensor // attention output
	out             compute.Tensor // o_proj and down_proj outputs
	// With sandwich norms (Gemma): outMLP is down_proj's output (out is
	// o_proj's), and normed their norms' outputs. Serving points all
	// three at one tensor (the norms run in place); training keeps out
	// and outMLP for Backward.
	outMLP, normed compute.Tensor
	gate, up, act  compute.Tensor // MLP projections and silu(gate)·up
	pos            compute.Tensor // I32 position of every row
}

// proj is one linear layer of a block: dst = x·Wᵀ + bias, for LoRA target
// target of the layer.
type proj struct {
	dst, w, bias compute.Tensor
	target       int
}

// blockPass is what differs between a serving and a training pass of a
// block (see the comment at the top of the file).
type blockPass interface {
	// project runs the linear layers ps of layer l over the same input x.
	project(l int, x compute.Tensor, ps []proj)
	// attend writes layer l's attention of q over k and v (rotated) into
	// dst.
	attend(l int, dst, q, k, v compute.Tensor)
	// yield marks a slice boundary, where a training pass may let serving
	// run.
	yield()
}

// block runs transformer block l with weights w (Model's package doc has
// it in pseudo-code).
// ps is scratch for the products of one call (the caller's, so that a
// pass does not allocate per layer).
func (m *Model) block(bp blockPass, l int, w *layer, io *blockIO, ps *[3]proj) {
	b, c := m.b, m.Config
	eps := float32(c.RMSNormEps)

	// Attention: normalise, project to queries, keys and values, normalise
	// q and k per head (Qwen3), rotate by position, attend, project back
	// and add to the residual stream.
	h1 := io.xin // OLMo 2 projects the residual stream itself
	if !c.PostNormsOnly {
		b.RMSNorm(io.h1, io.xin, w.AttnNorm, eps)
		h1 = io.h1
	}
	*ps = [3]proj{{io.qpre, w.Q, w.QBias, targetQ}, {io.kpre, w.K, w.KBias, targetK}, {io.v, w.V, w.VBias, targetV}}
	bp.project(l, h1, ps[:])
	if c.QKNorm {
		b.RMSNorm(io.q, io.qpre, w.QNorm, eps)
		b.RMSNorm(io.k, io.kpre, w.KNorm, eps)
	}
	if c.rotates(l) {
		cos, sin := m.ropeFor(l)
		b.RoPE(io.q, io.pos, cos, sin, c.HeadDim)
		b.RoPE(io.k, io.pos, cos, sin, c.HeadDim)
	}
	bp.yield()
	bp.attend(l, io.att, io.q, io.k, io.v)
	*ps = [3]proj{{io.out, w.O, w.OBias, targetO}}
	bp.project(l, io.att, ps[:1])
	if c.SandwichNorms {
		b.RMSNorm(io.normed, io.out, w.PostAttnNorm, eps)
		b.Add(io.xmid, io.xin, io.normed)
	} else {
		if r := c.residualScale(); r != 1 {
			b.(compute.Scaler).Scale(io.out, r) // Granite's residual_multiplier
		}
		b.Add(io.xmid, io.xin, io.out)
	}
	bp.yield()

	// MLP: normalise, gate·up with SiLU (GELU), project down, (normalise,)
	// add to the residual.
	h2 := io.xmid
	if !c.PostNormsOnly {
		b.RMSNorm(io.h2, io.xmid, w.MLPNorm, eps)
		h2 = io.h2
	}
	*ps = [3]proj{{io.gate, w.Gate, w.GateBias, targetGate}, {io.up, w.Up, w.UpBias, targetUp}}
	bp.project(l, h2, ps[:2])
	if c.Activation == ActGELUTanh {
		b.(compute.Gemma).GELUMul(io.act, io.gate, io.up)
	} else {
		b.SiLUMul(io.act, io.gate, io.up)
	}
	bp.yield()
	out := io.out
	if c.SandwichNorms {
		out = io.outMLP
	}
	*ps = [3]proj{{out, w.Down, w.DownBias, targetDown}}
	bp.project(l, io.act, ps[:1])
	if c.SandwichNorms {
		b.RMSNorm(io.normed, out, w.PostMLPNorm, eps)
		out = io.normed
	} else if r := c.residualScale(); r != 1 {
		b.(compute.Scaler).Scale(out, r)
	}
	b.Add(io.xout, io.xmid, out)
}

// servePass is a serving pass's blockPass: the linear layers of one input
// as one LinearMulti (a decode step reads all their weights in one pass,
// where separate products would synchronise threads and restart a memory
// stream after each matrix), attention over the paged KV cache, no
// yields. A set's unmerged LoRA adapters (over quantized matrices) join
// the same LinearMulti with their x·Aᵀ, and add scale·(x·Aᵀ)·Bᵀ after it.
type servePass struct {
	b    compute.Backend
	c    *Config
	kv   *KVCache
	v    *views
	attn *compute.Attention
	outs *[6]compute.LinearOut

	lora  [][numTargets]*adapter // the set's unmerged adapters; nil: none
	scale float32
	tb    compute.Trainer // for the adapters' MatMul
}

func (s *servePass) project(l int, x compute.Tensor, ps []proj) {
	outs := s.outs[:0]
	for _, p := range ps {
		outs = append(outs, compute.LinearOut{Dst: p.dst, W: p.w, Bias: p.bias})
	}
	var ads [3]*adapter
	if s.lora != nil {
		for i, p := range ps {
			if ad := s.lora[l][p.target]; ad != nil {
				ads[i] = ad
				outs = append(outs, compute.LinearOut{Dst: s.v.lora[i], W: ad.A})
			}
		}
	}
	if len(outs) == 1 {
		s.b.Linear(outs[0].Dst, x, outs[0].W, outs[0].Bias)
	} else {
		s.b.LinearMulti(x, outs)
	}
	for i, ad := range ads[:len(ps)] {
		if ad != nil {
			s.tb.MatMul(ps[i].dst, s.v.lora[i], ad.B, false, true, s.scale, 1) // dst += s·u·Bᵀ
		}
	}
}

func (s *servePass) attend(l int, dst, q, k, v compute.Tensor) {
	s.attn.Window = s.c.LayerWindow(l)
	s.b.StoreKV(s.kv.k[l], s.kv.v[l], k, v, s.v.slots, s.attn)
	s.b.Attention(dst, q, s.kv.k[l], s.kv.v[l], s.attn)
}

func (s *servePass) yield() {}

// trainPass is a training pass's blockPass: each product with its LoRA
// adapter (the adapter's x·Aᵀ kept for Backward), dense causal attention
// over each sample (its log-normalisers kept), and slice boundaries.
type trainPass struct {
	p *Pass
	a *layerActs
}

func (tp trainPass) project(l int, x compute.Tensor, ps []proj) {
	t := tp.p.t
	ad := t.adapters(l)
	for _, p := range ps {
		t.linear(p.dst, x, p.w, p.bias, ad[p.target], tp.a.u[p.target])
	}
}

func (tp trainPass) attend(l int, dst, q, k, v compute.Tensor) {
	tp.p.attn.Window = tp.p.t.m.Config.LayerWindow(l)
	tp.p.t.tb.DenseAttention(dst, tp.a.lse, q, k, v, &tp.p.attn)
}

func (tp trainPass) yield() { tp.p.yield() }
