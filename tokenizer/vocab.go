package tokenizer

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// TokenType is the role of a token in a Vocab, numbered as GGUF files
// number them (tokenizer.ggml.token_type).
type TokenType int32

// Token types.
const (
	TokenNormal      TokenType = 1 // a BPE token in the byte-level alphabet
	TokenUnknown     TokenType = 2
	TokenControl     TokenType = 3 // a special added token ("<|im_end|>")
	TokenUserDefined TokenType = 4 // an added token that is not special ("<think>")
	TokenUnused      TokenType = 5 // a placeholder that pads the vocabulary
	TokenByte        TokenType = 6
)

// Tokenizer models as GGUF files name them (tokenizer.ggml.model).
const (
	ModelBPE = "gpt2"  // byte-level BPE
	ModelSPM = "llama" // SentencePiece BPE
)

// Names of pre-tokenizers as llama.cpp's converter writes them
// (tokenizer.ggml.pre), for the pre-tokenizers this package runs.
const (
	PreQwen2  = "qwen2"     // PatternQwen2, NFC normalization (Qwen2, Qwen2.5, Qwen3)
	PreLlama3 = "llama-bpe" // PatternLlama3, merges ignored for whole-word tokens (Llama 3)
	PreGPT2   = "gpt-2"     // the GPT-2 byte-level pattern
)

// Vocab is a BPE vocabulary as a GGUF file holds it. A byte-level one
// (Model "gpt2"): the tokens by id in the byte-level alphabet (added
// tokens as their text), their types, the merge rules by rank and the
// pre-tokenizer's name. A SentencePiece one (Model "llama"): the tokens
// with "▁" for a space (a user-defined token with the space itself, as
// llama.cpp's converter writes it), their types and scores, and whether a
// "▁" goes before the text. Both: the special tokens and the chat templates.
// FromVocab builds a Tokenizer from one; Tokenizer.Vocab makes one.
type Vocab struct {
	// Model is ModelBPE ("" reads as it) or ModelSPM.
	Model  string
	Tokens []string
	// Types has one entry per token; nil means every token is normal.
	Types  []TokenType
	Merges [][2]string
	// Pre names the pre-tokenizer: PreQwen2, PreLlama3 (or its other
	// names "llama3" and "llama-v3"), PreGPT2 ("gpt2"), one of the other
	// names PreTokenizerNames lists, or "default", which llama.cpp's
	// converter writes for a pre-tokenizer it does not recognise and which
	// is run as llama.cpp runs it.
	Pre string
	// Scores (SentencePiece) rank merges: of two adjacent pieces, the
	// pair that makes the token of highest score merges first.
	Scores []float32
	// AddSpacePrefix (SentencePiece) puts a "▁" before each piece of text
	// that starts the text or follows a special token, as llama.cpp's
	// tokenizer.ggml.add_space_prefix (true in its files unless stated).
	AddSpacePrefix bool
	// BOS, EOS and PAD are token ids, −1 for none.
	BOS, EOS, PAD int32
	// AddBOS puts the BOS token before a raw prompt
	// (tokenizer.ggml.add_bos_token; see Tokenizer.EncodePrompt).
	AddBOS bool
	// ChatTemplates by name; "default" is the chat template.
	ChatTemplates map[string]string
	// RStrip lists added tokens (control or user-defined) that swallow
	// the whitespace after them where they are matched in text, as
	// tokenizer.json's rstrip says; GGUF files do not hold it, and
	// llama.cpp sets it by the model's name (Phi-3's).
	RStrip map[int32]bool
}

// preTokenizer is how a pre-tokenizer name is run.
type preTokenizer struct {
	normalizer   string // tokenizer.json's normalizer section, "" for none
	preTokenizer string
	ignoreMerges bool
}

func splitByteLevel(pattern string) string {
	return `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` + quoteJSON(pattern) +
		`},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]}`
}

