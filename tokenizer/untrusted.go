package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// Untrusted text in chat prompts.
//
// A chat template writes the control tokens of a conversation
// ("<|im_start|>", "<|im_end|>") around the messages' contents, and the
// rendered text is then encoded with special tokens recognised. Encoding
// that text as a whole, as transformers does, also turns a "<|im_end|>"
// that a user typed into the control token, so a user can close their own
// turn and open another. EncodeChat tells the two apart: everything that
// comes from the request (message contents and roles, names, reasoning,
// tool calls and their arguments, tool results, tool definitions, template
// variables, a prefill) is encoded as EncodeOrdinary encodes it, as Hugging
// Face's split_special_tokens does for untrusted text, while special tokens
// written by the template itself stay control tokens.
//
// How: before rendering, every string of the request that holds a special
// token, or that begins or ends with part of one (so that two of them, or
// one and the template's text, could join into one), gets a mark inside
// each such place: a Unicode noncharacter (or private-use character) that
// occurs nowhere in the request, the template or the tokens. Special tokens
// are then matched in the rendered text; a marked one no longer matches.
// The marks are removed from the text between special tokens before it is
// split into words, so the ids are those of the user's exact bytes. A
// request with no such string renders and encodes exactly as Encode does.
// The marks survive what templates do to contents (slicing aside: strip,
// split on "</think>", startswith, tojson, upper/lower), since they sit
// only inside token-like text.

// specialGuard knows the special tokens as the text matchers see them.
type specialGuard struct {
	first    [256]bool         // bytes that start some key
	byFirst  map[byte][]string // keys by their first byte
	prefixes map[string]bool   // proper, non-empty prefixes of keys
	suffixes map[string]bool   // proper, non-empty suffixes of keys
	maxLen   int
	// normalize is set when some special token is matched after
	// normalization: untrusted strings are then normalized before they
	// are checked (a normalizer could otherwise make one of them).
	normalize bool
	used      []rune // mark candidates that occur in some key
}

// newSpecialGuard indexes the special tokens among raw (matched on the raw
// text) and norm (matched after normalization), under their keys.
func newSpecialGuard(raw []addedToken, rawKeys []string, norm []addedToken, normKeys []string, hasNormalizer bool) *specialGuard {
	g := &specialGuard{byFirst: map[byte][]string{}, prefixes: map[string]bool{}, suffixes: map[string]bool{}}
	add := func(toks []addedToken, keys []string, normalized bool) {
		for i, a := range toks {
			key := keys[i]
			if !a.Special || key == "" {
				continue
			}
			if normalized && hasNormalizer {
				g.normalize = true
			}
			g.first[key[0]] = true
			g.byFirst[key[0]] = append(g.byFirst[key[0]], key)
			g.maxLen = max(g.maxLen, len(key))
			for j := 1; j < len(key); j++ {
				g.prefixes[key[:j]] = true
				g.suffixes[key[j:]] = true
			}
			for _, r := range key {
				if isMarkCandidate(r) {
					g.used = append(g.used, r)
				}
			}
		}
	}
	add(raw, rawKeys, false)
	add(norm, normKeys, true)
	return g
}

// tokenAt reports whether a special token starts at s[i].
func (g *specialGuard) tokenAt(s string, i int) bool {
	for _, k := range g.byFirst[s[i]] {
		if strings.HasPrefix(s[i:], k) {
			return true
		}
	}
	return false
}

// risky reports whether s holds a special token, or begins or ends with a
// proper part of one.
func (g *specialGuard) risky(s string) bool {
	return g.riskyStart(s) || g.riskyEnd(s) || g.holdsToken(s)
}

func (g *specialGuard) holdsToken(s string) bool {
	if len(g.byFirst) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if g.first[s[i]] && g.tokenAt(s, i) {
			return true
		}
	}
	return false
}

// riskyStart: s begins with a proper suffix of a token.
func (g *specialGuard) riskyStart(s string) bool {
	for n := 1; n < g.maxLen && n <= len(s); n++ {
		if g.suffixes[s[:n]] {
			return true
		}
	}
	return false
}

// riskyEnd: s ends with a proper prefix of a token.
func (g *specialGuard) riskyEnd(s string) bool {
	for n := 1; n < g.maxLen && n <= len(s); n++ {
		if g.prefixes[s[len(s)-n:]] {
			return true
		}
	}
	return false
}

