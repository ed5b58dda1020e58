package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/clawrl/clawrl/atomicfile"
)

// WriteTensor is one tensor to write. Its bytes (already encoded in Type,
// see Quantize) come from Data, or, when Data is nil, from Stream, which
// must write exactly the tensor's size, so that large models need not sit
// in memory.
type WriteTensor struct {
	Name string
	Type TensorType
	// Shape is outermost first, as Hugging Face writes it; the file
	// stores it reversed (ggml's ne, innermost first).
	Shape  []int
	Data   []byte
	Stream func(w io.Writer) error
}

// Size is the tensor's size in bytes in the file.
func (t *WriteTensor) Size() (int64, error) {
	n := int64(1)
	for _, d := range t.Shape {
		if d < 0 || d != 0 && n > maxElems/int64(d) {
			return 0, fmt.Errorf("tensor %q: bad shape %v", t.Name, t.Shape)
		}
		n *= int64(d)
	}
	block := int64(t.Type.BlockSize())
	if block == 0 {
		return 0, fmt.Errorf("tensor %q: unknown tensor type %d", t.Name, uint32(t.Type))
	}
	row := int64(1)
	if len(t.Shape) > 0 {
		row = int64(t.Shape[len(t.Shape)-1])
	}
	if row%block != 0 {
		return 0, fmt.Errorf("tensor %q: rows of %d elements are not whole %s blocks of %d", t.Name, row, t.Type, block)
	}
	return n / block * int64(t.Type.TypeSize()), nil
}

// KeyQuantizationVersion is the metadata key that a file with quantized
// tensors must hold; Write adds it (version 2) when it is missing.
const KeyQuantizationVersion = "general.quantization_version"

// Write writes a GGUF file (version 3, little-endian) to w: the metadata
// in the order given, then the tensor descriptions and data in the order
// given, each tensor's data starting at a multiple of the alignment
// (general.alignment if kvs sets it, a power-of-two uint32, else 32) and
// padded with zeros up to the next, as llama.cpp expects. Keys and tensor
// names must be unique; tensor names must be at most 63 bytes (ggml's
// limit).
func Write(w io.Writer, kvs []KV, tensors []WriteTensor) error {
	align := uint64(DefaultAlignment)
	keys := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		if kv.Key == "" || len(kv.Key) > MaxKeyLen {
			return fmt.Errorf("metadata key %q: empty or longer than %d bytes", kv.Key, MaxKeyLen)
		}
		if keys[kv.Key] {
			return fmt.Errorf("metadata key %q given twice", kv.Key)
		}
		keys[kv.Key] = true
		if err := checkValue(kv.Value, 0); err != nil {
			return fmt.Errorf("metadata %q: %w", kv.Key, err)
		}
		if kv.Key == KeyAlignment {
			a, ok := kv.Value.x.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("%s must be a power-of-two uint32, got %s %v", KeyAlignment, kv.Value.typ, kv.Value)
			}
			align = uint64(a)
		}
	}
	quantized := false
	names := make(map[string]bool, len(tensors))
	sizes := make([]uint64, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		switch {
		case t.Name == "" || len(t.Name) > 63:
			return fmt.Errorf("tensor name %q: empty or longer than 63 bytes", t.Name)
		case names[t.Name]:
			return fmt.Errorf("tensor %q given twice", t.Name)
		case len(t.Shape) > MaxDims:
			return fmt.Errorf("tensor %q has %d dimensions, more than %d", t.Name, len(t.Shape), MaxDims)
		case t.Data == nil && t.Stream == nil:
			return fmt.Errorf("tensor %q has neither Data nor Stream", t.Name)
		}
		names[t.Name] = true
		size, err := t.Size()
		if err != nil {
			return err
		}
		if t.Data != nil && int64(len(t.Data)) != size {
			return fmt.Errorf("tensor %q: %d bytes of data for shape %v of %s (%d bytes)", t.Name, len(t.Data), t.Shape, t.Type, size)
		}
		sizes[i] = uint64(size)
		quantized = quantized || t.Type.Quantized()
	}
	if quantized && !keys[KeyQuantizationVersion] {
		kvs = append(kvs[:len(kvs):len(kvs)], KV{KeyQuantizationVersion, Uint32(2)})
	}

	bw := bufio.NewWriterSize(w, 1<<20)
	cw := &countWriter{w: bw}
	e := &encoder{w: cw}
	e.raw([]byte("GGUF"))
	e.u32(3)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.typ))
		e.value(kv.Value)
	}
	var off uint64
	for i, t := range tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Shape)))
		for k := len(t.Shape) - 1; k >= 0; k-- {
			e.u64(uint64(t.Shape[k]))
		}
		e.u32(uint32(t.Type))
		e.u64(off)
		off = alignUp(off+sizes[i], align)
	}
	e.pad(align)
	for i, t := range tensors {
		if e.err != nil {
			break
		}
		start := cw.n
		if t.Data != nil {
			e.raw(t.Data)
		} else if err := t.Stream(cw); err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if got := cw.n - start; e.err == nil && got != sizes[i] {
			return fmt.Errorf("tensor %q: Stream wrote %d bytes, want %d", t.Name, got, sizes[i])
		}
		if i < len(tensors)-1 {
			e.pad(align)
		}
	}
	if e.err != nil {
		return e.err
	}
	return bw.Flush()
}

