package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
)

// These tests check each op against a float64 reference on the paths the
// backend chooses between (GEMV, tensor-core and SIMT products; decode with
// and without split keys, and prefill attention), which the shapes of a
// conformance suite alone would not all reach.

// variant returns a backend on b's device with other tuning knobs.
func variant(b *Backend, gemvMaxM, attnPath, minSplitLen int) *Backend {
	return &Backend{dev: b.dev, name: b.name, errWord: b.errWord, gemvMaxM: gemvMaxM, attnPath: attnPath, minSplitLen: minSplitLen}
}

// opHarness holds the backend and random source of one test.
type opHarness struct {
	t *testing.T
	b *Backend
	r *rand.Rand
}

func newOpHarness(t *testing.T, b *Backend) *opHarness {
	return &opHarness{t: t, b: b, r: rand.New(rand.NewPCG(uint64(len(t.Name())), 7))}
}

func (h *opHarness) randn(n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(h.r.NormFloat64() * scale)
	}
	return v
}

func (h *opHarness) f32(v []float32, shape ...int) compute.Tensor {
	h.t.Helper()
	x, err := h.b.NewTensor(compute.F32, shape...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.b.Write(x, v)
	h.t.Cleanup(func() { h.b.Free(x) })
	return x
}

func (h *opHarness) i32(v []int32) compute.Tensor {
	h.t.Helper()
	x, err := h.b.NewTensor(compute.I32, len(v))
	if err != nil {
		h.t.Fatal(err)
	}
	h.b.WriteInt32(x, v)
	h.t.Cleanup(func() { h.b.Free(x) })
	return x
}

// weight makes an F32 or BF16 weight from v and returns the values it
// holds (rounded for BF16).
func (h *opHarness) weight(dt compute.DType, v []float32, shape ...int) (compute.Tensor, []float32) {
	h.t.Helper()
	var w compute.Tensor
	var err error
	vals := v
	if dt == compute.BF16 {
		bits := make([]uint16, len(v))
		vals = make([]float32, len(v))
		for i, x := range v {
			bits[i] = bf16(x)
			vals[i] = math.Float32frombits(uint32(bits[i]) << 16)
		}
		w, err = h.b.WeightBF16(bits, shape...)
	} else {
		w, err = h.b.WeightF32(v, shape...)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { h.b.Free(w) })
	return w, vals
}

func (h *opHarness) read(x compute.Tensor) []float32 {
	h.t.Helper()
	v := make([]float32, compute.Len(x))
	if err := h.b.Read(v, x); err != nil {
		h.t.Fatal(err)
	}
	return v
}

// near checks got against want: the error relative to max(|want|, rms of
// want) must be at most tol.
func (h *opHarness) near(what string, got []float32, want []float64, tol float64) {
	h.t.Helper()
	ss := 0.0
	for _, w := range want {
		ss += w * w
	}
	floor := math.Sqrt(ss/float64(max(len(want), 1))) + 1e-30
	for i := range got {
		e := math.Abs(float64(got[i])-want[i]) / (math.Abs(want[i]) + floor)
		if !(e <= tol) {
			h.t.Fatalf("%s: element %d = %v, want %v (error %.3g, tolerance %.3g)", what, i, got[i], want[i], e, tol)
		}
	}
}

// bf16 rounds to BF16 bits (nearest even).
func bf16(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

func roundBF16(x float32) float32 { return math.Float32frombits(uint32(bf16(x)) << 16) }

func TestLinearPaths(t *testing.T) {
	base := testBackend(t)
	cases := []struct {
		m, n, k int
		bias    bool
		offset  int // rows of x skipped by a Slice (unaligned x when k is odd)
	}{
		{1, 33, 8, true, 0}, {3, 40, 64, false, 0}, {8, 24, 200, true, 0}, {5, 17, 13, true, 1},
		{9, 50, 64, true, 0}, {40, 72, 96, false, 0}, {33, 64, 31, true, 1}, {70, 130, 48, true, 0},
		{300, 1024, 32, true, 0}, // enough tiles for the 128×128 kernel
	}
	for _, dt := range []compute.DType{compute.F32, compute.BF16} {
		for _, c := range cases {
			for _, gemv := range []int{8, 0} { // 0: never the GEMV kernels
				if gemv == 0 && c.m > 8 {
					continue
				}
				name := fmt.Sprintf("%v/m%d_n%d_k%d_bias%v_off%d_gemv%d", dt, c.m, c.n, c.k, c.bias, c.offset, gemv)
				t.Run(name, func(t *testing.T) {
					h := newOpHarness(t, variant(base, gemv, 0, 256))
					xv := h.randn((c.m+c.offset)*c.k, 1)
					xall := h.f32(xv, c.m+c.offset, c.k)
					x := h.b.Slice(xall, c.offset, c.m+c.offset)
					xv = xv[c.offset*c.k:]
					w, wv := h.weight(dt, h.randn(c.n*c.k, 0.1), c.n, c.k)
					var bias compute.Tensor
					bv := make([]float32, c.n)
					if c.bias {
						bv = h.randn(c.n, 1)
						bias = h.f32(bv, c.n)
					}
					dst := h.f32(make([]float32, c.m*c.n), c.m, c.n)
					h.b.Linear(dst, x, w, bias)
					want := make([]float64, c.m*c.n)
					for i := range c.m {
						for j := range c.n {
							s := float64(bv[j])
							for k := range c.k {
								xk := xv[i*c.k+k]
								if dt == compute.BF16 {
									xk = roundBF16(xk)
								}
								s += float64(xk) * float64(wv[j*c.k+k])
							}
							want[i*c.n+j] = s
						}
					}
					h.near("Linear", h.read(dst), want, 1e-5*math.Sqrt(float64(c.k)))
				})
			}
		}
	}
	launched(t, base.dev, "gemv_f32", "gemv_bf16", "gemm_f32", "gemm_bf16_64x64", "gemm_bf16_128x128")
}

// launched checks that each kernel has run on d.
func launched(t *testing.T, d *Device, kernels ...string) {
	t.Helper()
	n := d.Launches()
	for _, k := range kernels {
		if n[k] == 0 {
			t.Errorf("kernel %s never ran", k)
		}
	}
}

// attnSeq is one sequence of an attention test: ctx tokens in the cache
// after the step, the last nNew of them new.
type attnSeq struct{ ctx, nNew int }

func TestAttentionPaths(t *testing.T) {
	base := testBackend(t)
	cases := []struct {
		heads, kvHeads, hd, bs int
		seqs                   []attnSeq
	}{
		{4, 2, 16, 4, []attnSeq{{9, 9}, {6, 1}, {13, 3}}},
		{2, 2, 8, 1, []attnSeq{{5, 5}, {3, 1}}},
		{8, 2, 64, 16, []attnSeq{{300, 1}, {70, 1}}},
		{4, 1, 128, 16, []attnSeq{{40, 7}, {17, 17}}},
		{4, 2, 16, 4, []attnSeq{{20, 0}, {12, 3}}},
		{2, 2, 256, 8, []attnSeq{{20, 4}}}, // prefill needs more than 48 KiB of shared memory
		{6, 3, 24, 5, []attnSeq{{1, 1}, {45, 2}}},
	}
	paths := []struct {
		name         string
		path, minLen int
	}{{"auto", 0, 256}, {"decode", attnDecode, 256}, {"decode-split", attnDecode, 32}, {"prefill", attnPrefill, 256}}
	for _, dt := range []compute.DType{compute.F32, compute.BF16} {
		for _, c := range cases {
			for _, p := range paths {
				name := fmt.Sprintf("%v/h%d_kv%d_d%d_bs%d_%v/%s", dt, c.heads, c.kvHeads, c.hd, c.bs, c.seqs, p.name)
				t.Run(name, func(t *testing.T) {
					h := newOpHarness(t, variant(base, 8, p.path, p.minLen))
					h.attention(dt, c.heads, c.kvHeads, c.hd, c.bs, c.seqs)
				})
			}
		}
	}
	launched(t, base.dev, "attn_decode_f32", "attn_decode_bf16", "attn_combine", "attn_prefill_f32", "attn_prefill_bf16",
		"store_kv_f32", "store_kv_bf16")
}

// attention fills a paged cache through StoreKV (blocks in a shuffled
// order) and checks Attention against a float64 reference.
func (h *opHarness) attention(dt compute.DType, heads, kvHeads, hd, bs int, seqs []attnSeq) {
	qdim, kvdim := heads*hd, kvHeads*hd
	maxBlocks, total := 0, 0
	for _, s := range seqs {
		nb := (s.ctx + bs - 1) / bs
		maxBlocks = max(maxBlocks, nb)
		total += nb
	}
	nBlocks := total + 3
	order := h.r.Perm(nBlocks)
	table := make([]int32, len(seqs)*maxBlocks)
	var slots []int32
	keys := make([][]float32, len(seqs))
	vals := make([][]float32, len(seqs))
	var kAll, vAll []float32
	next := 0
	for i, s := range seqs {
		for j := range (s.ctx + bs - 1) / bs {
			table[i*maxBlocks+j] = int32(order[next])
			next++
		}
		keys[i], vals[i] = h.randn(s.ctx*kvdim, 1), h.randn(s.ctx*kvdim, 1)
		for p := range s.ctx {
			slots = append(slots, table[i*maxBlocks+p/bs]*int32(bs)+int32(p%bs))
		}
		kAll, vAll = append(kAll, keys[i]...), append(vAll, vals[i]...)
	}
	kc, err := h.b.NewTensor(dt, nBlocks*bs, kvdim)
	if err != nil {
		h.t.Fatal(err)
	}
	vc, err := h.b.NewTensor(dt, nBlocks*bs, kvdim)
	if err != nil {
		h.t.Fatal(err)
	}
	defer h.b.Free(kc)
	defer h.b.Free(vc)
	a := &compute.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd))), BlockSize: bs,
		Seqs: len(seqs), MaxBlocks: maxBlocks}
	h.b.StoreKV(kc, vc, h.f32(kAll, len(slots), kvdim), h.f32(vAll, len(slots), kvdim), h.i32(slots), a)

	qstart := []int32{0}
	ctx := make([]int32, len(seqs))
	for i, s := range seqs {
		qstart = append(qstart, qstart[i]+int32(s.nNew))
		ctx[i] = int32(s.ctx)
	}
	rows := int(qstart[len(seqs)])
	qv := h.randn(rows*qdim, 1)
	a.QueryStart, a.ContextLen, a.BlockTable = h.i32(qstart), h.i32(ctx), h.i32(table)
	dst := h.f32(make([]float32, rows*qdim), rows, qdim)
	h.b.Attention(dst, h.f32(qv, rows, qdim), kc, vc, a)

	want := make([]float64, rows*qdim)
	group := heads / kvHeads
	round := func(x float32) float64 {
		if dt == compute.BF16 {
			return float64(roundBF16(x))
		}
		return float64(x)
	}
	for i, s := range seqs {
		for tok := range s.nNew {
			r := int(qstart[i]) + tok
			pos := s.ctx - s.nNew + tok
			for hh := range heads {
				g := hh / group
				sc := make([]float64, pos+1)
				top := math.Inf(-1)
				for p := range pos + 1 {
					d := 0.0
					for e := range hd {
						d += round(qv[r*qdim+hh*hd+e]) * round(keys[i][p*kvdim+g*hd+e])
					}
					sc[p] = d * float64(a.Scale)
					top = math.Max(top, sc[p])
				}
				sum := 0.0
				for p := range sc {
					sc[p] = math.Exp(sc[p] - top)
					sum += sc[p]
				}
				for e := range hd {
					o := 0.0
					for p := range sc {
						o += sc[p] * round(vals[i][p*kvdim+g*hd+e])
					}
					want[r*qdim+hh*hd+e] = o / sum
				}
			}
		}
	}
	h.near("Attention", h.read(dst), want, 2e-5*math.Sqrt(float64(hd)))
}

