// Package grammar constrains generation to JSON that a JSON Schema
// accepts: the sampler asks, token by token, which tokens may come next,
// so that a forced tool call always names a declared function with
// arguments that validate, a tool call the model opens on its own in a
// free reply does too (Lazy), and a response_format of json_object or
// json_schema always yields a document of that shape.
//
// A schema is compiled to a small graph (Schema); a State walks the bytes
// generated so far with an explicit stack, one frame per open value, and
// tells whether a byte can extend them (Feed) and whether the document is
// complete. Constraint wraps a Grammar (literal text around the JSON
// value, alternatives) and a vocabulary for the scheduler; Lazy starts a
// Grammar at each trigger text in an otherwise free generation.
//
// A choice (anyOf, oneOf, a nullable type spelt as a choice) makes the
// State hold several stacks at once, one per branch still possible, so a
// byte is allowed when some branch takes it; branches that end up in the
// same place merge again. Local references ($ref to #/$defs/..., #/...,
// recursive ones included) are resolved when the schema is compiled, so a
// recursive schema is a graph, not a tree.
//
// It is written here rather than taken from a library: the Go JSON Schema
// libraries validate whole documents, while decoding needs an incremental
// prefix check that can be cloned per candidate token; the subset below
// is what tool parameters and structured outputs use (what OpenAI's strict
// mode, Pydantic and Zod emit). Keywords outside it are refused with their
// name rather than ignored, so that a schema is never silently loosened;
// a branch of anyOf that uses one is dropped instead (generation then
// never takes it, which keeps every output valid). The tests validate
// every generated document with santhosh-tekuri/jsonschema, a full
// validator.
//
// Generation is stricter than validation in ways that keep every output
// valid and keep a small model from wandering: object keys are the
// declared properties (each at most once, the required ones before the
// object may close) and keys matching patternProperties (each at most
// once); only an object that declares neither takes any key.
// Whitespace is at most one space or newline between tokens; numbers are
// plain JSON numbers, and integers where a bound applies; maxLength
// counts UTF-16 code units, as JavaScript validators such as Zod do (a
// character beyond the BMP counts twice, and is never written as \u
// surrogates), so a string within it is within it by code points too. oneOf is taken
// when its branches cannot both match one value (different types, or a
// required property whose values differ: a discriminator), and refused
// otherwise.
package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"sort"
	"strconv"
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
	// anyOf, when set, makes the schema a choice: a value of any of these
	// (the fields below are then unused).
	anyOf []*Schema

	types    typeSet
	props    []prop // declared properties, in declaration order
	required []string
	// requiredIdx are the indices in props of the required properties.
	requiredIdx []int
	// patterns are patternProperties: keys that match one take its value.
	patterns []patternProp
	// addl is additionalProperties as a schema, the values of an object
	// that declares no properties and no patterns (nil: any value).
	addl     *Schema
	items    *Schema // array items (nil: any)
	minItems int
	maxItems int // -1: none
	// enum lists the allowed values as compact JSON (const is a one-value
	// enum); nil: any value of the types.
	enum []string
	// strEnum holds enum's string values, unquoted, when every value is a
	// string that needs no escape: generation matches them inside a string.
	strEnum []string
	minLen  int
	maxLen  int      // -1: none
	pattern *pattern // a string's pattern (nil: none)
	min     *float64
	max     *float64

	// shortest is the length of the shortest document (infLen: none).
	shortest int
}

type prop struct {
	name   string
	schema *Schema
}

type patternProp struct {
	re     *pattern
	schema *Schema
}

// infLen stands for "no finite document"; sums of it stay below overflow.
const infLen = math.MaxInt32 / 4

// annotations are keywords that describe and never constrain.
var annotations = map[string]bool{"description": true, "title": true, "default": true, "examples": true, "$schema": true,
	"$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true, "format": true, "strict": true,
	"$defs": true, "definitions": true, "discriminator": true, "x-order": true,
	// OpenAPI's nullable is not JSON Schema: a validator ignores it, so
	// generation does too (it never writes the null that only OpenAPI
	// allows).
	"nullable": true}

