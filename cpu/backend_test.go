package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu/kernels"
)

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func tensorOf(t *testing.T, b *Backend, v []float32, shape ...int) compute.Tensor {
	t.Helper()
	x, err := b.NewTensor(compute.F32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	b.Write(x, v)
	return x
}

func ints(t *testing.T, b *Backend, v []int32) compute.Tensor {
	t.Helper()
	x, err := b.NewTensor(compute.I32, len(v))
	if err != nil {
		t.Fatal(err)
	}
	b.WriteInt32(x, v)
	return x
}

func closeTo(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*(1+math.Abs(want[i])) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestLinear(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(1, 2))
	for _, tt := range []struct {
		name    string
		m, n, k int
		bf16    bool
		bias    bool
	}{
		{"f32 gemv", 1, 7, 13, false, false},
		{"f32 gemm bias", 5, 9, 16, false, true},
		{"bf16 gemv bias", 1, 33, 8, true, true},
		{"bf16 gemm", 4, 6, 31, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			xv, wv, bv := randVec(r, tt.m*tt.k), randVec(r, tt.n*tt.k), randVec(r, tt.n)
			var w compute.Tensor
			var err error
			if tt.bf16 {
				bits := make([]uint16, len(wv))
				kernels.F32ToBF16(bits, wv)
				kernels.BF16ToF32(wv, bits) // the reference uses the rounded weights
				w, err = b.WeightBF16(bits, tt.n, tt.k)
			} else {
				w, err = b.WeightF32(wv, tt.n, tt.k)
			}
			if err != nil {
				t.Fatal(err)
			}
			var bias compute.Tensor
			if tt.bias {
				bias = tensorOf(t, b, bv, tt.n)
			}
			dst := tensorOf(t, b, make([]float32, tt.m*tt.n), tt.m, tt.n)
			b.Linear(dst, tensorOf(t, b, xv, tt.m, tt.k), w, bias)
			want := make([]float64, tt.m*tt.n)
			for i := 0; i < tt.m; i++ {
				for j := 0; j < tt.n; j++ {
					s := 0.0
					if tt.bias {
						s = float64(bv[j])
					}
					for p := 0; p < tt.k; p++ {
						s += float64(xv[i*tt.k+p]) * float64(wv[j*tt.k+p])
					}
					want[i*tt.n+j] = s
				}
			}
			closeTo(t, "Linear", Float32s(dst), want, 1e-5)
		})
	}
}

func TestRMSNorm(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(3, 4))
	for _, group := range []int{12, 4} { // whole rows, then per head
		xv, wv := randVec(r, 3*12), randVec(r, group)
		x := tensorOf(t, b, xv, 3, 12)
		b.RMSNorm(x, x, tensorOf(t, b, wv, group), 1e-5)
		want := make([]float64, len(xv))
		for g := 0; g < len(xv); g += group {
			ss := 0.0
			for _, v := range xv[g : g+group] {
				ss += float64(v) * float64(v)
			}
			s := 1 / math.Sqrt(ss/float64(group)+1e-5)
			for j := range group {
				want[g+j] = float64(xv[g+j]) * s * float64(wv[j])
			}
		}
		closeTo(t, "RMSNorm", Float32s(x), want, 1e-5)
	}
}

func TestRoPE(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(5, 6))
	const heads, hd, maxPos = 3, 8, 10
	half := hd / 2
	cosv, sinv := make([]float32, maxPos*half), make([]float32, maxPos*half)
	for p := range maxPos {
		for j := range half {
			a := float64(p) * math.Pow(100, -float64(2*j)/hd)
			cosv[p*half+j], sinv[p*half+j] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	pos := []int32{0, 7, 3}
	xv := randVec(r, len(pos)*heads*hd)
	x := tensorOf(t, b, xv, len(pos), heads*hd)
	b.RoPE(x, ints(t, b, pos), tensorOf(t, b, cosv, maxPos, half), tensorOf(t, b, sinv, maxPos, half), hd)
	want := make([]float64, len(xv))
	for i, p := range pos {
		for h := range heads {
			row := xv[i*heads*hd+h*hd:]
			for j := range hd {
				a := float64(p) * math.Pow(100, -float64(2*(j%half))/hd)
				var rot float64 // rotate_half: [-x2, x1]
				if j < half {
					rot = -float64(row[j+half])
				} else {
					rot = float64(row[j-half])
				}
				want[i*heads*hd+h*hd+j] = float64(row[j])*math.Cos(a) + rot*math.Sin(a)
			}
		}
	}
	closeTo(t, "RoPE", Float32s(x), want, 1e-5)
}

func TestElementwise(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(7, 8))
	gv, uv := randVec(r, 50), randVec(r, 50)
	g, u := tensorOf(t, b, gv, 5, 10), tensorOf(t, b, uv, 5, 10)
	sum := tensorOf(t, b, make([]float32, 50), 5, 10)
	b.Add(sum, g, u)
	b.SiLUMul(g, g, u)
	ws, wm := make([]float64, 50), make([]float64, 50)
	for i := range gv {
		x, y := float64(gv[i]), float64(uv[i])
		ws[i], wm[i] = x+y, x/(1+math.Exp(-x))*y
	}
	closeTo(t, "Add", Float32s(sum), ws, 1e-6)
	closeTo(t, "SiLUMul", Float32s(g), wm, 1e-6)
}

