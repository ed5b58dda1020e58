package grammar

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var testSchemas = map[string]string{
	"weather": `{"type":"object","properties":{"city":{"type":"string","description":"City"},` +
		`"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14}},` +
		`"required":["city"],"additionalProperties":false}`,
	"nested": `{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":` +
		`{"name":{"type":"string","maxLength":8},"price":{"type":"number"},"tags":{"type":"array","items":{"type":"string"},"maxItems":2}},` +
		`"required":["name","price"]},"minItems":1,"maxItems":3},"note":{"type":["string","null"]},"ok":{"type":"boolean"}},"required":["items","ok"]}`,
	"free":    `{"type":"object"}`,
	"any":     `{}`,
	"enums":   `{"type":"object","properties":{"n":{"enum":[1,10,"x",null,true]},"c":{"const":"fixed"}},"required":["n","c"]}`,
	"numbers": `{"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":120},"b":{"type":"number","minimum":0.5}},"required":["a","b"]}`,
	"strlen":  `{"type":"string","minLength":2,"maxLength":4}`,
	"short":   `{"type":"string","maxLength":2}`,
	"array":   `{"type":"array","items":{"type":"integer"},"minItems":2}`,
	// Real-world shapes: Pydantic's Optional (anyOf with null) and $defs,
	// a discriminated union (oneOf on a const), a recursive $ref,
	// patternProperties, pattern, nullable, enums of any type.
	"pydantic": `{"$defs":{"Unit":{"enum":["c","f"],"type":"string"},"Place":{"properties":{"city":{"type":"string","maxLength":12},` +
		`"unit":{"anyOf":[{"$ref":"#/$defs/Unit"},{"type":"null"}],"default":null}},"required":["city"],"type":"object"}},` +
		`"properties":{"place":{"$ref":"#/$defs/Place"},"days":{"anyOf":[{"type":"integer","minimum":1,"maximum":9},{"type":"null"}]}},` +
		`"required":["place","days"],"type":"object"}`,
	"oneof": `{"type":"object","properties":{"pet":{"oneOf":[` +
		`{"type":"object","properties":{"kind":{"const":"cat"},"lives":{"type":"integer","minimum":0,"maximum":9}},"required":["kind","lives"],"additionalProperties":false},` +
		`{"type":"object","properties":{"kind":{"const":"dog"},"bark":{"type":"boolean"}},"required":["kind"],"additionalProperties":false},` +
		`{"type":"string","maxLength":6}]}},"required":["pet"]}`,
	"tree": `{"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},` +
		`"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"],"additionalProperties":false}}}`,
	"env": `{"type":"object","properties":{"cmd":{"type":"string","pattern":"^[a-z]+( [a-z0-9-]+)*$"},` +
		`"env":{"type":"object","patternProperties":{"^[A-Z_][A-Z0-9_]*$":{"type":"string","maxLength":8}},"additionalProperties":false}},` +
		`"required":["cmd"]}`,
	"mixed": `{"type":"object","properties":{"m":{"enum":["a\"b",2.5,[1,2],{"k":null},false]},"n":{"type":"string","nullable":true},` +
		`"x":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":3}},"required":["m","n","x"]}`,
	"dict":    `{"type":"object","additionalProperties":{"type":"integer"}}`,
	"anyroot": `{"anyOf":[{"type":"integer"},{"type":"number"},{"type":"array","items":{"type":"string","maxLength":3},"maxItems":2}]}`,
}

