package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// ErrUnsupported is wrapped by the errors that report a tokenizer.json
// feature this package does not implement, so that a checkpoint it cannot
// tokenize exactly fails to load instead of tokenizing wrongly.
var ErrUnsupported = errors.New("unsupported tokenizer feature")

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrUnsupported)
}

// File names inside a Hugging Face checkpoint directory.
const (
	tokenizerFile    = "tokenizer.json"
	configFile       = "tokenizer_config.json"
	chatTemplateFile = "chat_template.jinja"
)

// Load reads a tokenizer from a Hugging Face checkpoint directory:
// tokenizer.json (required), tokenizer_config.json (optional: special token
// names and the chat template) and chat_template.jinja (optional; when
// present it replaces the config's template, as in transformers).
func Load(dir string) (*Tokenizer, error) {
	data, err := os.ReadFile(filepath.Join(dir, tokenizerFile))
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, configFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	t, err := FromFiles(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer from %s: %w", dir, err)
	}
	tmpl, err := os.ReadFile(filepath.Join(dir, chatTemplateFile))
	switch {
	case err == nil:
		t.chat = newChatTemplates(map[string]string{"default": string(tmpl)})
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	return t, nil
}

// FromJSON builds a tokenizer from the contents of a tokenizer.json file.
func FromJSON(tokenizerJSON []byte) (*Tokenizer, error) {
	return FromFiles(tokenizerJSON, nil)
}

// FromFiles builds a tokenizer from the contents of tokenizer.json and of
// tokenizer_config.json; configJSON may be nil.
func FromFiles(tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("parse %s: %w", tokenizerFile, err)
	}
	t, err := build(&f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tokenizerFile, err)
	}
	if len(configJSON) > 0 {
		if err := t.applyConfig(configJSON); err != nil {
			return nil, fmt.Errorf("%s: %w", configFile, err)
		}
	}
	return t, nil
}

// fileJSON is the part of tokenizer.json this package reads. Truncation and
// padding are runtime settings of the Hugging Face library and are ignored,
// and so is the post-processor: Encode never adds BOS/EOS around its input
// (a chat template writes them into the text instead).
type fileJSON struct {
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         modelJSON       `json:"model"`
}

