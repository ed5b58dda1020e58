package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sampleKVs holds a value of every type, arrays of every element type,
// nested and empty arrays.
func sampleKVs() []KV {
	return []KV{
		{"general.architecture", String("llama")},
		{"general.name", String("")},
		{"test.u8", Uint8(200)},
		{"test.i8", Int8(-100)},
		{"test.u16", Uint16(60000)},
		{"test.i16", Int16(-30000)},
		{"test.u32", Uint32(4000000000)},
		{"test.i32", Int32(-2000000000)},
		{"test.f32", Float32(1e-6)},
		{"test.bool", Bool(true)},
		{"test.u64", Uint64(math.MaxUint64)},
		{"test.i64", Int64(math.MinInt64)},
		{"test.f64", Float64(math.Pi)},
		{"test.strings", Array([]string{"a", "", "ĠHello", "<|im_end|>"})},
		{"test.u8s", Array([]uint8{1, 2, 3})},
		{"test.i8s", Array([]int8{-1, 2})},
		{"test.u16s", Array([]uint16{7})},
		{"test.i16s", Array([]int16{-7, 8})},
		{"test.u32s", Array([]uint32{1, 2})},
		{"test.i32s", Array([]int32{1, 3, 4})},
		{"test.f32s", Array([]float32{0.5, -2})},
		{"test.bools", Array([]bool{true, false})},
		{"test.u64s", Array([]uint64{9})},
		{"test.i64s", Array([]int64{-9})},
		{"test.f64s", Array([]float64{1.25})},
		{"test.empty", Array([]int32{})},
		{"test.nested", Arrays([]Value{Array([]string{"x"}), Array([]float32{1, 2}), Arrays([]Value{Array([]uint8{})})})},
	}
}

// sampleTensors holds a tensor of each readable type, with random values
// encoded by the quantizer.
func sampleTensors(rng *rand.Rand) ([]WriteTensor, map[string][]float32) {
	var ts []WriteTensor
	want := map[string][]float32{}
	for i, typ := range testTypes {
		shape := []int{3, 2 * 256}
		if i%3 == 0 {
			shape = []int{2, 2, 256}
		}
		n := 1
		for _, d := range shape {
			n *= d
		}
		x := make([]float32, n)
		for j := range x {
			x[j] = float32(rng.NormFloat64())
		}
		size, _ := EncodedSize(typ, n)
		data := make([]byte, size)
		recon := make([]float32, n)
		quantizers[typ](data, x, recon)
		name := "t." + strings.ToLower(typ.String())
		ts = append(ts, WriteTensor{Name: name, Type: typ, Shape: shape, Data: data})
		want[name] = recon
	}
	ts = append(ts, WriteTensor{Name: "scalar", Type: F32, Shape: nil, Data: []byte{0, 0, 128, 63}})
	want["scalar"] = []float32{1}
	return ts, want
}

func writeSample(t testing.TB, dir string, extra ...KV) (string, []KV, map[string][]float32) {
	t.Helper()
	kvs := append(sampleKVs(), extra...)
	ts, want := sampleTensors(rand.New(rand.NewPCG(5, 6)))
	path := filepath.Join(dir, "sample.gguf")
	if err := WriteFile(path, kvs, ts); err != nil {
		t.Fatal(err)
	}
	return path, kvs, want
}

