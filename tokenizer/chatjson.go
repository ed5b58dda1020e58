package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// The |tojson filter of the Jinja engine writes JSON the Go way where
// transformers writes it with Python's json.dumps: 2.0 as 2 (Python: 2.0),
// 1e6 as 1e+06 (Python: 1000000.0), U+2028 escaped (Python: raw), and with
// indent= it sorts keys. The engine does not let a filter be replaced, so
// before compiling, rewriteToJSON turns every "EXPR | tojson(ARGS)" in the
// template into a call "__clawrl_tojson(EXPR, ARGS)" of pyJSON, which
// follows json.dumps exactly (as transformers calls it: ensure_ascii=False).

const tojsonFunc = "__clawrl_tojson"

// lexeme is a token inside a template tag.
type lexeme struct {
	kind       byte // 'i' identifier, 'n' number, 's' string, 'p' punctuation
	text       string
	start, end int
}

func lexTag(s string) ([]lexeme, bool) {
	var out []lexeme
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, false // unterminated string
			}
			out = append(out, lexeme{'s', s[i : j+1], i, j + 1})
			i = j + 1
		case c == '_' || c >= 0x80 || ('a' <= c|0x20 && c|0x20 <= 'z'):
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= 0x80 || ('a' <= s[j]|0x20 && s[j]|0x20 <= 'z') || ('0' <= s[j] && s[j] <= '9')) {
				j++
			}
			out = append(out, lexeme{'i', s[i:j], i, j})
			i = j
		case '0' <= c && c <= '9':
			j := i + 1
			for j < len(s) && (('0' <= s[j] && s[j] <= '9') || s[j] == '.' || s[j] == '_' || s[j] == 'e' || s[j] == 'E') {
				j++
			}
			out = append(out, lexeme{'n', s[i:j], i, j})
			i = j
		default:
			out = append(out, lexeme{'p', s[i : i+1], i, i + 1})
			i++
		}
	}
	return out, true
}

// Words that end an operand when walking back from a filter.
var jinjaKeywords = map[string]bool{
	"in": true, "not": true, "and": true, "or": true, "is": true, "if": true, "else": true,
	"elif": true, "for": true, "set": true, "recursive": true, "with": true, "import": true,
	"from": true, "as": true, "return": true, "macro": true, "call": true, "filter": true,
}

func isOperandAtom(l lexeme) bool {
	return l.kind == 'n' || l.kind == 's' || (l.kind == 'i' && !jinjaKeywords[l.text])
}

func isCloser(l lexeme) bool {
	return l.kind == 'p' && (l.text == ")" || l.text == "]" || l.text == "}")
}