// Compile compiles a JSON Schema. An empty schema ({} or nil) allows any
// JSON value.
func Compile(raw json.RawMessage) (*Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return anyValue(), nil
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("schema is not valid JSON: %w", err)
	}
	c := &compiler{root: v, refs: map[string]*Schema{}, filling: map[*Schema]bool{}}
	s, err := c.compile(v, "schema")
	if err != nil {
		return nil, err
	}
	for _, o := range c.oneOfs {
		if err := o.check(); err != nil {
			return nil, err
		}
	}
	measure(c.all)
	if s.shortest >= infLen {
		return nil, fmt.Errorf("schema: no finite document satisfies it (a required property that recurses without end?)")
	}
	return s, nil
}

// anyValue is the schema of any JSON value.
func anyValue() *Schema {
	s := &Schema{types: tAny, maxItems: -1, maxLen: -1}
	measure([]*Schema{s})
	return s
}

// compiler compiles one schema document.
type compiler struct {
	root    any
	refs    map[string]*Schema // compiled $ref targets, by reference
	filling map[*Schema]bool   // references being compiled (recursion)
	all     []*Schema
	oneOfs  []oneOfCheck
	depth   int
}

func (c *compiler) newSchema() *Schema {
	s := &Schema{maxItems: -1, maxLen: -1}
	c.all = append(c.all, s)
	return s
}

// onlyAnnotations reports the first key of m, besides skip, that is not
// an annotation ("" when none).
func onlyAnnotations(m map[string]any, skip ...string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !annotations[k] && !slices.Contains(skip, k) {
			return k
		}
	}
	return ""
}

func (c *compiler) compile(v any, path string) (*Schema, error) {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > 64 {
		return nil, fmt.Errorf("%s: the schema nests too deeply", path)
	}
	switch v := v.(type) {
	case bool:
		if !v {
			return nil, fmt.Errorf("%s: the schema false accepts nothing", path)
		}
		s := c.newSchema()
		s.types = tAny
		return s, nil
	case map[string]any:
		if ref, ok := v["$ref"]; ok {
			if k := onlyAnnotations(v, "$ref"); k != "" {
				return nil, fmt.Errorf("%s: keyword %q beside $ref is not supported by constrained decoding", path, k)
			}
			str, ok := ref.(string)
			if !ok {
				return nil, fmt.Errorf("%s.$ref: must be a string", path)
			}
			return c.ref(str, path)
		}
		_, anyOf := v["anyOf"]
		_, one := v["oneOf"]
		if anyOf || one {
			if anyOf && one {
				return nil, fmt.Errorf("%s: anyOf beside oneOf is not supported by constrained decoding", path)
			}
			kw := "anyOf"
			if one {
				kw = "oneOf"
			}
			if k := onlyAnnotations(v, kw); k != "" {
				return nil, fmt.Errorf("%s: keyword %q beside %s is not supported by constrained decoding", path, k, kw)
			}
			return c.union(v[kw], kw, path)
		}
		if all, ok := v["allOf"]; ok {
			l, ok := all.([]any)
			if !ok || len(l) != 1 {
				return nil, fmt.Errorf("%s.allOf: keyword %q with more than one schema is not supported by constrained decoding", path, "allOf")
			}
			if k := onlyAnnotations(v, "allOf"); k != "" {
				return nil, fmt.Errorf("%s: keyword %q beside allOf is not supported by constrained decoding", path, k)
			}
			return c.compile(l[0], path+".allOf[0]")
		}
		return c.object(v, path)
	}
	return nil, fmt.Errorf("%s: a schema must be an object", path)
}

// ref compiles a local reference (#, #/$defs/Name, any JSON pointer into
// the document); a reference met again while it is compiled is the same
// schema, so recursive schemas are graphs.
func (c *compiler) ref(ref, path string) (*Schema, error) {
	at := path + ".$ref"
	if s, ok := c.refs[ref]; ok {
		return s, nil
	}
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, fmt.Errorf("%s: %q: only references inside the schema (#/...) are supported by constrained decoding", at, ref)
	}
	target, err := pointer(c.root, frag)
	if err != nil {
		return nil, fmt.Errorf("%s: %q: %w", at, ref, err)
	}
	s := c.newSchema()
	c.refs[ref] = s
	c.filling[s] = true
	got, err := c.compile(target, path+"("+ref+")")
	delete(c.filling, s)
	if err != nil {
		return nil, err
	}
	if got == s || c.filling[got] {
		return nil, fmt.Errorf("%s: %q refers to itself without a value in between", at, ref)
	}
	*s = *got
	return s, nil
}

