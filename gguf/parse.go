package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
)

// Errors that Parse and Open wrap, so that callers (and tests) can tell
// the kinds of damage apart with errors.Is.
var (
	// ErrTruncated: the file ends before something it declares (a header
	// field, a string, an array, a tensor's data).
	ErrTruncated = errors.New("truncated")
	// ErrMagic: the file does not start with "GGUF".
	ErrMagic = errors.New("not a GGUF file")
	// ErrVersion: a format version other than 2 and 3, or a big-endian
	// file.
	ErrVersion = errors.New("unsupported GGUF version")
	// ErrValueType: a metadata value of a type the format does not define.
	ErrValueType = errors.New("unknown metadata value type")
	// ErrTensorType: a tensor of a type the format does not define.
	ErrTensorType = errors.New("unknown tensor type")
	// ErrInvalid: anything else the format forbids: sizes that overflow,
	// misaligned or overlapping tensor data, duplicate keys or tensor
	// names, a bad alignment, a bool that is neither 0 nor 1.
	ErrInvalid = errors.New("invalid")
)

// Limits on what a file may declare. Counts and lengths are further
// bounded by the bytes left in the file, so that nothing is allocated
// beyond a small multiple of the file's size whatever it declares.
const (
	// MaxKeyLen is the longest metadata key the format allows.
	MaxKeyLen = 65535
	// MaxNameLen bounds tensor names (ggml itself takes at most 63 bytes;
	// Write refuses longer names).
	MaxNameLen = 65535
	// MaxDims is the most dimensions a tensor may have (GGML_MAX_DIMS).
	MaxDims = 4
	// maxDepth bounds the nesting of arrays of arrays.
	maxDepth = 4
	// maxElems bounds a tensor's element count (2^62), so that sizes in
	// bytes never overflow.
	maxElems = 1 << 62
)

// DefaultAlignment is the alignment of tensor data when the file does not
// set general.alignment.
const DefaultAlignment = 32

// KeyAlignment is the metadata key that sets the alignment of tensor data.
const KeyAlignment = "general.alignment"

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name string
	// Dims are the dimensions as the file stores them: the innermost
	// (contiguous) first, as ggml's ne. Shape gives them outermost first.
	Dims []uint64
	Type TensorType
	// Offset is where the data starts, relative to the data section;
	// Size is its length in bytes.
	Offset, Size uint64
}

// Elems is the number of elements (1 for a tensor of no dimensions).
func (t TensorInfo) Elems() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Shape is the shape outermost first, as Hugging Face and NumPy write it
// (a matrix of ne = [cols, rows] has Shape [rows, cols]).
func (t TensorInfo) Shape() []int {
	s := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		s[len(s)-1-i] = int(d)
	}
	return s
}

// Header is the parsed and validated part of a GGUF file before its
// tensor data: version, metadata and tensor descriptions.
type Header struct {
	Version uint32
	// KV is the metadata in file order.
	KV []KV
	// Tensors are the tensor descriptions in file order.
	Tensors []TensorInfo
	// Alignment is the alignment of tensor data (general.alignment, or
	// DefaultAlignment).
	Alignment int
	// DataOffset is the file offset of the data section.
	DataOffset int64

	keys  map[string]int
	names map[string]int
}

// Get returns the value of a metadata key.
func (h *Header) Get(key string) (Value, bool) {
	i, ok := h.keys[key]
	if !ok {
		return Value{}, false
	}
	return h.KV[i].Value, true
}

// Tensor returns the description of the named tensor.
func (h *Header) Tensor(name string) (TensorInfo, bool) {
	i, ok := h.names[name]
	if !ok {
		return TensorInfo{}, false
	}
	return h.Tensors[i], true
}

