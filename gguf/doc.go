// Package gguf reads and writes GGUF files, the single-file model format
// of ggml, llama.cpp and Ollama, and opens the llama, qwen2 and qwen3
// models they hold as clawrl checkpoints.
//
// The format (ggml's docs/gguf.md, gguf-py's constants): the magic
// "GGUF", a version (3; 2 reads the same), the tensor and metadata counts,
// metadata as typed key-value pairs (numbers, bools, strings and arrays,
// little-endian, strings and arrays prefixed with 64-bit lengths), one
// description per tensor (name, dimensions innermost first, type, offset),
// then, at the next multiple of general.alignment (default 32), the tensor
// data, each tensor aligned the same way. Parse validates all of it
// without trusting the file: lengths and counts are bounded by the bytes
// left before anything is allocated, sizes are checked for overflow, and
// tensor data must be aligned and lie inside the file without overlap;
// errors say what is wrong (ErrTruncated, ErrMagic, ErrVersion,
// ErrValueType, ErrTensorType, ErrInvalid) and Open adds the path. Open
// maps the file read-only, so that F32 and BF16 tensors are used in place.
//
// Tensor values: F32, F16, BF16 and the block formats Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS decode to
// float32 exactly as ggml's
// reference dequantization does (Dequantize); Quantize encodes them (with
// the plain reference scheme), and Write and WriteFile write files that
// llama.cpp loads.
//
// Models: OpenModel reads a model's config from the metadata
// (general.architecture, {arch}.embedding_length, .block_count,
// .feed_forward_length, .attention.head_count, .head_count_kv,
// .key_length, .layer_norm_rms_epsilon, .rope.freq_base, .context_length;
// Llama 3 rope scaling from the rope_freqs.weight tensor llama.cpp's
// converter makes of it) and serves the tensors under their Hugging Face
// names (TensorName maps them: token_embd.weight is
// model.embed_tokens.weight, blk.N.attn_q.weight is
// model.layers.N.self_attn.q_proj.weight, and so on) as a model.Source.
// llama.cpp's converter permutes the rows of llama's query and key
// projections so that ggml's interleaved rotary kernel sees the pairs
// that Hugging Face's rotate-half rotation forms (PermuteRows); the loader
// undoes it. Qwen2 and Qwen3 run ggml's NEOX rotation, Hugging Face's own,
// and are stored unpermuted. ReadTokenizer builds the tokenizer the file
// holds (tokenizer.ggml.*, tokenizer.chat_template): byte-level BPE
// ("gpt2": merges and a named pre-tokenizer) or SentencePiece BPE
// ("llama": scores, token types, add_space_prefix), and
// TokenizerMetadata writes either.
package gguf
