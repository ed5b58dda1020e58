package cuda

import (
	"fmt"
	"math"

	"github.com/clawrl/clawrl/compute"
)

// lockstep is a compute.Backend that runs every op on two backends, a
// reference and the one under test, and compares the outputs after each op,
// so that a model-level difference is traced to the first op that makes it.
// Its tensors are pairs.
type lockstep struct {
	ref, got compute.Backend
	tol      float64 // error allowed relative to the output's rms
	ops      int
	fail     func(format string, args ...any)
}

type pair struct{ ref, got compute.Tensor }

func (p *pair) DType() compute.DType { return p.ref.DType() }
func (p *pair) Shape() []int         { return p.ref.Shape() }

func pr(t compute.Tensor) compute.Tensor {
	if t == nil {
		return nil
	}
	return t.(*pair).ref
}

func pg(t compute.Tensor) compute.Tensor {
	if t == nil {
		return nil
	}
	return t.(*pair).got
}

func (l *lockstep) Name() string { return "lockstep(" + l.ref.Name() + ", " + l.got.Name() + ")" }

func (l *lockstep) NewTensor(dt compute.DType, shape ...int) (compute.Tensor, error) {
	r, err := l.ref.NewTensor(dt, shape...)
	if err != nil {
		return nil, err
	}
	g, err := l.got.NewTensor(dt, shape...)
	if err != nil {
		return nil, err
	}
	return &pair{r, g}, nil
}

func (l *lockstep) WeightF32(data []float32, shape ...int) (compute.Tensor, error) {
	r, err := l.ref.WeightF32(data, shape...)
	if err != nil {
		return nil, err
	}
	g, err := l.got.WeightF32(data, shape...)
	if err != nil {
		return nil, err
	}
	return &pair{r, g}, nil
}

func (l *lockstep) WeightBF16(data []uint16, shape ...int) (compute.Tensor, error) {
	r, err := l.ref.WeightBF16(data, shape...)
	if err != nil {
		return nil, err
	}
	g, err := l.got.WeightBF16(data, shape...)
	if err != nil {
		return nil, err
	}
	return &pair{r, g}, nil
}

func (l *lockstep) Slice(t compute.Tensor, lo, hi int) compute.Tensor {
	return &pair{l.ref.Slice(pr(t), lo, hi), l.got.Slice(pg(t), lo, hi)}
}

func (l *lockstep) Free(t compute.Tensor) { l.ref.Free(pr(t)); l.got.Free(pg(t)) }

func (l *lockstep) Write(dst compute.Tensor, src []float32) {
	l.ref.Write(pr(dst), src)
	l.got.Write(pg(dst), src)
}

func (l *lockstep) WriteInt32(dst compute.Tensor, src []int32) {
	l.ref.WriteInt32(pr(dst), src)
	l.got.WriteInt32(pg(dst), src)
}

func (l *lockstep) Read(dst []float32, src compute.Tensor) error {
	if err := l.got.Read(dst, pg(src)); err != nil {
		return err
	}
	return l.ref.Read(dst, pr(src))
}

func (l *lockstep) Synchronize() error {
	if err := l.got.Synchronize(); err != nil {
		return err
	}
	return l.ref.Synchronize()
}

// check compares an F32 output of both backends.
func (l *lockstep) check(op string, t compute.Tensor) {
	l.ops++
	if t.DType() != compute.F32 {
		return
	}
	n := compute.Len(t)
	r, g := make([]float32, n), make([]float32, n)
	if err := l.ref.Read(r, pr(t)); err != nil {
		l.fail("op %d %s: reading the reference: %v", l.ops, op, err)
		return
	}
	if err := l.got.Read(g, pg(t)); err != nil {
		l.fail("op %d %s: %v", l.ops, op, err)
		return
	}
	ss := 0.0
	for _, v := range r {
		ss += float64(v) * float64(v)
	}
	rms := math.Sqrt(ss/float64(max(n, 1))) + 1e-30
	for i := range r {
		if e := math.Abs(float64(g[i]) - float64(r[i])); e > l.tol*rms || math.IsNaN(float64(g[i])) != math.IsNaN(float64(r[i])) {
			l.fail("op %d %s %s: element %d = %v, reference %v (error %.3g, rms %.3g)", l.ops, op, compute.ShapeString(t.Shape()), i, g[i], r[i], e, rms)
			return
		}
	}
}

func (l *lockstep) Copy(dst, src compute.Tensor) {
	l.ref.Copy(pr(dst), pr(src))
	l.got.Copy(pg(dst), pg(src))
	l.check("Copy", dst)
}

func (l *lockstep) Embedding(dst, table, ids compute.Tensor) {
	l.ref.Embedding(pr(dst), pr(table), pr(ids))
	l.got.Embedding(pg(dst), pg(table), pg(ids))
	l.check("Embedding", dst)
}

func (l *lockstep) Linear(dst, x, w, bias compute.Tensor) {
	l.ref.Linear(pr(dst), pr(x), pr(w), pr(bias))
	l.got.Linear(pg(dst), pg(x), pg(w), pg(bias))
	l.check(fmt.Sprintf("Linear %v w %s", w.DType(), compute.ShapeString(w.Shape())), dst)
}