// defuse writes mark after the first character of every special token in
// s, before s when it begins with part of one, and after s when it ends
// with part of one.
func (g *specialGuard) defuse(s, mark string) string {
	if !g.risky(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*len(mark))
	if g.riskyStart(s) {
		b.WriteString(mark)
	}
	done := 0
	for i := 0; i < len(s); i++ {
		if !g.first[s[i]] || !g.tokenAt(s, i) {
			continue
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		b.WriteString(s[done : i+n])
		b.WriteString(mark)
		done = i + n
	}
	b.WriteString(s[done:])
	if g.riskyEnd(s) {
		b.WriteString(mark)
	}
	return b.String()
}

// Marks are drawn from the noncharacters U+FDD0..U+FDEF, then from the
// private-use plane 15; never from text a request could not avoid.
func isMarkCandidate(r rune) bool {
	return (r >= 0xFDD0 && r <= 0xFDEF) || (r >= 0xF0000 && r <= 0xFFFFD)
}

func nextMarkCandidate(r rune) rune {
	switch {
	case r < 0xFDD0:
		return 0xFDD0
	case r < 0xFDEF:
		return r + 1
	case r < 0xF0000:
		return 0xF0000
	case r < 0xFFFFD:
		return r + 1
	}
	return -1
}

// markPicker collects the mark candidates that occur in some text.
type markPicker map[rune]bool

func (p markPicker) scan(s string) {
	for i := 0; i < len(s); i++ {
		// Every candidate is encoded with a lead byte of 0xEF or 0xF3.
		if s[i] != 0xEF && s[i] != 0xF3 {
			continue
		}
		if r, _ := utf8.DecodeRuneInString(s[i:]); isMarkCandidate(r) {
			p[r] = true
		}
	}
}

// pick returns the first candidate that occurs in no scanned text.
func (p markPicker) pick() (string, error) {
	for r := nextMarkCandidate(0); r >= 0; r = nextMarkCandidate(r) {
		if !p[r] {
			return string(r), nil
		}
	}
	return "", errors.New("every private-use character occurs in the request; cannot mark untrusted text")
}

// walkStrings calls f for every string in v, dictionary keys included.
func walkStrings(v jinja.Value, f func(string)) {
	switch {
	case v.IsString():
		f(v.AsString())
	case v.IsList():
		for _, it := range v.AsList().Items {
			walkStrings(it, f)
		}
	case v.IsDict():
		d := v.AsDict()
		for _, k := range d.Keys {
			f(k)
			walkStrings(d.Data[k], f)
		}
	}
}

// mapStrings returns a copy of v with every string (dictionary keys
// included) replaced by f's result. f must be injective.
func mapStrings(v jinja.Value, f func(string) string) jinja.Value {
	switch {
	case v.IsString():
		return jinja.NewString(f(v.AsString()))
	case v.IsList():
		items := v.AsList().Items
		out := make([]jinja.Value, len(items))
		for i, it := range items {
			out[i] = mapStrings(it, f)
		}
		return jinja.NewList(out)
	case v.IsDict():
		d := v.AsDict()
		c := jinja.NewDict()
		cd := c.AsDict()
		for _, k := range d.Keys {
			cd.Set(f(k), mapStrings(d.Data[k], f))
		}
		return c
	}
	return v
}

// untrustedVars names the template variables that come from the request.
func untrustedVars(req ChatRequest) []string {
	names := []string{"messages", "tools"}
	for k := range req.Vars {
		if k != "messages" && k != "tools" {
			names = append(names, k)
		}
	}
	return names
}

// EncodeChat renders req with the chat template, as ApplyChatTemplate
// does, and encodes the prompt so that only the template's own text can
// produce special tokens: whatever the request holds (message contents,
// roles and names, reasoning, tool calls and their arguments, tool
// results, tool definitions, template variables, the prefill) is encoded
// as EncodeOrdinary encodes it, so a "<|im_end|>" typed by a user is the
// characters "<|im_end|>", never the end of a turn. Added tokens that are
// not special (Qwen3's "<think>", "<tool_call>") are recognised anywhere,
// as with Hugging Face's split_special_tokens. It returns the ids and the
// rendered text (ApplyChatTemplate's). A request without special-token
// text encodes exactly as Encode(ApplyChatTemplate(req)).
func (t *Tokenizer) EncodeChat(req ChatRequest) (ids []int32, text string, err error) {
	ct, vars, err := t.prepareChat(req)
	if err != nil {
		return nil, "", err
	}
	untrusted := untrustedVars(req)
	g := t.guard
	risky := g != nil && g.risky(req.Prefill)
	for _, name := range untrusted {
		if risky {
			break
		}
		if v, ok := vars[name]; ok {
			walkStrings(v, func(s string) {
				if !risky && g != nil {
					if g.normalize {
						s = t.norm.normalize(s)
					}
					risky = g.risky(s)
				}
			})
		}
	}
	if !risky {
		out, err := ct.tmpl.RenderValues(vars)
		if err != nil {
			return nil, "", fmt.Errorf("chat template: render: %w", err)
		}
		out += req.Prefill
		return t.Encode(out), out, nil
	}

	// Pick a mark that occurs nowhere: not in the template, the request,
	// the other variables or the special tokens.
	p := markPicker{}
	p.scan(ct.source)
	p.scan(req.Prefill)
	for _, v := range vars {
		walkStrings(v, p.scan)
	}
	for _, r := range g.used {
		p[r] = true
	}
	mark, err := p.pick()
	if err != nil {
		return nil, "", fmt.Errorf("chat template: %w", err)
	}
	defuse := func(s string) string {
		if g.normalize {
			s = t.norm.normalize(s)
		}
		return g.defuse(s, mark)
	}
	for _, name := range untrusted {
		if v, ok := vars[name]; ok {
			vars[name] = mapStrings(v, defuse)
		}
	}
	vars[tojsonFunc] = tojsonCallable(mark)
	out, err := ct.tmpl.RenderValues(vars)
	if err != nil {
		return nil, "", fmt.Errorf("chat template: render: %w", err)
	}
	out += defuse(req.Prefill)
	return t.encodeMarked(out, mark), strings.ReplaceAll(out, mark, ""), nil
}

// encodeMarked is Encode of text whose marks break special tokens: added
// tokens are matched in text as it is, and the marks are removed from the
// text between them before it is split into words.
func (t *Tokenizer) encodeMarked(text, mark string) []int32 {
	ids := make([]int32, 0, len(text)/4+4)
	word := func(w string) { ids = t.model.appendWord(ids, w) }
	atStart := true
	token := func(id int32) { ids, atStart = append(ids, id), false }
	pretokenize := func(s string) {
		if strings.Contains(s, mark) {
			if s = strings.ReplaceAll(s, mark, ""); s == "" {
				return
			}
		}
		t.pretokenize(s, &atStart, word)
	}
	normalized := func(s string) { t.normAdded.split(s, false, pretokenize, token) }
	raw := func(s string) { normalized(t.norm.normalize(s)) }
	t.rawAdded.split(text, false, raw, token)
	return ids
}