func TestElementwiseOps(t *testing.T) {
	h := newOpHarness(t, testBackend(t))
	// RMSNorm over rows (block kernel) and over heads (warp kernel), in
	// place; SiLUMul and Add in place; LogSoftmax in place; Gather; RoPE.
	for _, g := range []int{7, 64, 300, 1000} {
		rows := 5
		xv := h.randn(rows*g, 2)
		wv := h.randn(g, 1)
		x := h.f32(xv, rows, g)
		h.b.RMSNorm(x, x, h.f32(wv, g), 1e-5)
		want := make([]float64, rows*g)
		for r := range rows {
			ss := 0.0
			for i := range g {
				ss += float64(xv[r*g+i]) * float64(xv[r*g+i])
			}
			inv := 1 / math.Sqrt(ss/float64(g)+1e-5)
			for i := range g {
				want[r*g+i] = float64(xv[r*g+i]) * inv * float64(wv[i])
			}
		}
		h.near(fmt.Sprintf("RMSNorm g=%d", g), h.read(x), want, 1e-5)
	}

	n := 1000
	gv, uv := h.randn(n, 3), h.randn(n, 1)
	gt, ut := h.f32(gv, n), h.f32(uv, n)
	h.b.SiLUMul(ut, gt, ut)
	want := make([]float64, n)
	for i := range want {
		g := float64(gv[i])
		want[i] = g / (1 + math.Exp(-g)) * float64(uv[i])
	}
	h.near("SiLUMul", h.read(ut), want, 1e-5)
	h.b.Add(gt, gt, ut)
	for i := range want {
		want[i] += float64(gv[i])
	}
	h.near("Add", h.read(gt), want, 1e-6)

	for _, cols := range []int{5, 3000, 20000} {
		rows := 3
		xv := h.randn(rows*cols, 4)
		x := h.f32(xv, rows, cols)
		h.b.LogSoftmax(x, x)
		want := make([]float64, rows*cols)
		for r := range rows {
			top := math.Inf(-1)
			for _, v := range xv[r*cols : (r+1)*cols] {
				top = math.Max(top, float64(v))
			}
			s := 0.0
			for _, v := range xv[r*cols : (r+1)*cols] {
				s += math.Exp(float64(v) - top)
			}
			for i, v := range xv[r*cols : (r+1)*cols] {
				want[r*cols+i] = float64(v) - top - math.Log(s)
			}
		}
		h.near(fmt.Sprintf("LogSoftmax cols=%d", cols), h.read(x), want, 1e-5)

		idx := []int32{int32(cols - 1), 0, int32(cols / 2)}
		d := h.f32(make([]float32, rows), rows)
		h.b.Gather(d, x, h.i32(idx))
		got := h.read(d)
		all := h.read(x)
		for r := range rows {
			if got[r] != all[r*cols+int(idx[r])] {
				h.t.Fatalf("Gather row %d: %v, want %v", r, got[r], all[r*cols+int(idx[r])])
			}
		}
	}

	// RoPE: rows at positions from a table, 3 heads of 8.
	rows, hd, heads, maxPos := 4, 8, 3, 10
	cv, sv := h.randn(maxPos*hd/2, 1), h.randn(maxPos*hd/2, 1)
	pos := []int32{0, 9, 3, 3}
	xv := h.randn(rows*heads*hd, 1)
	x := h.f32(xv, rows, heads*hd)
	h.b.RoPE(x, h.i32(pos), h.f32(cv, maxPos, hd/2), h.f32(sv, maxPos, hd/2), hd)
	want = make([]float64, len(xv))
	for r := range rows {
		for hh := range heads {
			for j := range hd / 2 {
				i1, i2 := r*heads*hd+hh*hd+j, r*heads*hd+hh*hd+j+hd/2
				c, s := float64(cv[int(pos[r])*hd/2+j]), float64(sv[int(pos[r])*hd/2+j])
				want[i1] = float64(xv[i1])*c - float64(xv[i2])*s
				want[i2] = float64(xv[i2])*c + float64(xv[i1])*s
			}
		}
	}
	h.near("RoPE", h.read(x), want, 1e-6)
}