// matchOpen returns the index of the bracket that opens the closer at i.
func matchOpen(toks []lexeme, i int) int {
	depth := 0
	for j := i; j >= 0; j-- {
		if toks[j].kind != 'p' {
			continue
		}
		switch toks[j].text {
		case ")", "]", "}":
			depth++
		case "(", "[", "{":
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// matchClose returns the index of the bracket that closes the opener at i.
func matchClose(toks []lexeme, i int) int {
	depth := 0
	for j := i; j < len(toks); j++ {
		if toks[j].kind != 'p' {
			continue
		}
		switch toks[j].text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// operandStart walks back from toks[i], the last token of a filter's
// operand, to its first token: a primary followed by attribute accesses,
// subscripts, calls and earlier filters. It returns -1 when unsure.
func operandStart(toks []lexeme, i int) int {
	j := i
	for {
		if j < 0 {
			return -1
		}
		group := false
		switch t := toks[j]; {
		case isCloser(t):
			if j = matchOpen(toks, j); j < 0 {
				return -1
			}
			group = toks[j].text != "{"
		case isOperandAtom(t):
		default:
			return -1
		}
		if j == 0 {
			return 0
		}
		p := toks[j-1]
		switch {
		case p.kind == 'p' && (p.text == "." || p.text == "|"):
			j -= 2 // attribute access, or an earlier filter in the chain
		case group && (isOperandAtom(p) || isCloser(p)):
			j-- // a call or a subscript of what precedes
		default:
			return j
		}
	}
}

// rewriteTag rewrites the tojson filters of one tag's inner text.
func rewriteTag(inner string) string {
	for range 64 { // each pass rewrites one filter
		toks, ok := lexTag(inner)
		if !ok {
			return inner
		}
		found := false
		for k := 1; k+1 < len(toks); k++ {
			if toks[k].kind != 'p' || toks[k].text != "|" || toks[k+1].kind != 'i' || toks[k+1].text != "tojson" {
				continue
			}
			start := operandStart(toks, k-1)
			if start < 0 {
				continue
			}
			end, args := toks[k+1].end, ""
			if k+2 < len(toks) && toks[k+2].kind == 'p' && toks[k+2].text == "(" {
				c := matchClose(toks, k+2)
				if c < 0 {
					continue
				}
				end, args = toks[c].end, strings.TrimSpace(inner[toks[k+2].end:toks[c].start])
			}
			call := tojsonFunc + "(" + strings.TrimSpace(inner[toks[start].start:toks[k].start])
			if args != "" {
				call += ", " + args
			}
			inner = inner[:toks[start].start] + call + ")" + inner[end:]
			found = true
			break
		}
		if !found {
			return inner
		}
	}
	return inner
}

// rewriteToJSON applies rewriteTag to every {{ }} and {% %} tag of a
// template, leaving text, comments and raw blocks alone.
func rewriteToJSON(src string) string {
	var out strings.Builder
	for i := 0; i < len(src); {
		j := strings.IndexByte(src[i:], '{')
		if j < 0 || i+j+1 >= len(src) {
			out.WriteString(src[i:])
			break
		}
		j += i
		open := src[j+1]
		if open != '{' && open != '%' && open != '#' {
			out.WriteString(src[i : j+1])
			i = j + 1
			continue
		}
		out.WriteString(src[i:j])
		closeTag := map[byte]string{'{': "}}", '%': "%}", '#': "#}"}[open]
		end := tagEnd(src, j+2, closeTag, open != '#')
		if end < 0 {
			out.WriteString(src[j:])
			break
		}
		tag := src[j:end]
		switch {
		case open == '#':
			out.WriteString(tag)
		case open == '%' && isRawTag(tag):
			// Copy up to the end of the raw block untouched.
			k := strings.Index(src[end:], "endraw")
			if k < 0 {
				out.WriteString(src[j:])
				return out.String()
			}
			stop := tagEnd(src, end+k, "%}", true)
			if stop < 0 {
				out.WriteString(src[j:])
				return out.String()
			}
			out.WriteString(src[j:stop])
			end = stop
		default:
			out.WriteString(src[j : j+2])
			out.WriteString(rewriteTag(src[j+2 : end-2]))
			out.WriteString(closeTag)
		}
		i = end
	}
	return out.String()
}

// tagEnd returns the index just past closeTag, skipping quoted strings when
// quotes is set, or -1.
func tagEnd(s string, i int, closeTag string, quotes bool) int {
	for i < len(s) {
		c := s[i]
		if quotes && (c == '\'' || c == '"') {
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
			continue
		}
		if strings.HasPrefix(s[i:], closeTag) {
			return i + len(closeTag)
		}
		i++
	}
	return -1
}

func isRawTag(tag string) bool {
	inner := strings.Trim(tag[2:len(tag)-2], "-+ \t\r\n")
	return inner == "raw"
}

// tojsonValue is the template function behind the rewritten filter.
var tojsonValue = tojsonCallable("")

// tojsonCallable is tojsonValue writing mark (see EncodeChat) as it is,
// even with ensure_ascii.
func tojsonCallable(mark string) jinja.Value {
	keep, _ := utf8.DecodeRuneInString(mark)
	if mark == "" {
		keep = -1
	}
	return jinja.NewCallable(tojsonFunc, func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
		return tojson(args, kwargs, keep)
	})
}

func tojson(args []jinja.Value, kwargs map[string]jinja.Value, keep rune) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: no value")
	}
	o := pyJSONOptions{itemSep: ", ", keySep: ": ", keep: keep}
	if v, ok := kwargs["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		switch {
		case v.IsInt():
			o.indent, o.indented = strings.Repeat(" ", int(max(v.AsInt(), 0))), true
		case v.IsString():
			o.indent, o.indented = v.AsString(), true
		default:
			return jinja.Undefined(), errors.New("tojson: indent must be an integer or a string")
		}
		o.itemSep = ","
	}
	if v, ok := kwargs["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return jinja.Undefined(), errors.New("tojson: separators must be two strings")
		}
		o.itemSep, o.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
	}
	o.sortKeys = kwargs["sort_keys"].IsTruthy()
	o.ensureASCII = kwargs["ensure_ascii"].IsTruthy()
	var sb strings.Builder
	if err := pyJSON(&sb, args[0], &o, 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(sb.String()), nil
}

type pyJSONOptions struct {
	itemSep, keySep string
	indent          string
	indented        bool
	sortKeys        bool
	ensureASCII     bool
	keep            rune // written as it is even with ensureASCII (-1: none)
}

// pyJSON writes v as Python's json.dumps does.
func pyJSON(sb *strings.Builder, v jinja.Value, o *pyJSONOptions, depth int) error {
	if depth > 512 {
		return errors.New("tojson: value nested too deeply")
	}
	newline := func(d int) {
		if o.indented {
			sb.WriteByte('\n')
			for range d {
				sb.WriteString(o.indent)
			}
		}
	}
	switch {
	case v.IsNone() || v.IsUndefined():
		sb.WriteString("null")
	case v.IsBool():
		sb.WriteString(strconv.FormatBool(v.AsBool()))
	case v.IsInt():
		sb.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		sb.WriteString(pyFloat(v.AsFloat()))
	case v.IsString():
		pyString(sb, v.AsString(), o.ensureASCII, o.keep)
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			sb.WriteString("[]")
			return nil
		}
		sb.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				sb.WriteString(o.itemSep)
			}
			newline(depth + 1)
			if err := pyJSON(sb, item, o, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		sb.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			sb.WriteString("{}")
			return nil
		}
		keys := d.OrderedKeys()
		if o.sortKeys {
			slices.Sort(keys)
		}
		sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				sb.WriteString(o.itemSep)
			}
			newline(depth + 1)
			pyString(sb, k, o.ensureASCII, o.keep)
			sb.WriteString(o.keySep)
			val, _ := d.Get(k)
			if err := pyJSON(sb, val, o, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		sb.WriteByte('}')
	default:
		return fmt.Errorf("tojson: cannot encode %s", v.String())
	}
	return nil
}

