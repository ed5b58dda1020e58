// Package safetensors reads and writes checkpoints in the safetensors format
// of Hugging Face: an 8-byte little-endian header length, a JSON header that
// names every tensor with its dtype, shape and byte range, then the raw
// little-endian tensor data.
//
// Reading is strict, because a checkpoint is untrusted input: the header
// length is bounded by the file and by MaxHeaderSize, every byte range must
// lie inside the data section and match its shape and dtype, and tensors may
// neither overlap nor leave gaps. Files are memory-mapped read-only, so
// opening a multi-gigabyte checkpoint is instant and the accessors hand out
// views of the mapping without copying (a copy is made only when a tensor's
// bytes are not aligned for its element type). Sharded checkpoints
// (model.safetensors.index.json plus shard files) open as one Checkpoint.
//
// Writing goes to a temporary file in the destination directory, which is
// fsynced, renamed over the destination and followed by an fsync of the
// directory, so a reader never sees a partial checkpoint.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// MaxHeaderSize bounds the JSON header (100 MiB, as the reference reader).
const MaxHeaderSize = 100 << 20

// DType is a safetensors element type name, as written in the header.
type DType string

// The element types this package can convert. Other standard safetensors
// dtypes are recognised (so their byte ranges are validated) but their
// values cannot be read.
const (
	F32  DType = "F32"
	BF16 DType = "BF16"
	F16  DType = "F16"
)

// dtypeSizes lists every dtype the format defines, with its element size.
var dtypeSizes = map[DType]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
	"I16": 2, "U16": 2, F16: 2, BF16: 2,
	"I32": 4, "U32": 4, F32: 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// Size is the number of bytes per element, or 0 for an unknown dtype.
func (d DType) Size() int { return dtypeSizes[d] }

// Supported reports whether values of this dtype can be read (F32, BF16,
// F16).
func (d DType) Supported() bool { return d == F32 || d == BF16 || d == F16 }

// ErrUnsupportedDType is wrapped by errors about tensors whose dtype this
// package cannot convert.
var ErrUnsupportedDType = errors.New("unsupported dtype")

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int
	// Begin and End are byte offsets into the data section (after the
	// header); End−Begin is the product of Shape times the dtype size.
	Begin, End int64
}

// Len is the number of elements.
func (t TensorInfo) Len() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// Header is a parsed and validated safetensors header.
type Header struct {
	Metadata map[string]string
	Tensors  map[string]TensorInfo
	// DataStart is the file offset of the data section (8 + header length);
	// DataSize its length in bytes.
	DataStart, DataSize int64
}

// Names returns the tensor names in sorted order.
func (h *Header) Names() []string {
	names := make([]string, 0, len(h.Tensors))
	for n := range h.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

type rawTensor struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// ParseHeader parses and validates the header of a safetensors file whose
// complete contents are file. It checks everything that can be checked
// without reading tensor values: the header length against the file size
// and MaxHeaderSize, the JSON syntax, the metadata (a string-to-string map),
// each tensor's dtype, shape and byte range, and that the tensors tile the
// data section exactly, without overlap or gap.
func ParseHeader(file []byte) (*Header, error) {
	if len(file) < 8 {
		return nil, fmt.Errorf("file is %d bytes, too short for the 8-byte header length", len(file))
	}
	n := binary.LittleEndian.Uint64(file[:8])
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("header length %d exceeds the maximum of %d", n, MaxHeaderSize)
	}
	if n > uint64(len(file)-8) {
		return nil, fmt.Errorf("header length %d exceeds the file size (%d bytes after the length field)", n, len(file)-8)
	}
	raw := file[8 : 8+n]
	if len(raw) < 2 || raw[0] != '{' {
		return nil, fmt.Errorf("header is not a JSON object")
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&fields); err != nil {
		return nil, fmt.Errorf("header JSON: %w", err)
	}
	if rest := bytes.TrimRight(raw[dec.InputOffset():], " \t\r\n"); len(rest) != 0 {
		return nil, fmt.Errorf("header JSON: %d unexpected bytes after the object", len(rest))
	}
	h := &Header{
		Tensors:   make(map[string]TensorInfo, len(fields)),
		DataStart: int64(8 + n),
		DataSize:  int64(len(file)) - int64(8+n),
	}
	for name, msg := range fields {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, fmt.Errorf("__metadata__ must map strings to strings: %w", err)
			}
			continue
		}
		t, err := parseTensor(name, msg, h.DataSize)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		h.Tensors[name] = t
	}
	if err := checkTiling(h); err != nil {
		return nil, err
	}
	return h, nil
}