func TestLogSoftmaxGather(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(9, 10))
	const rows, cols = 3, 3000 // more than one softmax chunk
	xv := randVec(r, rows*cols)
	for i := range xv {
		xv[i] *= 10
	}
	xv[5] = 1e4 // a dominant logit must not overflow
	x := tensorOf(t, b, xv, rows, cols)
	b.LogSoftmax(x, x)
	want := make([]float64, len(xv))
	for i := range rows {
		row := xv[i*cols : (i+1)*cols]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, float64(v))
		}
		s := 0.0
		for _, v := range row {
			s += math.Exp(float64(v) - m)
		}
		for j, v := range row {
			want[i*cols+j] = float64(v) - m - math.Log(s)
		}
	}
	closeTo(t, "LogSoftmax", Float32s(x), want, 1e-5)
	idx := []int32{5, 0, cols - 1}
	dst := tensorOf(t, b, make([]float32, rows), rows)
	b.Gather(dst, x, ints(t, b, idx))
	closeTo(t, "Gather", Float32s(dst), []float64{want[5], want[cols], want[3*cols-1]}, 1e-5)
}

func TestEmbeddingSliceCopy(t *testing.T) {
	b := New()
	bits := []uint16{0x3f80, 0x4000, 0x4040, 0x4080, 0xbf80, 0x0000} // 1 2 3 4 -1 0
	table, err := b.WeightBF16(bits, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	dst := tensorOf(t, b, make([]float32, 6), 3, 2)
	b.Embedding(dst, table, ints(t, b, []int32{2, 0, 1}))
	closeTo(t, "Embedding", Float32s(dst), []float64{-1, 0, 1, 2, 3, 4}, 0)
	b.Copy(b.Slice(dst, 0, 1), b.Slice(dst, 2, 3))
	closeTo(t, "Copy", Float32s(dst), []float64{3, 4, 1, 2, 3, 4}, 0)
	if _, err := b.WeightF32(make([]float32, 5), 2, 3); err == nil {
		t.Error("WeightF32 accepted 5 values for shape [2 3]")
	}
}

// TestAttention compares paged grouped-query attention with a dense naive
// computation, for sequences of different lengths whose blocks are
// scattered over the cache.
func TestAttention(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(11, 12))
	const heads, kvHeads, hd, bs, nBlocks = 4, 2, 8, 4, 16
	qdim, kvdim := heads*hd, kvHeads*hd
	type seq struct{ ctx, nNew int }
	seqs := []seq{{ctx: 9, nNew: 9}, {ctx: 6, nNew: 1}, {ctx: 13, nNew: 3}}
	maxBlocks := 4
	perm := r.Perm(nBlocks)
	var table, qstart, ctxLen, slots []int32
	qstart = append(qstart, 0)
	next := 0
	keys := make([][][]float32, len(seqs)) // [seq][pos] → kv row
	vals := make([][][]float32, len(seqs))
	kc := make([]float32, nBlocks*bs*kvdim)
	vc := make([]float32, nBlocks*bs*kvdim)
	geo := &compute.Attention{KVHeads: kvHeads, HeadDim: hd, BlockSize: bs}
	var q []float32
	for s, sq := range seqs {
		row := make([]int32, maxBlocks)
		for i := 0; i < (sq.ctx+bs-1)/bs; i++ {
			row[i] = int32(perm[next])
			next++
		}
		table = append(table, row...)
		for p := 0; p < sq.ctx; p++ {
			k, v := randVec(r, kvdim), randVec(r, kvdim)
			keys[s], vals[s] = append(keys[s], k), append(vals[s], v)
			slot := int(row[p/bs])*bs + p%bs
			putKV(kc, geo, slot, k)
			putKV(vc, geo, slot, v)
			if p >= sq.ctx-sq.nNew {
				slots = append(slots, int32(slot))
			}
		}
		q = append(q, randVec(r, sq.nNew*qdim)...)
		qstart = append(qstart, qstart[s]+int32(sq.nNew))
		ctxLen = append(ctxLen, int32(sq.ctx))
	}
	rows := int(qstart[len(seqs)])
	kct, vct := tensorOf(t, b, kc, nBlocks*bs, kvdim), tensorOf(t, b, vc, nBlocks*bs, kvdim)
	dst := tensorOf(t, b, make([]float32, rows*qdim), rows, qdim)
	scale := float32(1 / math.Sqrt(hd))
	b.Attention(dst, tensorOf(t, b, q, rows, qdim), kct, vct, &compute.Attention{
		Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: scale, BlockSize: bs,
		Seqs: len(seqs), MaxBlocks: maxBlocks,
		QueryStart: ints(t, b, qstart), ContextLen: ints(t, b, ctxLen), BlockTable: ints(t, b, table),
	})
	want := make([]float64, rows*qdim)
	for s, sq := range seqs {
		for i := 0; i < sq.nNew; i++ {
			r := int(qstart[s]) + i
			pos := sq.ctx - sq.nNew + i
			for h := range heads {
				g := h / (heads / kvHeads)
				qv := q[r*qdim+h*hd : r*qdim+(h+1)*hd]
				w := make([]float64, pos+1)
				m := math.Inf(-1)
				for p := 0; p <= pos; p++ {
					d := 0.0
					for j := range hd {
						d += float64(qv[j]) * float64(keys[s][p][g*hd+j])
					}
					w[p] = d * float64(scale)
					m = math.Max(m, w[p])
				}
				z := 0.0
				for p := range w {
					w[p] = math.Exp(w[p] - m)
					z += w[p]
				}
				for p := range w {
					for j := range hd {
						want[r*qdim+h*hd+j] += w[p] / z * float64(vals[s][p][g*hd+j])
					}
				}
			}
		}
	}
	closeTo(t, "Attention", Float32s(dst), want, 1e-5)

	// StoreKV writes rows to their slots, head by head.
	k, v := randVec(r, 2*kvdim), randVec(r, 2*kvdim)
	b.StoreKV(kct, vct, tensorOf(t, b, k, 2, kvdim), tensorOf(t, b, v, 2, kvdim), ints(t, b, []int32{5, 0}), geo)
	for i, slot := range []int{5, 0} {
		for g := range kvHeads {
			at := geo.KVIndex(slot, g)
			if !slices.Equal(Float32s(kct)[at:at+hd], k[i*kvdim+g*hd:][:hd]) || !slices.Equal(Float32s(vct)[at:at+hd], v[i*kvdim+g*hd:][:hd]) {
				t.Errorf("StoreKV: row %d head %d is not at slot %d's place", i, g, slot)
			}
		}
	}
}

