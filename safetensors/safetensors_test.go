package safetensors

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawFile builds a safetensors file from a literal header and data section.
func rawFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func TestParseHeader(t *testing.T) {
	data16 := make([]byte, 16)
	tests := []struct {
		name    string
		file    []byte
		wantErr string // "" means valid
	}{
		{"valid", rawFile(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`, data16), ""},
		{"valid two dtypes", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[8,16]}}`, data16), ""},
		{"padded header", rawFile(`{"a":{"dtype":"F16","shape":[8],"data_offsets":[0,16]}}    `, data16), ""},
		{"scalar", rawFile(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, make([]byte, 4)), ""},
		{"empty", rawFile(`{}`, nil), ""},
		{"unknown-but-valid dtype parses", rawFile(`{"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}}`, data16), ""},
		{"too short", []byte{1, 2, 3}, "too short"},
		{"header longer than file", rawFile(`{}`, nil)[:9], "exceeds the file size"},
		{"header over maximum", binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1), "exceeds the maximum"},
		{"not an object", rawFile(`[1,2]`, nil), "not a JSON object"},
		{"bad JSON", rawFile(`{"a":`, nil), "header JSON"},
		{"trailing garbage", rawFile(`{} x`, nil), "unexpected bytes"},
		{"metadata not strings", rawFile(`{"__metadata__":{"a":1}}`, nil), "__metadata__"},
		{"unknown dtype", rawFile(`{"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}`, []byte{0}), `unknown dtype "Q4"`},
		{"missing field", rawFile(`{"a":{"dtype":"F32","shape":[1]}}`, make([]byte, 4)), "needs dtype, shape and data_offsets"},
		{"negative dim", rawFile(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, make([]byte, 4)), "negative dimension"},
		{"fractional dim", rawFile(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, make([]byte, 4)), "bad entry"},
		{"huge shape", rawFile(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, make([]byte, 4)), "more bytes than"},
		{"three offsets", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, make([]byte, 4)), "want 2"},
		{"reversed offsets", rawFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, make([]byte, 4)), "bad data_offsets"},
		{"offset out of bounds", rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, make([]byte, 8)), "run past the data section"},
		{"size mismatch", rawFile(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}`, data16), "needs 12"},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, data16), "overlaps"},
		{"gap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}}`, data16), "gap"},
		{"trailing data", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, data16), "data section of 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHeader(tt.file)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseHeader: %v", err)
				}
				if h.DataStart+h.DataSize != int64(len(tt.file)) {
					t.Errorf("data section %d+%d, file %d", h.DataStart, h.DataSize, len(tt.file))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseHeader error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add(rawFile(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`, make([]byte, 16)))
	f.Add(rawFile(`{"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"F16","shape":[1],"data_offsets":[6,8]}}`, make([]byte, 8)))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, make([]byte, 8)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, file []byte) {
		h, err := ParseHeader(file)
		if err != nil {
			return
		}
		if h.DataStart < 8 || h.DataStart+h.DataSize != int64(len(file)) {
			t.Fatalf("data section [%d, +%d) in a file of %d", h.DataStart, h.DataSize, len(file))
		}
		for name, ti := range h.Tensors {
			if ti.Begin < 0 || ti.End < ti.Begin || ti.End > h.DataSize {
				t.Fatalf("tensor %q accepted with offsets [%d, %d] in a data section of %d", name, ti.Begin, ti.End, h.DataSize)
			}
			if ti.End-ti.Begin != ti.Len()*int64(ti.DType.Size()) {
				t.Fatalf("tensor %q accepted with %d bytes for %d elements", name, ti.End-ti.Begin, ti.Len())
			}
			_ = file[h.DataStart+ti.Begin : h.DataStart+ti.End]
		}
	})
}

func TestWriteReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	f32 := []float32{1, -2.5, 3.25, float32(math.Inf(1)), 0}
	bf := []uint16{0x3f80, 0xc000, 0x7fc0}  // 1, -2, NaN
	f16 := []uint16{0x3c00, 0xc000, 0x0001} // 1, -2, 2⁻²⁴
	odd := []uint16{0x4000}                 // a 1-element 16-bit tensor shifts alignment if misordered
	err := WriteFile(path, []WriteTensor{
		{Name: "odd", DType: BF16, Shape: []int{1}, Data: EncodeUint16(odd)},
		{Name: "b", DType: BF16, Shape: []int{3}, Data: EncodeUint16(bf)},
		{Name: "h", DType: F16, Shape: []int{3, 1}, Stream: func(w io.Writer) error {
			_, err := w.Write(EncodeUint16(f16))
			return err
		}},
		{Name: "a", DType: F32, Shape: []int{5}, Data: EncodeFloat32(f32)},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !f.Mapped() {
		t.Error("file was not memory-mapped")
	}
	if got := f.Metadata()["format"]; got != "pt" {
		t.Errorf("metadata format = %q", got)
	}
	if got := strings.Join(f.Names(), ","); got != "a,b,h,odd" {
		t.Errorf("names = %s", got)
	}
	a, err := f.Float32("a")
	if err != nil {
		t.Fatal(err)
	}
	for i := range f32 {
		if a[i] != f32[i] {
			t.Errorf("a[%d] = %v, want %v", i, a[i], f32[i])
		}
	}
	bw, err := f.Float32("b")
	if err != nil {
		t.Fatal(err)
	}
	if bw[0] != 1 || bw[1] != -2 || !math.IsNaN(float64(bw[2])) {
		t.Errorf("b widened = %v", bw)
	}
	bb, err := f.Uint16("b")
	if err != nil {
		t.Fatal(err)
	}
	for i := range bf {
		if bb[i] != bf[i] {
			t.Errorf("b bits[%d] = %#x, want %#x", i, bb[i], bf[i])
		}
	}
	hw, err := f.Float32("h")
	if err != nil {
		t.Fatal(err)
	}
	if hw[0] != 1 || hw[1] != -2 || hw[2] != float32(math.Ldexp(1, -24)) {
		t.Errorf("h widened = %v", hw)
	}
	if _, err := f.Uint16("a"); err == nil {
		t.Error("Uint16 of an F32 tensor succeeded")
	}
	if _, err := f.Float32("missing"); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"missing"`) {
		t.Errorf("missing tensor error = %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after write, want only the file", len(entries))
	}
}

func TestUnsupportedDType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteFile(path, []WriteTensor{{Name: "pos", DType: "I64", Shape: []int{2}, Data: make([]byte, 16)}}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = f.Float32("pos")
	if !errors.Is(err, ErrUnsupportedDType) || !strings.Contains(err.Error(), `"pos"`) || !strings.Contains(err.Error(), "I64") {
		t.Errorf("Float32 of I64 tensor: %v", err)
	}
}

func TestWriteFileRejects(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		ts   []WriteTensor
		want string
	}{
		{"duplicate", []WriteTensor{{Name: "a", DType: F32, Shape: []int{1}, Data: make([]byte, 4)}, {Name: "a", DType: F32, Shape: []int{1}, Data: make([]byte, 4)}}, "twice"},
		{"size", []WriteTensor{{Name: "a", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}}, "8 bytes"},
		{"short stream", []WriteTensor{{Name: "a", DType: F32, Shape: []int{2}, Stream: func(w io.Writer) error { _, err := w.Write(make([]byte, 4)); return err }}}, "wrote 4 bytes"},
		{"dtype", []WriteTensor{{Name: "a", DType: "Q4", Shape: []int{2}, Data: make([]byte, 4)}}, "unknown dtype"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".safetensors")
			err := WriteFile(path, tt.ts, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("WriteFile error = %v, want %q", err, tt.want)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("failed write left %s behind", path)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed writes left %d files behind", len(entries))
	}
}

func TestShardedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	write := func(file string, names ...string) {
		var ts []WriteTensor
		for i, n := range names {
			ts = append(ts, WriteTensor{Name: n, DType: F32, Shape: []int{1}, Data: EncodeFloat32([]float32{float32(i + 1)})})
		}
		if err := WriteFile(filepath.Join(dir, file), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	write("model-00001-of-00002.safetensors", "x", "y")
	write("model-00002-of-00002.safetensors", "z")
	wm := map[string]string{"x": "model-00001-of-00002.safetensors", "y": "model-00001-of-00002.safetensors", "z": "model-00002-of-00002.safetensors"}
	if err := WriteIndex(filepath.Join(dir, IndexFile), wm, 12); err != nil {
		t.Fatal(err)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Files()) != 2 || strings.Join(c.Names(), "") != "xyz" {
		t.Errorf("files %d, names %v", len(c.Files()), c.Names())
	}
	z, err := c.Float32("z")
	if err != nil || z[0] != 1 {
		t.Errorf("z = %v, %v", z, err)
	}
	if _, err := c.Float32("w"); err == nil || !strings.Contains(err.Error(), IndexFile) {
		t.Errorf("missing tensor error = %v", err)
	}
	c.Close()

	for name, m := range map[string]map[string]string{
		"not in shard": {"x": "model-00002-of-00002.safetensors"},
		"escaping":     {"x": "../model-00001-of-00002.safetensors"},
		"no shard":     {"x": "model-00009-of-00009.safetensors"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := WriteIndex(filepath.Join(dir, IndexFile), m, 4); err != nil {
				t.Fatal(err)
			}
			if c, err := OpenDir(dir); err == nil {
				c.Close()
				t.Fatal("bad index accepted")
			} else if !strings.Contains(err.Error(), IndexFile) && !strings.Contains(err.Error(), "model-0000") {
				t.Errorf("error does not name a file: %v", err)
			}
		})
	}
}

func TestConversions(t *testing.T) {
	for _, tt := range []struct {
		f    float32
		bf16 uint16
		f16  uint16
	}{
		{1, 0x3f80, 0x3c00},
		{-2, 0xc000, 0xc000},
		{0.5, 0x3f00, 0x3800},
		{65504, 0x4780, 0x7bff},
		{1e6, 0x4974, 0x7c00},                             // f16 overflows to +Inf
		{float32(math.Ldexp(1, -24)), 0x3380, 0x0001},     // smallest f16 subnormal
		{float32(math.Ldexp(1, -26)), 0x3280, 0x0000},     // rounds to zero in f16
		{float32(math.Ldexp(3, -25)), 0x33c0, 0x0002},     // 1.5 ulp → 2 (even)
		{1 + float32(math.Ldexp(1, -11)), 0x3f80, 0x3c00}, // halfway, ties to even
	} {
		if got := Float32ToBF16(tt.f); got != tt.bf16 {
			t.Errorf("Float32ToBF16(%g) = %#x, want %#x", tt.f, got, tt.bf16)
		}
		if got := Float32ToF16(tt.f); got != tt.f16 {
			t.Errorf("Float32ToF16(%g) = %#x, want %#x", tt.f, got, tt.f16)
		}
	}
	// Every finite half widens and narrows back to itself.
	for h := 0; h < 1<<16; h++ {
		f := F16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := Float32ToF16(f); back != uint16(h) {
			t.Fatalf("F16 %#x → %g → %#x", h, f, back)
		}
	}
}
