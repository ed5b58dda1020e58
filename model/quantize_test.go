package model

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
)

// loadQuantized loads the checkpoint in dir on a CPU backend, quantized
// to dt (0: as stored).
func loadQuantized(t *testing.T, dir string, dt compute.DType) *Model {
	t.Helper()
	return loadQuantizedOn(t, cpu.New(), dir, dt)
}

// loadQuantizedOn is loadQuantized on backend b.
func loadQuantizedOn(t *testing.T, b compute.Backend, dir string, dt compute.DType) *Model {
	t.Helper()
	src, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dt != 0 {
		if src, err = Quantize(src, dt); err != nil {
			t.Fatal(err)
		}
	}
	m, err := LoadFrom(b, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestQuantizeOnLoad checks the mix (which tensors take which type), that
// the quantized weights are the reference quantizer's blocks, and that the
// logits of a quantized model stay near the BF16 model's.
func TestQuantizeOnLoad(t *testing.T) {
	for _, tied := range []bool{true, false} {
		dir := filepath.Join(t.TempDir(), "ck")
		spec := RandomSpec{Arch: ArchQwen3, Hidden: 64, Intermediate: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
			Vocab: 200, Tied: tied, InitStd: 0.1, Seed: 3}
		if err := WriteRandomCheckpoint(dir, spec); err != nil {
			t.Fatal(err)
		}
		base := loadQuantized(t, dir, 0)
		prompt := []int32{5, 17, 99, 3, 150, 42, 7, 7, 8, 120, 33, 1}
		ref := forwardAll(t, base, prompt)
		for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_0} {
			m := loadQuantized(t, dir, dt)
			for _, nt := range m.Weights().Params() {
				want := QuantizedType(m.Config, nt.Name, nt.T.Shape(), dt)
				got := nt.T.DType()
				switch {
				case want == 0 && got.Quantized():
					t.Errorf("tied %v, %v: %s is %v, want it as stored", tied, dt, nt.Name, got)
				case want != 0 && got != want:
					t.Errorf("tied %v, %v: %s is %v, want %v", tied, dt, nt.Name, got, want)
				}
				// Output projection at Q6_16 (Q8_0 in the Q8_0 mix); layers at dt; norms as stored.
				if strings.HasSuffix(nt.Name, "norm.weight") && got.Quantized() {
					t.Errorf("%s quantized", nt.Name)
				}
			}
			out := m.Weights().Params()
			for _, nt := range out {
				if nt.Name != "model.layers.1.mlp.down_proj.weight" {
					continue
				}
				// The weight holds the reference quantizer's values.
				got, err := ReadTensor(m.Backend(), nt.T)
				if err != nil {
					t.Fatal(err)
				}
				orig, err := ReadTensor(base.Backend(), tensorNamed(base, nt.Name))
				if err != nil {
					t.Fatal(err)
				}
				blocks := make([]byte, dt.Bytes(len(orig)))
				want := make([]float32, len(orig))
				if err := compute.Quantize(dt, blocks, orig); err != nil {
					t.Fatal(err)
				}
				compute.Dequantize(dt, want, blocks)
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("%v: %s[%d] = %g, want %g", dt, nt.Name, i, got[i], want[i])
					}
				}
			}
			if b, bb := m.Weights().Bytes(), base.Weights().Bytes(); !(b < bb*3/4) {
				t.Errorf("%v: %d bytes of weights, BF16 %d", dt, b, bb)
			}
			// Logits: the relative RMS error over the prompt's rows.
			got := forwardAll(t, m, prompt)
			var se, ss float64
			for i := range got {
				d := float64(got[i] - ref[i])
				se += d * d
				ss += float64(ref[i]) * float64(ref[i])
			}
			rel := math.Sqrt(se / ss)
			bound := map[compute.DType]float64{compute.Q8_0: 0.05, compute.Q4_0: 0.5}[dt] // random weights: a sanity bound (see TestQuantizedLogProbs)
			t.Logf("tied %v, %v: logits' relative RMS error %.4f", tied, dt, rel)
			if !(rel < bound) {
				t.Errorf("tied %v, %v: logits' relative RMS error %.4f, want < %g", tied, dt, rel, bound)
			}
			// LoRA trains over the quantized base (qlora_test.go); full
			// fine-tuning is refused.
			tr, err := m.NewTrainable(nil, TrainOptions{LoRA: &LoRAConfig{Rank: 4, Alpha: 8}})
			if err != nil {
				t.Errorf("%v: LoRA over a quantized base: %v", dt, err)
			} else {
				tr.Free()
			}
			if _, err := m.NewTrainable(nil, TrainOptions{}); err == nil || !strings.Contains(err.Error(), "full fine-tuning over a quantized base") {
				t.Errorf("%v: full fine-tuning over a quantized base: %v", dt, err)
			}
		}
	}
	if _, err := Quantize(nil, compute.BF16); err == nil {
		t.Error("Quantize to BF16 accepted")
	}
}

