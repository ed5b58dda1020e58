package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Tokenizer is a byte-level BPE tokenizer with its special tokens and chat
// template. It is immutable once built and safe for concurrent use.
type Tokenizer struct {
	norm      normalizer
	pre       preStep
	model     bpeModel
	rawAdded  *addedMatcher // added tokens matched on the raw text
	normAdded *addedMatcher // added tokens matched on the normalized text
	guard     *specialGuard // the special tokens, for EncodeChat

	strs    []string         // id → model vocab entry ("" for none)
	raw     [][]byte         // id → bytes it decodes to
	known   []bool           // id → whether any token has this id
	special []bool           // id → whether it is a special added token
	ids     map[string]int32 // token as written in tokenizer.json → id
	added   []addedToken
	addedAt map[int32]int // id → index in added
	merges  [][2]int32    // merge rules by rank

	// tokenizer.json sections kept verbatim for saving.
	normalizer, preTok, postProc, decoder json.RawMessage
	unkModel                              string

	bos, eos, pad, unk specialToken
	chat               *chatTemplates

	// SentencePiece-style tokenizers (see spm.go): a Metaspace
	// pre-tokenizer that puts "▁" before the start of the text only, and
	// how many spaces decoding strips from the start of the text.
	metaFirst *metaspaceStep
	stripLead int

	// addBOS: a raw prompt gets the BOS token first (bos.go).
	addBOS bool
}

type specialToken struct {
	text string
	id   int32
	ok   bool
}

// VocabSize returns one more than the largest token id, added tokens
// included. (A model's embedding table may be larger.)
func (t *Tokenizer) VocabSize() int { return len(t.strs) }

// TokenID returns the id of a token written as in tokenizer.json: an added
// token by its content ("<|im_end|>"), any other in the byte-level alphabet
// ("Ġthe" for " the").
func (t *Tokenizer) TokenID(token string) (int32, bool) {
	id, ok := t.ids[token]
	return id, ok
}

// TokenString returns the token of an id as written in tokenizer.json, or ""
// for an id that has no token.
func (t *Tokenizer) TokenString(id int32) string {
	if !t.valid(id) {
		return ""
	}
	if i, ok := t.addedAt[id]; ok {
		return t.added[i].Content
	}
	return t.strs[id]
}

// turnEndTexts are the tokens that end a turn (or a message) in the chat
// formats of common models: ChatML's, Llama 3's (end of turn, end of a
// message that calls a tool, end of text), Phi-3's, DeepSeek's, Gemma's
// and GPT-2's end of text. llama.cpp ends generation at the same ones.
var turnEndTexts = []string{"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|end|>",
	"<｜end▁of▁sentence｜>", "<end_of_turn>", "<|endoftext|>"}

// IsTurnEnd reports whether text is one of those tokens' texts.
func IsTurnEnd(text string) bool { return slices.Contains(turnEndTexts, text) }

// TurnEnds lists the ids of the special tokens of the tokenizer that end a
// turn in a common chat format (ChatML's <|im_end|>, Llama 3's <|eot_id|>,
// Phi-3's <|end|>, ...), which end generation besides the EOS token: a
// model's config often names only its base model's EOS (Phi-3's
// <|endoftext|>), while its chat template ends each turn with another.
func (t *Tokenizer) TurnEnds() []int32 {
	var out []int32
	for _, s := range turnEndTexts {
		if id, ok := t.TokenID(s); ok && t.IsSpecial(id) {
			out = append(out, id)
		}
	}
	return out
}

// IsSpecial reports whether id is an added token marked special (such as
// "<|im_end|>"). Added tokens that are not special ("<think>" in Qwen3) and
// ordinary tokens are not.
func (t *Tokenizer) IsSpecial(id int32) bool { return t.valid(id) && t.special[id] }

func (t *Tokenizer) valid(id int32) bool { return id >= 0 && int(id) < len(t.known) && t.known[id] }

// BOS returns the beginning-of-sequence token named by tokenizer_config.json.
func (t *Tokenizer) BOS() (id int32, ok bool) { return t.bos.id, t.bos.ok }

