// Package grammar constrains generation to JSON that a JSON Schema
// accepts: the sampler asks, token by token, which tokens may come next,
// so that a forced tool call always names a declared function with
// arguments that validate, and a response_format of json_object or
// json_schema always yields a document of that shape.
//
// A schema is compiled to a small tree (Schema); a State walks the bytes
// generated so far with an explicit stack, one frame per open value, and
// tells whether a byte can extend them (Feed) and whether the document is
// complete. Constraint wraps a Grammar (literal text around the JSON
// value, alternatives) and a vocabulary for the scheduler.
//
// It is written here rather than taken from a library: the Go JSON Schema
// libraries validate whole documents, while decoding needs an incremental
// prefix check that can be cloned per candidate token; the subset below
// is what tool parameters and structured outputs use. Keywords outside it
// are refused with their name rather than ignored, so that a schema is
// never silently loosened. The tests validate every generated document
// with santhosh-tekuri/jsonschema, a full validator.
//
// Generation is stricter than validation in ways that keep every output
// valid and keep a small model from wandering: object keys are the
// declared properties only (each at most once, the required ones before
// the object may close), whitespace is at most one space or newline
// between tokens, and numbers are plain JSON numbers.
package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Types a schema allows, as a bit set.
type typeSet uint8

const (
	tObject typeSet = 1 << iota
	tArray
	tString
	tNumber
	tInteger
	tBoolean
	tNull
	tAny = tObject | tArray | tString | tNumber | tInteger | tBoolean | tNull
)

var typeNames = map[string]typeSet{"object": tObject, "array": tArray, "string": tString, "number": tNumber,
	"integer": tInteger, "boolean": tBoolean, "null": tNull}

// Schema is a compiled JSON Schema.
type Schema struct {
	types    typeSet
	props    []prop // declared properties, in declaration order
	required []string
	// requiredIdx are the indices in props of the required properties.
	requiredIdx []int
	items       *Schema // array items (nil: any)
	minItems    int
	maxItems    int // -1: none
	// enum lists the allowed values as compact JSON (const is a one-value
	// enum); nil: any value of the types.
	enum []string
	// strEnum holds enum's string values, unquoted, when every value is a
	// string: generation matches them inside a string.
	strEnum []string
	minLen  int
	maxLen  int // -1: none
	min     *float64
	max     *float64
}

type prop struct {
	name   string
	schema *Schema
}

// annotations are keywords that describe and never constrain.
var annotations = map[string]bool{"description": true, "title": true, "default": true, "examples": true, "$schema": true,
	"$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true, "format": true, "strict": true,
	"additionalProperties": true}

// Compile compiles a JSON Schema. An empty schema ({} or nil) allows any
// JSON value.
func Compile(raw json.RawMessage) (*Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return &Schema{types: tAny, maxItems: -1, maxLen: -1}, nil
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("schema is not valid JSON: %w", err)
	}
	return compile(v, "schema")
}

func compile(v any, path string) (*Schema, error) {
	s := &Schema{maxItems: -1, maxLen: -1}
	switch v := v.(type) {
	case bool:
		if !v {
			return nil, fmt.Errorf("%s: the schema false accepts nothing", path)
		}
		s.types = tAny
		return s, nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := s.keyword(k, v[k], v, path); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("%s: a schema must be an object", path)
	}
	if s.types == 0 {
		switch {
		case s.enum != nil:
			s.types = tAny
		case s.props != nil:
			s.types = tObject
		case s.items != nil:
			s.types = tArray
		default:
			s.types = tAny
		}
	}
	for _, r := range s.required {
		if i := slices.IndexFunc(s.props, func(p prop) bool { return p.name == r }); i >= 0 {
			s.requiredIdx = append(s.requiredIdx, i)
		}
	}
	if s.types&tInteger != 0 && s.types&tNumber != 0 {
		s.types &^= tInteger // number covers integer
	}
	if s.enum != nil {
		var strs []string
		for _, e := range s.enum {
			var str string
			if json.Unmarshal([]byte(e), &str) != nil {
				strs = nil
				break
			}
			strs = append(strs, str)
		}
		if len(strs) == len(s.enum) {
			for _, str := range strs {
				if needsEscape(str) {
					return nil, fmt.Errorf("%s: enum value %q has a character that needs an escape, which constrained decoding does not support", path, str)
				}
			}
			s.strEnum = strs
		}
	}
	return s, nil
}