// pointer resolves a JSON pointer (RFC 6901, as a URI fragment) in doc.
func pointer(doc any, frag string) (any, error) {
	if frag == "" {
		return doc, nil
	}
	frag, err := url.PathUnescape(frag)
	if err != nil || !strings.HasPrefix(frag, "/") {
		return nil, fmt.Errorf("not a JSON pointer")
	}
	cur := doc
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := cur.(type) {
		case map[string]any:
			next, ok := x[tok]
			if !ok {
				return nil, fmt.Errorf("nothing at %q", tok)
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, fmt.Errorf("nothing at %q", tok)
			}
			cur = x[i]
		default:
			return nil, fmt.Errorf("nothing at %q", tok)
		}
	}
	return cur, nil
}

// union compiles anyOf or oneOf. A branch of anyOf that cannot be
// compiled is left out (generation never takes it); with no branch left,
// the first branch's error is returned.
func (c *compiler) union(v any, kw, path string) (*Schema, error) {
	at := path + "." + kw
	l, ok := v.([]any)
	if !ok || len(l) == 0 {
		return nil, fmt.Errorf("%s: must be a non-empty list of schemas", at)
	}
	s := c.newSchema()
	var first error
	for i, b := range l {
		bs, err := c.compile(b, fmt.Sprintf("%s[%d]", at, i))
		if err != nil {
			if kw == "oneOf" {
				return nil, err
			}
			if first == nil {
				first = err
			}
			continue
		}
		if len(bs.anyOf) > 0 && !c.filling[bs] && kw == "anyOf" {
			s.anyOf = append(s.anyOf, bs.anyOf...) // anyOf of anyOf
			continue
		}
		s.anyOf = append(s.anyOf, bs)
	}
	if len(s.anyOf) == 0 {
		return nil, first
	}
	if kw == "oneOf" {
		c.oneOfs = append(c.oneOfs, oneOfCheck{s.anyOf, at})
	}
	return s, nil
}

// oneOfCheck is a oneOf whose branches must be shown exclusive once every
// reference is compiled.
type oneOfCheck struct {
	branches []*Schema
	at       string
}

func (o oneOfCheck) check() error {
	for i, a := range o.branches {
		for j := i + 1; j < len(o.branches); j++ {
			if !disjoint(a, o.branches[j], 0) {
				return fmt.Errorf("%s: branches %d and %d may both match one value, which oneOf forbids; constrained decoding takes oneOf "+
					"only when its branches differ in type or in a required property's value (a discriminator): use anyOf", o.at, i, j)
			}
		}
	}
	return nil
}

// disjoint reports whether no value is valid for both a and b, as far as
// types, enums and required discriminating properties show.
func disjoint(a, b *Schema, depth int) bool {
	if depth > 8 {
		return false
	}
	for _, x := range a.anyOf {
		if !disjoint(x, b, depth+1) {
			return false
		}
	}
	if len(a.anyOf) > 0 {
		return true
	}
	for _, y := range b.anyOf {
		if !disjoint(a, y, depth+1) {
			return false
		}
	}
	if len(b.anyOf) > 0 {
		return true
	}
	ta, tb := valueTypes(a), valueTypes(b)
	if ta&tb == 0 {
		return true
	}
	if a.enum != nil && b.enum != nil {
		for _, e := range a.enum {
			if slices.Contains(b.enum, e) {
				return false
			}
		}
		return true
	}
	if ta&tb == tObject {
		for _, i := range a.requiredIdx {
			name := a.props[i].name
			j := slices.IndexFunc(b.props, func(p prop) bool { return p.name == name })
			if j >= 0 && slices.Contains(b.requiredIdx, j) && disjoint(a.props[i].schema, b.props[j].schema, depth+1) {
				return true
			}
		}
	}
	return false
}

// valueTypes is the set of types s's values can have, integer and number
// counting as one.
func valueTypes(s *Schema) typeSet {
	t := s.types
	if s.enum != nil {
		t = 0
		for _, e := range s.enum {
			t |= jsonType(e)
		}
	}
	if t&(tNumber|tInteger) != 0 {
		t |= tNumber | tInteger
	}
	return t
}