// Parse parses and validates the header of a GGUF file whose complete
// contents are file: magic, version (2 or 3, little-endian), every
// metadata value, every tensor description, and that each tensor's data
// is aligned and lies inside the file without overlapping another's. It
// never panics, and allocates no more than a small multiple of
// len(file), whatever the file declares.
func Parse(file []byte) (*Header, error) {
	if len(file) < 4 {
		return nil, fmt.Errorf("%w: the file is %d bytes, too short for the magic \"GGUF\"", ErrTruncated, len(file))
	}
	if string(file[:4]) != "GGUF" {
		return nil, fmt.Errorf("%w: it starts with %q, not \"GGUF\"", ErrMagic, file[:4])
	}
	r := &reader{b: file, off: 4}
	version, err := r.u32("the version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 2 || version == 3:
	case version == 1:
		return nil, fmt.Errorf("%w: version 1 (the 2023 draft, with 32-bit counts) is not supported; convert the model again with a current llama.cpp", ErrVersion)
	case bits.ReverseBytes32(version) >= 1 && bits.ReverseBytes32(version) <= 3:
		return nil, fmt.Errorf("%w: a big-endian file (version %d byte-swapped); only little-endian files are supported", ErrVersion, bits.ReverseBytes32(version))
	default:
		return nil, fmt.Errorf("%w: version %d (want 2 or 3)", ErrVersion, version)
	}
	h := &Header{Version: version, Alignment: DefaultAlignment, keys: map[string]int{}, names: map[string]int{}}
	nTensors, err := r.u64("the tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := r.u64("the metadata count")
	if err != nil {
		return nil, err
	}
	// A key-value pair takes at least 13 bytes (key length, type, one
	// byte of value), a tensor description 24.
	if err := r.fits(nKV, 13, "metadata pairs"); err != nil {
		return nil, err
	}
	h.KV = make([]KV, 0, nKV)
	for i := range nKV {
		key, err := r.str(MaxKeyLen, fmt.Sprintf("the key of metadata pair %d", i))
		if err != nil {
			return nil, err
		}
		if _, dup := h.keys[key]; dup {
			return nil, fmt.Errorf("%w: metadata key %q appears twice", ErrInvalid, key)
		}
		typ, err := r.u32(fmt.Sprintf("the type of %q", key))
		if err != nil {
			return nil, err
		}
		v, err := r.value(ValueType(typ), 0, strconv.Quote(key))
		if err != nil {
			return nil, err
		}
		h.keys[key] = len(h.KV)
		h.KV = append(h.KV, KV{Key: key, Value: v})
	}
	if v, ok := h.Get(KeyAlignment); ok {
		a, isU32 := v.x.(uint32)
		if !isU32 || v.typ != TypeUint32 {
			return nil, fmt.Errorf("%w: %s is a %s, not a uint32", ErrInvalid, KeyAlignment, v.typ)
		}
		if a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("%w: %s is %d, not a power of two", ErrInvalid, KeyAlignment, a)
		}
		h.Alignment = int(a)
	}

	if err := r.fits(nTensors, 24, "tensor descriptions"); err != nil {
		return nil, err
	}
	h.Tensors = make([]TensorInfo, 0, nTensors)
	for i := range nTensors {
		t, err := r.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if _, dup := h.names[t.Name]; dup {
			return nil, fmt.Errorf("%w: tensor %q appears twice", ErrInvalid, t.Name)
		}
		h.names[t.Name] = len(h.Tensors)
		h.Tensors = append(h.Tensors, t)
	}

	// The data section starts at the next multiple of the alignment.
	pos := int64(r.off)
	a := int64(h.Alignment)
	h.DataOffset = (pos + a - 1) / a * a
	if len(h.Tensors) == 0 {
		return h, nil
	}
	if h.DataOffset > int64(len(file)) {
		return nil, fmt.Errorf("%w: the tensor data should start at offset %d, past the end of the file (%d bytes)", ErrTruncated, h.DataOffset, len(file))
	}
	dataSize := uint64(int64(len(file)) - h.DataOffset)
	order := make([]int, len(h.Tensors))
	for i, t := range h.Tensors {
		order[i] = i
		if t.Offset%uint64(h.Alignment) != 0 {
			return nil, fmt.Errorf("%w: tensor %q: its data at offset %d is not aligned to %d bytes", ErrInvalid, t.Name, t.Offset, h.Alignment)
		}
		if t.Offset > dataSize || t.Size > dataSize-t.Offset {
			return nil, fmt.Errorf("%w: tensor %q: its %d bytes at data offset %d lie past the end of the file (the data section holds %d bytes)", ErrTruncated, t.Name, t.Size, t.Offset, dataSize)
		}
	}
	slices.SortFunc(order, func(i, j int) int {
		a, b := h.Tensors[i], h.Tensors[j]
		switch {
		case a.Offset != b.Offset:
			if a.Offset < b.Offset {
				return -1
			}
			return 1
		case a.Size != b.Size:
			if a.Size < b.Size {
				return -1
			}
			return 1
		}
		return 0
	})
	for k := 1; k < len(order); k++ {
		prev, next := h.Tensors[order[k-1]], h.Tensors[order[k]]
		if prev.Offset+prev.Size > next.Offset && prev.Size > 0 && next.Size > 0 {
			return nil, fmt.Errorf("%w: the data of tensors %q and %q overlap", ErrInvalid, prev.Name, next.Name)
		}
	}
	return h, nil
}

// reader reads little-endian fields from a byte slice, reporting
// truncation with the field's name and offset.
type reader struct {
	b   []byte
	off int
}

func (r *reader) left() uint64 { return uint64(len(r.b) - r.off) }

