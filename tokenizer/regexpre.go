package tokenizer

import (
	"slices"
	"strings"
)

// regexPre is a pre-tokenizer that is nothing but Split regexes, each
// isolating its matches within the pieces the one before it left, and then
// the byte-level mapping: how llama.cpp runs the pre-tokenizers of
// DeepSeek's, Falcon's, Mistral's Tekken and OpenAI's o200k tokenizers,
// and how their
// tokenizer.json files describe them (a Sequence of Split pre-tokenizers,
// behavior Isolated, before a ByteLevel one without its own regex).
type regexPre struct {
	patterns     []string
	ignoreMerges bool
	// total says the one pattern matches every character of any text, so
	// that a Split that keeps only its matches (behavior Removed, invert
	// true, as o200k's tokenizer.json has it) splits as Isolated does.
	total bool
}

// regexPres are the pre-tokenizers of this kind, by their GGUF names. The
// patterns are those of llama.cpp's llama-vocab.cpp (Tekken's and o200k's
// as the tokenizer.json has them, which regexp2 runs without llama.cpp's
// rewrite); its vocabulary test files for DeepSeek's and Falcon's pass
// (gguf.TestLlamaCppVocabFiles), and llama-tokenize splits as this
// package does for every one (gguf.TestLlamaCppPreTokenizers).
var regexPres = map[string]regexPre{
	// DeepSeek LLM 7B and 67B (Llama's architecture).
	"deepseek-llm": {patterns: []string{
		"[\r\n]",
		`\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+`,
		`\s?[!-/:-~！-／：-～‘-‟　-。]+`,
		`\s+$`,
		`[一-龥ࠀ-一가-퟿]+`,
		`\p{N}+`,
	}},
	// DeepSeek Coder 1.3B, 6.7B and 33B (Llama's architecture).
	"deepseek-coder": {patterns: []string{
		"[\r\n]",
		`\s?\p{L}+`,
		`\s?\p{P}+`,
		`[一-龥ࠀ-一가-퟿]+`,
		`\p{N}`,
	}},
	// Falcon 7B and 40B: punctuation runs, GPT-2's split, digits by three.
	"falcon": {patterns: []string{
		"[\\p{P}\\$\\+<=>\\^~\\|`]+",
		`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`,
		`[0-9][0-9][0-9]`,
	}},
	// What llama.cpp runs for a name it does not know, and for "default",
	// which its converter writes for a pre-tokenizer it did not recognise:
	// Falcon's split with every digit run cut by three.
	"default": {patterns: []string{
		"[\\p{P}\\$\\+<=>\\^~\\|]+",
		`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`,
		`\p{N}+`,
		`[0-9][0-9][0-9]`,
	}},
	// OpenAI's o200k split (Phi-4-mini, GPT-4o's tokenizer): Tekken's
	// words with English contractions kept on, digits by three.
	"gpt-4o": {total: true, patterns: []string{
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	}},
	// Mistral's Tekken (Mistral NeMo, Ministral, Pixtral's text model):
	// words split before an upper-case letter that follows a lower-case
	// one, single digits, "/" kept with a run of punctuation.
	"tekken": {ignoreMerges: true, total: true, patterns: []string{
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	}},
}

func init() {
	for name, p := range regexPres {
		preTokenizers[name] = preTokenizer{preTokenizer: splitsByteLevel(p.patterns), ignoreMerges: p.ignoreMerges}
	}
}

// splitsByteLevel is the pre_tokenizer section of a tokenizer.json whose
// pre-tokenizer isolates the matches of each pattern in turn and then maps
// bytes.
func splitsByteLevel(patterns []string) string {
	var b strings.Builder
	b.WriteString(`{"type":"Sequence","pretokenizers":[`)
	for _, p := range patterns {
		b.WriteString(`{"type":"Split","pattern":{"Regex":` + quoteJSON(p) + `},"behavior":"Isolated","invert":false},`)
	}
	b.WriteString(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]}`)
	return b.String()
}

// regexPreName names the pre-tokenizer of t when it is one of regexPres:
// the same patterns in the same order (a Digits step counting as the
// pattern that isolates the same runs), no normalizer, the same
// ignore_merges.
func (t *Tokenizer) regexPreName() (string, bool) {
	var steps []preStep
	switch p := t.pre.(type) {
	case splitStep:
		steps = []preStep{p}
	case sequence:
		steps = p
	default:
		return "", false
	}
	patterns := make([]string, 0, len(steps))
	keepOnly := false // a Split that keeps only its matches
	for _, s := range steps {
		if d, ok := s.(digitsStep); ok {
			// A Digits pre-tokenizer isolates what these patterns do
			// (DeepSeek's tokenizer.json files have one).
			patterns = append(patterns, map[bool]string{true: `\p{N}`, false: `\p{N}+`}[d.individual])
			continue
		}
		sp, ok := s.(splitStep)
		switch {
		case !ok:
			return "", false
		case sp.behavior == behaviorRemoved && sp.invert:
			keepOnly = true
		case sp.behavior != behaviorIsolated || sp.invert:
			return "", false
		}
		re, ok := sp.m.(regexMatcher)
		if !ok {
			return "", false
		}
		patterns = append(patterns, re.pattern)
	}
	if len(t.norm) != 0 {
		return "", false
	}
	for name, p := range regexPres {
		if p.ignoreMerges == t.model.ignoreMerges && slices.Equal(p.patterns, patterns) && (!keepOnly || p.total && len(patterns) == 1) {
			return name, true
		}
	}
	return "", false
}