// forwardAll returns the logits of every position of tokens.
func forwardAll(t *testing.T, m *Model, tokens []int32) []float32 {
	t.Helper()
	kv, err := m.NewKVCache(KVCacheOptions{Budget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	seq := kv.NewSequence()
	defer seq.Free()
	out, err := m.Forward([]Step{{Seq: seq, Tokens: tokens}}, AllLogits, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func tensorNamed(m *Model, name string) compute.Tensor {
	for _, nt := range m.Weights().Params() {
		if nt.Name == name {
			return nt.T
		}
	}
	return nil
}

// blockSource presents some of a source's matrices as stored in a block
// format the backend has no kernels for ("Q4_K"), with Rows giving their
// values and Reblock succeeding or failing per tensor.
type blockSource struct {
	Source
	reblock map[string]error // tensors stored as "Q4_K": Reblock's error
}

func (s *blockSource) Tensor(name string) (SourceTensor, error) {
	st, err := s.Source.Tensor(name)
	rerr, ok := s.reblock[name]
	if err != nil || !ok {
		return st, err
	}
	vals, _, err := st.Float32()
	if err != nil {
		return st, err
	}
	cols := st.Shape[1]
	st.BF16, st.Format, st.Blocks = nil, "Q4_K", []byte{1}
	st.Float32 = func() ([]float32, bool, error) { panic("a block tensor with Rows was widened whole") }
	st.Rows = func(dst []float32, lo, hi int) error { copy(dst, vals[lo*cols:hi*cols]); return nil }
	st.Reblock = func() (compute.DType, []byte, error) {
		if rerr != nil {
			return 0, nil, rerr
		}
		b := make([]byte, compute.Q4_1.Bytes(len(vals)))
		return compute.Q4_1, b, compute.Quantize(compute.Q4_1, b, vals)
	}
	return st, nil
}

// TestRequantize: Requantize takes a Q4_K tensor's Reblock as Q4_1 blocks
// when it succeeds, and otherwise quantizes its rows (from Rows, never
// widened whole) to Q8_0, the reference quantizer's blocks; tensors in
// formats the backend takes stay as they are; Note says what went where.
func TestRequantize(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	spec := RandomSpec{Arch: ArchQwen3, Hidden: 64, Intermediate: 128, Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 32,
		Vocab: 96, MaxPositions: 64, DType: "float32", Seed: 3, InitStd: 0.05}
	if err := WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	base, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	const up, down, q = "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.q_proj.weight"
	src := &blockSource{Source: base, reblock: map[string]error{up: nil, down: errors.New("a scale beyond a half")}}
	rq, err := Requantize(src, compute.Q8_0)
	if err != nil {
		t.Fatal(err)
	}
	defer rq.Close()
	for _, c := range []struct {
		name, format string
	}{{up, "Q4_1"}, {down, "Q8_0"}, {q, ""}} {
		st, err := rq.Tensor(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Format != c.format {
			t.Errorf("%s: format %q, want %q", c.name, st.Format, c.format)
			continue
		}
		if c.format == "" {
			continue
		}
		bt, _ := base.Tensor(c.name)
		v, _, _ := bt.Float32()
		dt := map[string]compute.DType{"Q4_1": compute.Q4_1, "Q8_0": compute.Q8_0}[c.format]
		want := make([]byte, dt.Bytes(len(v)))
		compute.Quantize(dt, want, v)
		if string(st.Blocks) != string(want) {
			t.Errorf("%s: the %s blocks are not the reference quantizer's", c.name, c.format)
		}
		if st.Rows != nil || st.Reblock != nil {
			t.Errorf("%s: the converted tensor keeps the stored format's Rows or Reblock", c.name)
		}
	}
	if note := rq.Note(); note != "Q4_K×1 → Q4_1, Q4_K×1 → Q8_0" {
		t.Errorf("note %q", note)
	}
}

// widening is a CPU backend as the GPU's looks to the loader: no quantized
// products (compute.QuantBackend hidden), matrices stored in blocks asked
// for as BF16 (compute.WidensToBF16).
type widening struct{ compute.Backend }

func (widening) WidensToBF16() bool { return true }

// TestWidensQuantizedToBF16: on a backend without quantized products that
// asks for it, a matrix stored in blocks loads as its dequantized values
// rounded to BF16 (half the memory of F32, the tensor cores' input);
// without the request it loads as F32 as before; vectors stay F32 and
// matrices stored as BF16 stay BF16 either way.
func TestWidensQuantizedToBF16(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	spec := RandomSpec{Arch: ArchQwen3, Hidden: 64, Intermediate: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
		Vocab: 200, DType: "bfloat16", InitStd: 0.1, Seed: 4}
	if err := WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	load := func(b compute.Backend, dt compute.DType) *Model { return loadQuantizedOn(t, b, dir, dt) }
	type plain struct{ compute.Backend } // no quantized products, no request
	quantOnCPU := load(cpu.New(), compute.Q8_0)
	wcpu := cpu.New()
	widened := load(widening{wcpu}, compute.Q8_0)
	wide := load(plain{cpu.New()}, compute.Q8_0)
	asStored := load(widening{cpu.New()}, 0)
	for i, nt := range widened.Weights().Params() {
		matrix := len(nt.T.Shape()) == 2
		want := compute.F32
		if matrix {
			want = compute.BF16
		}
		if got := nt.T.DType(); got != want {
			t.Errorf("widened: %s is %v, want %v", nt.Name, got, want)
		}
		if got := wide.Weights().Params()[i].T.DType(); matrix && got != compute.F32 {
			t.Errorf("without the request: %s is %v, want F32", nt.Name, got)
		}
		if got := asStored.Weights().Params()[i].T.DType(); got != want {
			t.Errorf("stored as BF16: %s is %v, want %v", nt.Name, got, want)
		}
		if !matrix {
			continue
		}
		// The values: the quantized blocks' values rounded to BF16.
		q, err := ReadTensor(quantOnCPU.Backend(), quantOnCPU.Weights().Params()[i].T)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadTensor(wcpu, nt.T) // the wrapper hides compute.Trainer's Convert
		if err != nil {
			t.Fatal(err)
		}
		bits := make([]uint16, len(q))
		toBF16Bits(bits, q)
		for k := range got {
			if got[k] != bf16ToF32(bits[k]) {
				t.Fatalf("%s[%d] = %g, want %g (BF16 of %g)", nt.Name, k, got[k], bf16ToF32(bits[k]), q[k])
			}
		}
	}
	if b, f := widened.Weights().Bytes(), wide.Weights().Bytes(); !(b < f*6/10) {
		t.Errorf("widened to BF16: %d bytes of weights, to F32 %d", b, f)
	}
}
