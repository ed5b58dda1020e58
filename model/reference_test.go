package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/safetensors"
)

// refModel is a naive float64 transformer written from the Hugging Face
// modeling code's definitions, independently of the engine: it reads
// config.json into a map and the weights straight from the safetensors
// files, and shares no code with the package beyond the file reader.
type refModel struct {
	hidden, inter, layers, heads, kvHeads, hd, vocab int
	eps                                              float64
	invFreq                                          []float64
	ropeScale                                        float64 // cos and sin multiplied (LongRoPE)
	window                                           int     // sliding window (Mistral, Phi-3), 0: none
	rot                                              int     // head dimensions RoPE rotates (the first ones)
	w                                                map[string][]float64

	// Gemma 3: norms multiply by 1 + w, sandwich norms, GELU (tanh), the
	// embedding times √hidden, scores times query_pre_attn_scalar^−½, and
	// per layer a window and rotary frequencies of its own.
	gemma       bool
	attnScale   float64 // 0: 1/√head_dim
	layerWindow []int   // per layer, when set (overrides window)
	localLayer  []bool  // the layers that rotate with localInvFreq
	// Gemma 2's soft-caps of the scores and the logits (0: none).
	attnCap, finalCap float64
	localInvFreq      []float64 // the windowed layers' frequencies (Gemma 3)

	// OLMo 2: no norms before the attention and the MLP, q and k
	// normalised over whole rows, the outputs normalised (post norms).
	olmo2 bool
	// noRope marks SmolLM3's layers without RoPE.
	noRope []bool

	// Granite: embedding, residual and logit multipliers (1 when absent);
	// attnScale holds its attention_multiplier.
	embedMul, residualMul, logitsDiv float64

	// roundInputs rounds the input of every product with a BF16 weight
	// (through float32, to nearest even) to BF16, as the engine does at
	// kernels.PrecisionBF16.
	roundInputs bool
	// roundKV rounds keys and values to BF16 (after RoPE), as a BF16 KV
	// cache stores them.
	roundKV bool
	// quantKV rounds keys and values (after RoPE) through float32 to Q8_0
	// blocks and back (compute.Quantize, ggml's quantizer), as a Q8_0 KV
	// cache stores them.
	quantKV bool
	// roundQ rounds the queries to BF16 (after RoPE) before their products
	// with the keys, as attention does at kernels.PrecisionBF16 with a BF16
	// cache.
	roundQ bool
	bf16   map[string]bool // the weights stored as BF16

	// quant names the weights stored quantized (their values in w are the
	// dequantized ones): the input of their products is quantized to Q8_0
	// blocks, as the engine's quantized products do (compute's package
	// doc). In record mode (replay false) every such product keeps its
	// rounding residual Q(x) − x, in call order from the start of a loss;
	// in replay mode it adds the recorded residual to x instead, so that
	// the forward is the quantized one at the recorded point and its
	// derivative takes the rounding as the identity (the engine's
	// backward: a straight-through estimator).
	quant  map[string]bool
	replay bool
	resid  [][]float64
	call   int
	// lora adds scale·B·(A·x) to a weight's product (x before any
	// rounding), as the engine serves and trains adapters unmerged.
	lora map[string]refAdapter
}

// refAdapter is one LoRA adapter of the reference: A [rank, in], B [out,
// rank], row-major, and the scale alpha/rank.
type refAdapter struct {
	A, B  []float64
	scale float64
}