// The pre-tokenizers below, by what they run (llama.cpp names several
// models' the same when their tokenizer.json split the text alike).
var (
	preQwen2        = preTokenizer{normalizer: `{"type":"NFC"}`, preTokenizer: splitByteLevel(PatternQwen2)}
	preLlama3       = preTokenizer{preTokenizer: splitByteLevel(PatternLlama3), ignoreMerges: true}
	preLlama3Merged = preTokenizer{preTokenizer: splitByteLevel(PatternLlama3)} // Llama 3's split, merges never skipped
	preGPT2         = preTokenizer{preTokenizer: `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`}
	// preDigitsGPT2 isolates every digit, then splits as GPT-2 does
	// (SmolLM, StarCoder, Refact, Command R).
	preDigitsGPT2 = preTokenizer{preTokenizer: `{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]}`}
)

// PreSmolLM names preDigitsGPT2 when a tokenizer is written as GGUF.
const PreSmolLM = "smollm"

// PreSmaug names Llama 3's split without ignore_merges.
const PreSmaug = "smaug-bpe"

var preTokenizers = map[string]preTokenizer{
	PreQwen2: preQwen2, "deepseek-r1-qwen": preQwen2,
	PreLlama3: preLlama3, "llama3": preLlama3, "llama-v3": preLlama3, "falcon3": preLlama3, "pixtral": preLlama3,
	PreSmaug: preLlama3Merged, "dbrx": preLlama3Merged,
	PreGPT2: preGPT2, "gpt2": preGPT2, "mpt": preGPT2, "olmo": preGPT2, "phi-2": preGPT2,
	PreSmolLM: preDigitsGPT2, "starcoder": preDigitsGPT2, "refact": preDigitsGPT2, "command-r": preDigitsGPT2, "codeshell": preDigitsGPT2,
	"minerva-7b": preDigitsGPT2,
}

// PreAddsBOS reports whether llama.cpp puts the BOS token before a raw
// prompt for a byte-level vocabulary of pre-tokenizer pre when the file
// does not say (tokenizer.ggml.add_bos_token): Llama 3's split does.
func PreAddsBOS(pre string) bool {
	p, ok := preTokenizers[pre]
	return ok && p.ignoreMerges
}

// PreNormalizes reports whether the pre-tokenizer named pre comes with a
// normalizer (Qwen2's NFC), which llama.cpp does not apply.
func PreNormalizes(pre string) bool { return preTokenizers[pre].normalizer != "" }

// PreTokenizerNames lists the pre-tokenizer names FromVocab accepts.
func PreTokenizerNames() []string { return slices.Sorted(maps.Keys(preTokenizers)) }