// jsonType is the type of a compact JSON value (a number is tNumber, and
// also tInteger when it has no fraction).
func jsonType(v string) typeSet {
	switch v[0] {
	case '{':
		return tObject
	case '[':
		return tArray
	case '"':
		return tString
	case 't', 'f':
		return tBoolean
	case 'n':
		return tNull
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && f == math.Trunc(f) {
		return tNumber | tInteger
	}
	return tNumber
}

// object compiles a schema with no choice or reference at its top.
func (c *compiler) object(v map[string]any, path string) (*Schema, error) {
	s := c.newSchema()
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	typed := false
	closed := false
	for _, k := range keys {
		typed = typed || k == "type"
		if k == "additionalProperties" && v[k] == false {
			closed = true
		}
		if err := c.keyword(s, k, v[k], v, path); err != nil {
			return nil, err
		}
	}
	if s.types == 0 {
		switch {
		case s.enum != nil:
			s.types = tAny
		case s.props != nil || s.patterns != nil || s.addl != nil || closed:
			s.types = tObject
		case s.items != nil:
			s.types = tArray
		default:
			s.types = tAny
		}
	}
	if closed && s.props == nil && s.patterns == nil {
		s.props = []prop{} // additionalProperties false and nothing declared: {}
	}
	for _, r := range s.required {
		if i := slices.IndexFunc(s.props, func(p prop) bool { return p.name == r }); i >= 0 {
			s.requiredIdx = append(s.requiredIdx, i)
		}
	}
	for _, pp := range s.patterns {
		for _, p := range s.props {
			if pp.re.matches(p.name) {
				return nil, fmt.Errorf("%s: property %q also matches patternProperties %q, which constrained decoding does not combine", path, p.name, pp.re.src)
			}
		}
	}
	if s.types&tInteger != 0 && s.types&tNumber != 0 {
		s.types &^= tInteger // number covers integer
	}
	if s.enum != nil && typed {
		// Only the values of the declared types are valid.
		keep := s.enum[:0]
		for _, e := range s.enum {
			t := jsonType(e)
			if t&s.types != 0 || (t&tInteger != 0 && s.types&tNumber != 0) {
				keep = append(keep, e)
			}
		}
		if len(keep) == 0 {
			return nil, fmt.Errorf("%s: no value of enum is of the type %s", path, s.Describe())
		}
		s.enum = keep
	}
	if s.enum != nil {
		var strs []string
		for _, e := range s.enum {
			var str string
			if json.Unmarshal([]byte(e), &str) != nil || needsEscape(str) {
				strs = nil // generated as literal JSON texts instead
				break
			}
			strs = append(strs, str)
		}
		if len(strs) == len(s.enum) {
			s.strEnum = strs
		}
	}
	return s, nil
}

func (c *compiler) keyword(s *Schema, k string, v any, all map[string]any, path string) error {
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
		// Declaration order where the document keeps it is lost in a
		// map; sorted order keeps generation deterministic.
		sort.Strings(names)
		for _, name := range names {
			if needsEscape(name) {
				return fmt.Errorf("%s: property name %q has a character that needs an escape, which constrained decoding does not support", at, name)
			}
			ps, err := c.compile(m[name], at+"."+name)
			if err != nil {
				return err
			}
			s.props = append(s.props, prop{name, ps})
		}
		if s.props == nil {
			s.props = []prop{}
		}
	case "patternProperties":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: must be an object", at)
		}
		srcs := make([]string, 0, len(m))
		for src := range m {
			srcs = append(srcs, src)
		}
		sort.Strings(srcs)
		for _, src := range srcs {
			re, err := compilePattern(src)
			if err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
			ps, err := c.compile(m[src], at+"."+src)
			if err != nil {
				return err
			}
			s.patterns = append(s.patterns, patternProp{re, ps})
		}
	case "additionalProperties":
		switch x := v.(type) {
		case bool:
			// false: declared and pattern keys only, which generation
			// keeps to anyway; true: any.
		case map[string]any:
			if _, hasProps := all["properties"]; hasProps {
				return nil // generation writes declared keys only
			}
			if _, hasPat := all["patternProperties"]; hasPat {
				return nil
			}
			as, err := c.compile(x, at)
			if err != nil {
				return err
			}
			s.addl = as
		default:
			return fmt.Errorf("%s: must be a boolean or a schema", at)
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
		is, err := c.compile(v, at)
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
	case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
		n, ok := v.(json.Number)
		f, err := n.Float64()
		if !ok || err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("%s: must be a number", at)
		}
		// A bounded number is generated as an integer, so an exclusive
		// bound is the next integer inside it.
		switch k {
		case "exclusiveMinimum":
			f = math.Floor(f) + 1
		case "exclusiveMaximum":
			f = math.Ceil(f) - 1
		}
		if strings.HasSuffix(k, "inimum") {
			if s.min == nil || f > *s.min {
				s.min = &f
			}
		} else if s.max == nil || f < *s.max {
			s.max = &f
		}
	case "pattern":
		src, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: must be a string", at)
		}
		re, err := compilePattern(src)
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		s.pattern = re
	case "enum", "const":
		vals := []any{v}
		if k == "enum" {
			l, ok := v.([]any)
			if !ok || len(l) == 0 {
				return fmt.Errorf("%s: must be a non-empty list", at)
			}
			vals = l
		}
		var set []string
		for _, x := range vals {
			b, err := json.Marshal(x)
			if err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
			if !slices.Contains(set, string(b)) {
				set = append(set, string(b))
			}
		}
		if s.enum != nil { // enum and const: both hold
			set = slices.DeleteFunc(set, func(e string) bool { return !slices.Contains(s.enum, e) })
			if len(set) == 0 {
				return fmt.Errorf("%s: no value satisfies both enum and const", at)
			}
		}
		s.enum = set
	default:
		if !annotations[k] {
			return fmt.Errorf("%s: keyword %q is not supported by constrained decoding (supported: type, properties, required, "+
				"additionalProperties, patternProperties, items, enum, const, anyOf, oneOf, allOf of one schema, $ref, $defs, "+
				"minItems, maxItems, minLength, maxLength, pattern, minimum, maximum, exclusiveMinimum, exclusiveMaximum, and annotations)", at, k)
		}
	}
	return nil
}