// take returns the next n bytes.
func (r *reader) take(n uint64, what string) ([]byte, error) {
	if n > r.left() {
		return nil, fmt.Errorf("%w: %s at offset %d needs %d bytes, but only %d are left", ErrTruncated, what, r.off, n, r.left())
	}
	b := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return b, nil
}

// fits checks that n items of at least size bytes each can fit in what is
// left of the file, before anything is allocated for them.
func (r *reader) fits(n uint64, size int, what string) error {
	if n > r.left()/uint64(size) {
		return fmt.Errorf("%w: %d %s need at least %d bytes each, but only %d bytes are left at offset %d", ErrTruncated, n, what, size, r.left(), r.off)
	}
	return nil
}

func (r *reader) u32(what string) (uint32, error) {
	b, err := r.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *reader) u64(what string) (uint64, error) {
	b, err := r.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// str reads a string: a uint64 length, then that many bytes (copied out of
// the file).
func (r *reader) str(maxLen uint64, what string) (string, error) {
	n, err := r.u64(what + " (its length)")
	if err != nil {
		return "", err
	}
	if n > maxLen {
		return "", fmt.Errorf("%w: %s is %d bytes long, more than the %d allowed", ErrInvalid, what, n, maxLen)
	}
	b, err := r.take(n, what)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// value reads a value of type typ; what names it for messages.
func (r *reader) value(typ ValueType, depth int, what string) (Value, error) {
	if size := typ.fixedSize(); size > 0 {
		b, err := r.take(uint64(size), "the value of "+what)
		if err != nil {
			return Value{}, err
		}
		return scalar(typ, b, what)
	}
	switch typ {
	case TypeString:
		s, err := r.str(math.MaxUint64, "the string "+what)
		if err != nil {
			return Value{}, err
		}
		return String(s), nil
	case TypeArray:
		if depth >= maxDepth {
			return Value{}, fmt.Errorf("%w: %s nests arrays more than %d deep", ErrInvalid, what, maxDepth)
		}
		et, err := r.u32("the element type of " + what)
		if err != nil {
			return Value{}, err
		}
		elem := ValueType(et)
		if !elem.Valid() {
			return Value{}, fmt.Errorf("%w: %d, the element type of %s", ErrValueType, et, what)
		}
		n, err := r.u64("the length of " + what)
		if err != nil {
			return Value{}, err
		}
		if err := r.fits(n, elem.minSize(), "elements of "+what); err != nil {
			return Value{}, err
		}
		return r.array(elem, int(n), depth, what)
	}
	return Value{}, fmt.Errorf("%w: %d, the type of %s", ErrValueType, uint32(typ), what)
}

// scalar decodes a fixed-size value from its bytes.
func scalar(typ ValueType, b []byte, what string) (Value, error) {
	switch typ {
	case TypeUint8:
		return Uint8(b[0]), nil
	case TypeInt8:
		return Int8(int8(b[0])), nil
	case TypeBool:
		if b[0] > 1 {
			return Value{}, fmt.Errorf("%w: %s is a bool of value %d, neither 0 nor 1", ErrInvalid, what, b[0])
		}
		return Bool(b[0] == 1), nil
	case TypeUint16:
		return Uint16(binary.LittleEndian.Uint16(b)), nil
	case TypeInt16:
		return Int16(int16(binary.LittleEndian.Uint16(b))), nil
	case TypeUint32:
		return Uint32(binary.LittleEndian.Uint32(b)), nil
	case TypeInt32:
		return Int32(int32(binary.LittleEndian.Uint32(b))), nil
	case TypeFloat32:
		return Float32(math.Float32frombits(binary.LittleEndian.Uint32(b))), nil
	case TypeUint64:
		return Uint64(binary.LittleEndian.Uint64(b)), nil
	case TypeInt64:
		return Int64(int64(binary.LittleEndian.Uint64(b))), nil
	case TypeFloat64:
		return Float64(math.Float64frombits(binary.LittleEndian.Uint64(b))), nil
	}
	return Value{}, fmt.Errorf("%w: %d, the type of %s", ErrValueType, uint32(typ), what)
}

// array reads n elements of type elem (their room is already checked).
func (r *reader) array(elem ValueType, n, depth int, what string) (Value, error) {
	if size := elem.fixedSize(); size > 0 {
		b, err := r.take(uint64(n*size), "the elements of "+what)
		if err != nil {
			return Value{}, err
		}
		return fixedArray(elem, b, n, what)
	}
	switch elem {
	case TypeString:
		xs := make([]string, n)
		for i := range xs {
			s, err := r.str(math.MaxUint64, fmt.Sprintf("element %d of %s", i, what))
			if err != nil {
				return Value{}, err
			}
			xs[i] = s
		}
		return Array(xs), nil
	case TypeArray:
		vs := make([]Value, n)
		for i := range vs {
			v, err := r.value(TypeArray, depth+1, fmt.Sprintf("element %d of %s", i, what))
			if err != nil {
				return Value{}, err
			}
			vs[i] = v
		}
		return Arrays(vs), nil
	}
	return Value{}, fmt.Errorf("%w: %d, the element type of %s", ErrValueType, uint32(elem), what)
}

func fixedArray(elem ValueType, b []byte, n int, what string) (Value, error) {
	le := binary.LittleEndian
	switch elem {
	case TypeUint8:
		return Array(slices.Clone(b)), nil
	case TypeInt8:
		xs := make([]int8, n)
		for i := range xs {
			xs[i] = int8(b[i])
		}
		return Array(xs), nil
	case TypeBool:
		xs := make([]bool, n)
		for i := range xs {
			if b[i] > 1 {
				return Value{}, fmt.Errorf("%w: element %d of %s is a bool of value %d, neither 0 nor 1", ErrInvalid, i, what, b[i])
			}
			xs[i] = b[i] == 1
		}
		return Array(xs), nil
	case TypeUint16:
		xs := make([]uint16, n)
		for i := range xs {
			xs[i] = le.Uint16(b[2*i:])
		}
		return Array(xs), nil
	case TypeInt16:
		xs := make([]int16, n)
		for i := range xs {
			xs[i] = int16(le.Uint16(b[2*i:]))
		}
		return Array(xs), nil
	case TypeUint32:
		xs := make([]uint32, n)
		for i := range xs {
			xs[i] = le.Uint32(b[4*i:])
		}
		return Array(xs), nil
	case TypeInt32:
		xs := make([]int32, n)
		for i := range xs {
			xs[i] = int32(le.Uint32(b[4*i:]))
		}
		return Array(xs), nil
	case TypeFloat32:
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
		return Array(xs), nil
	case TypeUint64:
		xs := make([]uint64, n)
		for i := range xs {
			xs[i] = le.Uint64(b[8*i:])
		}
		return Array(xs), nil
	case TypeInt64:
		xs := make([]int64, n)
		for i := range xs {
			xs[i] = int64(le.Uint64(b[8*i:]))
		}
		return Array(xs), nil
	case TypeFloat64:
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = math.Float64frombits(le.Uint64(b[8*i:]))
		}
		return Array(xs), nil
	}
	return Value{}, fmt.Errorf("%w: %d, the element type of %s", ErrValueType, uint32(elem), what)
}

// tensorInfo reads the description of tensor i.
func (r *reader) tensorInfo(i uint64) (TensorInfo, error) {
	name, err := r.str(MaxNameLen, fmt.Sprintf("the name of tensor %d", i))
	if err != nil {
		return TensorInfo{}, err
	}
	what := fmt.Sprintf("tensor %q", name)
	nd, err := r.u32("the dimension count of " + what)
	if err != nil {
		return TensorInfo{}, err
	}
	if nd > MaxDims {
		return TensorInfo{}, fmt.Errorf("%w: %s has %d dimensions, more than %d", ErrInvalid, what, nd, MaxDims)
	}
	t := TensorInfo{Name: name, Dims: make([]uint64, nd)}
	elems := uint64(1)
	for k := range t.Dims {
		d, err := r.u64(fmt.Sprintf("dimension %d of %s", k, what))
		if err != nil {
			return TensorInfo{}, err
		}
		t.Dims[k] = d
		if d != 0 && elems > maxElems/d {
			return TensorInfo{}, fmt.Errorf("%w: %s has dimensions %v: more than 2^62 elements", ErrInvalid, what, t.Dims[:k+1])
		}
		elems *= d
	}
	typ, err := r.u32("the type of " + what)
	if err != nil {
		return TensorInfo{}, err
	}
	t.Type = TensorType(typ)
	if !t.Type.Known() {
		return TensorInfo{}, fmt.Errorf("%w: %d, the type of %s", ErrTensorType, typ, what)
	}
	block, size := uint64(t.Type.BlockSize()), uint64(t.Type.TypeSize())
	if block > 1 {
		row := uint64(1)
		if nd > 0 {
			row = t.Dims[0]
		}
		if row%block != 0 {
			return TensorInfo{}, fmt.Errorf("%w: %s is %s, whose blocks hold %d elements, but its rows hold %d", ErrInvalid, what, t.Type, block, row)
		}
	}
	// The size in bytes must fit in a uint64 (8-byte elements of F64 and
	// I64 could overflow it).
	if elems/block > math.MaxUint64/size {
		return TensorInfo{}, fmt.Errorf("%w: %s: its size in bytes overflows", ErrInvalid, what)
	}
	t.Size = elems / block * size
	if t.Offset, err = r.u64("the data offset of " + what); err != nil {
		return TensorInfo{}, err
	}
	return t, nil
}