// schemaNames lists testSchemas in sorted order, so that a seeded random
// test draws the same cases for each schema on every run.
func schemaNames() []string {
	names := make([]string, 0, len(testSchemas))
	for name := range testSchemas {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func compileBoth(t testing.TB, src string) (*Schema, *jsonschema.Schema) {
	t.Helper()
	s, err := Compile(json.RawMessage(src))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	v, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

func accepts(s *Schema, doc string) bool {
	st := NewState(s)
	return st.FeedString(doc) && st.Done()
}

func TestAcceptsAndRefuses(t *testing.T) {
	for _, c := range []struct {
		schema, doc string
		ok          bool
	}{
		{"weather", `{"city": "Paris"}`, true},
		{"weather", `{"city": "Paris", "unit": "celsius", "days": 3}`, true},
		{"weather", `{"unit":"celsius","city":"Oslo"}`, true},
		{"weather", `{"unit": "celsius"}`, false},                 // city required
		{"weather", `{"city": "Paris", "city": "Rome"}`, false},   // repeated key
		{"weather", `{"city": "Paris", "wind": 3}`, false},        // undeclared key
		{"weather", `{"city": "Paris", "unit": "kelvin"}`, false}, // not in the enum
		{"weather", `{"city": "Paris", "days": 15}`, false},       // above maximum
		{"weather", `{"city": "Paris", "days": 0}`, false},        // below minimum
		{"weather", `{"city": "Paris", "days": 2.5}`, false},      // not an integer
		{"weather", `{"city": 3}`, false},                         // not a string
		{"weather", `{"city": "Paris"}  `, false},                 // trailing spaces
		{"weather", `{ "city" : "Paris" }`, true},                 // single spaces
		{"weather", `{"city":  "Paris"}`, false},                  // two spaces
		{"nested", `{"items": [{"name": "tea", "price": 2.5}], "ok": true}`, true},
		{"nested", `{"items": [], "ok": true}`, false},                                  // minItems
		{"nested", `{"items": [{"name": "abcdefghi", "price": 1}], "ok": true}`, false}, // maxLength
		{"nested", `{"items": [{"name": "a", "price": 1, "tags": ["x", "y", "z"]}], "ok": true}`, false},
		{"nested", `{"items": [{"name": "a", "price": -1e3}], "note": null, "ok": false}`, true},
		{"free", `{"anything": [1, {"b": null}], "x": "y"}`, true},
		{"free", `[]`, false},
		{"any", `"text"`, true},
		{"any", `12`, true},
		{"enums", `{"n": 10, "c": "fixed"}`, true},
		{"enums", `{"n": 1, "c": "fixed"}`, true},
		{"enums", `{"n": null, "c": "fixed"}`, true},
		{"enums", `{"n": 2, "c": "fixed"}`, false},
		{"enums", `{"n": "x", "c": "other"}`, false},
		{"numbers", `{"a": -5, "b": 1}`, true},
		{"numbers", `{"a": -5, "b": 0.5}`, false}, // valid, but bounded numbers are generated as integers
		{"numbers", `{"a": 120, "b": 3}`, true},
		{"numbers", `{"a": 121, "b": 3}`, false},
		{"numbers", `{"a": -6, "b": 3}`, false},
		{"numbers", `{"a": 01, "b": 3}`, false},
		{"strlen", `"ab"`, true},
		{"strlen", `"a"`, false},
		{"strlen", `"abcde"`, false},
		{"strlen", `"é\n"`, true},
		// maxLength counts UTF-16 units, as JavaScript clients do.
		{"short", `"😀"`, true},
		{"short", `"a😀"`, false},
		{"short", `"\u00e9a"`, true},
		{"short", `"\ud83d\ude00"`, false}, // surrogate escapes: written as UTF-8 instead
		{"array", `[1, 2, 3]`, true},
		{"array", `[1]`, false},
		{"array", `[1, 2,]`, false},
		{"pydantic", `{"place": {"city": "Oslo"}, "days": null}`, true},
		{"pydantic", `{"place": {"city": "Oslo", "unit": "c"}, "days": 3}`, true},
		{"pydantic", `{"place": {"city": "Oslo", "unit": null}, "days": 3}`, true},
		{"pydantic", `{"place": {"city": "Oslo", "unit": "k"}, "days": 3}`, false},
		{"pydantic", `{"place": {"city": "Oslo"}, "days": 10}`, false},
		{"pydantic", `{"place": {"city": "Oslo"}}`, false},
		{"oneof", `{"pet": {"kind": "cat", "lives": 9}}`, true},
		{"oneof", `{"pet": {"kind": "dog"}}`, true},
		{"oneof", `{"pet": "fish"}`, true},
		{"oneof", `{"pet": {"kind": "dog", "lives": 9}}`, false},
		{"oneof", `{"pet": {"kind": "cat"}}`, false},
		{"oneof", `{"pet": "goldfish"}`, false},
		{"tree", `{"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]}`, true},
		{"tree", `{"v": 1, "kids": [{"v": 2}, {"v": 3}, {"v": 4}]}`, false},
		{"tree", `{"kids": []}`, false},
		{"env", `{"cmd": "ls -la", "env": {"HOME": "/root", "A_1": "x"}}`, true},
		{"env", `{"cmd": "ls", "env": {}}`, true},
		{"env", `{"cmd": "ls -la", "env": {"home": "/root"}}`, false},
		{"env", `{"cmd": "ls", "env": {"A": "x", "A": "y"}}`, false},
		{"env", `{"cmd": "ls", "env": {"A": "123456789"}}`, false},
		{"env", `{"cmd": "Ls"}`, false},
		{"env", `{"cmd": "ls "}`, false},
		{"mixed", `{"m": "a\"b", "n": "", "x": 1}`, true},
		{"mixed", `{"m": "a\"b", "n": null, "x": 1}`, false}, // OpenAPI's nullable is not JSON Schema
		{"mixed", `{"m": [1,2], "n": "s", "x": 2}`, true},
		{"mixed", `{"m": {"k":null}, "n": "s", "x": 2}`, true},
		{"mixed", `{"m": false, "n": "s", "x": 3}`, false},
		{"mixed", `{"m": false, "n": "s", "x": 0}`, false},
		{"mixed", `{"m": true, "n": "s", "x": 1}`, false},
		{"dict", `{"a": 1, "b": -2}`, true},
		{"dict", `{"a": "1"}`, false},
		{"anyroot", `12`, true},
		{"anyroot", `1.5`, true},
		{"anyroot", `["ab"]`, true},
		{"anyroot", `["abcd"]`, false},
	} {
		s, v := compileBoth(t, testSchemas[c.schema])
		if got := accepts(s, c.doc); got != c.ok {
			t.Errorf("%s: %s accepted %v, want %v", c.schema, c.doc, got, c.ok)
		}
		if c.ok { // the reference validator agrees
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(c.doc))
			if err != nil || v.Validate(inst) != nil {
				t.Errorf("%s: %s, accepted here, is not valid: %v %v", c.schema, c.doc, err, v.Validate(inst))
			}
		}
	}
}

func TestCompileRefuses(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`{"$ref":"#/x"}`, "$ref"},
		{`{"$ref":"http://example.com/s.json"}`, "only references inside"},
		{`{"$ref":"#"}`, "refers to itself"},
		{`{"type":"strange"}`, "unknown type"},
		{`{"required":["x"],"properties":{}}`, "required"},
		{`false`, "false"},
		{`[1]`, "must be an object"},
		{`{"type":"string"`, "not valid JSON"},
		{`{"type":"object","properties":{"a":{"anyOf":[]}}}`, "anyOf"},
		{`{"oneOf":[{"type":"integer"},{"type":"number"}]}`, "oneOf"},
		{`{"oneOf":[{"type":"object","properties":{"a":{"type":"string"}}},{"type":"object"}]}`, "oneOf"},
		{`{"allOf":[{"type":"string"},{"maxLength":3}]}`, "allOf"},
		{`{"type":"string","anyOf":[{"maxLength":3}]}`, "beside anyOf"},
		{`{"$ref":"#/$defs/a","maxLength":3,"$defs":{"a":{"type":"string"}}}`, "beside $ref"},
		{`{"type":"string","pattern":"\\bword"}`, "word boundaries"},
		{`{"type":"string","pattern":"(?<=a)b"}`, "pattern"},
		{`{"type":"object","properties":{"AB":{"type":"string"}},"patternProperties":{"^[A-Z]+$":{"type":"integer"}}}`, "also matches"},
		{`{"type":"string","enum":[1,2]}`, "no value of enum"},
		{`{"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]}`, "no finite document"},
		{`{"type":"array","uniqueItems":true}`, "uniqueItems"},
	} {
		_, err := Compile(json.RawMessage(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.src, err, c.want)
		}
	}
	// A branch of anyOf that cannot be followed is left out; the rest
	// stay.
	s, err := Compile(json.RawMessage(`{"anyOf":[{"type":"array","uniqueItems":true},{"type":"null"}]}`))
	if err != nil || !accepts(s, "null") || accepts(s, "[]") {
		t.Errorf("anyOf with an unsupported branch: %v", err)
	}
}