func TestTensorsAndEmbedding(t *testing.T) {
	h := newOpHarness(t, testBackend(t))
	if !strings.HasPrefix(h.b.Name(), "cuda:0 (clawrl fake CUDA device)") {
		t.Errorf("Name %q", h.b.Name())
	}
	// NewTensor is zero-filled (the fake fills fresh memory with NaN).
	for _, dt := range []compute.DType{compute.F32, compute.BF16, compute.I32} {
		x, err := h.b.NewTensor(dt, 3, 5)
		if err != nil {
			t.Fatal(err)
		}
		if dt == compute.F32 {
			for i, v := range h.read(x) {
				if v != 0 {
					t.Fatalf("NewTensor F32: element %d = %v", i, v)
				}
			}
		}
		h.b.Free(x)
	}
	// Embedding from F32 and BF16 tables, and of activation rows; a Slice
	// shares storage and a Copy between slices moves rows.
	for _, dt := range []compute.DType{compute.F32, compute.BF16} {
		table, tv := h.weight(dt, h.randn(6*4, 1), 6, 4)
		ids := []int32{5, 0, 2, 2}
		dst := h.f32(make([]float32, 16), 4, 4)
		h.b.Embedding(dst, table, h.i32(ids))
		got := h.read(dst)
		for i, id := range ids {
			for c := range 4 {
				if got[i*4+c] != tv[int(id)*4+c] {
					t.Fatalf("Embedding %v: row %d col %d = %v, want %v", dt, i, c, got[i*4+c], tv[int(id)*4+c])
				}
			}
		}
		sel := h.f32(make([]float32, 8), 2, 4)
		h.b.Embedding(sel, dst, h.i32([]int32{3, 0}))
		h.b.Copy(h.b.Slice(dst, 1, 3), sel)
		got = h.read(dst)
		for c := range 4 {
			if got[4+c] != tv[2*4+c] || got[8+c] != tv[5*4+c] {
				t.Fatalf("Embedding of activation rows then Copy into a slice: %v", got)
			}
		}
	}
	// A freed tensor panics when used; freeing a view leaves the parent.
	x := h.f32(make([]float32, 4), 2, 2)
	h.b.Free(h.b.Slice(x, 0, 1))
	h.read(x)
	y, _ := h.b.NewTensor(compute.F32, 2)
	h.b.Free(y)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Read of a freed tensor did not panic")
			}
		}()
		h.b.Read(make([]float32, 2), y)
	}()
}

