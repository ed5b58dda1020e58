package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/clawrl/clawrl/atomicfile"
)

// TokenizerJSON returns the tokenizer in Hugging Face's tokenizer.json
// format, which Load, FromJSON and Hugging Face tokenizers read.
func (t *Tokenizer) TokenizerJSON() []byte {
	var b bytes.Buffer
	b.WriteString(`{"version":"1.0","truncation":null,"padding":null,"added_tokens":[`)
	for i, a := range t.added {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"content":%s,"single_word":%t,"lstrip":%t,"rstrip":%t,"normalized":%t,"special":%t}`,
			a.ID, quoteJSON(a.Content), a.SingleWord, a.LStrip, a.RStrip, a.Normalized, a.Special)
	}
	b.WriteString(`],"normalizer":`)
	b.Write(orNull(t.normalizer))
	b.WriteString(`,"pre_tokenizer":`)
	b.Write(orNull(t.preTok))
	b.WriteString(`,"post_processor":`)
	b.Write(orNull(t.postProc))
	b.WriteString(`,"decoder":`)
	b.Write(orNull(t.decoder))
	unk := "null"
	if t.unkModel != "" {
		unk = quoteJSON(t.unkModel)
	}
	fmt.Fprintf(&b, `,"model":{"type":"BPE","dropout":null,"unk_token":%s,"continuing_subword_prefix":"","end_of_word_suffix":"","fuse_unk":%t,"byte_fallback":%t,"ignore_merges":%t,"vocab":{`,
		unk, t.model.fuseUnk, t.model.byteFallback, t.model.ignoreMerges)
	first := true
	for id, s := range t.strs {
		if s == "" {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(quoteJSON(s))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(id))
	}
	b.WriteString(`},"merges":[`)
	// "a b" strings load in every version of Hugging Face tokenizers; pairs
	// are needed only when a token holds a space.
	pairs := slices.ContainsFunc(t.merges, func(m [2]int32) bool {
		return strings.Contains(t.strs[m[0]], " ") || strings.Contains(t.strs[m[1]], " ")
	})
	for i, m := range t.merges {
		if i > 0 {
			b.WriteByte(',')
		}
		if pairs {
			b.WriteString("[" + quoteJSON(t.strs[m[0]]) + "," + quoteJSON(t.strs[m[1]]) + "]")
		} else {
			b.WriteString(quoteJSON(t.strs[m[0]] + " " + t.strs[m[1]]))
		}
	}
	b.WriteString("]}}")
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		panic(fmt.Sprintf("tokenizer: TokenizerJSON built invalid JSON: %v", err)) // a bug here, not bad input
	}
	out.WriteByte('\n')
	return out.Bytes()
}

// ConfigJSON returns a tokenizer_config.json that names the special tokens
// and holds the chat template. Other settings a loaded checkpoint's config
// may have had are not kept.
func (t *Tokenizer) ConfigJSON() []byte {
	type addedEntry struct {
		Content    string `json:"content"`
		LStrip     bool   `json:"lstrip"`
		Normalized bool   `json:"normalized"`
		RStrip     bool   `json:"rstrip"`
		SingleWord bool   `json:"single_word"`
		Special    bool   `json:"special"`
	}
	type namedTemplate struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	var cfg struct {
		AddBOSToken    bool                  `json:"add_bos_token"`
		AddPrefixSpace bool                  `json:"add_prefix_space"`
		AddedTokens    map[string]addedEntry `json:"added_tokens_decoder"`
		BOS            *string               `json:"bos_token"`
		ChatTemplate   any                   `json:"chat_template,omitempty"`
		CleanUpSpaces  bool                  `json:"clean_up_tokenization_spaces"`
		EOS            *string               `json:"eos_token"`
		PAD            *string               `json:"pad_token"`
		TokenizerClass string                `json:"tokenizer_class"`
		UNK            *string               `json:"unk_token"`
	}
	cfg.AddedTokens = make(map[string]addedEntry, len(t.added))
	for _, a := range t.added {
		cfg.AddedTokens[strconv.Itoa(int(a.ID))] = addedEntry{a.Content, a.LStrip, a.Normalized, a.RStrip, a.SingleWord, a.Special}
	}
	name := func(s specialToken) *string {
		if s.text == "" {
			return nil
		}
		return &s.text
	}
	cfg.BOS, cfg.EOS, cfg.PAD, cfg.UNK = name(t.bos), name(t.eos), name(t.pad), name(t.unk)
	cfg.AddBOSToken = t.AddsBOS()
	cfg.TokenizerClass = "PreTrainedTokenizerFast"
	if t.HasChatTemplate() {
		if ct, ok := t.chat.byName["default"]; ok && len(t.chat.byName) == 1 {
			cfg.ChatTemplate = ct.source
		} else {
			var list []namedTemplate
			for n, ct := range t.chat.byName {
				list = append(list, namedTemplate{n, ct.source})
			}
			slices.SortFunc(list, func(a, b namedTemplate) int { return strings.Compare(a.Name, b.Name) })
			cfg.ChatTemplate = list
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		panic(fmt.Sprintf("tokenizer: ConfigJSON: %v", err)) // only plain strings and bools: cannot fail
	}
	return b.Bytes()
}

// Save writes tokenizer.json and tokenizer_config.json into dir, creating
// it if needed. Each file is written atomically (atomicfile.WriteBytes:
// temporary file, fsync, rename, fsync of dir), so a crash never leaves a
// partial file behind.
func (t *Tokenizer) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save tokenizer: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{tokenizerFile, t.TokenizerJSON()}, {configFile, t.ConfigJSON()}} {
		if err := atomicfile.WriteBytes(filepath.Join(dir, f.name), 0o644, f.data); err != nil {
			return fmt.Errorf("save tokenizer: %w", err)
		}
	}
	return nil
}

// quoteJSON returns s as a JSON string, without escaping <, > and &.
func quoteJSON(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

func rawJSON(s string) json.RawMessage { return json.RawMessage(s) }

func orNull(raw json.RawMessage) []byte {
	if isNull(raw) {
		return []byte("null")
	}
	return raw
}