func parseTensor(name string, msg json.RawMessage, dataSize int64) (TensorInfo, error) {
	var r rawTensor
	if err := json.Unmarshal(msg, &r); err != nil {
		return TensorInfo{}, fmt.Errorf("bad entry: %w", err)
	}
	if r.DType == nil || r.Shape == nil || r.DataOffsets == nil {
		return TensorInfo{}, errors.New("entry needs dtype, shape and data_offsets")
	}
	t := TensorInfo{Name: name, DType: DType(*r.DType)}
	size := t.DType.Size()
	if size == 0 {
		return TensorInfo{}, fmt.Errorf("unknown dtype %q", *r.DType)
	}
	elems := int64(1)
	for _, d := range *r.Shape {
		if d < 0 {
			return TensorInfo{}, fmt.Errorf("negative dimension in shape %v", *r.Shape)
		}
		if d > 0 && elems > (dataSize+1)/d {
			return TensorInfo{}, fmt.Errorf("shape %v needs more bytes than the data section holds (%d)", *r.Shape, dataSize)
		}
		elems *= d
		t.Shape = append(t.Shape, int(d))
	}
	if t.Shape == nil {
		t.Shape = []int{} // a scalar
	}
	offs := *r.DataOffsets
	if len(offs) != 2 {
		return TensorInfo{}, fmt.Errorf("data_offsets has %d entries, want 2", len(offs))
	}
	t.Begin, t.End = offs[0], offs[1]
	if t.Begin < 0 || t.End < t.Begin {
		return TensorInfo{}, fmt.Errorf("bad data_offsets [%d, %d]", t.Begin, t.End)
	}
	if t.End > dataSize {
		return TensorInfo{}, fmt.Errorf("data_offsets [%d, %d] run past the data section of %d bytes (file truncated?)", t.Begin, t.End, dataSize)
	}
	if want := elems * int64(size); t.End-t.Begin != want {
		return TensorInfo{}, fmt.Errorf("data_offsets [%d, %d] hold %d bytes, but shape %v of %s needs %d", t.Begin, t.End, t.End-t.Begin, *r.Shape, t.DType, want)
	}
	return t, nil
}

// checkTiling verifies that the tensors cover the data section exactly once.
func checkTiling(h *Header) error {
	ts := make([]TensorInfo, 0, len(h.Tensors))
	for _, t := range h.Tensors {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].Begin != ts[j].Begin {
			return ts[i].Begin < ts[j].Begin
		}
		if ts[i].End != ts[j].End {
			return ts[i].End < ts[j].End
		}
		return ts[i].Name < ts[j].Name
	})
	var end int64
	prev := ""
	for _, t := range ts {
		switch {
		case t.Begin < end:
			return fmt.Errorf("tensor %q (bytes %d..%d) overlaps tensor %q (ending at %d)", t.Name, t.Begin, t.End, prev, end)
		case t.Begin > end:
			return fmt.Errorf("tensor %q starts at byte %d, leaving a gap after byte %d", t.Name, t.Begin, end)
		}
		if t.End > end {
			end, prev = t.End, t.Name
		}
	}
	if end != h.DataSize {
		return fmt.Errorf("tensors end at byte %d of a data section of %d bytes", end, h.DataSize)
	}
	return nil
}

// describe formats a shape for messages.
func describe(shape []int) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