func (s *Schema) keyword(k string, v any, all map[string]any, path string) error {
	at := path + "." + k
	switch k {
	case "type":
		switch t := v.(type) {
		case string:
			ts, ok := typeNames[t]
			if !ok {
				return fmt.Errorf("%s: unknown type %q", at, t)
			}
			s.types = ts
		case []any:
			for _, x := range t {
				name, _ := x.(string)
				ts, ok := typeNames[name]
				if !ok {
					return fmt.Errorf("%s: unknown type %v", at, x)
				}
				s.types |= ts
			}
			if s.types == 0 {
				return fmt.Errorf("%s: no type", at)
			}
		default:
			return fmt.Errorf("%s: must be a string or a list of strings", at)
		}
	case "properties":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: must be an object", at)
		}
		names := make([]string, 0, len(m))
		for name := range m {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if needsEscape(name) {
				return fmt.Errorf("%s: property name %q has a character that needs an escape, which constrained decoding does not support", at, name)
			}
			ps, err := compile(m[name], at+"."+name)
			if err != nil {
				return err
			}
			s.props = append(s.props, prop{name, ps})
		}
		if s.props == nil {
			s.props = []prop{}
		}
	case "required":
		l, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: must be a list of names", at)
		}
		for _, x := range l {
			name, ok := x.(string)
			if !ok {
				return fmt.Errorf("%s: must be a list of names", at)
			}
			s.required = append(s.required, name)
		}
		props, _ := all["properties"].(map[string]any)
		for _, name := range s.required {
			if _, ok := props[name]; !ok {
				return fmt.Errorf("%s: %q is required but not among the properties", at, name)
			}
		}
	case "items":
		is, err := compile(v, at)
		if err != nil {
			return err
		}
		s.items = is
	case "minItems", "maxItems", "minLength", "maxLength":
		n, ok := v.(json.Number)
		i, err := n.Int64()
		if !ok || err != nil || i < 0 || i > 1<<20 {
			return fmt.Errorf("%s: must be a non-negative integer", at)
		}
		switch k {
		case "minItems":
			s.minItems = int(i)
		case "maxItems":
			s.maxItems = int(i)
		case "minLength":
			s.minLen = int(i)
		case "maxLength":
			s.maxLen = int(i)
		}
	case "minimum", "maximum":
		n, ok := v.(json.Number)
		f, err := n.Float64()
		if !ok || err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("%s: must be a number", at)
		}
		if k == "minimum" {
			s.min = &f
		} else {
			s.max = &f
		}
	case "enum", "const":
		vals := []any{v}
		if k == "enum" {
			l, ok := v.([]any)
			if !ok || len(l) == 0 {
				return fmt.Errorf("%s: must be a non-empty list", at)
			}
			vals = l
		}
		for _, x := range vals {
			b, err := json.Marshal(x)
			if err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
			if !slices.Contains(s.enum, string(b)) {
				s.enum = append(s.enum, string(b))
			}
		}
	default:
		if !annotations[k] {
			return fmt.Errorf("%s: keyword %q is not supported by constrained decoding (supported: type, properties, required, items, "+
				"enum, const, minItems, maxItems, minLength, maxLength, minimum, maximum, and annotations)", at, k)
		}
		if k == "additionalProperties" {
			if b, ok := v.(bool); !ok || b {
				// Generation emits declared properties only, which any
				// additionalProperties accepts.
				return nil
			}
		}
	}
	return nil
}

// needsEscape reports whether s has a character JSON writes escaped.
func needsEscape(s string) bool {
	return strings.ContainsAny(s, "\"\\") || strings.IndexFunc(s, func(r rune) bool { return r < 0x20 }) >= 0
}

// Describe is a short human description of the schema's top level, for
// error messages.
func (s *Schema) Describe() string {
	var ts []string
	for name, t := range typeNames {
		if s.types&t != 0 {
			ts = append(ts, name)
		}
	}
	sort.Strings(ts)
	return strings.Join(ts, "|")
}