func (l *lockstep) LinearMulti(x compute.Tensor, outs []compute.LinearOut) {
	ro, go_ := make([]compute.LinearOut, len(outs)), make([]compute.LinearOut, len(outs))
	for i, o := range outs {
		ro[i] = compute.LinearOut{Dst: pr(o.Dst), W: pr(o.W), Bias: pr(o.Bias)}
		go_[i] = compute.LinearOut{Dst: pg(o.Dst), W: pg(o.W), Bias: pg(o.Bias)}
	}
	l.ref.LinearMulti(pr(x), ro)
	l.got.LinearMulti(pg(x), go_)
	for i, o := range outs {
		l.check(fmt.Sprintf("LinearMulti out %d %v w %s", i, o.W.DType(), compute.ShapeString(o.W.Shape())), o.Dst)
	}
}

func (l *lockstep) RMSNorm(dst, x, w compute.Tensor, eps float32) {
	l.ref.RMSNorm(pr(dst), pr(x), pr(w), eps)
	l.got.RMSNorm(pg(dst), pg(x), pg(w), eps)
	l.check("RMSNorm", dst)
}

func (l *lockstep) RoPE(x, pos, cos, sin compute.Tensor, headDim int) {
	l.ref.RoPE(pr(x), pr(pos), pr(cos), pr(sin), headDim)
	l.got.RoPE(pg(x), pg(pos), pg(cos), pg(sin), headDim)
	l.check("RoPE", x)
}

func (l *lockstep) attn(a *compute.Attention, side func(compute.Tensor) compute.Tensor) *compute.Attention {
	c := *a
	c.QueryStart, c.ContextLen, c.BlockTable = side(a.QueryStart), side(a.ContextLen), side(a.BlockTable)
	return &c
}

func (l *lockstep) StoreKV(kCache, vCache, k, v, slots compute.Tensor, a *compute.Attention) {
	l.ref.StoreKV(pr(kCache), pr(vCache), pr(k), pr(v), pr(slots), l.attn(a, pr))
	l.got.StoreKV(pg(kCache), pg(vCache), pg(k), pg(v), pg(slots), l.attn(a, pg))
	l.check("StoreKV k", kCache)
	l.check("StoreKV v", vCache)
}

func (l *lockstep) Attention(dst, q, kCache, vCache compute.Tensor, a *compute.Attention) {
	l.ref.Attention(pr(dst), pr(q), pr(kCache), pr(vCache), l.attn(a, pr))
	l.got.Attention(pg(dst), pg(q), pg(kCache), pg(vCache), l.attn(a, pg))
	l.check("Attention", dst)
}

func (l *lockstep) SiLUMul(dst, gate, up compute.Tensor) {
	l.ref.SiLUMul(pr(dst), pr(gate), pr(up))
	l.got.SiLUMul(pg(dst), pg(gate), pg(up))
	l.check("SiLUMul", dst)
}

// The ops of compute.Gemma, compute.Softcap and compute.SlidingWindow,
// which both sides of a lockstep over the CPU and this backend have.
func (l *lockstep) SlidingWindow() bool { return true }

func (l *lockstep) GELUMul(dst, gate, up compute.Tensor) {
	l.ref.(compute.Gemma).GELUMul(pr(dst), pr(gate), pr(up))
	l.got.(compute.Gemma).GELUMul(pg(dst), pg(gate), pg(up))
	l.check("GELUMul", dst)
}

func (l *lockstep) Scale(x compute.Tensor, alpha float32) {
	l.ref.(compute.Scaler).Scale(pr(x), alpha)
	l.got.(compute.Scaler).Scale(pg(x), alpha)
	l.check("Scale", x)
}

func (l *lockstep) Softcap(x compute.Tensor, cap float32) {
	l.ref.(compute.Softcap).Softcap(pr(x), cap)
	l.got.(compute.Softcap).Softcap(pg(x), cap)
	l.check("Softcap", x)
}

func (l *lockstep) SoftcapBackward(dx, y compute.Tensor, cap float32) {
	l.ref.(compute.Softcap).SoftcapBackward(pr(dx), pr(y), cap)
	l.got.(compute.Softcap).SoftcapBackward(pg(dx), pg(y), cap)
	l.check("SoftcapBackward", dx)
}

func (l *lockstep) Add(dst, a, b compute.Tensor) {
	l.ref.Add(pr(dst), pr(a), pr(b))
	l.got.Add(pg(dst), pg(a), pg(b))
	l.check("Add", dst)
}

func (l *lockstep) LogSoftmax(dst, x compute.Tensor) {
	l.ref.LogSoftmax(pr(dst), pr(x))
	l.got.LogSoftmax(pg(dst), pg(x))
	l.check("LogSoftmax", dst)
}

func (l *lockstep) Gather(dst, x, idx compute.Tensor) {
	l.ref.Gather(pr(dst), pr(x), pr(idx))
	l.got.Gather(pg(dst), pg(x), pg(idx))
	l.check("Gather", dst)
}
