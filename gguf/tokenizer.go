package gguf

import (
	"fmt"
	"slices"
	"strings"

	"github.com/clawrl/clawrl/tokenizer"
)

// Metadata keys of the tokenizer.
const (
	KeyTokenizerModel = "tokenizer.ggml.model"
	KeyTokenizerPre   = "tokenizer.ggml.pre"
	KeyTokens         = "tokenizer.ggml.tokens"
	KeyTokenTypes     = "tokenizer.ggml.token_type"
	KeyMerges         = "tokenizer.ggml.merges"
	KeyBOS            = "tokenizer.ggml.bos_token_id"
	KeyEOS            = "tokenizer.ggml.eos_token_id"
	KeyPAD            = "tokenizer.ggml.padding_token_id"
	KeyChatTemplate   = "tokenizer.chat_template"
	KeyScores         = "tokenizer.ggml.scores"
	KeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
	KeyUNK            = "tokenizer.ggml.unknown_token_id"
	KeyAddBOS         = "tokenizer.ggml.add_bos_token"
)

// phi3RStrip gives Phi-3's special tokens the rstrip of its
// tokenizer.json, which GGUF files do not hold, as llama.cpp gives it them:
// by the model's name (general.name holding "phi3" or "phi-3", in any
// case), every control and user-defined token but <unk>, <s> and
// <|endoftext|> swallows the whitespace after it, so that the "\n" a chat
// template writes after <|user|> or <|end|> is not a token of the prompt.
func phi3RStrip(f *File, v *tokenizer.Vocab) {
	nv, ok := f.Get("general.name")
	if !ok {
		return
	}
	name, ok := nv.Str()
	if lower := strings.ToLower(name); !ok || !strings.Contains(lower, "phi3") && !strings.Contains(lower, "phi-3") {
		return
	}
	v.RStrip = map[int32]bool{}
	for i, s := range v.Tokens {
		typ := tokenizer.TokenNormal
		if v.Types != nil {
			typ = v.Types[i]
		}
		if (typ == tokenizer.TokenControl || typ == tokenizer.TokenUserDefined || s == "</s>") && s != "<unk>" && s != "<s>" && s != "<|endoftext|>" {
			v.RStrip[int32(i)] = true
		}
	}
}

// Tokenizer builds the tokenizer the file holds (see ReadTokenizer).
func (m *Model) Tokenizer() (*tokenizer.Tokenizer, error) { return ReadTokenizer(m.f) }