// EOS returns the end-of-sequence token named by tokenizer_config.json (for
// an instruction model, the end of a turn, such as "<|im_end|>").
func (t *Tokenizer) EOS() (id int32, ok bool) { return t.eos.id, t.eos.ok }

// PAD returns the padding token named by tokenizer_config.json.
func (t *Tokenizer) PAD() (id int32, ok bool) { return t.pad.id, t.pad.ok }

// Encode tokenizes text. Added tokens written in the text, special ones
// included, are recognised and encoded as their ids, as Hugging Face does
// for rendered chat templates. No BOS or EOS is added.
func (t *Tokenizer) Encode(text string) []int32 { return t.encode(text, true) }

// EncodeOrdinary tokenizes text without recognising special tokens: a
// "<|im_start|>" in the text is encoded as plain characters. (Added tokens
// that are not special, such as Qwen3's "<think>", are still recognised, as
// with Hugging Face's split_special_tokens.) Use it for untrusted text that
// must not be able to forge turn boundaries.
func (t *Tokenizer) EncodeOrdinary(text string) []int32 { return t.encode(text, false) }

func (t *Tokenizer) encode(text string, allowSpecial bool) []int32 {
	ids := make([]int32, 0, len(text)/4+4)
	word := func(w string) { ids = t.model.appendWord(ids, w) }
	atStart := true
	token := func(id int32) { ids, atStart = append(ids, id), false }
	pretokenize := func(s string) { t.pretokenize(s, &atStart, word) }
	normalized := func(s string) { t.normAdded.split(s, !allowSpecial, pretokenize, token) }
	raw := func(s string) { normalized(t.norm.normalize(s)) }
	t.rawAdded.split(text, !allowSpecial, raw, token)
	return ids
}

// pretokenize cuts s, a piece of normalized text between added tokens,
// into words; atStart says whether s begins the text (for a Metaspace
// pre-tokenizer that marks the start of the text only) and is cleared.
func (t *Tokenizer) pretokenize(s string, atStart *bool, word func(string)) {
	first := *atStart
	*atStart = false
	if t.metaFirst != nil {
		t.metaFirst.applyAt(s, first, word)
		return
	}
	t.pre.apply(s, word)
}

// Decode returns the text of ids: the exact bytes the tokens stand for, so
// that Decode(Encode(s)) == s for any s that normalization leaves alone.
// Special tokens are included. Ids that have no token are skipped (see
// DecodeChecked). The result is not valid UTF-8 when ids end or begin
// inside a multi-byte character; use a StreamDecoder to decode a stream,
// and note that encoding/json replaces invalid bytes with U+FFFD. A
// SentencePiece-style tokenizer's decoder removes the space its encoder
// put before the text ("▁Hello" decodes to "Hello", as in Hugging Face),
// which AppendDecoded and TokenBytes keep.
func (t *Tokenizer) Decode(ids []int32) string {
	return string(stripLeading(t.AppendDecoded(nil, ids), t.stripLead))
}

// TokenBytes returns, for every id, the bytes Decode gives it alone (nil
// for an id with no token): the vocabulary as constrained decoding
// matches it. The slices are the tokenizer's own; do not modify them.
func (t *Tokenizer) TokenBytes() [][]byte {
	out := make([][]byte, len(t.raw))
	for id := range out {
		if t.valid(int32(id)) {
			out[id] = t.raw[id]
		}
	}
	return out
}

// DecodeChecked is Decode that fails on the first id that has no token.
func (t *Tokenizer) DecodeChecked(ids []int32) (string, error) {
	for i, id := range ids {
		if !t.valid(id) {
			return "", fmt.Errorf("decode: token %d at position %d is out of range [0, %d) or unassigned", id, i, len(t.strs))
		}
	}
	return t.Decode(ids), nil
}

// AppendDecoded appends the bytes of ids to dst, skipping ids that have no
// token.
func (t *Tokenizer) AppendDecoded(dst []byte, ids []int32) []byte {
	for _, id := range ids {
		if t.valid(id) {
			dst = append(dst, t.raw[id]...)
		}
	}
	return dst
}