type modelJSON struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	ByteFallback            bool             `json:"byte_fallback"`
	FuseUnk                 bool             `json:"fuse_unk"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  []mergeJSON      `json:"merges"`
}

// mergeJSON is one merge rule, written either as "a b" (older files) or as
// ["a", "b"] (newer ones).
type mergeJSON [2]string

func (m *mergeJSON) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		parts := strings.Split(s, " ")
		if len(parts) != 2 {
			return fmt.Errorf("merge %q is not two tokens separated by one space", s)
		}
		m[0], m[1] = parts[0], parts[1]
		return nil
	}
	var pair []string
	if err := json.Unmarshal(b, &pair); err != nil {
		return fmt.Errorf("merge %s: %w", b, err)
	}
	if len(pair) != 2 {
		return fmt.Errorf("merge %s is not a pair", b)
	}
	m[0], m[1] = pair[0], pair[1]
	return nil
}

// componentJSON holds the fields of any normalizer, pre-tokenizer or
// decoder; which ones matter depends on Type.
type componentJSON struct {
	Type          string            `json:"type"`
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Decoders      []json.RawMessage `json:"decoders"`
	Pattern       *struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior         string `json:"behavior"`
	Invert           bool   `json:"invert"`
	AddPrefixSpace   *bool  `json:"add_prefix_space"`
	UseRegex         *bool  `json:"use_regex"`
	IndividualDigits bool   `json:"individual_digits"`
	// Prepend (normalizer), Replace (normalizer, decoder), Strip
	// (decoder) and Metaspace (pre-tokenizer, decoder).
	Prepend       string  `json:"prepend"`
	Content       *string `json:"content"`
	Start         int     `json:"start"`
	Stop          int     `json:"stop"`
	Replacement   string  `json:"replacement"`
	StrRep        string  `json:"str_rep"`
	PrependScheme string  `json:"prepend_scheme"`
	Split         *bool   `json:"split"`
}

// addPrefixSpace is add_prefix_space, false when absent.
func (c *componentJSON) addPrefixSpace() bool { return c.AddPrefixSpace != nil && *c.AddPrefixSpace }

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

func parseComponent(raw json.RawMessage, what string) (*componentJSON, error) {
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("parse %s: %w", what, err)
	}
	return &c, nil
}

func buildNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	c, err := parseComponent(raw, "normalizer")
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "NFC":
		return normalizer{formStep{norm.NFC}}, nil
	case "NFD":
		return normalizer{formStep{norm.NFD}}, nil
	case "NFKC":
		return normalizer{formStep{norm.NFKC}}, nil
	case "NFKD":
		return normalizer{formStep{norm.NFKD}}, nil
	case "Prepend":
		return normalizer{prependStep{c.Prepend}}, nil
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil || c.Content == nil {
			return nil, unsupported("Replace normalizer without a literal String pattern (regex patterns are not supported)")
		}
		return normalizer{replaceStep{*c.Pattern.String, *c.Content}}, nil
	case "Sequence":
		var out normalizer
		for i, sub := range c.Normalizers {
			n, err := buildNormalizer(sub)
			if err != nil {
				return nil, fmt.Errorf("normalizer sequence item %d: %w", i, err)
			}
			out = append(out, n...)
		}
		return out, nil
	}
	return nil, unsupported("normalizer type %q", c.Type)
}

// buildPreTokenizer returns the pre-tokenizer pipeline and whether it holds
// a ByteLevel step.
func buildPreTokenizer(raw json.RawMessage) (step preStep, byteLevel bool, err error) {
	if isNull(raw) {
		return sequence{}, false, nil
	}
	c, err := parseComponent(raw, "pre_tokenizer")
	if err != nil {
		return nil, false, err
	}
	switch c.Type {
	case "Sequence":
		var seq sequence
		for i, sub := range c.Pretokenizers {
			s, bl, err := buildPreTokenizer(sub)
			if err != nil {
				return nil, false, fmt.Errorf("pre_tokenizer sequence item %d: %w", i, err)
			}
			byteLevel = byteLevel || bl
			if inner, ok := s.(sequence); ok {
				seq = append(seq, inner...)
			} else {
				seq = append(seq, s)
			}
		}
		if len(seq) == 1 {
			return seq[0], byteLevel, nil
		}
		return seq, byteLevel, nil
	case "Split":
		if c.Pattern == nil || (c.Pattern.Regex == nil) == (c.Pattern.String == nil) {
			return nil, false, errors.New("split pre-tokenizer: pattern must hold one of Regex or String")
		}
		var m matcher
		if c.Pattern.Regex != nil {
			if m, err = newMatcher(*c.Pattern.Regex); err != nil {
				return nil, false, fmt.Errorf("split pre-tokenizer: %w", err)
			}
		} else {
			m = literalMatcher{lit: *c.Pattern.String}
		}
		switch c.Behavior {
		case behaviorRemoved, behaviorIsolated, behaviorMergedWithPrevious, behaviorMergedWithNext, behaviorContiguous:
		default:
			return nil, false, unsupported("split pre-tokenizer behavior %q", c.Behavior)
		}
		return splitStep{m: m, behavior: c.Behavior, invert: c.Invert}, false, nil
	case "ByteLevel":
		b := byteLevelStep{addPrefixSpace: c.addPrefixSpace()}
		if c.UseRegex == nil || *c.UseRegex { // use_regex defaults to true
			b.split = gpt2Matcher{}
		}
		if !b.addPrefixSpace && b.split == nil {
			return sequence{}, true, nil // nothing to do at this stage
		}
		return b, true, nil
	case "Digits":
		return digitsStep{individual: c.IndividualDigits}, false, nil
	case "Metaspace":
		m, err := c.metaspace()
		if err != nil {
			return nil, false, err
		}
		return m, false, nil
	}
	return nil, false, unsupported("pre_tokenizer type %q", c.Type)
}

// checkDecoder accepts a ByteLevel decoder, alone or in a Sequence.
func checkDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return unsupported("no decoder (only the ByteLevel decoder is supported)")
	}
	c, err := parseComponent(raw, "decoder")
	if err != nil {
		return err
	}
	switch c.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		if len(c.Decoders) == 0 {
			return unsupported("empty decoder sequence")
		}
		for i, sub := range c.Decoders {
			if err := checkDecoder(sub); err != nil {
				return fmt.Errorf("decoder sequence item %d: %w", i, err)
			}
		}
		return nil
	}
	return unsupported("decoder type %q", c.Type)
}

func checkModel(m *modelJSON) error {
	switch m.Type {
	case "BPE":
	case "":
		if m.Merges == nil {
			return unsupported("model without a type or merges")
		}
	default:
		return unsupported("model type %q (only byte-level BPE is supported)", m.Type)
	}
	if m.Dropout != nil && *m.Dropout > 0 {
		return unsupported("BPE dropout %v", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return unsupported("BPE continuing_subword_prefix %q", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return unsupported("BPE end_of_word_suffix %q", *m.EndOfWordSuffix)
	}
	if len(m.Vocab) == 0 {
		return errors.New("model has an empty vocab")
	}
	return nil
}

// build assembles a Tokenizer from a parsed tokenizer.json.
func build(f *fileJSON) (*Tokenizer, error) {
	if err := checkModel(&f.Model); err != nil {
		return nil, err
	}
	nrm, err := buildNormalizer(f.Normalizer)
	if err != nil {
		return nil, err
	}
	pre, byteLevel, err := buildPreTokenizer(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	var spm spmDecoder
	if byteLevel {
		if err := checkDecoder(f.Decoder); err != nil {
			return nil, err
		}
	} else if spm, err = buildSPMDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("%w (a tokenizer without a ByteLevel pre-tokenizer step must decode as SentencePiece does: Replace, ByteFallback, Fuse, Strip or Metaspace)", err)
	}

	t := &Tokenizer{
		norm:       nrm,
		pre:        pre,
		ids:        make(map[string]int32, len(f.Model.Vocab)+len(f.AddedTokens)),
		normalizer: f.Normalizer,
		preTok:     f.PreTokenizer,
		postProc:   f.PostProcessor,
		decoder:    f.Decoder,
		stripLead:  spm.strip,
		model: bpeModel{
			merges:       make(map[uint64]uint64, len(f.Model.Merges)),
			vocab:        make(map[string]int32, len(f.Model.Vocab)),
			ignoreMerges: f.Model.IgnoreMerges,
			cache:        newWordCache(),
			chars:        !byteLevel,
			unk:          -1,
		},
	}
	if m, ok := pre.(metaspaceStep); ok && m.first {
		t.metaFirst = &m
	}
	if f.Model.UnkToken != nil {
		t.unkModel = *f.Model.UnkToken
	}

	size := int32(0)
	for s, id := range f.Model.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("vocab token %q has negative id %d", s, id)
		}
		size = max(size, id+1)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 || a.Content == "" {
			return nil, fmt.Errorf("added token %q has id %d", a.Content, a.ID)
		}
		size = max(size, a.ID+1)
	}
	t.strs = make([]string, size)
	t.raw = make([][]byte, size)
	t.special = make([]bool, size)
	t.known = make([]bool, size)
	for s, id := range f.Model.Vocab {
		if t.known[id] {
			return nil, fmt.Errorf("vocab id %d is used by both %q and %q", id, t.strs[id], s)
		}
		t.known[id] = true
		t.strs[id] = s
		t.ids[s] = id
		switch raw, ok := byteLevelDecode(s); {
		case !byteLevel:
			t.raw[id] = spm.tokenBytes(s)
			t.model.vocab[s] = id
		case ok:
			t.raw[id] = raw
			t.model.vocab[string(raw)] = id
		default:
			// Not in the byte-level alphabet: BPE can never produce it, and it
			// decodes to its own UTF-8 bytes, as in Hugging Face.
			t.raw[id] = []byte(s)
		}
	}
	if byteLevel {
		for b := 0; b < 256; b++ {
			id, ok := t.ids[string(byteToRune[b])]
			switch {
			case !ok && (b < 0x20 || b > 0x7E):
				// Some vocabularies leave out bytes that only invalid
				// UTF-8 or the rarest planes hold (StarCoder's, MPT's), or
				// control characters (Falcon's): such a byte is dropped,
				// as Hugging Face drops a symbol that has no token and no
				// unk_token. Printable ASCII must be there: without it the
				// vocabulary is not byte-level.
				id = -1 // byteID −1: encoding drops the byte
			case !ok:
				return nil, fmt.Errorf("vocab lacks the byte-level token %q for byte 0x%02x", string(byteToRune[b]), b)
			}
			t.model.byteID[b] = id
		}
	} else {
		if err := t.model.setFallback(&f.Model); err != nil {
			return nil, err
		}
		if cutsWords(&f.Model, metaspace) {
			t.model.cut = metaspace
		}
	}
	t.merges = make([][2]int32, 0, len(f.Model.Merges))
	for rank, mg := range f.Model.Merges {
		a, okA := f.Model.Vocab[mg[0]]
		b, okB := f.Model.Vocab[mg[1]]
		c, okC := f.Model.Vocab[mg[0]+mg[1]]
		if !okA || !okB || !okC {
			return nil, fmt.Errorf("merge %d (%q %q): token not in vocab", rank, mg[0], mg[1])
		}
		// A repeated pair keeps its last rank, as Hugging Face does.
		t.model.merges[pairKey(a, b)] = uint64(rank)<<32 | uint64(uint32(c))
		t.merges = append(t.merges, [2]int32{a, b})
	}

	// Added tokens: their id replaces any vocab id of the same string.
	var rawTok, normTok []addedToken
	var rawKeys, normKeys []string
	t.addedAt = make(map[int32]int, len(f.AddedTokens))
	for _, a := range f.AddedTokens {
		if _, dup := t.addedAt[a.ID]; dup {
			return nil, fmt.Errorf("added token id %d is used twice", a.ID)
		}
		t.addedAt[a.ID] = len(t.added)
		t.known[a.ID] = true
		t.raw[a.ID] = []byte(a.Content)
		if !byteLevel {
			// Hugging Face runs added tokens through the decoder like any
			// other (tokenizers reverted skipping it, PR #1569; so does
			// transformers.js), so a SentencePiece-style added token
			// decodes as its vocabulary entry would: Gemma's "▁▁"
			// (id 138, also what BPE makes of two spaces) is two spaces,
			// not "▁▁". A byte-level added token keeps its text.
			t.raw[a.ID] = spm.tokenBytes(a.Content)
		}
		t.ids[a.Content] = a.ID
		t.special[a.ID] = a.Special
		t.added = append(t.added, a)
		if a.Normalized {
			normTok = append(normTok, a)
			normKeys = append(normKeys, nrm.normalize(a.Content))
		} else {
			rawTok = append(rawTok, a)
			rawKeys = append(rawKeys, a.Content)
		}
	}
	t.rawAdded = newAddedMatcher(rawTok, rawKeys)
	t.normAdded = newAddedMatcher(normTok, normKeys)
	t.guard = newSpecialGuard(rawTok, rawKeys, normTok, normKeys, len(nrm) > 0)
	return t, nil
}

// configJSON is the part of tokenizer_config.json this package reads.
type configJSON struct {
	BOS          tokenField      `json:"bos_token"`
	EOS          tokenField      `json:"eos_token"`
	PAD          tokenField      `json:"pad_token"`
	UNK          tokenField      `json:"unk_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
	AddBOSToken  *bool           `json:"add_bos_token"`
}

