package cpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// peakGFLOPS is the FMA peak on Threads() threads, measured once per
// process (best of a few short runs, since the machine is shared).
var peakGFLOPS = sync.OnceValue(func() float64 {
	g := 0.0
	for range 10 {
		g = max(g, kernels.PeakGFLOPS(kernels.Threads(), 40*time.Millisecond))
	}
	return g
})

// BenchmarkPagedAttention measures Attention, on the path it takes on this
// machine, over a paged cache whose blocks are scattered (a random
// permutation, as after a cache has served a while): full prefill of L
// tokens, one prefill chunk of 512 tokens after 16K cached ones (the shape
// of a serving step on a long prompt), and decode of one token per
// sequence. GFLOP/s counts 4·head dim·heads FLOPs per visible key of every
// query (two products) and %peak compares it with kernels.PeakGFLOPS
// measured in the same process. Decode is bound by reading the cache:
// kv-GB/s is the bytes of keys and values of every sequence's context (one
// read) per second. Every case runs with an F32, a BF16 (half the bytes;
// compare their ns/op) and a Q8_0 cache (34 bytes for 32 values), and
// the prefill cases also with a BF16 cache at kernels.PrecisionBF16
// (bf16-products).
//
//	go test -run '^$' -bench PagedAttention ./cpu/
func BenchmarkPagedAttention(b *testing.B) {
	type bench struct {
		name string
		sh   pagedShape
	}
	var cases []bench
	for _, hd := range []struct{ heads, kv, hd int }{{6, 2, 64}, {16, 8, 128}} {
		for _, L := range []int{4096, 16384} {
			cases = append(cases, bench{fmt.Sprintf("prefill-%d-h%d-kv%d-d%d", L, hd.heads, hd.kv, hd.hd),
				pagedShape{hd.heads, hd.kv, hd.hd, 16, []pagedSeq{{ctx: L, nNew: L}}, "scattered"}})
		}
	}
	cases = append(cases,
		bench{"chunk512-at-16384-h6-kv2-d64", pagedShape{6, 2, 64, 16, []pagedSeq{{ctx: 16384, nNew: 512}}, "scattered"}},
		bench{"chunk512-at-16384-h6-kv2-d64-contiguous", pagedShape{6, 2, 64, 16, []pagedSeq{{ctx: 16384, nNew: 512}}, "contiguous"}},
		bench{"decode-at-1024-h6-kv2-d64", pagedShape{6, 2, 64, 16, []pagedSeq{{ctx: 1024, nNew: 1}}, "scattered"}},
		bench{"decode-at-16384-h6-kv2-d64", pagedShape{6, 2, 64, 16, []pagedSeq{{ctx: 16384, nNew: 1}}, "scattered"}},
		bench{"decode-at-16384-h16-kv8-d128", pagedShape{16, 8, 128, 16, []pagedSeq{{ctx: 16384, nNew: 1}}, "scattered"}},
		bench{"decode-8x4096-h6-kv2-d64", pagedShape{6, 2, 64, 16, []pagedSeq{{4096, 1}, {4096, 1}, {4096, 1}, {4096, 1}, {4096, 1}, {4096, 1}, {4096, 1}, {4096, 1}}, "scattered"}},
	)
	// A batched decode step of a server: 32 sequences of short contexts.
	var batch []pagedSeq
	for i := range 32 {
		batch = append(batch, pagedSeq{ctx: 40 + 3*i, nNew: 1})
	}
	cases = append(cases, bench{"decode-32x40-133-h6-kv2-d64", pagedShape{6, 2, 64, 16, batch, "scattered"}},
		bench{"decode-32x40-133-h16-kv8-d128", pagedShape{16, 8, 128, 16, batch, "scattered"}}) // Qwen3-0.6B's heads
	// The same with contexts long enough that the cache (130 MB) streams
	// from memory.
	batch = nil
	for range 32 {
		batch = append(batch, pagedSeq{ctx: 4096, nNew: 1})
	}
	cases = append(cases, bench{"decode-32x4096-h6-kv2-d64", pagedShape{6, 2, 64, 16, batch, "scattered"}})
	type variant struct {
		name string
		dt   compute.DType
		prec kernels.Precision
	}
	for _, c := range cases {
		// Decode with an F32 and a BF16 cache; prefill also with a BF16
		// cache at BF16 products (queries rounded to BF16; VDPBF16PS for
		// the scores where the CPU has it).
		vs := []variant{{"/f32", compute.F32, kernels.PrecisionF32}, {"/bf16", compute.BF16, kernels.PrecisionF32}, {"/q8_0", compute.Q8_0, kernels.PrecisionF32}}
		if !strings.HasPrefix(c.name, "decode") {
			vs = append(vs, variant{"/bf16-products", compute.BF16, kernels.PrecisionBF16})
		}
		for _, v := range vs {
			b.Run(c.name+v.name, func(b *testing.B) { benchPaged(b, c.sh, v.dt, v.prec) })
		}
	}
}

// benchPaged runs one case of BenchmarkPagedAttention with a cache of dt,
// at precision prec.
func benchPaged(b *testing.B, sh pagedShape, dt compute.DType, prec kernels.Precision) {
	be := NewWithOptions(Options{Precision: prec})
	p := newPagedProblemOf(b, be, rand.New(rand.NewPCG(1, 2)), sh, dt)
	p.keys, p.vals = nil, nil // the reference is not run; free its copy
	flops, kvBytes := 0.0, 0.0
	elem := 4.0
	switch dt {
	case compute.BF16:
		elem = 2
	case compute.Q8_0:
		elem = 34.0 / 32
	}
	for _, s := range sh.seqs {
		kvBytes += 2 * elem * float64(s.ctx*sh.kvHeads*sh.hd)
		for i := range s.nNew {
			pos := s.ctx - s.nNew + i
			flops += 4 * float64(sh.hd*sh.heads) * float64(pos+1)
		}
	}
	be.Attention(p.dst, p.q, p.kc, p.vc, &p.attn) // warm up
	b.ResetTimer()
	for range b.N {
		be.Attention(p.dst, p.q, p.kc, p.vc, &p.attn)
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.StopTimer()
	g := flops / sec / 1e9
	b.ReportMetric(g, "GFLOP/s")
	b.ReportMetric(100*g/peakGFLOPS(), "%peak")
	b.ReportMetric(kvBytes/sec/1e9, "kv-GB/s")
}