// TestDeviceDataErrors checks that bad ids, positions, slots and block
// tables, which only the device sees, are reported by Synchronize and Read
// with the op's name, and that the backend works afterwards.
func TestDeviceDataErrors(t *testing.T) {
	h := newOpHarness(t, testBackend(t))
	table, _ := h.weight(compute.F32, h.randn(12, 1), 3, 4)
	dst := h.f32(make([]float32, 8), 2, 4)
	h.b.Embedding(dst, table, h.i32([]int32{1, 7}))
	if err := h.b.Synchronize(); err == nil || !strings.Contains(err.Error(), "Embedding: an id outside the table") {
		t.Fatalf("Synchronize after a bad id: %v", err)
	}
	if err := h.b.Synchronize(); err != nil {
		t.Fatalf("the error is reported once: %v", err)
	}
	x := h.f32(make([]float32, 8), 1, 8)
	h.b.RoPE(x, h.i32([]int32{4}), h.f32(make([]float32, 8), 2, 4), h.f32(make([]float32, 8), 2, 4), 8)
	h.b.Gather(h.f32(make([]float32, 1), 1), x, h.i32([]int32{-1}))
	if err := h.b.Read(make([]float32, 8), x); err == nil || !strings.Contains(err.Error(), "RoPE: a position") || !strings.Contains(err.Error(), "Gather: an index") {
		t.Fatalf("Read after a bad position and index: %v", err)
	}
	kc, _ := h.b.NewTensor(compute.F32, 8, 4)
	defer h.b.Free(kc)
	a := &compute.Attention{Heads: 1, KVHeads: 1, HeadDim: 4, BlockSize: 4, Scale: 1}
	h.b.StoreKV(kc, kc, x.(*tensor).view(1, 4, h.b), x.(*tensor).view(1, 4, h.b), h.i32([]int32{8}), a)
	if err := h.b.Synchronize(); err == nil || !strings.Contains(err.Error(), "StoreKV: a slot outside the cache") {
		t.Fatalf("Synchronize after a bad slot: %v", err)
	}
	a.Seqs, a.MaxBlocks = 1, 1
	a.QueryStart, a.ContextLen, a.BlockTable = h.i32([]int32{0, 1}), h.i32([]int32{1}), h.i32([]int32{5})
	h.b.Attention(h.f32(make([]float32, 4), 1, 4), h.f32(make([]float32, 4), 1, 4), kc, kc, a)
	if err := h.b.Synchronize(); err == nil || !strings.Contains(err.Error(), "Attention: block table") {
		t.Fatalf("Synchronize after a bad block table: %v", err)
	}
}

// view reshapes the first rows·cols elements of t (test helper).
func (t *tensor) view(rows, cols int, b *Backend) compute.Tensor {
	return &tensor{dt: t.dt, shape: []int{rows, cols}, n: rows * cols, ptr: t.ptr, freed: t.freed}
}
