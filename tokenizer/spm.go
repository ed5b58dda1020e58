package tokenizer

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// SentencePiece-style BPE, as Llama 2, Mistral, TinyLlama and Gemma
// tokenizers are written in tokenizer.json (and as GGUF files hold them,
// tokenizer model "llama"): spaces become "▁" (a Replace normalizer or a
// Metaspace pre-tokenizer), a "▁" is put before the text (a Prepend
// normalizer, or the Metaspace's prepend_scheme; Gemma's puts none), the
// BPE model merges characters rather than bytes, and a character outside
// the vocabulary becomes the "<0xXX>" tokens of its UTF-8 bytes
// (byte_fallback). Decoding turns "▁" back into spaces and "<0xXX>" into
// bytes, and strips the space the encoder put before the text.

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

// fromSPMVocab builds a SentencePiece vocabulary as llama.cpp runs it: the
// legacy tokenizer.json layout (a Prepend "▁" normalizer when
// AddSpacePrefix, Replace " " → "▁", no pre-tokenizer, byte fallback
// when all 256 "<0xXX>" tokens are there, unknown characters fused into
// the unknown token) with merge rules made from the scores, as
// transformers' converter makes them from a SentencePiece model: every
// split of a normal or user-defined token (with its spaces as "▁") into
// two such tokens is a merge, ranked by the token's score (highest
// first), then its id, then the split's position.
func fromSPMVocab(v Vocab) (*Tokenizer, error) {
	if len(v.Scores) != len(v.Tokens) {
		return nil, fmt.Errorf("SentencePiece vocabulary: %d scores for %d tokens", len(v.Scores), len(v.Tokens))
	}
	norm := `{"type":"Replace","pattern":{"String":" "},"content":"▁"}`
	dec := `{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"}]}`
	if v.AddSpacePrefix {
		norm = `{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},` + norm + `]}`
		dec = `{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}`
	}
	f := &fileJSON{
		Normalizer: rawJSON(norm),
		Decoder:    rawJSON(dec),
		Model:      modelJSON{Type: "BPE", Vocab: make(map[string]int32, len(v.Tokens)), FuseUnk: true},
	}
	normal, err := f.addTokens(v, true)
	if err != nil {
		return nil, err
	}
	// A user-defined token is matched in the raw text, and llama.cpp's
	// SentencePiece tokenizer also merges pieces into it, as into any token
	// of the vocabulary, by its text and score: it is a piece of the model
	// too, with its spaces as "▁" (which GGUF files write as spaces, see
	// preNormalizeUserDefined). So is Gemma's "▁▁" in its tokenizer.json:
	// an added token, and what BPE makes of two spaces.
	for i, s := range v.Tokens {
		if v.Types == nil || v.Types[i] != TokenUserDefined {
			continue
		}
		piece := strings.ReplaceAll(s, " ", metaspace)
		if _, dup := f.Model.Vocab[piece]; !dup {
			f.Model.Vocab[piece] = int32(i)
			normal[piece] = int32(i)
		}
	}
	f.Model.ByteFallback = true
	for b := range 256 {
		if _, ok := f.Model.Vocab[byteTokenName(byte(b))]; !ok {
			f.Model.ByteFallback = false
			break
		}
	}
	type cand struct {
		l, r  string
		score float32
		id    int32
		at    int
	}
	var cands []cand
	for s, id := range normal {
		for at := range s {
			if at == 0 {
				continue
			}
			if _, ok := normal[s[:at]]; !ok {
				continue
			}
			if _, ok := normal[s[at:]]; ok {
				cands = append(cands, cand{s[:at], s[at:], v.Scores[id], id, at})
			}
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		switch {
		case a.score != b.score:
			return cmp.Compare(b.score, a.score)
		case a.id != b.id:
			return cmp.Compare(a.id, b.id)
		}
		return cmp.Compare(a.at, b.at)
	})
	f.Model.Merges = make([]mergeJSON, len(cands))
	for i, c := range cands {
		f.Model.Merges[i] = mergeJSON{c.l, c.r}
	}
	return buildVocab(f, v)
}