// ReadTokenizer builds a tokenizer from a file's metadata: the byte-level
// BPE vocabulary of tokenizer.ggml.model "gpt2" (tokens, token types,
// merges) and its pre-tokenizer (tokenizer.ggml.pre: qwen2, llama-bpe,
// gpt-2, default; see tokenizer.Vocab), or the SentencePiece BPE
// vocabulary of tokenizer.ggml.model "llama" (tokens, token types,
// scores, add_space_prefix: Llama 2, Mistral, TinyLlama), the BOS, EOS
// and padding tokens, and the chat templates (tokenizer.chat_template,
// and named ones as tokenizer.chat_template.NAME).
func ReadTokenizer(f *File) (*tokenizer.Tokenizer, error) {
	m := &Model{f: f}
	kind, ok, err := m.stringKey(KeyTokenizerModel)
	if err != nil {
		return nil, err
	}
	switch {
	case !ok:
		return nil, f.errorf("the file holds no tokenizer (%s is missing)", KeyTokenizerModel)
	case kind != tokenizer.ModelBPE && kind != tokenizer.ModelSPM:
		return nil, fmt.Errorf("%w: %w", f.errorf("tokenizer %s %q is not supported; clawrl runs byte-level BPE (%q) and SentencePiece BPE (%q) tokenizers", KeyTokenizerModel, kind, tokenizer.ModelBPE, tokenizer.ModelSPM), tokenizer.ErrUnsupported)
	}
	v := tokenizer.Vocab{Model: kind, Pre: "default", BOS: -1, EOS: -1, PAD: -1, AddSpacePrefix: true}
	if kind == tokenizer.ModelSPM {
		sv, ok := f.Get(KeyScores)
		if !ok {
			return nil, f.errorf("metadata: %s is missing (a SentencePiece vocabulary merges by them)", KeyScores)
		}
		scores, ok := sv.Floats()
		if !ok {
			return nil, f.errorf("metadata: %s is %s of %s, not an array of floats", KeyScores, sv.Type(), sv.ElemType())
		}
		v.Scores = make([]float32, len(scores))
		for i, x := range scores {
			v.Scores[i] = float32(x)
		}
		if bv, ok := f.Get(KeyAddSpacePrefix); ok {
			if v.AddSpacePrefix, ok = bv.Bool(); !ok {
				return nil, f.errorf("metadata: %s is %s, not a bool", KeyAddSpacePrefix, bv.Type())
			}
		}
	}
	if pre, ok, err := m.stringKey(KeyTokenizerPre); err != nil {
		return nil, err
	} else if ok {
		v.Pre = pre
	}
	tv, ok := f.Get(KeyTokens)
	if !ok {
		return nil, f.errorf("metadata: %s is missing", KeyTokens)
	}
	if v.Tokens, ok = tv.Strings(); !ok {
		return nil, f.errorf("metadata: %s is %s of %s, not an array of strings", KeyTokens, tv.Type(), tv.ElemType())
	}
	if tt, ok := f.Get(KeyTokenTypes); ok {
		ints, ok := tt.Ints()
		if !ok {
			return nil, f.errorf("metadata: %s is %s of %s, not an array of integers", KeyTokenTypes, tt.Type(), tt.ElemType())
		}
		v.Types = make([]tokenizer.TokenType, len(ints))
		for i, x := range ints {
			v.Types[i] = tokenizer.TokenType(x)
		}
	}
	if mv, ok := f.Get(KeyMerges); ok {
		merges, ok := mv.Strings()
		if !ok {
			return nil, f.errorf("metadata: %s is %s of %s, not an array of strings", KeyMerges, mv.Type(), mv.ElemType())
		}
		v.Merges = make([][2]string, len(merges))
		for i, s := range merges {
			if v.Merges[i], err = tokenizer.ParseMerge(s); err != nil {
				return nil, f.errorf("metadata: %s[%d]: %v", KeyMerges, i, err)
			}
		}
	}
	for _, s := range []struct {
		key string
		dst *int32
	}{{KeyBOS, &v.BOS}, {KeyEOS, &v.EOS}, {KeyPAD, &v.PAD}} {
		id, ok, err := m.intKey(s.key)
		if err != nil {
			return nil, err
		}
		if ok {
			*s.dst = int32(id)
		}
	}
	phi3RStrip(f, &v)
	// A raw prompt gets BOS first where llama.cpp puts it there: as the
	// file says, or by default for SentencePiece and Llama 3's split.
	v.AddBOS = kind == tokenizer.ModelSPM || tokenizer.PreAddsBOS(v.Pre)
	if bv, ok := f.Get(KeyAddBOS); ok {
		if v.AddBOS, ok = bv.Bool(); !ok {
			return nil, f.errorf("metadata: %s is %s, not a bool", KeyAddBOS, bv.Type())
		}
	}
	for _, kv := range f.KV {
		name, ok := "default", kv.Key == KeyChatTemplate
		if !ok {
			name, ok = strings.CutPrefix(kv.Key, KeyChatTemplate+".")
		}
		if !ok {
			continue
		}
		src, isStr := kv.Value.Str()
		if !isStr {
			return nil, f.errorf("metadata: %s is %s, not a string", kv.Key, kv.Value.Type())
		}
		if v.ChatTemplates == nil {
			v.ChatTemplates = map[string]string{}
		}
		v.ChatTemplates[name] = src
	}
	tok, err := tokenizer.FromVocab(v)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: tokenizer: %w", f.path, err)
	}
	return tok, nil
}

// TokenizerMetadata returns the metadata of a vocabulary
// (tokenizer.Tokenizer.Vocab) as llama.cpp's converter writes it: merges
// and the pre-tokenizer's name for byte-level BPE, scores and
// add_space_prefix for SentencePiece.
func TokenizerMetadata(v tokenizer.Vocab) []KV {
	types := make([]int32, len(v.Tokens))
	for i := range types {
		types[i] = int32(tokenizer.TokenNormal)
		if v.Types != nil {
			types[i] = int32(v.Types[i])
		}
	}
	var kvs []KV
	if v.Model == tokenizer.ModelSPM {
		kvs = []KV{
			{KeyTokenizerModel, String(tokenizer.ModelSPM)},
			{KeyTokens, Array(slices.Clone(v.Tokens))},
			{KeyScores, Array(slices.Clone(v.Scores))},
			{KeyTokenTypes, Array(types)},
			{KeyAddSpacePrefix, Bool(v.AddSpacePrefix)},
		}
		for id, typ := range types {
			if typ == int32(tokenizer.TokenUnknown) {
				kvs = append(kvs, KV{KeyUNK, Uint32(uint32(id))})
				break
			}
		}
	} else {
		merges := make([]string, len(v.Merges))
		for i, m := range v.Merges {
			merges[i] = m[0] + " " + m[1]
		}
		kvs = []KV{
			{KeyTokenizerModel, String(tokenizer.ModelBPE)},
			{KeyTokenizerPre, String(v.Pre)},
			{KeyTokens, Array(slices.Clone(v.Tokens))},
			{KeyTokenTypes, Array(types)},
			{KeyMerges, Array(merges)},
		}
	}
	for _, s := range []struct {
		key string
		id  int32
	}{{KeyBOS, v.BOS}, {KeyEOS, v.EOS}, {KeyPAD, v.PAD}} {
		if s.id >= 0 {
			kvs = append(kvs, KV{s.key, Uint32(uint32(s.id))})
		}
	}
	kvs = append(kvs, KV{KeyAddBOS, Bool(v.AddBOS)})
	names := make([]string, 0, len(v.ChatTemplates))
	for name := range v.ChatTemplates {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		key := KeyChatTemplate
		if name != "default" {
			key += "." + name
		}
		kvs = append(kvs, KV{key, String(v.ChatTemplates[name])})
	}
	return kvs
}
