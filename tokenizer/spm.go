package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// SentencePiece-style BPE, as Llama 2, Mistral and TinyLlama tokenizers
// are written in tokenizer.json (and as GGUF files hold them, tokenizer
// model "llama"): spaces become "▁" (a Replace normalizer or a Metaspace
// pre-tokenizer), a "▁" is put before the text (a Prepend normalizer, or
// the Metaspace's prepend_scheme), the BPE model merges characters rather
// than bytes, and a character outside the vocabulary becomes the
// "<0xXX>" tokens of its UTF-8 bytes (byte_fallback). Decoding turns "▁"
// back into spaces and "<0xXX>" into bytes, and strips the space the
// encoder put before the text.

// metaspace is the SentencePiece word separator, U+2581.
const metaspace = "▁"

// metaspaceStep is the Metaspace pre-tokenizer: spaces become rep, rep is
// put before a piece that does not start with it (always, or for the
// piece at the start of the text only: first), and with split every rep
// starts a new word.
type metaspaceStep struct {
	rep           string
	always, first bool
	split         bool
}

func (m metaspaceStep) apply(s string, emit func(string)) { m.applyAt(s, m.always, emit) }

// applyAt is apply with the rep put before s when prepend is set.
func (m metaspaceStep) applyAt(s string, prepend bool, emit func(string)) {
	s = strings.ReplaceAll(s, " ", m.rep)
	if prepend && !strings.HasPrefix(s, m.rep) {
		s = m.rep + s
	}
	if !m.split {
		if s != "" {
			emit(s)
		}
		return
	}
	splitStep{m: literalMatcher{lit: m.rep}, behavior: behaviorMergedWithNext}.apply(s, emit)
}

// metaspace reads a Metaspace pre-tokenizer or decoder: replacement (or
// the older str_rep), prepend_scheme (or the older add_prefix_space:
// true as "always") and split (true when absent, as in tokenizers).
func (c *componentJSON) metaspace() (metaspaceStep, error) {
	m := metaspaceStep{rep: c.Replacement, split: c.Split == nil || *c.Split}
	if m.rep == "" {
		m.rep = c.StrRep
	}
	if m.rep == "" {
		return m, unsupported("Metaspace without a replacement")
	}
	switch c.PrependScheme {
	case "always":
		m.always = true
	case "first":
		m.first = true
	case "never":
	case "":
		m.always = c.AddPrefixSpace == nil || *c.AddPrefixSpace
	default:
		return m, unsupported("Metaspace prepend_scheme %q", c.PrependScheme)
	}
	return m, nil
}

// spmDecoder is what a SentencePiece-style decoder does: literal
// replacements in each token ("▁" → " "), "<0xXX>" tokens as their byte
// (ByteFallback), and up to strip spaces removed from the start of the
// text (Strip, or Metaspace's one).
type spmDecoder struct {
	replace      [][2]string
	byteFallback bool
	strip        int
}

// buildSPMDecoder reads a decoder of Replace, ByteFallback, Fuse, Strip
// and Metaspace steps, alone or in a Sequence.
func buildSPMDecoder(raw json.RawMessage) (spmDecoder, error) {
	var d spmDecoder
	if isNull(raw) {
		return d, unsupported("no decoder")
	}
	var add func(raw json.RawMessage) error
	add = func(raw json.RawMessage) error {
		c, err := parseComponent(raw, "decoder")
		if err != nil {
			return err
		}
		switch c.Type {
		case "Sequence":
			if len(c.Decoders) == 0 {
				return unsupported("empty decoder sequence")
			}
			for i, sub := range c.Decoders {
				if err := add(sub); err != nil {
					return fmt.Errorf("decoder sequence item %d: %w", i, err)
				}
			}
		case "Replace":
			if c.Pattern == nil || c.Pattern.String == nil || c.Content == nil || *c.Pattern.String == "" {
				return unsupported("Replace decoder without a literal String pattern")
			}
			d.replace = append(d.replace, [2]string{*c.Pattern.String, *c.Content})
		case "ByteFallback":
			d.byteFallback = true
		case "Fuse":
			// Tokens are always joined.
		case "Strip":
			if c.Content == nil || *c.Content != " " || c.Stop != 0 || c.Start < 0 {
				return unsupported("Strip decoder other than of leading spaces")
			}
			d.strip = max(d.strip, c.Start)
		case "Metaspace":
			m, err := c.metaspace()
			if err != nil {
				return err
			}
			d.replace = append(d.replace, [2]string{m.rep, " "})
			if m.always || m.first {
				d.strip = max(d.strip, 1)
			}
		default:
			return unsupported("decoder type %q in a SentencePiece-style tokenizer", c.Type)
		}
		return nil
	}
	return d, add(raw)
}

// tokenBytes is what token s decodes to.
func (d spmDecoder) tokenBytes(s string) []byte {
	if d.byteFallback {
		if b, ok := byteToken(s); ok {
			return []byte{b}
		}
	}
	for _, r := range d.replace {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return []byte(s)
}

// byteToken reads a byte-fallback token, "<0x0A>".
func byteToken(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(s[3:5], 16, 8)
	return byte(v), err == nil
}

// byteTokenName is the byte-fallback token of b, as tokenizers names it.
func byteTokenName(b byte) string { return fmt.Sprintf("<0x%02X>", b) }

// stripLeading removes up to n spaces from the start of b.
func stripLeading(b []byte, n int) []byte {
	for ; n > 0 && len(b) > 0 && b[0] == ' '; n-- {
		b = b[1:]
	}
	return b
}

// setFallback sets a SentencePiece-style model's unknown token and, with
// byte_fallback, the ids of the 256 "<0xXX>" tokens (all must exist).
func (m *bpeModel) setFallback(f *modelJSON) error {
	if f.UnkToken != nil && *f.UnkToken != "" {
		id, ok := f.Vocab[*f.UnkToken]
		if !ok {
			return fmt.Errorf("unk_token %q is not in the vocab", *f.UnkToken)
		}
		m.unk = id
	}
	m.fuseUnk = f.FuseUnk
	if !f.ByteFallback {
		return nil
	}
	m.byteFallback = true
	for b := range 256 {
		id, ok := f.Vocab[byteTokenName(byte(b))]
		if !ok {
			return fmt.Errorf("byte_fallback: the vocab lacks %s", byteTokenName(byte(b)))
		}
		m.fallback[b] = id
	}
	return nil
}

// cutsWords reports whether every merge of f joins a run of cut strings
// and then text without one, so that bpeModel.cut may be set.
func cutsWords(f *modelJSON, cut string) bool {
	if cut == "" {
		return false
	}
	for _, mg := range f.Merges {
		rest := strings.TrimLeft(mg[0]+mg[1], cut)
		if strings.Contains(rest, cut) {
			return false
		}
	}
	return true
}