// pyFloat formats f as Python's float repr: the shortest digits that read
// back the same, in positional form from 1e-4 up to 1e16 (always with a
// fractional part, 2.0), in exponent form outside it (1e-05, 1e+16).
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±XX
	mant, expText, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expText)
	sign := ""
	if strings.HasPrefix(mant, "-") {
		sign, mant = "-", mant[1:]
	}
	digits := strings.Replace(mant, ".", "", 1)
	point := exp + 1 // digits before the decimal point
	switch {
	case point <= -4 || point > 16:
		return e
	case point <= 0:
		return sign + "0." + strings.Repeat("0", -point) + digits
	case point >= len(digits):
		return sign + digits + strings.Repeat("0", point-len(digits)) + ".0"
	}
	return sign + digits[:point] + "." + digits[point:]
}

// pyString writes s as a JSON string the way json.dumps does; keep is
// written as it is even with ensureASCII.
func pyString(sb *strings.Builder, s string, ensureASCII bool, keep rune) {
	const hex = "0123456789abcdef"
	u4 := func(r rune) {
		sb.WriteString(`\u`)
		sb.WriteByte(hex[r>>12&0xF])
		sb.WriteByte(hex[r>>8&0xF])
		sb.WriteByte(hex[r>>4&0xF])
		sb.WriteByte(hex[r&0xF])
	}
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				u4(r)
			case ensureASCII && r > 0x7E && r != keep:
				if r > 0xFFFF {
					r -= 0x10000
					u4(0xD800 + r>>10)
					u4(0xDC00 + r&0x3FF)
				} else {
					u4(r)
				}
			default:
				sb.WriteRune(r)
			}
		}
	}
	sb.WriteByte('"')
}