// splitsNothing reports whether pre, the pre-tokenizer of a tokenizer
// whose normalizer turns every space into "▁", leaves every piece whole:
// none, or a Split on a literal that holds a space, which is never found
// (Gemma's: a Split on " " after Replace " " → "▁").
func splitsNothing(pre preStep) bool {
	switch p := pre.(type) {
	case sequence:
		return len(p) == 0
	case splitStep:
		m, ok := p.m.(literalMatcher)
		return ok && !p.invert && strings.Contains(m.lit, " ")
	}
	return false
}

// spmVocab is Vocab of a SentencePiece-style tokenizer. GGUF files (and
// llama.cpp) put a "▁" before every piece of text that starts the text or
// follows a special token, or before none (add_space_prefix false, as
// Gemma's), and merge by scores, so only the legacy layout (Prepend "▁"
// when at all, Replace " " → "▁", no pre-tokenizer or one that splits
// nothing) is written: a token's score is minus the rank of the first
// merge that makes it (a token no merge makes scores below all of them).
func (t *Tokenizer) spmVocab(size int) (Vocab, error) {
	var prefix bool
	switch n := t.norm; {
	case len(n) == 2 && n[0] == prependStep{metaspace} && n[1] == replaceStep{" ", metaspace}:
		prefix = true
	case len(n) == 1 && n[0] == replaceStep{" ", metaspace}:
	default:
		return Vocab{}, fmt.Errorf("%w: a SentencePiece tokenizer goes into a GGUF file in the legacy layout only (normalizers Prepend \"▁\" and Replace \" \" → \"▁\", no pre-tokenizer), as llama.cpp runs it", ErrNoPreName)
	}
	if !splitsNothing(t.pre) || t.metaFirst != nil {
		return Vocab{}, fmt.Errorf("%w: a SentencePiece tokenizer with a pre-tokenizer cannot go into a GGUF file", ErrNoPreName)
	}
	v := t.baseVocab(size)
	v.Model, v.AddSpacePrefix = ModelSPM, prefix
	v.Scores = make([]float32, len(v.Tokens))
	low := -float32(len(t.merges) + 1)
	for id := range v.Scores {
		v.Scores[id] = low
	}
	for rank := len(t.merges) - 1; rank >= 0; rank-- {
		_, merged := t.model.lookup(t.merges[rank][0], t.merges[rank][1])
		if merged >= 0 {
			v.Scores[merged] = float32(-rank) // not −0, which some readers write as 0
		}
	}
	for id, typ := range v.Types {
		i := int32(id)
		switch {
		case i == t.model.unk:
			v.Types[id], v.Scores[id] = TokenUnknown, 0
		case typ == TokenUserDefined && t.strs[id] != "":
			// An added token that is also a piece of the model (Gemma's
			// "▁▁") keeps the score of the merge that makes it: FromVocab
			// (and llama.cpp) merge pieces into it by that score.
		case typ != TokenNormal:
			v.Scores[id] = 0
		case t.model.byteFallback:
			if _, ok := byteToken(v.Tokens[id]); ok {
				v.Types[id], v.Scores[id] = TokenByte, 0
			}
		}
	}
	preNormalizeUserDefined(&v)
	return v, nil
}

// preNormalizeUserDefined writes the "▁" of user-defined tokens as
// spaces, as llama.cpp's converter writes them (Gemma's "▁▁" is "  " in
// its GGUF files): llama.cpp matches a user-defined token in the raw
// text, where a space is still a space, and decodes it to its text as it
// is, without the decoder's "▁" → " ". fromSPMVocab makes the "▁" form a
// piece of the model again. A token whose space form another token
// already has keeps its "▁".
func preNormalizeUserDefined(v *Vocab) {
	texts := make(map[string]bool, len(v.Tokens))
	for _, s := range v.Tokens {
		texts[s] = true
	}
	for id, typ := range v.Types {
		if typ != TokenUserDefined {
			continue
		}
		if s := strings.ReplaceAll(v.Tokens[id], metaspace, " "); !texts[s] {
			v.Tokens[id], texts[s] = s, true
		}
	}
}