// walk generates a random document of s byte by byte among the bytes the
// state allows; it fails the test on a dead end (a live state no byte can
// extend that is not complete).
func walk(t testing.TB, s *Schema, r *rand.Rand, maxLen int) string {
	st := NewState(s)
	var out []byte
	var alphabet []byte // printable ASCII, newline, and the bytes of é and 😀
	for c := byte(' '); c < 0x7f; c++ {
		alphabet = append(alphabet, c)
	}
	alphabet = append(alphabet, '\n')
	alphabet = append(alphabet, "é😀"...)
	for len(out) < maxLen {
		if st.Done() && (r.IntN(3) == 0 || len(out) > maxLen/2) {
			return string(out)
		}
		var ok []byte
		for _, c := range alphabet {
			if st.Clone().Feed(c) {
				ok = append(ok, c)
			}
		}
		if len(out) > maxLen/2 { // steer toward closing
			var closing []byte
			for _, c := range ok {
				if strings.IndexByte("}]\"0123456789eflnrstu", c) >= 0 {
					closing = append(closing, c)
				}
			}
			if len(closing) > 0 {
				ok = closing
			}
		}
		if len(ok) == 0 {
			if st.Done() {
				return string(out)
			}
			t.Fatalf("dead end after %q", out)
		}
		c := ok[r.IntN(len(ok))]
		if !st.Feed(c) {
			t.Fatalf("byte %q allowed on a clone refused after %q", c, out)
		}
		out = append(out, c)
	}
	return ""
}