func loadRef(t *testing.T, dir string) *refModel {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	num := func(k string) float64 { return cfg[k].(float64) }
	r := &refModel{
		hidden: int(num("hidden_size")), inter: int(num("intermediate_size")),
		layers: int(num("num_hidden_layers")), heads: int(num("num_attention_heads")),
		kvHeads: int(num("num_key_value_heads")), vocab: int(num("vocab_size")),
		eps: num("rms_norm_eps"), w: map[string][]float64{}, bf16: map[string]bool{},
	}
	r.hd = r.hidden / r.heads
	if v, ok := cfg["head_dim"].(float64); ok {
		r.hd = int(v)
	}
	// inv_freq[i] = theta^(-2i/d), then Llama 3's piecewise rescaling.
	theta := num("rope_theta")
	r.rot = r.hd
	if f, ok := cfg["partial_rotary_factor"].(float64); ok {
		r.rot = int(float64(r.hd) * f)
	}
	for i := 0; i < r.rot; i += 2 {
		r.invFreq = append(r.invFreq, 1/math.Pow(theta, float64(i)/float64(r.rot)))
	}
	r.ropeScale = 1
	if w, ok := cfg["sliding_window"].(float64); ok && w < num("max_position_embeddings") &&
		(cfg["architectures"].([]any)[0] == "MistralForCausalLM" || cfg["architectures"].([]any)[0] == "Phi3ForCausalLM") {
		r.window = int(w) // Hugging Face masks keys more than window−1 positions back
	}
	if rs, ok := cfg["rope_scaling"].(map[string]any); ok && (rs["type"] == "linear" || rs["rope_type"] == "linear") {
		for i := range r.invFreq {
			r.invFreq[i] /= rs["factor"].(float64)
		}
	}
	if rs, ok := cfg["rope_scaling"].(map[string]any); ok && rs["type"] == "longrope" {
		// Phi-3's LongRoPE within original_max_position_embeddings: the
		// short factors, cos and sin scaled by √(1 + ln s / ln orig).
		short := rs["short_factor"].([]any)
		for i := range r.invFreq {
			r.invFreq[i] = 1 / (short[i].(float64) * math.Pow(theta, float64(2*i)/float64(r.rot)))
		}
		orig := num("original_max_position_embeddings")
		if s := num("max_position_embeddings") / orig; s > 1 {
			r.ropeScale = math.Sqrt(1 + math.Log(s)/math.Log(orig))
		}
	}
	r.embedMul, r.residualMul, r.logitsDiv = 1, 1, 1
	r.olmo2 = cfg["architectures"].([]any)[0] == "Olmo2ForCausalLM"
	if nope, ok := cfg["no_rope_layers"].([]any); ok { // SmolLM3: 0 where a layer does not rotate
		for _, v := range nope {
			r.noRope = append(r.noRope, v.(float64) == 0)
		}
	}
	if cfg["architectures"].([]any)[0] == "GraniteForCausalLM" {
		// GraniteForCausalLM: embeddings × embedding_multiplier, scores ×
		// attention_multiplier, each branch × residual_multiplier,
		// logits / logits_scaling (all 1 by default).
		get := func(k string) float64 {
			if v, ok := cfg[k].(float64); ok {
				return v
			}
			return 1
		}
		r.embedMul, r.attnScale, r.residualMul, r.logitsDiv = get("embedding_multiplier"), get("attention_multiplier"), get("residual_multiplier"), get("logits_scaling")
	}
	if arch := cfg["architectures"].([]any)[0]; arch == "Gemma3ForCausalLM" || arch == "Gemma2ForCausalLM" {
		// Gemma3TextConfig: layer i slides unless (i+1) % pattern == 0,
		// or as layer_types says; sliding layers rotate with
		// rope_local_base_freq and no scaling. Gemma2Config: every other
		// layer slides (pattern 2), all rotate alike; scores and logits
		// are soft-capped.
		r.gemma = true
		r.attnScale = 1 / math.Sqrt(float64(r.hd))
		if v, ok := cfg["query_pre_attn_scalar"].(float64); ok {
			r.attnScale = 1 / math.Sqrt(v)
		}
		local := 10000.0
		if v, ok := cfg["rope_local_base_freq"].(float64); ok {
			local = v
		}
		for i := 0; i < r.rot; i += 2 {
			r.localInvFreq = append(r.localInvFreq, 1/math.Pow(local, float64(i)/float64(r.rot)))
		}
		pattern := 6
		if arch == "Gemma2ForCausalLM" {
			pattern, r.localInvFreq = 2, r.invFreq
			r.attnCap, _ = cfg["attn_logit_softcapping"].(float64)
			r.finalCap, _ = cfg["final_logit_softcapping"].(float64)
		}
		r.layerWindow, r.localLayer = make([]int, r.layers), make([]bool, r.layers)
		if w, ok := cfg["sliding_window"].(float64); ok {
			if v, ok := cfg["sliding_window_pattern"].(float64); ok {
				pattern = int(v)
			}
			for l := range r.layers {
				sliding := (l+1)%pattern != 0
				if lt, ok := cfg["layer_types"].([]any); ok {
					sliding = lt[l] == "sliding_attention"
				}
				r.localLayer[l] = sliding
				if sliding && w < num("max_position_embeddings") {
					r.layerWindow[l] = int(w)
				}
			}
		}
	}
	if rs, ok := cfg["rope_scaling"].(map[string]any); ok && rs["rope_type"] == "llama3" {
		factor, lo, hi := rs["factor"].(float64), rs["low_freq_factor"].(float64), rs["high_freq_factor"].(float64)
		old := rs["original_max_position_embeddings"].(float64)
		for i, f := range r.invFreq {
			wl := 2 * math.Pi / f
			switch {
			case wl > old/lo: // low frequency: stretched
				r.invFreq[i] = f / factor
			case wl >= old/hi: // medium: interpolate
				smooth := (old/wl - lo) / (hi - lo)
				r.invFreq[i] = (1-smooth)*f/factor + smooth*f
			}
		}
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, name := range ck.Names() {
		v, err := ck.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		w := make([]float64, len(v))
		for i, x := range v {
			w[i] = float64(x)
		}
		r.w[name] = w
		if _, info, err := ck.Find(name); err == nil && info.DType == safetensors.BF16 {
			r.bf16[name] = true
		}
	}
	// Phi-3's fused projections, split as its modeling code splits them:
	// the first heads·head_dim rows are the queries, then the keys, then
	// the values; gate_up's first half is the gate.
	for name, w := range r.w {
		q, kv := r.heads*r.hd*r.hidden, r.kvHeads*r.hd*r.hidden
		if p, ok := strings.CutSuffix(name, "qkv_proj.weight"); ok {
			r.w[p+"q_proj.weight"], r.w[p+"k_proj.weight"], r.w[p+"v_proj.weight"] = w[:q], w[q:q+kv], w[q+kv:]
			r.bf16[p+"q_proj.weight"], r.bf16[p+"k_proj.weight"], r.bf16[p+"v_proj.weight"] = r.bf16[name], r.bf16[name], r.bf16[name]
		}
		if p, ok := strings.CutSuffix(name, "gate_up_proj.weight"); ok {
			r.w[p+"gate_proj.weight"], r.w[p+"up_proj.weight"] = w[:len(w)/2], w[len(w)/2:]
			r.bf16[p+"gate_proj.weight"], r.bf16[p+"up_proj.weight"] = r.bf16[name], r.bf16[name]
		}
	}
	if r.gemma {
		for name, w := range r.w {
			if strings.HasSuffix(name, "norm.weight") { // Gemma3RMSNorm: x̂·(1 + w)
				one := make([]float64, len(w))
				for i, v := range w {
					one[i] = 1 + v
				}
				r.w[name] = one
			}
		}
	}
	if _, ok := r.w["lm_head.weight"]; !ok {
		r.w["lm_head.weight"] = r.w["model.embed_tokens.weight"]
		r.bf16["lm_head.weight"] = r.bf16["model.embed_tokens.weight"]
	}
	return r
}

// linear returns the product of weight name with x (+ b), x rounded to
// BF16 first when r.roundInputs and the weight is BF16.
func (r *refModel) linear(name string, x, b []float64) []float64 {
	xin := x
	if r.roundInputs && r.bf16[name] {
		x = roundBF16s(x)
	}
	if r.quant[name] {
		x = r.quantizeInput(x)
	}
	out := matvec(r.w[name], x, b)
	if ad, ok := r.lora[name]; ok {
		u := matvec(ad.A, xin, nil)
		for o := range out {
			s := 0.0
			for k, uk := range u {
				s += ad.B[o*len(u)+k] * uk
			}
			out[o] += ad.scale * s
		}
	}
	return out
}

// quantizeInput returns x as the engine's quantized products see it (see
// refModel.quant): in record mode each block of 32 rounded to Q8_0 as
// compute's package doc says (d = max|x|/127 in float32, q = x·(1/d)
// rounded to nearest even), its residual kept; in replay mode x plus the
// recorded residual.
func (r *refModel) quantizeInput(x []float64) []float64 {
	i := r.call
	r.call++
	out := make([]float64, len(x))
	if r.replay {
		for j, v := range x {
			out[j] = v + r.resid[i][j]
		}
		return out
	}
	res := make([]float64, len(x))
	for b := 0; b < len(x); b += 32 {
		var amax float32
		for _, v := range x[b : b+32] {
			amax = max(amax, float32(math.Abs(v)))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		for j := b; j < b+32; j++ {
			out[j] = float64(d) * math.RoundToEven(float64(float32(x[j])*id))
			res[j] = out[j] - x[j]
		}
	}
	r.resid = append(r.resid, res)
	return out
}

// roundQ8_0s returns x (a multiple of compute.QK values) rounded through
// float32 to Q8_0 blocks and dequantized.
func roundQ8_0s(x []float64) []float64 {
	f := make([]float32, len(x))
	for i, v := range x {
		f[i] = float32(v)
	}
	blocks := make([]byte, compute.Q8_0.Bytes(len(f)))
	if err := compute.Quantize(compute.Q8_0, blocks, f); err != nil {
		panic(err)
	}
	if err := compute.Dequantize(compute.Q8_0, f, blocks); err != nil {
		panic(err)
	}
	out := make([]float64, len(x))
	for i, v := range f {
		out[i] = float64(v)
	}
	return out
}

// roundBF16s returns x rounded through float32 to BF16 (to nearest even).
func roundBF16s(x []float64) []float64 {
	xr := make([]float64, len(x))
	for i, v := range x {
		bits := math.Float32bits(float32(v))
		bits += 0x7fff + (bits>>16)&1 // to nearest even (no NaNs here)
		xr[i] = float64(math.Float32frombits(bits &^ 0xffff))
	}
	return xr
}

// matvec returns W x (+ b) for W stored [out, in].
func matvec(w, x, b []float64) []float64 {
	out := make([]float64, len(w)/len(x))
	for i := range out {
		s := 0.0
		if b != nil {
			s = b[i]
		}
		for j, xv := range x {
			s += w[i*len(x)+j] * xv
		}
		out[i] = s
	}
	return out
}

func (r *refModel) rmsnorm(x, w []float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	s := 1 / math.Sqrt(ss/float64(len(x))+r.eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * s * w[i]
	}
	return out
}

// rope applies rotate-half RoPE to every head of x at position pos: to
// its first rot dimensions, pairing j with j+rot/2, as Hugging Face's
// Phi-3 does with partial rotary; the others pass through.
func (r *refModel) rope(x []float64, pos int, invFreq []float64) {
	half := r.rot / 2
	for h := 0; h < len(x); h += r.hd {
		head := append([]float64(nil), x[h:h+r.hd]...)
		for j := 0; j < r.rot; j++ {
			a := float64(pos) * invFreq[j%half]
			var rot float64
			if j < half {
				rot = -head[j+half]
			} else {
				rot = head[j-half]
			}
			x[h+j] = (head[j]*math.Cos(a) + rot*math.Sin(a)) * r.ropeScale
		}
	}
}

// forward returns the logits at every position of tokens.
func (r *refModel) forward(tokens []int32) [][]float64 {
	n := len(tokens)
	x := make([][]float64, n)
	emb := r.w["model.embed_tokens.weight"]
	for i, tok := range tokens {
		x[i] = append([]float64(nil), emb[int(tok)*r.hidden:int(tok+1)*r.hidden]...)
		for e := range x[i] {
			x[i][e] *= r.embedMul
		}
		if r.gemma {
			for e := range x[i] {
				x[i][e] *= math.Sqrt(float64(r.hidden))
			}
		}
	}
	scale := 1 / math.Sqrt(float64(r.hd))
	if r.attnScale > 0 {
		scale = r.attnScale
	}
	for l := 0; l < r.layers; l++ {
		p := "model.layers." + strconv.Itoa(l) + "."
		W := func(name string) []float64 { return r.w[p+name] } // nil when absent
		window, invFreq := r.window, r.invFreq
		if r.layerWindow != nil {
			window = r.layerWindow[l]
			if r.localLayer[l] {
				invFreq = r.localInvFreq
			}
		}
		qs, ks, vs := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for i := range n {
			h := x[i] // Olmo2Attention projects the residual stream itself
			if !r.olmo2 {
				h = r.rmsnorm(x[i], W("input_layernorm.weight"))
			}
			qs[i] = r.linear(p+"self_attn.q_proj.weight", h, W("self_attn.q_proj.bias"))
			ks[i] = r.linear(p+"self_attn.k_proj.weight", h, W("self_attn.k_proj.bias"))
			vs[i] = r.linear(p+"self_attn.v_proj.weight", h, W("self_attn.v_proj.bias"))
			if r.olmo2 { // q_norm and k_norm over the whole projections
				qs[i] = r.rmsnorm(qs[i], W("self_attn.q_norm.weight"))
				ks[i] = r.rmsnorm(ks[i], W("self_attn.k_norm.weight"))
			} else if qn := W("self_attn.q_norm.weight"); qn != nil {
				for hh := 0; hh < len(qs[i]); hh += r.hd {
					copy(qs[i][hh:], r.rmsnorm(qs[i][hh:hh+r.hd], qn))
				}
				kn := W("self_attn.k_norm.weight")
				for hh := 0; hh < len(ks[i]); hh += r.hd {
					copy(ks[i][hh:], r.rmsnorm(ks[i][hh:hh+r.hd], kn))
				}
			}
			if r.noRope == nil || !r.noRope[l] {
				r.rope(qs[i], i, invFreq)
				r.rope(ks[i], i, invFreq)
			}
			if r.roundKV {
				ks[i], vs[i] = roundBF16s(ks[i]), roundBF16s(vs[i])
			}
			if r.quantKV {
				ks[i], vs[i] = roundQ8_0s(ks[i]), roundQ8_0s(vs[i])
			}
			if r.roundQ {
				qs[i] = roundBF16s(qs[i])
			}
		}
		for i := range n {
			att := make([]float64, r.heads*r.hd)
			for h := range r.heads {
				g := h / (r.heads / r.kvHeads)
				q := qs[i][h*r.hd : (h+1)*r.hd]
				scores := make([]float64, i+1)
				m := math.Inf(-1)
				for j := 0; j <= i; j++ {
					if window > 0 && j <= i-window {
						scores[j] = math.Inf(-1) // outside the sliding window
						continue
					}
					d := 0.0
					for e := range r.hd {
						d += q[e] * ks[j][g*r.hd+e]
					}
					scores[j] = d * scale
					if r.attnCap > 0 {
						scores[j] = r.attnCap * math.Tanh(scores[j]/r.attnCap)
					}
					m = math.Max(m, scores[j])
				}
				z := 0.0
				for j := range scores {
					scores[j] = math.Exp(scores[j] - m)
					z += scores[j]
				}
				for j := range scores {
					for e := range r.hd {
						att[h*r.hd+e] += scores[j] / z * vs[j][g*r.hd+e]
					}
				}
			}
			o := r.linear(p+"self_attn.o_proj.weight", att, W("self_attn.o_proj.bias"))
			mlpNorm := "post_attention_layernorm.weight"
			if r.gemma || r.olmo2 {
				o = r.rmsnorm(o, W("post_attention_layernorm.weight"))
				mlpNorm = "pre_feedforward_layernorm.weight"
			}
			for e := range x[i] {
				x[i][e] += o[e] * r.residualMul
			}
			h := x[i]
			if !r.olmo2 {
				h = r.rmsnorm(x[i], W(mlpNorm))
			}
			gate := r.linear(p+"mlp.gate_proj.weight", h, W("mlp.gate_proj.bias"))
			up := r.linear(p+"mlp.up_proj.weight", h, W("mlp.up_proj.bias"))
			for e := range gate {
				if r.gemma { // gelu_pytorch_tanh
					g := gate[e]
					gate[e] = 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g))) * up[e]
				} else {
					gate[e] = gate[e] / (1 + math.Exp(-gate[e])) * up[e]
				}
			}
			d := r.linear(p+"mlp.down_proj.weight", gate, W("mlp.down_proj.bias"))
			if r.gemma || r.olmo2 {
				d = r.rmsnorm(d, W("post_feedforward_layernorm.weight"))
			}
			for e := range d {
				d[e] *= r.residualMul
			}
			for e := range x[i] {
				x[i][e] += d[e]
			}
		}
	}
	logits := make([][]float64, n)
	for i := range n {
		logits[i] = r.linear("lm_head.weight", r.rmsnorm(x[i], r.w["model.norm.weight"]), nil)
		for e := range logits[i] {
			logits[i][e] /= r.logitsDiv
			if r.finalCap > 0 {
				logits[i][e] = r.finalCap * math.Tanh(logits[i][e]/r.finalCap)
			}
		}
	}
	return logits
}
