package gguf

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Value is one metadata value: a scalar of a ValueType, or an array of
// scalars (or of arrays). Make values with the constructors (Uint32,
// String, Array, ...); read them with the accessors, which convert
// between integer types where the value fits.
type Value struct {
	typ  ValueType
	elem ValueType // an array's element type
	// x is the Go value: uint8 … float64, bool or string for a scalar;
	// []uint8 … []float64, []bool or []string for an array of scalars;
	// []Value for an array of arrays.
	x any
}

// KV is a metadata key with its value.
type KV struct {
	Key   string
	Value Value
}

// Constructors of scalar values.
func Uint8(x uint8) Value     { return Value{typ: TypeUint8, x: x} }
func Int8(x int8) Value       { return Value{typ: TypeInt8, x: x} }
func Uint16(x uint16) Value   { return Value{typ: TypeUint16, x: x} }
func Int16(x int16) Value     { return Value{typ: TypeInt16, x: x} }
func Uint32(x uint32) Value   { return Value{typ: TypeUint32, x: x} }
func Int32(x int32) Value     { return Value{typ: TypeInt32, x: x} }
func Float32(x float32) Value { return Value{typ: TypeFloat32, x: x} }
func Bool(x bool) Value       { return Value{typ: TypeBool, x: x} }
func String(x string) Value   { return Value{typ: TypeString, x: x} }
func Uint64(x uint64) Value   { return Value{typ: TypeUint64, x: x} }
func Int64(x int64) Value     { return Value{typ: TypeInt64, x: x} }
func Float64(x float64) Value { return Value{typ: TypeFloat64, x: x} }

// Elem is a Go type an array of scalars can hold.
type Elem interface {
	uint8 | int8 | uint16 | int16 | uint32 | int32 | float32 | bool | string | uint64 | int64 | float64
}

// Array is an array value of scalars; the slice is kept, not copied.
func Array[T Elem](xs []T) Value {
	var elem ValueType
	switch any(xs).(type) {
	case []uint8:
		elem = TypeUint8
	case []int8:
		elem = TypeInt8
	case []uint16:
		elem = TypeUint16
	case []int16:
		elem = TypeInt16
	case []uint32:
		elem = TypeUint32
	case []int32:
		elem = TypeInt32
	case []float32:
		elem = TypeFloat32
	case []bool:
		elem = TypeBool
	case []string:
		elem = TypeString
	case []uint64:
		elem = TypeUint64
	case []int64:
		elem = TypeInt64
	case []float64:
		elem = TypeFloat64
	}
	if xs == nil {
		xs = []T{}
	}
	return Value{typ: TypeArray, elem: elem, x: xs}
}

// Arrays is an array of arrays; every element must be an array value.
func Arrays(vs []Value) Value {
	if vs == nil {
		vs = []Value{}
	}
	return Value{typ: TypeArray, elem: TypeArray, x: vs}
}

// Type is the value's type.
func (v Value) Type() ValueType { return v.typ }

// ElemType is an array's element type.
func (v Value) ElemType() ValueType { return v.elem }

// Interface is the Go value (see Value).
func (v Value) Interface() any { return v.x }

// Len is the number of elements of an array, or 0 for a scalar.
func (v Value) Len() int {
	if v.typ != TypeArray {
		return 0
	}
	switch xs := v.x.(type) {
	case []uint8:
		return len(xs)
	case []int8:
		return len(xs)
	case []uint16:
		return len(xs)
	case []int16:
		return len(xs)
	case []uint32:
		return len(xs)
	case []int32:
		return len(xs)
	case []float32:
		return len(xs)
	case []bool:
		return len(xs)
	case []string:
		return len(xs)
	case []uint64:
		return len(xs)
	case []int64:
		return len(xs)
	case []float64:
		return len(xs)
	case []Value:
		return len(xs)
	}
	return 0
}

// Int returns an integer value of any integer type as int64; ok is false
// for another type or a uint64 beyond int64.
func (v Value) Int() (int64, bool) { return toInt(v.x) }

// Uint returns a non-negative integer value of any integer type.
func (v Value) Uint() (uint64, bool) {
	if u, ok := v.x.(uint64); ok {
		return u, true
	}
	i, ok := toInt(v.x)
	if !ok || i < 0 {
		return 0, false
	}
	return uint64(i), true
}

// Float returns a float32 or float64 value as float64.
func (v Value) Float() (float64, bool) {
	switch x := v.x.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// Str returns a string value.
func (v Value) Str() (string, bool) {
	s, ok := v.x.(string)
	return s, ok && v.typ == TypeString
}

// Bool returns a bool value.
func (v Value) Bool() (bool, bool) {
	b, ok := v.x.(bool)
	return b, ok && v.typ == TypeBool
}

// Strings returns an array of strings (the slice itself).
func (v Value) Strings() ([]string, bool) {
	s, ok := v.x.([]string)
	return s, ok && v.typ == TypeArray
}

// Ints returns an array of integers of any integer type as int64s; ok is
// false for another element type or a uint64 beyond int64.
func (v Value) Ints() ([]int64, bool) {
	if v.typ != TypeArray {
		return nil, false
	}
	n := v.Len()
	out := make([]int64, n)
	for i := range n {
		x, ok := toInt(elemAt(v.x, i))
		if !ok {
			return nil, false
		}
		out[i] = x
	}
	return out, true
}

// Floats returns an array of float32 or float64 as float64s.
func (v Value) Floats() ([]float64, bool) {
	switch xs := v.x.(type) {
	case []float32:
		out := make([]float64, len(xs))
		for i, x := range xs {
			out[i] = float64(x)
		}
		return out, true
	case []float64:
		return xs, true
	}
	return nil, false
}

// Values returns the elements of an array of arrays.
func (v Value) Values() ([]Value, bool) {
	vs, ok := v.x.([]Value)
	return vs, ok
}

func elemAt(xs any, i int) any {
	switch xs := xs.(type) {
	case []uint8:
		return xs[i]
	case []int8:
		return xs[i]
	case []uint16:
		return xs[i]
	case []int16:
		return xs[i]
	case []uint32:
		return xs[i]
	case []int32:
		return xs[i]
	case []uint64:
		return xs[i]
	case []int64:
		return xs[i]
	}
	return nil
}

func toInt(x any) (int64, bool) {
	switch x := x.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	}
	return 0, false
}

// String formats the value for people: strings quoted, long arrays cut.
func (v Value) String() string {
	if v.typ != TypeArray {
		if s, ok := v.x.(string); ok {
			return strconv.Quote(s)
		}
		return fmt.Sprint(v.x)
	}
	n := v.Len()
	var b strings.Builder
	fmt.Fprintf(&b, "[%s×%d", v.elem, n)
	const show = 8
	for i := range min(n, show) {
		b.WriteString(" ")
		switch xs := v.x.(type) {
		case []Value:
			b.WriteString(xs[i].String())
		case []string:
			b.WriteString(strconv.Quote(xs[i]))
		case []bool:
			fmt.Fprint(&b, xs[i])
		case []float32:
			fmt.Fprint(&b, xs[i])
		case []float64:
			fmt.Fprint(&b, xs[i])
		default:
			fmt.Fprint(&b, elemAt(v.x, i))
		}
	}
	if n > show {
		b.WriteString(" …")
	}
	b.WriteString("]")
	return b.String()
}
