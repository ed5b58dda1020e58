package gguf

import (
	"bytes"
	"math/rand/v2"
	"runtime/metrics"
	"testing"
)

// allocated is the bytes allocated on the heap so far (cheaper to read
// than runtime.MemStats, which stops the world).
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// FuzzParse feeds arbitrary bytes to Parse: it must never panic, and a
// file it accepts must describe tensors that lie inside it and that
// Dequantize reads without fault; whatever the bytes declare, parsing
// allocates no more than a small multiple of their length.
func FuzzParse(f *testing.F) {
	// Seeds: files the writer makes (metadata of every type, a tensor of
	// every readable type), a small model-like file, and damaged ones.
	var full bytes.Buffer
	var ts []WriteTensor
	rng := rand.New(rand.NewPCG(7, 8))
	for _, typ := range testTypes { // one block of each
		n := max(typ.BlockSize(), 2)
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		size, _ := EncodedSize(typ, n)
		data := make([]byte, size)
		Quantize(data, x, typ)
		ts = append(ts, WriteTensor{Name: typ.String(), Type: typ, Shape: []int{n}, Data: data})
	}
	if err := Write(&full, sampleKVs(), ts); err != nil {
		f.Fatal(err)
	}
	f.Add(full.Bytes())
	var small bytes.Buffer
	q := make([]byte, 34*2)
	Quantize(q, make([]float32, 64), Q8_0)
	if err := Write(&small, []KV{{"general.architecture", String("qwen3")}, {"tokenizer.ggml.tokens", Array([]string{"a", "b"})}, {KeyAlignment, Uint32(64)}},
		[]WriteTensor{{Name: "token_embd.weight", Type: Q8_0, Shape: []int{2, 32}, Data: q}, {Name: "output_norm.weight", Type: F32, Shape: []int{4}, Data: make([]byte, 16)}}); err != nil {
		f.Fatal(err)
	}
	f.Add(small.Bytes())
	f.Add(full.Bytes()[:len(full.Bytes())/2])
	f.Add([]byte("GGUF"))
	f.Add(new(raw).head(3, 0, 1).str("k").u32(9).u32(9).u64(1).u32(8).u64(2).str("x").str("y").Bytes())
	f.Add(new(raw).head(3, 2, 0).tensor("a", Q4_K, 0, 256).tensor("b", Q6_K, 160, 256).data(512))
	f.Add(new(raw).head(2, 1, 1).str(KeyAlignment).u32(4).u32(8).tensor("a", BF16, 8, 3).data(64))

	f.Fuzz(func(t *testing.T, data []byte) {
		before := allocated()
		h, err := Parse(data)
		if grew := allocated() - before; grew > uint64(64*len(data)+1<<20) {
			t.Fatalf("parsing %d bytes allocated %d bytes", len(data), grew)
		}
		if err != nil {
			return
		}
		for _, ti := range h.Tensors {
			end := uint64(h.DataOffset) + ti.Offset + ti.Size
			if end > uint64(len(data)) || uint64(h.DataOffset)+ti.Offset < uint64(h.DataOffset) {
				t.Fatalf("tensor %q: [%d+%d, %d) outside %d bytes", ti.Name, h.DataOffset, ti.Offset, end, len(data))
			}
			if !ti.Type.Readable() || ti.Elems() > 1<<16 {
				continue
			}
			b := data[uint64(h.DataOffset)+ti.Offset : end]
			if err := Dequantize(make([]float32, ti.Elems()), b, ti.Type); err != nil {
				t.Fatalf("tensor %q: %v", ti.Name, err)
			}
		}
		for _, kv := range h.KV {
			_ = kv.Value.String()
		}
	})
}