// FromVocab builds a tokenizer from a vocabulary: normal (and byte and
// unknown) tokens form the BPE vocabulary, control tokens become special
// added tokens and user-defined tokens added tokens that are not special,
// both matched in the raw text (in a SentencePiece vocabulary a
// user-defined token is also a piece BPE merges into, with its spaces as
// "▁"); unused tokens are left out (their ids decode to nothing). A
// special-token id that names no token is ignored.
func FromVocab(v Vocab) (*Tokenizer, error) {
	switch v.Model {
	case "", ModelBPE:
	case ModelSPM:
		return fromSPMVocab(v)
	default:
		return nil, unsupported("tokenizer model %q (supported: %q, byte-level BPE, and %q, SentencePiece BPE)", v.Model, ModelBPE, ModelSPM)
	}
	pre, ok := preTokenizers[v.Pre]
	if !ok {
		return nil, unsupported("pre-tokenizer %q (supported: %s)", v.Pre, strings.Join(PreTokenizerNames(), ", "))
	}
	f := &fileJSON{
		PreTokenizer: rawJSON(pre.preTokenizer),
		Decoder:      rawJSON(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}`),
		Model: modelJSON{
			Type:         "BPE",
			Vocab:        make(map[string]int32, len(v.Tokens)),
			IgnoreMerges: pre.ignoreMerges,
		},
	}
	if pre.normalizer != "" {
		f.Normalizer = rawJSON(pre.normalizer)
	}
	if _, err := f.addTokens(v, false); err != nil {
		return nil, err
	}
	f.Model.Merges = make([]mergeJSON, len(v.Merges))
	for i, m := range v.Merges {
		f.Model.Merges[i] = mergeJSON(m)
	}
	return buildVocab(f, v)
}

// addTokens puts v's tokens into f: normal, byte and unknown ones into the
// BPE vocabulary, control ones as special added tokens, user-defined ones
// as added tokens that are not special (unused ones are left out); with
// unkSpecial, the first unknown token is also the model's unk_token and a
// special added token (as SentencePiece files have it). It returns the
// normal tokens.
func (f *fileJSON) addTokens(v Vocab, unkSpecial bool) (normal map[string]int32, err error) {
	if v.Types != nil && len(v.Types) != len(v.Tokens) {
		return nil, fmt.Errorf("%d token types for %d tokens", len(v.Types), len(v.Tokens))
	}
	normal = map[string]int32{}
	addedAt := map[string]int32{}
	added := func(id int32, s string, special bool) error {
		if prev, dup := addedAt[s]; dup {
			return fmt.Errorf("added token %q has two ids, %d and %d", s, prev, id)
		}
		addedAt[s] = id
		f.AddedTokens = append(f.AddedTokens, addedToken{ID: id, Content: s, Special: special, RStrip: v.RStrip[id]})
		return nil
	}
	for i, s := range v.Tokens {
		id := int32(i)
		typ := TokenNormal
		if v.Types != nil {
			typ = v.Types[i]
		}
		switch typ {
		case TokenNormal, TokenByte, TokenUnknown:
			if s == "" {
				return nil, fmt.Errorf("token %d is empty", id)
			}
			if prev, dup := f.Model.Vocab[s]; dup {
				return nil, fmt.Errorf("token %q has two ids, %d and %d", s, prev, id)
			}
			f.Model.Vocab[s] = id
			if typ == TokenNormal {
				normal[s] = id
			}
			if typ == TokenUnknown && unkSpecial && f.Model.UnkToken == nil {
				f.Model.UnkToken = &v.Tokens[i]
				if err := added(id, s, true); err != nil {
					return nil, err
				}
			}
		case TokenControl, TokenUserDefined:
			if s == "" {
				return nil, fmt.Errorf("added token %d is empty", id)
			}
			if err := added(id, s, typ == TokenControl); err != nil {
				return nil, err
			}
		case TokenUnused:
		default:
			return nil, fmt.Errorf("token %d (%q) has type %d, not one of 1-6", id, s, typ)
		}
	}
	return normal, nil
}

// buildVocab builds the tokenizer.json f made from v and sets v's special
// tokens and chat templates.
func buildVocab(f *fileJSON, v Vocab) (*Tokenizer, error) {
	t, err := build(f)
	if err != nil {
		return nil, err
	}
	for _, st := range []struct {
		id  int32
		dst *specialToken
	}{{v.BOS, &t.bos}, {v.EOS, &t.eos}, {v.PAD, &t.pad}} {
		if t.valid(st.id) {
			*st.dst = specialToken{text: t.TokenString(st.id), id: st.id, ok: true}
		}
	}
	if len(v.ChatTemplates) > 0 {
		t.chat = newChatTemplates(v.ChatTemplates)
	}
	t.addBOS = v.AddBOS
	return t, nil
}

// ParseMerge splits a merge rule written "a b" (as GGUF files and older
// tokenizer.json files write them) into its two tokens.
func ParseMerge(s string) ([2]string, error) {
	a, b, ok := strings.Cut(s, " ")
	if !ok || a == "" || b == "" || strings.Contains(b, " ") {
		return [2]string{}, fmt.Errorf("merge %q is not two tokens separated by one space", s)
	}
	return [2]string{a, b}, nil
}

// ErrNoPreName is wrapped by Vocab's error for a tokenizer whose
// pre-tokenizer has no name in GGUF files.
var ErrNoPreName = errors.New("the pre-tokenizer has no GGUF name")

// Vocab returns the tokenizer as a GGUF vocabulary of size tokens (at
// least VocabSize: ids past the tokenizer's, and ids no token has, are
// unused tokens named "[PADn]", as llama.cpp's converter pads them), so
// that FromVocab gives back a tokenizer that encodes every text the same.
// It fails with ErrNoPreName when the normalizer and pre-tokenizer are not
// exactly one of the named ones (Qwen2's, Llama 3's, GPT-2's).
func (t *Tokenizer) Vocab(size int) (Vocab, error) {
	if t.model.chars {
		return t.spmVocab(size)
	}
	pre, err := t.preName()
	if err != nil {
		return Vocab{}, err
	}
	v := t.baseVocab(size)
	v.Model, v.Pre = ModelBPE, pre
	v.Merges = make([][2]string, len(t.merges))
	for i, m := range t.merges {
		v.Merges[i] = [2]string{t.strs[m[0]], t.strs[m[1]]}
	}
	return v, nil
}

// baseVocab is what Vocab writes for every model: the tokens (normal,
// added, unused padding up to size), the special tokens and the chat
// templates.
func (t *Tokenizer) baseVocab(size int) Vocab {
	n := max(size, len(t.strs))
	v := Vocab{Tokens: make([]string, n), Types: make([]TokenType, n), BOS: -1, EOS: -1, PAD: -1, AddBOS: t.AddsBOS()}
	for id := range n {
		i := int32(id)
		switch a, added := t.addedAt[i]; {
		case added && t.added[a].Special:
			v.Tokens[id], v.Types[id] = t.added[a].Content, TokenControl
		case added:
			v.Tokens[id], v.Types[id] = t.added[a].Content, TokenUserDefined
		case t.valid(i):
			v.Tokens[id], v.Types[id] = t.strs[id], TokenNormal
		default:
			v.Tokens[id], v.Types[id] = fmt.Sprintf("[PAD%d]", id), TokenUnused
		}
	}
	for _, st := range []struct {
		tok specialToken
		dst *int32
	}{{t.bos, &v.BOS}, {t.eos, &v.EOS}, {t.pad, &v.PAD}} {
		if st.tok.ok {
			*st.dst = st.tok.id
		}
	}
	if t.chat != nil {
		v.ChatTemplates = make(map[string]string, len(t.chat.byName))
		for name, ct := range t.chat.byName {
			v.ChatTemplates[name] = ct.source
		}
	}
	return v
}

// preName names the tokenizer's normalizer and pre-tokenizer.
func (t *Tokenizer) preName() (string, error) {
	nfc := t.norm.isForm(norm.NFC)
	switch p := t.pre.(type) {
	case splitStep:
		q, ok := p.m.(qwenMatcher)
		if !ok || p.behavior != behaviorIsolated || p.invert {
			break
		}
		switch {
		case q.maxDigits == 1 && nfc && !t.model.ignoreMerges:
			return PreQwen2, nil
		case q.maxDigits == 3 && len(t.norm) == 0 && t.model.ignoreMerges:
			return PreLlama3, nil
		case q.maxDigits == 3 && len(t.norm) == 0:
			return PreSmaug, nil
		}
	case byteLevelStep:
		if _, ok := p.split.(gpt2Matcher); ok && !p.addPrefixSpace && len(t.norm) == 0 && !t.model.ignoreMerges {
			return PreGPT2, nil
		}
	case sequence:
		d, okD := p[0].(digitsStep)
		b, okB := p[len(p)-1].(byteLevelStep)
		if len(p) == 2 && okD && okB && d.individual && !b.addPrefixSpace && len(t.norm) == 0 && !t.model.ignoreMerges {
			if _, ok := b.split.(gpt2Matcher); ok {
				return PreSmolLM, nil
			}
		}
	}
	if name, ok := t.regexPreName(); ok {
		return name, nil
	}
	return "", fmt.Errorf("%w (GGUF files name Qwen2's: the Qwen2 split pattern after NFC; Llama 3's: the Llama 3 pattern, no normalizer, with or without ignore_merges; GPT-2's byte-level pattern, alone or after single digits)", ErrNoPreName)
}
