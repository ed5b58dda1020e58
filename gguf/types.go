package gguf

import "fmt"

// TensorType is the storage type of a tensor (ggml_type): a plain number
// type or a block-quantized format.
type TensorType uint32

// The tensor types of the format. Numbers 4, 5, 31-33 and 36-38 belonged
// to types that were removed; a file that uses them is refused.
const (
	F32     TensorType = 0
	F16     TensorType = 1
	Q4_0    TensorType = 2
	Q4_1    TensorType = 3
	Q5_0    TensorType = 6
	Q5_1    TensorType = 7
	Q8_0    TensorType = 8
	Q8_1    TensorType = 9
	Q2_K    TensorType = 10
	Q3_K    TensorType = 11
	Q4_K    TensorType = 12
	Q5_K    TensorType = 13
	Q6_K    TensorType = 14
	Q8_K    TensorType = 15
	IQ2_XXS TensorType = 16
	IQ2_XS  TensorType = 17
	IQ3_XXS TensorType = 18
	IQ1_S   TensorType = 19
	IQ4_NL  TensorType = 20
	IQ3_S   TensorType = 21
	IQ2_S   TensorType = 22
	IQ4_XS  TensorType = 23
	I8      TensorType = 24
	I16     TensorType = 25
	I32     TensorType = 26
	I64     TensorType = 27
	F64     TensorType = 28
	IQ1_M   TensorType = 29
	BF16    TensorType = 30
	TQ1_0   TensorType = 34
	TQ2_0   TensorType = 35
	MXFP4   TensorType = 39
	NVFP4   TensorType = 40
	Q1_0    TensorType = 41
)

// qk is the element count of a K-quant super-block.
const qk = 256

// typeInfo is a tensor type's name, the elements of one block and the
// bytes one block takes (gguf-py's GGML_QUANT_SIZES).
type typeInfo struct {
	name  string
	block int
	size  int
}

var tensorTypes = map[TensorType]typeInfo{
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	Q4_0:    {"Q4_0", 32, 2 + 16},
	Q4_1:    {"Q4_1", 32, 2 + 2 + 16},
	Q5_0:    {"Q5_0", 32, 2 + 4 + 16},
	Q5_1:    {"Q5_1", 32, 2 + 2 + 4 + 16},
	Q8_0:    {"Q8_0", 32, 2 + 32},
	Q8_1:    {"Q8_1", 32, 4 + 4 + 32},
	Q2_K:    {"Q2_K", qk, 2 + 2 + qk/16 + qk/4},
	Q3_K:    {"Q3_K", qk, 2 + qk/4 + qk/8 + 12},
	Q4_K:    {"Q4_K", qk, 2 + 2 + qk/2 + 12},
	Q5_K:    {"Q5_K", qk, 2 + 2 + qk/2 + qk/8 + 12},
	Q6_K:    {"Q6_K", qk, 2 + qk/2 + qk/4 + qk/16},
	Q8_K:    {"Q8_K", qk, 4 + qk + qk/8},
	IQ2_XXS: {"IQ2_XXS", qk, 2 + qk/4},
	IQ2_XS:  {"IQ2_XS", qk, 2 + qk/4 + qk/32},
	IQ3_XXS: {"IQ3_XXS", qk, 2 + qk/4 + qk/8},
	IQ1_S:   {"IQ1_S", qk, 2 + qk/8 + qk/16},
	IQ4_NL:  {"IQ4_NL", 32, 2 + 16},
	IQ3_S:   {"IQ3_S", qk, 2 + qk/4 + qk/8 + qk/32 + 4},
	IQ2_S:   {"IQ2_S", qk, 2 + qk/4 + qk/16},
	IQ4_XS:  {"IQ4_XS", qk, 2 + 2 + qk/2 + qk/64},
	I8:      {"I8", 1, 1},
	I16:     {"I16", 1, 2},
	I32:     {"I32", 1, 4},
	I64:     {"I64", 1, 8},
	F64:     {"F64", 1, 8},
	IQ1_M:   {"IQ1_M", qk, qk/8 + qk/16 + qk/32},
	BF16:    {"BF16", 1, 2},
	TQ1_0:   {"TQ1_0", qk, 2 + 4*13},
	TQ2_0:   {"TQ2_0", qk, 2 + 64},
	MXFP4:   {"MXFP4", 32, 1 + 16},
	NVFP4:   {"NVFP4", 64, 4 + 32},
	Q1_0:    {"Q1_0", 128, 2 + 16},
}

// Known reports whether t is a type of the format (whether or not this
// package can read its values).
func (t TensorType) Known() bool {
	_, ok := tensorTypes[t]
	return ok
}

// String is the type's name as gguf-py spells it ("Q4_K"), or
// "type(N)" for a number the format does not define.
func (t TensorType) String() string {
	if info, ok := tensorTypes[t]; ok {
		return info.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize is the number of elements one block holds (1 for the plain
// number types), or 0 for an unknown type.
func (t TensorType) BlockSize() int { return tensorTypes[t].block }

// TypeSize is the number of bytes one block takes, or 0 for an unknown
// type.
func (t TensorType) TypeSize() int { return tensorTypes[t].size }

// Quantized reports whether t is a block-quantized format (not a plain
// number type).
func (t TensorType) Quantized() bool { return tensorTypes[t].block > 1 }

// Readable reports whether Dequantize can turn values of type t into
// float32.
func (t TensorType) Readable() bool {
	_, ok := dequantizers[t]
	return ok
}

// readableNames lists the types Dequantize reads, for messages.
func readableNames() string {
	return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS"
}

// ParseTensorType returns the type of a name as String writes it
// (case-insensitive).
func ParseTensorType(name string) (TensorType, error) {
	for t, info := range tensorTypes {
		if equalFold(info.name, name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("gguf: unknown tensor type %q", name)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// ValueType is the type of a metadata value (gguf_metadata_value_type).
type ValueType uint32

// The metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{
	"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
	"bool", "string", "array", "uint64", "int64", "float64",
}

// Valid reports whether t is a value type of the format.
func (t ValueType) Valid() bool { return int(t) < len(valueTypeNames) }

func (t ValueType) String() string {
	if t.Valid() {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("value type(%d)", uint32(t))
}

// fixedSize is the byte size of a scalar of type t, or 0 for strings,
// arrays and invalid types.
func (t ValueType) fixedSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// minSize is the fewest bytes a value of type t takes in a file: its size
// for a scalar, the length for a string, type and length for an array.
func (t ValueType) minSize() int {
	switch t {
	case TypeString:
		return 8
	case TypeArray:
		return 12
	}
	return t.fixedSize()
}
