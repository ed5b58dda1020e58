// Package tokenizer turns text into token ids and back for the models clawrl
// serves and trains, renders their chat templates into prompts, and trains
// new byte-level BPE vocabularies.
//
// # Tokenizing
//
// A Tokenizer is read from a Hugging Face checkpoint (Load, FromFiles) and
// tokenizes as Hugging Face's tokenizers library does for two kinds of BPE
// model: byte-level BPE (Qwen2, Qwen2.5 and Qwen3, Llama 3, GPT-2-style
// tokenizers) and SentencePiece-style BPE (Llama 2, Mistral, TinyLlama,
// Gemma 3).
// The steps, in order:
//
//   - Added tokens ("<|im_start|>", "<think>", ...) are found in the raw
//     text, leftmost first and longest at one position, and become one id
//     each. Their single_word, lstrip, rstrip and normalized options are
//     honoured; a normalized token is matched after normalization instead.
//   - The text between them is normalized: NFC, NFD, NFKC, NFKD, Prepend
//     and Replace with a literal pattern, alone or in a sequence (Qwen
//     uses NFC; the older Llama 2 layout Prepend "▁" and Replace " " →
//     "▁", so every piece of text between special tokens gets a "▁";
//     Gemma 3 Replace alone, with no "▁" before the text).
//   - Pre-tokenizers cut it into words: Split (regex or literal, all five
//     delimiter behaviours, invert), ByteLevel (prefix space, GPT-2 regex),
//     Digits and Metaspace (spaces as "▁", prepend_scheme always, first or
//     never, split), alone or in a Sequence.
//   - Each word is merged pair by pair, lowest merge rank first, into token
//     ids: from its bytes in a byte-level model; from its characters in a
//     SentencePiece-style one (no ByteLevel step), where a character
//     outside the vocabulary becomes the "<0xXX>" tokens of its UTF-8
//     bytes (byte_fallback) or the unknown token (fuse_unk joins a run).
//     Merges are read in both the "a b" and ["a", "b"] forms, and
//     ignore_merges (Llama 3) is honoured. A SentencePiece-style text with
//     no pre-tokenizer is one word; since no merge of such a vocabulary
//     joins a character to a following "▁" (checked at load), it is
//     merged a "▁"-started piece at a time, with the same result.
//
// Decoding follows the decoder: ByteLevel, or for SentencePiece-style
// models Replace ("▁" → " "), ByteFallback, Fuse, Strip (leading spaces)
// and Metaspace. A SentencePiece-style decoder decodes added tokens too,
// as Hugging Face's does (Gemma's added token "▁▁" is two spaces).
//
// Anything else a tokenizer.json may hold (a WordPiece or Unigram model, a
// Lowercase normalizer, a Replace with a regex, BPE dropout, a decoder
// other than those, ...) makes loading fail with an error that names it
// and wraps ErrUnsupported, rather than tokenizing wrongly. Truncation,
// padding and the post-processor are ignored: Encode is Hugging Face's
// encode with add_special_tokens=False, and BOS/EOS come from the chat
// template.
//
// Encode recognises special tokens written in the text, as transformers
// does when it tokenizes a rendered chat template; EncodeOrdinary does not,
// for text that must not forge turn boundaries (as Hugging Face's
// split_special_tokens). Decode returns the exact
// bytes of the tokens, so Decode(Encode(s)) == s for NFC text (a
// SentencePiece-style decoder strips the space its encoder put before the
// text, and a "▁" typed in the text comes back as a space, as in Hugging
// Face); a StreamDecoder holds back a UTF-8 character split across
// tokens until it is complete, for streaming responses.
//
// # Speed
//
// The Split patterns of Qwen2/3 (PatternQwen2), Llama 3 (PatternLlama3) and
// the GPT-2 ByteLevel pattern are recognised by their exact text and run as
// hand-written matchers; any other pattern runs through
// github.com/dlclark/regexp2, which supports the look-ahead these patterns
// use (Go's regexp does not) but is about ten times slower. A fuzz test and
// the golden corpus hold the hand-written matchers equal to regexp2. Words
// of up to 128 bytes are remembered in a bounded cache of 65,536 entries
// shared by all goroutines. On English text the Qwen3 tokenizer encodes
// 15-40 MB/s on one core with a cold cache, 30-60 MB/s with a warm one
// (BenchmarkEncode; regexp2 alone would give 5-10 MB/s).
//
// Unicode classes follow Go's unicode package (Unicode 15.0), as regexp2's
// do: \s is White_Space, as in Oniguruma, which Hugging Face uses. (?i)
// applies Unicode simple case folding, as regexp2 does, so "'ſ" (long s)
// counts as "'s"; transformers.js, which rewrites the group as [sS], does
// not.
//
// # Chat templates
//
// ApplyChatTemplate renders the Jinja chat_template of tokenizer_config.json
// (or chat_template.jinja; or a list of named templates, picked as
// transformers does) over OpenAI-shaped messages, tools and extra variables
// such as enable_thinking. The engine is github.com/ardanlabs/jinja: pure
// Go, without dependencies, written for exactly this use. It renders as
// transformers configures Jinja2 (trim_blocks, lstrip_blocks), supports
// what chat templates use (namespace, loop variables, slices such as
// messages[::-1], Python string methods, raise_exception), and renders the
// Qwen3 template byte for byte as the reference does. Where it departs
// from Python, this package closes the gap: its |tojson writes floats and
// U+2028 the Go way and sorts keys when indenting, so templates are
// compiled with every "x | tojson(...)" rewritten into a call of a
// json.dumps-exact encoder; and tool schemas and arguments are passed in
// their original key order. With these, we had no need of another engine.
//
// EncodeChat renders and encodes in one step, and is what serving, the
// judge and the teacher use: only the template's own text makes special
// tokens, while everything the request holds (message contents, tool calls
// and results, tool definitions, template variables) encodes as ordinary
// text, so a user who types "<|im_end|>" cannot end their turn. For a
// request without such text it gives exactly Encode(ApplyChatTemplate).
// Transformers' apply_chat_template(tokenize=True), vLLM and llama.cpp
// parse special tokens in the whole rendered text instead. A raw prompt
// (the /v1/completions endpoint) is the client's own template text and is
// encoded with Encode, as vLLM and transformers do.
//
// # Training
//
// Train learns a byte-level BPE vocabulary from a corpus, with incremental
// pair counts (about 2 s for 8k tokens from 20 MB on one core). Save writes
// it as tokenizer.json and tokenizer_config.json, which this package and
// Hugging Face loaders read.
//
// A Tokenizer is immutable once built and safe for concurrent use.
package tokenizer