// needsEscape reports whether s has a character JSON writes escaped.
func needsEscape(s string) bool {
	return strings.ContainsAny(s, "\"\\") || strings.IndexFunc(s, func(r rune) bool { return r < 0x20 }) >= 0
}

// measure sets shortest on every schema of a compiled graph: the least
// fixed point of the lengths, since references may make it cyclic.
func measure(all []*Schema) {
	for _, s := range all {
		s.shortest = infLen
	}
	for changed := true; changed; {
		changed = false
		for _, s := range all {
			if n := s.measureOnce(); n < s.shortest {
				s.shortest, changed = n, true
			}
		}
	}
}

// add is a + b, saturating at infLen.
func add(a, b int) int { return min(a+b, infLen) }

// measureOnce is s's shortest document given its children's current
// estimates.
func (s *Schema) measureOnce() int {
	if len(s.anyOf) > 0 {
		best := infLen
		for _, b := range s.anyOf {
			best = min(best, b.shortest)
		}
		return best
	}
	if s.enum != nil {
		best := infLen
		for _, e := range s.enum {
			best = min(best, len(e))
		}
		return best
	}
	best := infLen
	if s.types&(tNumber|tInteger) != 0 {
		n := 1
		if s.min != nil && *s.min > 0 {
			n = len(strconv.FormatFloat(math.Ceil(*s.min), 'f', -1, 64))
		} else if s.max != nil && *s.max < 0 {
			n = len(strconv.FormatFloat(math.Floor(*s.max), 'f', -1, 64))
		}
		best = min(best, n)
	}
	if s.types&(tNull|tBoolean) != 0 {
		best = min(best, 4)
	}
	if s.types&tString != 0 {
		n := s.minLen
		if s.pattern != nil {
			n = max(n, s.pattern.shortest(""))
		}
		best = min(best, add(2, n))
	}
	if s.types&tArray != 0 {
		n := 2
		if s.minItems > 0 {
			item := 1 // a digit
			if s.items != nil {
				item = s.items.shortest
			}
			n = add(n, add(s.minItems*min(item, infLen/(s.minItems+1)), s.minItems-1))
		}
		best = min(best, n)
	}
	if s.types&tObject != 0 {
		n, k := 2, 0
		for _, j := range s.requiredIdx {
			n = add(n, add(len(s.props[j].name)+3, s.props[j].schema.shortest))
			k++
		}
		best = min(best, add(n, max(k-1, 0)))
	}
	return best
}

// Describe is a short human description of the schema's top level, for
// error messages.
func (s *Schema) Describe() string {
	if len(s.anyOf) > 0 {
		var ds []string
		for _, b := range s.anyOf {
			if d := b.Describe(); !slices.Contains(ds, d) {
				ds = append(ds, d)
			}
		}
		return strings.Join(ds, " or ")
	}
	var ts []string
	for name, t := range typeNames {
		if s.types&t != 0 {
			ts = append(ts, name)
		}
	}
	sort.Strings(ts)
	return strings.Join(ts, "|")
}