// tokenField is a special token in tokenizer_config.json: a string, null, or
// an object whose "content" is the string.
type tokenField string

func (f *tokenField) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*f = ""
		return nil
	}
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = tokenField(s)
		return nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("special token %s: %w", b, err)
	}
	*f = tokenField(obj.Content)
	return nil
}

func (t *Tokenizer) applyConfig(data []byte) error {
	var c configJSON
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	set := func(role string, name tokenField, dst *specialToken) error {
		if name == "" {
			return nil
		}
		id, ok := t.ids[string(name)]
		if !ok {
			return fmt.Errorf("%s %q is not in the vocabulary", role, name)
		}
		*dst = specialToken{text: string(name), id: id, ok: true}
		return nil
	}
	if err := errors.Join(
		set("bos_token", c.BOS, &t.bos),
		set("eos_token", c.EOS, &t.eos),
		set("pad_token", c.PAD, &t.pad),
	); err != nil {
		return err
	}
	// A raw prompt gets the BOS token as the post-processor puts it there,
	// unless add_bos_token says otherwise (transformers' Llama tokenizers
	// rebuild the post-processor from it).
	if tok, ok := postProcessorAddsBOS(t.postProc); ok && t.bos.ok && tok == t.bos.text {
		t.addBOS = true
	}
	if c.AddBOSToken != nil {
		t.addBOS = *c.AddBOSToken
	}
	// A byte-level model never needs an unknown token; its name is only
	// passed on to chat templates.
	t.unk = specialToken{text: string(c.UNK)}
	if isNull(c.ChatTemplate) {
		return nil
	}
	templates, err := parseChatTemplateField(c.ChatTemplate)
	if err != nil {
		return err
	}
	t.chat = newChatTemplates(templates)
	return nil
}

// parseChatTemplateField reads chat_template: one template string, or a
// list of {"name": ..., "template": ...}.
func parseChatTemplateField(raw json.RawMessage) (map[string]string, error) {
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return map[string]string{"default": one}, nil
	}
	var list []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("chat_template is neither a string nor a list of named templates: %w", err)
	}
	out := make(map[string]string, len(list))
	for i, e := range list {
		if e.Name == nil || e.Template == nil {
			return nil, fmt.Errorf("chat_template item %d lacks a name or a template", i)
		}
		out[*e.Name] = *e.Template
	}
	return out, nil
}