// putKV writes one slot's keys or values (all heads) into a host copy of a
// cache in the layout of compute.Attention.KVIndex.
func putKV(c []float32, geo *compute.Attention, slot int, row []float32) {
	for g := range geo.KVHeads {
		copy(c[geo.KVIndex(slot, g):][:geo.HeadDim], row[g*geo.HeadDim:(g+1)*geo.HeadDim])
	}
}

func TestWeightCopyOrAlias(t *testing.T) {
	for _, zero := range []bool{false, true} {
		b := NewWithOptions(Options{ZeroCopyWeights: zero})
		f := []float32{1, 2}
		h := []uint16{0x3f80, 0x4000}
		wf, err := b.WeightF32(f, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		wh, err := b.WeightBF16(h, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		f[0], h[0] = 5, 0x40a0 // 5
		dst := tensorOf(t, b, make([]float32, 2), 1, 2)
		ids := ints(t, b, []int32{0})
		for name, w := range map[string]compute.Tensor{"F32": wf, "BF16": wh} {
			b.Embedding(dst, w, ids)
			want := float32(1)
			if zero {
				want = 5
			}
			if got := Float32s(dst)[0]; got != want {
				t.Errorf("ZeroCopyWeights %v, %s: weight reads %v after the source changed, want %v", zero, name, got, want)
			}
		}
	}
}
