package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/clawrl/clawrl/compute"
)

// These tests cover what the conformance suite (conformance_test.go) does
// not: head dimensions past its cases (the prefill kernel's shared memory
// beyond the default 48 KiB), bad device data reported by Synchronize and
// Read, and the backend's own rules (names, use after Free).

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

// attnSeq is one sequence of an attention test: ctx tokens in the cache
// after the step, the last nNew of them new.
type attnSeq struct{ ctx, nNew int }

// TestAttentionLargeHeads runs both attention kernels at head dimension
// 256, where the prefill kernel asks for more shared memory than a kernel
// gets without opting in, and at an odd group size and block size.
func TestAttentionLargeHeads(t *testing.T) {
	base := testBackend(t)
	cases := []struct {
		heads, kvHeads, hd, bs int
		seqs                   []attnSeq
	}{
		{2, 2, 256, 8, []attnSeq{{20, 4}, {9, 1}}},
		{6, 2, 24, 5, []attnSeq{{1, 1}, {45, 2}}},
	}
	for _, dt := range []compute.DType{compute.F32, compute.BF16} {
		for _, c := range cases {
			for _, path := range []int{attnDecode, attnPrefill} {
				name := fmt.Sprintf("%v/h%d_kv%d_d%d_bs%d_%v/path%d", dt, c.heads, c.kvHeads, c.hd, c.bs, c.seqs, path)
				t.Run(name, func(t *testing.T) {
					h := newOpHarness(t, variant(base, func(v *Backend) { v.attnPath, v.minSplitLen = path, 32 }))
					h.attention(dt, c.heads, c.kvHeads, c.hd, c.bs, c.seqs)
				})
			}
		}
	}
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

func TestNameAndFree(t *testing.T) {
	h := newOpHarness(t, testBackend(t))
	if !strings.HasPrefix(h.b.Name(), "cuda:0 (") || !realDriver() && h.b.Name() != "cuda:0 (clawrl fake CUDA device)" {
		t.Errorf("Name %q", h.b.Name())
	}
	// Freeing a view leaves its parent; a freed tensor panics when used.
	x := h.f32(make([]float32, 4), 2, 2)
	h.b.Free(h.b.Slice(x, 0, 1))
	h.read(x)
	y, err := h.b.NewTensor(compute.F32, 2)
	if err != nil {
		t.Fatal(err)
	}
	h.b.Free(y)
	h.b.Free(y) // twice is harmless
	defer func() {
		if recover() == nil {
			t.Error("Read of a freed tensor did not panic")
		}
	}()
	h.b.Read(make([]float32, 2), y)
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

// TestConcurrentUse runs ops from several goroutines at once on tensors of
// their own: the device's worker serialises them.
func TestConcurrentUse(t *testing.T) {
	b := testBackend(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x, err := b.NewTensor(compute.F32, 3, 5)
			if err != nil {
				errs <- err
				return
			}
			defer b.Free(x)
			v := make([]float32, 15)
			for i := range v {
				v[i] = float32(g*100 + i)
			}
			got := make([]float32, 15)
			for range 20 {
				b.Write(x, v)
				b.Add(x, x, x)
				if err := b.Read(got, x); err != nil {
					errs <- err
					return
				}
				for i := range v {
					if got[i] != 2*v[i] {
						errs <- fmt.Errorf("goroutine %d: element %d = %v, want %v", g, i, got[i], 2*v[i])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