func TestWriteRead(t *testing.T) {
	for _, align := range []uint32{0, 8, 64, 4096} {
		var extra []KV
		if align > 0 {
			extra = append(extra, KV{KeyAlignment, Uint32(align)})
		}
		path, kvs, want := writeSample(t, t.TempDir(), extra...)
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if f.Version != 3 {
			t.Errorf("version %d", f.Version)
		}
		if a := max(int(align), DefaultAlignment*boolInt(align == 0)); f.Alignment != a {
			t.Errorf("alignment %d, want %d", f.Alignment, a)
		}
		// The quantized tensors brought general.quantization_version.
		if v, ok := f.Get(KeyQuantizationVersion); !ok || v.Type() != TypeUint32 {
			t.Errorf("%s: %v %v", KeyQuantizationVersion, v, ok)
		}
		for _, kv := range kvs {
			v, ok := f.Get(kv.Key)
			if !ok {
				t.Fatalf("key %q missing", kv.Key)
			}
			if v.Type() != kv.Value.Type() || v.ElemType() != kv.Value.ElemType() || !reflect.DeepEqual(v.Interface(), kv.Value.Interface()) {
				t.Errorf("%s: read %s %v, wrote %s %v", kv.Key, v.Type(), v, kv.Value.Type(), kv.Value)
			}
		}
		for name, w := range want {
			ti, _ := f.Tensor(name)
			if ti.Offset%uint64(f.Alignment) != 0 {
				t.Errorf("%s at offset %d", name, ti.Offset)
			}
			got, err := f.Float32(name)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, w) {
				t.Errorf("%s: values differ", name)
			}
		}
		ti, _ := f.Tensor("t.q4_k")
		if got := ti.Shape(); !reflect.DeepEqual(got, []int{3, 512}) || ti.Dims[0] != 512 {
			t.Errorf("t.q4_k: shape %v, dims %v", got, ti.Dims)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestWriteRefuses(t *testing.T) {
	ok := WriteTensor{Name: "a", Type: F32, Shape: []int{2}, Data: make([]byte, 8)}
	cases := []struct {
		name    string
		kvs     []KV
		tensors []WriteTensor
	}{
		{"duplicate key", []KV{{"a", Uint8(1)}, {"a", Uint8(2)}}, nil},
		{"empty key", []KV{{"", Uint8(1)}}, nil},
		{"bad alignment", []KV{{KeyAlignment, Uint32(48)}}, nil},
		{"alignment of another type", []KV{{KeyAlignment, Uint64(64)}}, nil},
		{"zero value", []KV{{"a", Value{}}}, nil},
		{"duplicate tensor", nil, []WriteTensor{ok, ok}},
		{"long name", nil, []WriteTensor{{Name: strings.Repeat("x", 64), Type: F32, Shape: []int{2}, Data: make([]byte, 8)}}},
		{"wrong size", nil, []WriteTensor{{Name: "a", Type: F32, Shape: []int{3}, Data: make([]byte, 8)}}},
		{"partial block", nil, []WriteTensor{{Name: "a", Type: Q8_0, Shape: []int{2, 16}, Data: make([]byte, 34)}}},
		{"no data", nil, []WriteTensor{{Name: "a", Type: F32, Shape: []int{2}}}},
		{"five dimensions", nil, []WriteTensor{{Name: "a", Type: F32, Shape: []int{1, 1, 1, 1, 1}, Data: make([]byte, 4)}}},
	}
	for _, c := range cases {
		if err := Write(&bytes.Buffer{}, c.kvs, c.tensors); err == nil {
			t.Errorf("%s: written", c.name)
		}
	}
}

// raw builds GGUF bytes field by field, for files the writer would refuse
// to make.
type raw struct{ bytes.Buffer }

func (r *raw) u32(x uint32) *raw { binary.Write(r, binary.LittleEndian, x); return r }
func (r *raw) u64(x uint64) *raw { binary.Write(r, binary.LittleEndian, x); return r }
func (r *raw) str(s string) *raw { r.u64(uint64(len(s))); r.WriteString(s); return r }
func (r *raw) head(version uint32, tensors, kvs uint64) *raw {
	r.WriteString("GGUF")
	return r.u32(version).u64(tensors).u64(kvs)
}

// tensor writes a tensor description.
func (r *raw) tensor(name string, typ TensorType, off uint64, dims ...uint64) *raw {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(uint32(typ)).u64(off)
}

// data pads to 32 bytes and appends n zero bytes of tensor data.
func (r *raw) data(n int) []byte {
	for r.Len()%32 != 0 {
		r.WriteByte(0)
	}
	r.Write(make([]byte, n))
	return r.Bytes()
}

func TestParseRefuses(t *testing.T) {
	valid := func() []byte {
		var b bytes.Buffer
		ts, _ := sampleTensors(rand.New(rand.NewPCG(1, 1)))
		if err := Write(&b, sampleKVs(), ts); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}()
	bigEndian := append([]byte("GGUF"), 0, 0, 0, 3)
	cases := []struct {
		name string
		file []byte
		want error
		text string // in the message
	}{
		{"empty", nil, ErrTruncated, "too short"},
		{"bad magic", append([]byte("GGML"), valid[4:]...), ErrMagic, `"GGML"`},
		{"version 1", new(raw).head(1, 0, 0).Bytes(), ErrVersion, "version 1"},
		{"version 4", new(raw).head(4, 0, 0).Bytes(), ErrVersion, "version 4"},
		{"big-endian", append(bigEndian, make([]byte, 16)...), ErrVersion, "big-endian"},
		{"no counts", []byte("GGUF\x03\x00\x00\x00"), ErrTruncated, "tensor count"},
		{"huge metadata count", new(raw).head(3, 0, 1<<60).Bytes(), ErrTruncated, "metadata pairs"},
		{"huge tensor count", new(raw).head(3, 1<<60, 0).Bytes(), ErrTruncated, "tensor descriptions"},
		{"huge key length", append(new(raw).head(3, 0, 1).u64(1<<62).Bytes(), make([]byte, 16)...), ErrInvalid, "more than the 65535"},
		{"key past the end", append(new(raw).head(3, 0, 1).u64(100).Bytes(), make([]byte, 16)...), ErrTruncated, "key of metadata pair 0"},
		{"unknown value type", new(raw).head(3, 0, 1).str("k").u32(13).Bytes(), ErrValueType, `"k"`},
		{"unknown element type", new(raw).head(3, 0, 1).str("k").u32(9).u32(42).u64(0).Bytes(), ErrValueType, "element type"},
		{"huge array", new(raw).head(3, 0, 1).str("k").u32(9).u32(uint32(TypeUint8)).u64(1 << 62).Bytes(), ErrTruncated, "elements of"},
		{"huge string array", new(raw).head(3, 0, 1).str("k").u32(9).u32(uint32(TypeString)).u64(1 << 40).u64(0).Bytes(), ErrTruncated, "elements of"},
		{"huge string", new(raw).head(3, 0, 1).str("k").u32(8).u64(1 << 62).Bytes(), ErrTruncated, "string"},
		{"bool 2", append(new(raw).head(3, 0, 1).str("k").u32(7).Bytes(), 2), ErrInvalid, "bool"},
		{"arrays too deep", func() []byte {
			r := new(raw).head(3, 0, 1).str("k")
			r.u32(9)
			for range 6 {
				r.u32(9).u64(1)
			}
			return r.u32(0).u64(0).Bytes()
		}(), ErrInvalid, "nests arrays"},
		{"duplicate key", append(new(raw).head(3, 0, 2).str("k").u32(0).Bytes(), append(append([]byte{1}, new(raw).str("k").u32(0).Bytes()...), 2)...), ErrInvalid, "twice"},
		{"alignment zero", new(raw).head(3, 0, 1).str(KeyAlignment).u32(4).u32(0).Bytes(), ErrInvalid, "power of two"},
		{"alignment 48", new(raw).head(3, 0, 1).str(KeyAlignment).u32(4).u32(48).Bytes(), ErrInvalid, "power of two"},
		{"alignment uint64", new(raw).head(3, 0, 1).str(KeyAlignment).u32(10).u64(64).Bytes(), ErrInvalid, "not a uint32"},
		{"unknown tensor type", new(raw).head(3, 1, 0).tensor("w", 4, 0, 32).data(128), ErrTensorType, `"w"`},
		{"tensor type 99", new(raw).head(3, 1, 0).tensor("w", 99, 0, 32).data(128), ErrTensorType, "99"},
		{"five dimensions", new(raw).head(3, 1, 0).tensor("w", F32, 0, 1, 1, 1, 1, 1).data(4), ErrInvalid, "5 dimensions"},
		{"elements overflow", new(raw).head(3, 1, 0).tensor("w", F32, 0, 1<<40, 1<<40).data(4), ErrInvalid, "2^62"},
		{"bytes overflow", new(raw).head(3, 1, 0).tensor("w", F64, 0, 1<<31, 1<<31).data(4), ErrInvalid, "overflows"},
		{"partial block", new(raw).head(3, 1, 0).tensor("w", Q4_0, 0, 48).data(64), ErrInvalid, "blocks hold 32"},
		{"misaligned", new(raw).head(3, 1, 0).tensor("w", F32, 4, 4).data(64), ErrInvalid, "not aligned"},
		{"outside the file", new(raw).head(3, 1, 0).tensor("w", F32, 1<<20, 4).data(64), ErrTruncated, "past the end"},
		{"offset overflow", new(raw).head(3, 1, 0).tensor("w", F32, math.MaxUint64-31, 16).data(64), ErrTruncated, "past the end"},
		{"data truncated", new(raw).head(3, 1, 0).tensor("w", F32, 0, 64).data(100), ErrTruncated, "past the end"},
		{"no data section", new(raw).head(3, 1, 0).tensor("w", F32, 0, 64).Bytes(), ErrTruncated, "past the end"},
		{"overlap", new(raw).head(3, 2, 0).tensor("a", F32, 0, 16).tensor("b", F32, 32, 16).data(128), ErrInvalid, "overlap"},
		{"duplicate tensor", new(raw).head(3, 2, 0).tensor("a", F32, 0, 8).tensor("a", F32, 32, 8).data(128), ErrInvalid, "twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, err := Parse(c.file)
			if err == nil {
				t.Fatalf("parsed: %d tensors", len(h.Tensors))
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("got %q, want %v mentioning %q", err, c.want, c.text)
			}
		})
	}
	// Every prefix of a valid file is refused as truncated.
	if _, err := Parse(valid); err != nil {
		t.Fatal(err)
	}
	for n := range len(valid) - 1 {
		if _, err := Parse(valid[:n]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("prefix of %d bytes (of %d): %v", n, len(valid), err)
		}
	}
}

func TestOpenErrorsNamePath(t *testing.T) {
	dir := t.TempDir()
	path, _, _ := writeSample(t, dir)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "cut.gguf")
	if err := os.WriteFile(bad, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(bad)
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), bad) {
		t.Errorf("truncated file: %v", err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "none.gguf")); err == nil {
		t.Error("missing file opened")
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Float32("nope"); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("missing tensor: %v", err)
	}
}