// Every document the grammar lets a random walk write parses and is valid
// for the reference validator.
func TestRandomDocumentsValidate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, name := range schemaNames() {
		s, v := compileBoth(t, testSchemas[name])
		complete := 0
		for range 80 {
			doc := walk(t, s, r, 160)
			if doc == "" {
				continue
			}
			complete++
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(doc)))
			if err != nil {
				t.Fatalf("%s: %q does not parse: %v", name, doc, err)
			}
			if err := v.Validate(inst); err != nil {
				t.Fatalf("%s: %q is not valid: %v", name, doc, err)
			}
		}
		if complete < 25 {
			t.Errorf("%s: only %d of 80 walks finished", name, complete)
		}
	}
}

// FuzzGrammar: any byte string the state accepts as complete is valid.
func FuzzGrammar(f *testing.F) {
	f.Add(0, []byte(`{"city": "Paris"}`))
	f.Add(1, []byte(`{"items": [{"name": "tea", "price": 2.5}], "ok": true}`))
	f.Add(4, []byte(`{"n": 10, "c": "fixed"}`))
	f.Add(8, []byte(`{"place": {"city": "Oslo", "unit": null}, "days": 3}`))
	f.Add(9, []byte(`{"pet": {"kind": "cat", "lives": 9}}`))
	f.Add(11, []byte(`{"cmd": "ls -la", "env": {"HOME": "/root"}}`))
	names := []string{"weather", "nested", "free", "any", "enums", "numbers", "strlen", "array", "pydantic", "oneof", "tree", "env",
		"mixed", "dict", "anyroot"}
	f.Fuzz(func(t *testing.T, which int, doc []byte) {
		name := names[(which%len(names)+len(names))%len(names)]
		s, v := compileBoth(t, testSchemas[name])
		st := NewState(s)
		if !st.FeedString(string(doc)) || !st.Done() {
			return
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
		if err != nil {
			t.Fatalf("%s: %q accepted but does not parse: %v", name, doc, err)
		}
		if err := v.Validate(inst); err != nil {
			t.Fatalf("%s: %q accepted but invalid: %v", name, doc, err)
		}
	})
}

// A Constraint over a vocabulary of multi-byte tokens: a random walk over
// the allowed tokens always ends in a complete, valid call of one of the
// alternatives, then only the stop token is allowed.
func TestConstraintTokens(t *testing.T) {
	s, v := compileBoth(t, testSchemas["weather"])
	g := &Grammar{Alts: [][]Part{
		{{Text: `get_weather", "arguments": `}, {Schema: s}, {Text: "}\n</tool_call>"}},
		{{Text: `get_time", "arguments": `}, {Schema: s}, {Text: "}\n</tool_call>"}},
	}}
	words := []string{`get`, `_weather`, `_time`, `"`, `", "`, `arguments`, `": `, `{`, `}`, `{"`, `city`, `unit`, `days`, `":`, ` "`, `Paris`,
		`celsius`, `fahrenheit`, `cel`, `sius`, `3`, `14`, `1`, `0`, `, `, `,`, `}\n`, `</tool_call>`, "\n", ` `, `é`, `x`, `"}`}
	var vocab Vocab
	for _, w := range words {
		vocab = append(vocab, []byte(w))
	}
	for c := byte(' '); c < 0x7f; c++ { // every single character, as byte-level vocabularies have
		vocab = append(vocab, []byte{c})
	}
	stop := int32(len(vocab))
	vocab = append(vocab, nil) // the stop token has no bytes
	r := rand.New(rand.NewPCG(4, 4))
	for range 200 {
		c := NewConstraint(g, vocab, []int32{stop})
		var out []byte
		for step := 0; ; step++ {
			var ok []int32
			for tok := range int32(len(vocab)) {
				if c.Allow(tok) {
					ok = append(ok, tok)
				}
			}
			if len(ok) == 0 {
				t.Fatalf("no token allowed after %q", out)
			}
			tok := ok[r.IntN(len(ok))]
			if step > 60 && c.Allow(stop) {
				tok = stop
			}
			if tok == stop {
				if len(ok) != 1 {
					t.Fatalf("complete after %q, but %d other tokens allowed", out, len(ok)-1)
				}
				break
			}
			c.Accept(tok)
			out = append(out, vocab[tok]...)
			if step > 400 {
				t.Fatalf("no end after %q", out)
			}
		}
		doc := string(out)
		name, rest, _ := strings.Cut(doc, `", "arguments": `)
		args, tail, ok := strings.Cut(rest, "}\n</tool_call>")
		if !ok || tail != "" || (name != "get_weather" && name != "get_time") {
			t.Fatalf("generation %q", doc)
		}
		if err := validate(v, args); err != nil {
			t.Fatalf("arguments %q: %v", args, err)
		}
	}
}

func validate(v *jsonschema.Schema, doc string) error {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		return err
	}
	return v.Validate(inst)
}

