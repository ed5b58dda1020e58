// Package model is clawrl's transformer: the Llama (Mistral), Qwen2, Qwen3,
// Phi-3, Gemma 2, Gemma 3, Granite 3, OLMo 2 and SmolLM3 families of decoder-only
// language models, written once over compute.Backend, so the same code runs
// on the CPU and on a GPU.
//
// # The forward pass
//
// A forward pass takes a batch of sequences, each with some new tokens (a
// chunk of a prompt, or the one token just sampled), packs all new tokens
// into the rows of one activation matrix x, and runs:
//
//	x = embed[token]                          one row per new token
//	for each layer:
//	    h = rmsnorm(x) * input_layernorm
//	    q = h Wq + bq,  k = h Wk + bk,  v = h Wv + bv     (biases: Qwen2)
//	    q = rmsnorm_per_head(q) * q_norm, same for k      (Qwen3)
//	    q, k = rope(q, pos), rope(k, pos)                 rotate (j, j+d/2) pairs
//	    cache[layer][slot(seq, pos)] = k, v               write the paged KV cache
//	    a = softmax(q·k / sqrt(d)) · v                    over the cache, causal;
//	                                                      query head h reads kv head h/(H/KV)
//	    x = x + a Wo
//	    h = rmsnorm(x) * post_attention_layernorm
//	    x = x + (silu(h Wgate) * (h Wup)) Wdown
//	logits = (rmsnorm(x) * norm) Wlm                  Wlm = embed when tied
//
// Gemma 3 differs in four places: x = embed[token]·√hidden; each norm
// multiplies by 1 + w (the model holds 1 + w, Config.NormOffset); the
// attention's and the MLP's outputs are normalised before they join x
// (x = x + rmsnorm(a Wo) * post_attention_layernorm, then h = rmsnorm(x) *
// pre_feedforward_layernorm and x = x + rmsnorm(mlp(h)) *
// post_feedforward_layernorm); the MLP gates with GELU's tanh form; and
// most layers attend over a sliding window with a rotary base of their own
// (Config.WindowLayers, LocalRopeTheta), the scores scaled by
// query_pre_attn_scalar^−½. Granite multiplies the embedding, the scores
// (in place of 1/sqrt(d)) and both residual branches by constants and
// divides the logits by one (applied to the final hidden state before
// Wlm). OLMo 2 drops the two norms before the attention and the MLP (the
// projections read x itself), normalises their outputs as Gemma does, and
// normalises q and k over whole rows rather than per head. SmolLM3 skips
// the rotation in every fourth layer. Gemma 2 is Gemma 3 without q/k
// norms and one rotary base, windowed every other layer, and soft-caps
// the scores and the logits (cap·tanh(x/cap)).
//
// That is Model.block, line for line: the one forward pass of a layer,
// which serving (over the paged KV cache) and training (over whole
// samples, keeping what the backward pass reads) both run (layer.go).
// Every matrix product runs over all rows of the batch at once, so a batch
// of 8 decode steps reads each weight once, and a 512-token prefill is a
// matrix-matrix product. Only attention looks at sequences separately,
// through each one's block table.
//
// # Pieces
//
// Config is parsed from config.json (LoadConfig) and checked. The weights
// are fields of the layer and weights structs whose tags name the Hugging
// Face tensors and their shapes; Load maps the safetensors files and hands
// each tensor to the backend (BF16 and F32 matrices as they are, F16
// widened, norms and biases as F32); BF16 stays BF16 to halve the bytes
// each decode step reads. RoPE frequencies, with Llama 3 scaling, are
// tabulated once at load.
//
// KVCache is a pool of fixed-size blocks with reference counts; a Sequence
// holds a block table. The scheduler of package rollout drives it like this:
//
//	cache, _ := m.NewKVCache(model.KVCacheOptions{BlockSize: 16, Budget: 2 << 30})
//	a, b := cache.NewSequence(), cache.NewSequence()
//	logits, err := m.Forward([]model.Step{{a, promptA}, {b, promptB[:256]}}, model.LastLogits, nil)
//	// errors.Is(err, model.ErrCacheFull): preempt or wait, nothing changed
//	// sample from logits[0:V] for a; b's prompt continues in the next step:
//	logits, err = m.Forward([]model.Step{{a, []int32{next}}, {b, promptB[256:]}}, model.LastLogits, logits)
//	a.Free()                       // finished: its blocks return at once
//
// A prefix cache keeps the full blocks of a finished prompt with
// cache.Retain(a.Blocks()[:k]...) and later starts a new sequence from them
// with seq.Attach(blocks, tokens); cache.Release lets them go (LRU
// eviction). A sequence copies a shared block before writing into it.
//
// LogProbs scores a response after a prompt: one forward pass over both,
// then log-softmax at every response position, for the trainer (old and
// new policy log-probs) and the judge's teacher.
//
// # Versions and training
//
// A Weights is one immutable set of the model's tensors (a version):
// Model.Weights is the checkpoint's, Weights.Clone and Trainable.Snapshot
// make more, and Run and LogProbsWith take the set to use, so a scheduler
// can keep finishing generations on an old version while new ones start on
// the next. Sets share tensors by reference count; see Weights for the
// ownership rules.
//
// A Trainable holds the parameters being trained over a frozen base set:
// F32 master copies of every tensor (full fine-tuning) or LoRA adapters.
// Its Forward runs whole samples (prompt + response, dense causal attention
// over each sample, logits at response positions only) and returns a Pass
// with the response tokens' log-probabilities and entropies; Pass.Backward
// takes ∂loss/∂logp per response token and accumulates parameter
// gradients, which the caller's optimizer applies through the backend's
// compute.Trainer ops:
//
//	tr, _ := m.NewTrainable(m.Weights(), model.TrainOptions{LoRA: &model.LoRAConfig{Rank: 16, Alpha: 32}})
//	pass, _ := tr.Forward(samples)          // pass.LogProbs[i][j], pass.Entropy[i][j]
//	tr.ZeroGrad()
//	_ = pass.Backward(dLossDLogp)           // shaped like pass.LogProbs
//	pass.Free()
//	for _, p := range tr.Params() { tb.AdamW(p.Value, p.Grad, m[p], v[p], hp) }
//	next, _ := tr.Snapshot()                // serve it: m.Run(next, ...)
//
// The backward pass is checked against central differences of the float64
// reference model (train_test.go).
//
// Over a quantized base (Q8_0, Q4_0 or Q4_1 matrices, from Quantize or a GGUF
// file) only LoRA trains, as QLoRA does: the base stays quantized and
// frozen, and the adapters and the optimizer's state are F32. The forward
// pass runs the quantized products as serving does; the backward pass
// goes through the exactly dequantized matrices, the activations' rounding
// passed through as the identity (qlora_test.go checks the whole gradient
// against the float64 reference with the dequantized weights). A snapshot
// of such a Trainable does not merge: it shares the quantized matrices and
// carries a copy of each adapter, which Run adds to its product unmerged
// (x·Wᵀ + (Alpha/Rank)·(x·Aᵀ)·Bᵀ, the x·Aᵀ in the same LinearMulti as the
// base products), as llama.cpp's --lora does. Merging would mean
// quantizing the merged matrix again, which rounds away updates much
// smaller than a quantization step, or keeping it in F32, eight times a
// Q4_0 matrix. Weights.FileTensors gives such a set's tensors for a
// checkpoint file merged and dequantized, in F32, and Import merges them
// for another backend.
//
// WriteRandomCheckpoint writes small (or Qwen3-0.6B-shaped) checkpoints of
// random weights in the exact Hugging Face layout, for tests and benchmarks
// of this and other packages.
package model