// WriteFile writes a GGUF file to path atomically: into a temporary file
// in the same directory, fsynced and renamed over path (see Write).
func WriteFile(path string, kvs []KV, tensors []WriteTensor) error {
	err := atomicfile.WriteFile(path, 0o644, func(w io.Writer) error {
		return Write(w, kvs, tensors)
	})
	if err != nil {
		return fmt.Errorf("gguf: %s: %w", path, err)
	}
	return nil
}

// checkValue checks that a value made outside the constructors is
// consistent: its Go value matches its type.
func checkValue(v Value, depth int) error {
	if v.typ == TypeArray {
		if depth >= maxDepth {
			return fmt.Errorf("arrays nested more than %d deep", maxDepth)
		}
		if vs, ok := v.x.([]Value); ok {
			for i, e := range vs {
				if e.typ != TypeArray {
					return fmt.Errorf("element %d of an array of arrays is a %s", i, e.typ)
				}
				if err := checkValue(e, depth+1); err != nil {
					return err
				}
			}
			return nil
		}
		if v.elem == TypeArray || !v.elem.Valid() || v.x == nil {
			return errors.New("malformed array value")
		}
		return nil
	}
	if !v.typ.Valid() || v.x == nil {
		return errors.New("malformed value (make values with the package's constructors)")
	}
	return nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

type countWriter struct {
	w io.Writer
	n uint64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

// encoder writes little-endian fields, keeping the first error.
type encoder struct {
	w   *countWriter
	err error
	buf [8]byte
}

func (e *encoder) raw(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func (e *encoder) u32(x uint32) {
	binary.LittleEndian.PutUint32(e.buf[:4], x)
	e.raw(e.buf[:4])
}

func (e *encoder) u64(x uint64) {
	binary.LittleEndian.PutUint64(e.buf[:8], x)
	e.raw(e.buf[:8])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.raw([]byte(s))
}

func (e *encoder) pad(align uint64) {
	if n := alignUp(e.w.n, align) - e.w.n; n > 0 {
		e.raw(make([]byte, n))
	}
}

// value writes a value's payload (its type is written by the caller).
func (e *encoder) value(v Value) {
	switch x := v.x.(type) {
	case uint8:
		e.raw([]byte{x})
	case int8:
		e.raw([]byte{byte(x)})
	case bool:
		b := byte(0)
		if x {
			b = 1
		}
		e.raw([]byte{b})
	case uint16:
		e.raw(binary.LittleEndian.AppendUint16(nil, x))
	case int16:
		e.raw(binary.LittleEndian.AppendUint16(nil, uint16(x)))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case string:
		e.str(x)
	default:
		e.array(v)
	}
}

func (e *encoder) array(v Value) {
	e.u32(uint32(v.elem))
	e.u64(uint64(v.Len()))
	switch xs := v.x.(type) {
	case []Value:
		for _, x := range xs {
			e.value(x) // an element's type is the array's element type
		}
	case []string:
		for _, x := range xs {
			e.str(x)
		}
	case []uint8:
		e.raw(xs)
	default:
		for i := range v.Len() {
			e.value(Value{x: elemAny(v.x, i)})
		}
	}
}

// elemAny returns element i of an array of scalars.
func elemAny(xs any, i int) any {
	switch xs := xs.(type) {
	case []bool:
		return xs[i]
	case []float32:
		return xs[i]
	case []float64:
		return xs[i]
	}
	return elemAt(xs, i)
}