// BenchmarkConstraintAllow: the cost of checking every token of a
// 6144-token vocabulary (the bundled model's size) at one position of a
// tool call, the worst case of constrained sampling (after 16 refusals).
func BenchmarkConstraintAllow(b *testing.B) {
	s, _ := Compile(json.RawMessage(testSchemas["nested"]))
	g := &Grammar{Alts: [][]Part{{{Schema: s}}}}
	r := rand.New(rand.NewPCG(1, 1))
	vocab := make(Vocab, 6144)
	for i := range vocab {
		n := 1 + r.IntN(6)
		w := make([]byte, n)
		for j := range w {
			w[j] = byte(' ' + r.IntN(95))
		}
		vocab[i] = w
	}
	c := NewConstraint(g, vocab, nil)
	for _, tok := range []string{`{"items": [{"name": "te`} {
		c.m.FeedBytes([]byte(tok))
	}
	b.ResetTimer()
	for range b.N {
		c.firstSet = false
		for tok := range int32(len(vocab)) {
			c.Allow(tok)
		}
	}
}

// From any point of a random document, taking only bytes that lower
// MinRemaining completes a valid document within MinRemaining bytes: the
// estimate is an upper bound that a closing walk can always lower.
func TestMinRemainingCloses(t *testing.T) {
	var alphabet []byte
	for c := byte(' '); c < 0x7f; c++ {
		alphabet = append(alphabet, c)
	}
	// Prefixes that once broke the bound, then random ones. The schemas
	// are walked in sorted order so a seed always draws the same prefixes.
	fixed := []struct{ schema, prefix string }{
		{"free", `{ " 1qp|K\`},    // a free key with an escape pending
		{"free", `{"a\u00`},       // hex digits of \u left in a key
		{"free", `{"a": "x\u0`},   // and in a value
		{"strlen", `"\u00`},       // below minLength, inside \u
		{"enums", `{"n": 1, "c\`}, // a declared key with an escape pending
	}
	for _, f := range fixed {
		s, v := compileBoth(t, testSchemas[f.schema])
		st := NewState(s)
		if !st.FeedString(f.prefix) {
			continue // the schema refuses the prefix: nothing to close
		}
		closeByMinRemaining(t, f.schema, v, st, []byte(f.prefix), alphabet)
	}
	r := rand.New(rand.NewPCG(9, 9))
	for _, name := range schemaNames() {
		s, v := compileBoth(t, testSchemas[name])
		for range 200 {
			st := NewState(s)
			var out []byte
			stop := r.IntN(60)
			for len(out) < stop && !st.Done() {
				var ok []byte
				for _, c := range alphabet {
					if st.Clone().Feed(c) {
						ok = append(ok, c)
					}
				}
				if len(ok) == 0 {
					break
				}
				c := ok[r.IntN(len(ok))]
				st.Feed(c)
				out = append(out, c)
			}
			closeByMinRemaining(t, name, v, st, out, alphabet)
		}
	}
}

// closeByMinRemaining feeds st, which holds out, only bytes that lower its
// MinRemaining until it is done, failing if that takes more bytes than the
// first estimate, if no byte lowers it, or if the result is not valid.
func closeByMinRemaining(t *testing.T, name string, v *jsonschema.Schema, st *State, out, alphabet []byte) {
	t.Helper()
	bound := st.MinRemaining()
	for steps := 0; !st.Done(); steps++ {
		if steps > bound {
			t.Fatalf("%s: %q: not complete after %d bytes, MinRemaining said %d", name, out, steps, bound)
		}
		rem := st.MinRemaining()
		var next byte
		found := false
		for _, c := range alphabet {
			try := st.Clone()
			if try.Feed(c) && (try.Done() || try.MinRemaining() < rem) {
				next, found = c, true
				break
			}
		}
		if !found {
			t.Fatalf("%s: %q: no byte lowers MinRemaining %d", name, out, rem)
		}
		st.Feed(next)
		out = append(out, next)
	}
	if err := validate(v, string(out)); err != nil {
		t.Fatalf("%s: closed %q is not valid: %v", name, out, err)
	}
}

// With a budget, a generation of random allowed tokens finishes a valid
// document before its tokens run out, whenever the budget covers the
// shortest document with the closing slack.
func TestConstraintBudget(t *testing.T) {
	s, v := compileBoth(t, testSchemas["nested"])
	g := &Grammar{Alts: [][]Part{{{Schema: s}}}}
	var vocab Vocab
	for c := byte(' '); c < 0x7f; c++ {
		vocab = append(vocab, []byte{c})
	}
	for _, w := range []string{`{"items": [`, `{"name": "`, `", "price": `, `}], "ok": true}`, `abcdef`, `, "tags": ["`, `", "`, `12`, `.5`} {
		vocab = append(vocab, []byte(w))
	}
	stop := int32(len(vocab))
	vocab = append(vocab, nil)
	r := rand.New(rand.NewPCG(3, 3))
	min0 := NewState(s).MinRemaining()
	for _, budget := range []int{min0 + 2, min0 + 20, min0 + 60} {
		for range 50 {
			c := NewConstraint(g, vocab, []int32{stop})
			var out []byte
			done := false
			for left := budget; left > 0; left-- {
				c.SetBudget(left)
				var ok []int32
				for tok := range int32(len(vocab)) {
					if c.Allow(tok) {
						ok = append(ok, tok)
					}
				}
				if len(ok) == 0 {
					t.Fatalf("budget %d: no token allowed after %q", budget, out)
				}
				tok := ok[r.IntN(len(ok))]
				if tok == stop {
					done = true
					break
				}
				c.Accept(tok)
				out = append(out, vocab[tok]...)
			}
			if !done && !c.Done() {
				t.Fatalf("budget %d: %q incomplete when the tokens ran out", budget, out)
			}
			if err := validate(v, string(out)); err != nil {
				t.Fatalf("budget %d: %q: %v", budget, out, err)
			}
		}
	}
}
