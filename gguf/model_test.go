package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/safetensors"
	"github.com/clawrl/clawrl/tokenizer"
)

// The tests here make their own corpus: random Hugging Face checkpoints of
// each architecture (model.WriteRandomCheckpoint) with a small trained
// tokenizer, converted to GGUF the way llama.cpp's converter does it
// (convert below, written from gguf.md and the converter's documented
// behaviour, independently of the loader), in each tensor type.

const chatML = `{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}`

var testTok = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	var docs []string
	for i := range 60 {
		docs = append(docs, fmt.Sprintf("The quick brown fox %d jumps over the lazy dog. Hello, how are you today? ", i),
			"<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n2 + 3 = 5.<|im_end|>\n")
	}
	return tokenizer.Train(slices.Values(docs), tokenizer.TrainOptions{
		VocabSize:     320,
		SpecialTokens: []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"},
		EOS:           "<|im_end|>",
		PAD:           "<|endoftext|>",
		ChatTemplate:  chatML,
	})
})

func trainedTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := testTok()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// smallSpec is a model whose rows are whole K-quant blocks (256).
func smallSpec(arch string, vocab int) model.RandomSpec {
	return model.RandomSpec{
		Arch: arch, Hidden: 256, Intermediate: 512, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64,
		Vocab: vocab, MaxPositions: 256, DType: "float32", Seed: 11, InitStd: 0.05,
	}
}

var ggufArch = map[string]string{model.ArchLlama: "llama", model.ArchQwen2: "qwen2", model.ArchQwen3: "qwen3"}

// hfLayerNames pairs the Hugging Face and GGUF names of a layer's tensors
// (gguf.md's standardized names).
var hfLayerNames = [][2]string{
	{"input_layernorm.weight", "attn_norm.weight"},
	{"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.q_proj.bias", "attn_q.bias"},
	{"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.k_proj.bias", "attn_k.bias"},
	{"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.v_proj.bias", "attn_v.bias"},
	{"self_attn.o_proj.weight", "attn_output.weight"}, {"self_attn.o_proj.bias", "attn_output.bias"},
	{"self_attn.q_norm.weight", "attn_q_norm.weight"}, {"self_attn.k_norm.weight", "attn_k_norm.weight"},
	{"post_attention_layernorm.weight", "ffn_norm.weight"},
	{"mlp.gate_proj.weight", "ffn_gate.weight"}, {"mlp.gate_proj.bias", "ffn_gate.bias"},
	{"mlp.up_proj.weight", "ffn_up.weight"}, {"mlp.up_proj.bias", "ffn_up.bias"},
	{"mlp.down_proj.weight", "ffn_down.weight"}, {"mlp.down_proj.bias", "ffn_down.bias"},
}

func ggufNameOf(hf string) string {
	switch hf {
	case "model.embed_tokens.weight":
		return "token_embd.weight"
	case "model.norm.weight":
		return "output_norm.weight"
	case "lm_head.weight":
		return "output.weight"
	}
	var layer int
	var rest string
	if _, err := fmt.Sscanf(hf, "model.layers.%d.%s", &layer, &rest); err != nil {
		panic(hf)
	}
	for _, p := range hfLayerNames {
		if p[0] == rest {
			return fmt.Sprintf("blk.%d.%s", layer, p[1])
		}
	}
	panic(hf)
}

// llamaPermute is the converter's permute(w, n_head, n_head_kv) for rows
// of cols values: w.reshape(heads, 2, rows/heads/2, cols).swapaxes(1,
// 2).reshape(rows, cols), so out[h][i][p] = w[h][p][i].
func llamaPermute(w []float32, rows, cols, heads int) []float32 {
	d := rows / heads
	out := make([]float32, len(w))
	for h := range heads {
		for i := range d / 2 {
			for p := range 2 {
				src := (h*d + p*(d/2) + i) * cols
				dst := ((h*(d/2)+i)*2 + p) * cols
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out
}

// llamaUnpermute inverts llamaPermute.
func llamaUnpermute(w []float32, rows, cols, heads int) []float32 {
	d := rows / heads
	out := make([]float32, len(w))
	for h := range heads {
		for i := range d / 2 {
			for p := range 2 {
				src := ((h*(d/2)+i)*2 + p) * cols
				dst := (h*d + p*(d/2) + i) * cols
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out
}

// ropeFactors are the per-frequency divisors llama.cpp's converter writes
// as rope_freqs.weight for Llama 3 scaling.
func ropeFactors(c *model.Config) []float32 {
	s := c.RopeScaling
	lowWavelen := float64(s.OriginalMaxPositions) / s.LowFreqFactor
	highWavelen := float64(s.OriginalMaxPositions) / s.HighFreqFactor
	var out []float32
	for i := 0; i < c.HeadDim; i += 2 {
		freq := 1 / math.Pow(c.RopeTheta, float64(i)/float64(c.HeadDim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out = append(out, 1)
		case wavelen > lowWavelen:
			out = append(out, float32(s.Factor))
		default:
			smooth := (float64(s.OriginalMaxPositions)/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			out = append(out, float32(1/((1-smooth)/s.Factor+smooth)))
		}
	}
	return out
}

// converted is a checkpoint converted to GGUF: the metadata and tensors
// to write, and, by Hugging Face name and in Hugging Face order, the
// values the GGUF's tensors decode to.
type converted struct {
	kvs     []KV
	tensors []WriteTensor
	decoded map[string][]float32
}

// loadQ8_0 loads the checkpoint in dir quantized to Q8_0 on load (closed
// when the test ends).
func loadQ8_0(t testing.TB, dir string) *model.Model {
	t.Helper()
	src, err := model.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := model.Quantize(src, compute.Q8_0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.LoadFrom(cpu.New(), qs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// readBack reads the GGUF file at path as what WriteFile would write it
// from: its metadata and its tensors, copied.
func readBack(t testing.TB, path string) ([]KV, []WriteTensor) {
	t.Helper()
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tensors []WriteTensor
	for _, ti := range f.Tensors {
		b, _, err := f.Bytes(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		tensors = append(tensors, WriteTensor{Name: ti.Name, Type: ti.Type, Shape: ti.Shape(), Data: slices.Clone(b)})
	}
	return slices.Clone(f.KV), tensors
}

// setKV sets (or adds) a metadata value of a converted file.
func setKV(cv *converted, key string, v Value) {
	for i := range cv.kvs {
		if cv.kvs[i].Key == key {
			cv.kvs[i].Value = v
			return
		}
	}
	cv.kvs = append(cv.kvs, KV{key, v})
}

// dropKV removes a metadata key of a converted file.
func dropKV(cv *converted, key string) {
	cv.kvs = slices.DeleteFunc(cv.kvs, func(kv KV) bool { return kv.Key == key })
}

// convert converts the checkpoint in dir to GGUF as llama.cpp's converter
// does: metadata from config.json, the tokenizer's vocabulary, vectors in
// F32 and matrices in typ, llama's q and k rows permuted unless noPermute.
func convert(t testing.TB, dir string, tok *tokenizer.Tokenizer, typ TensorType, noPermute bool) converted {
	t.Helper()
	c, err := model.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	a := ggufArch[c.Architecture]
	out := converted{decoded: map[string][]float32{}, kvs: []KV{
		{"general.architecture", String(a)},
		{"general.name", String("test")},
		{a + ".context_length", Uint32(uint32(c.MaxPositions))},
		{a + ".embedding_length", Uint32(uint32(c.HiddenSize))},
		{a + ".block_count", Uint32(uint32(c.NumLayers))},
		{a + ".feed_forward_length", Uint32(uint32(c.IntermediateSize))},
		{a + ".attention.head_count", Uint32(uint32(c.NumHeads))},
		{a + ".attention.head_count_kv", Uint32(uint32(c.NumKVHeads))},
		{a + ".attention.key_length", Uint32(uint32(c.HeadDim))},
		{a + ".attention.value_length", Uint32(uint32(c.HeadDim))},
		{a + ".rope.dimension_count", Uint32(uint32(c.HeadDim))},
		{a + ".rope.freq_base", Float32(float32(c.RopeTheta))},
		{a + ".attention.layer_norm_rms_epsilon", Float32(float32(c.RMSNormEps))},
	}}
	if c.RopeLinear != 0 {
		out.kvs = append(out.kvs, KV{a + ".rope.scaling.type", String("linear")}, KV{a + ".rope.scaling.factor", Float32(float32(c.RopeLinear))})
	}
	if tok != nil {
		v, err := tok.Vocab(c.VocabSize)
		if err != nil {
			t.Fatal(err)
		}
		out.kvs = append(out.kvs, TokenizerMetadata(v)...)
	}
	for _, spec := range c.TensorSpecs() {
		vals, err := ck.Float32(spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		vals = slices.Clone(vals)
		rows, cols := spec.Shape[0], 1
		if len(spec.Shape) == 2 {
			cols = spec.Shape[1]
		}
		heads := 0
		if c.Architecture == model.ArchLlama && !noPermute {
			switch {
			case strings.Contains(spec.Name, "q_proj"):
				heads = c.NumHeads
			case strings.Contains(spec.Name, "k_proj"):
				heads = c.NumKVHeads
			}
		}
		if heads > 0 {
			vals = llamaPermute(vals, rows, cols, heads)
		}
		tt := F32
		if len(spec.Shape) == 2 {
			tt = typ
		}
		size, err := EncodedSize(tt, len(vals))
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, size)
		recon := make([]float32, len(vals))
		quantizers[tt](data, vals, recon)
		if heads > 0 {
			recon = llamaUnpermute(recon, rows, cols, heads)
		}
		out.decoded[spec.Name] = recon
		out.tensors = append(out.tensors, WriteTensor{Name: ggufNameOf(spec.Name), Type: tt, Shape: spec.Shape, Data: data})
	}
	if c.RopeScaling != nil {
		f := ropeFactors(c)
		data := make([]byte, 4*len(f))
		for i, x := range f {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
		}
		out.tensors = append(out.tensors, WriteTensor{Name: KeyRopeFreqs, Type: F32, Shape: []int{len(f)}, Data: data})
	}
	return out
}

func (cv converted) write(t testing.TB, path string) string {
	t.Helper()
	if err := WriteFile(path, cv.kvs, cv.tensors); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeDecoded writes a Hugging Face checkpoint (F32) of the decoded
// values beside dir's config.json: what the GGUF file must load as.
func (cv converted) writeDecoded(t testing.TB, dir, refDir string) {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(refDir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := model.ParseConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.WriteTensor
	for _, spec := range c.TensorSpecs() {
		vals := cv.decoded[spec.Name]
		data := make([]byte, 4*len(vals))
		for i, x := range vals {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
		}
		ts = append(ts, safetensors.WriteTensor{Name: spec.Name, DType: safetensors.F32, Shape: spec.Shape, Data: data})
	}
	if err := safetensors.WriteFile(filepath.Join(refDir, safetensors.SingleFile), ts, nil); err != nil {
		t.Fatal(err)
	}
}

var testTokens = []int32{5, 17, 300, 42, 8, 8, 91, 250, 3, 77, 160, 2, 199, 64, 31, 12}

// logits runs toks through m and returns every position's logits.
func logits(t testing.TB, m *model.Model, toks []int32) []float32 {
	t.Helper()
	kv, err := m.NewKVCache(model.KVCacheOptions{BlockSize: 16, Budget: m.Config.KVBytesPerToken(compute.F32) * 64})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	seq := kv.NewSequence()
	defer seq.Free()
	out, err := m.Forward([]model.Step{{Seq: seq, Tokens: toks}}, model.AllLogits, nil)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(out)
}

// sameLogits checks that gm, read back from a file of type typ, gives the
// logits of the checkpoint in dir: want as it is stored, or, for Q8_0, the
// checkpoint quantized on load.
func sameLogits(t *testing.T, gm *model.Model, dir string, typ TensorType, want []float32) {
	t.Helper()
	ref := want
	if typ == Q8_0 {
		ref = logits(t, loadQ8_0(t, dir), testTokens)
	}
	if d := maxDiff(logits(t, gm, testTokens), ref); d > 1e-4 {
		t.Errorf("%v: logits differ by %g", typ, d)
	}
}

// tensorNames lists f's tensors by name, in file order.
func tensorNames(f *File) []string {
	var names []string
	for _, ti := range f.Tensors {
		names = append(names, ti.Name)
	}
	return names
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func loadGGUF(t testing.TB, path string) *model.Model {
	t.Helper()
	src, err := OpenModel(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.LoadFrom(cpu.New(), src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// randomSource writes a random checkpoint of spec and opens it (closed
// when the test ends); dir is where it is.
func randomSource(t testing.TB, spec model.RandomSpec) (src model.Source, dir string) {
	t.Helper()
	dir = t.TempDir()
	if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	src, err := model.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src, dir
}

func loadDir(t testing.TB, dir string) *model.Model {
	t.Helper()
	m, err := model.Load(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestModelRoundTrip converts random checkpoints of each architecture to
// GGUF in each tensor type and loads them back: the model gives exactly
// the logits of the Hugging Face checkpoint holding the values the file
// decodes to (the checkpoint itself for F32 and BF16), so names, shapes,
// config and llama's q/k permutation all come back; and logits near the
// original's, as close as the type's precision allows.
func TestModelRoundTrip(t *testing.T) {
	tok := trainedTokenizer(t)
	types := []TensorType{F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}
	for _, arch := range []string{model.ArchLlama, model.ArchQwen2, model.ArchQwen3} {
		for _, typ := range types {
			t.Run(ggufArch[arch]+"/"+typ.String(), func(t *testing.T) {
				spec := smallSpec(arch, tok.VocabSize())
				if typ == BF16 {
					spec.DType = "bfloat16"
				}
				spec.Tied = arch == model.ArchQwen3
				spec.AttentionBias = arch == model.ArchLlama && typ == Q8_0
				spec.MLPBias = arch == model.ArchLlama && typ == Q4_0
				dir := t.TempDir()
				if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
					t.Fatal(err)
				}
				cv := convert(t, dir, tok, typ, false)
				path := cv.write(t, filepath.Join(t.TempDir(), "m.gguf"))
				refDir := dir
				if typ != F32 && typ != BF16 {
					refDir = t.TempDir()
					cv.writeDecoded(t, dir, refDir)
				}
				gm := loadGGUF(t, path)
				quantized := sameWeights(t, gm, cv.decoded)
				got := logits(t, gm, testTokens)
				want := logits(t, loadDir(t, refDir), testTokens)
				d := maxDiff(got, want)
				switch {
				case quantized != "" && d > 0.25:
					t.Errorf("logits differ from the decoded checkpoint's by up to %g (with %s kernels)", d, quantized)
				case quantized == "" && d != 0:
					t.Errorf("logits differ from the decoded checkpoint's by up to %g", d)
				}
				orig := logits(t, loadDir(t, dir), testTokens)
				t.Logf("max |Δ logit| against the decoded weights: %.3g %s, against the original weights: %.3g", d, quantized, maxDiff(got, orig))
			})
		}
	}
}

// sameWeights checks that every weight of m holds exactly the values
// decoded says (widened or dequantized exactly by the backend), and
// returns the name of the block type the backend computes with when it
// kept some weights quantized (compute.QuantBackend), "" otherwise.
func sameWeights(t *testing.T, m *model.Model, decoded map[string][]float32) (quantized string) {
	t.Helper()
	for _, p := range m.Weights().Params() {
		if dt := p.T.DType(); dt != compute.F32 && dt != compute.BF16 {
			quantized = dt.String()
		}
		vals, err := model.ReadTensor(m.Backend(), p.T)
		if err != nil {
			t.Fatal(err)
		}
		want, ok := decoded[p.Name]
		if !ok || !slices.Equal(vals, want) {
			t.Fatalf("weight %s: the file's values do not come back (%v)", p.Name, ok)
		}
	}
	return quantized
}

// TestLlamaPermutation: a llama GGUF written without the converter's q/k
// permutation loads to other logits (the permutation is real and undone),
// and qwen2/qwen3 files, which the converter does not permute, load as
// they are (TestModelRoundTrip).
func TestLlamaPermutation(t *testing.T) {
	tok := trainedTokenizer(t)
	dir := t.TempDir()
	if err := model.WriteRandomCheckpoint(dir, smallSpec(model.ArchLlama, tok.VocabSize())); err != nil {
		t.Fatal(err)
	}
	want := logits(t, loadDir(t, dir), testTokens)
	right := convert(t, dir, tok, F32, false).write(t, filepath.Join(t.TempDir(), "right.gguf"))
	wrong := convert(t, dir, tok, F32, true).write(t, filepath.Join(t.TempDir(), "wrong.gguf"))
	if d := maxDiff(logits(t, loadGGUF(t, right), testTokens), want); d != 0 {
		t.Errorf("permuted as llama.cpp does: logits differ by %g", d)
	}
	if d := maxDiff(logits(t, loadGGUF(t, wrong), testTokens), want); d < 1e-3 {
		t.Errorf("not permuted: logits differ by only %g; the test cannot see the permutation", d)
	}
	// The exported permutation is the converter's, and its inverse.
	rows, cols := 8, 3
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(i)
	}
	b := make([]byte, 4*len(w))
	for i, x := range w {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	p, err := PermuteRows(b, rows, 2)
	if err != nil {
		t.Fatal(err)
	}
	wantP := llamaPermute(w, rows, cols, 2)
	for i := range wantP {
		if math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:])) != wantP[i] {
			t.Fatalf("PermuteRows differs from the converter's permute at %d", i)
		}
	}
	back, err := UnpermuteRows(p, rows, 2)
	if err != nil || !slices.Equal(back, b) {
		t.Fatalf("UnpermuteRows does not undo PermuteRows: %v", err)
	}
}

// TestLlama3RopeScaling: Llama 3.1's scaling, which llama.cpp's converter
// turns into rope_freqs.weight, comes back as rope_scaling.
func TestLlama3RopeScaling(t *testing.T) {
	tok := trainedTokenizer(t)
	for _, s := range []model.RopeScaling{
		{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192},
		{Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192},
		{Factor: 4, LowFreqFactor: 2, HighFreqFactor: 3, OriginalMaxPositions: 100},
	} {
		spec := smallSpec(model.ArchLlama, tok.VocabSize())
		spec.RopeTheta = 500000
		spec.RopeScaling = &s
		dir := t.TempDir()
		if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
			t.Fatal(err)
		}
		path := convert(t, dir, tok, F32, false).write(t, filepath.Join(t.TempDir(), "m.gguf"))
		gm := loadGGUF(t, path)
		hm := loadDir(t, dir)
		gf, hf := gm.Config.RopeFrequencies(), hm.Config.RopeFrequencies()
		for i := range hf {
			// The file holds the divisors in float32 (a relative error of
			// 6e-8, which the fit may double).
			if math.Abs(gf[i]-hf[i]) > 2e-7*hf[i] {
				t.Errorf("%+v: frequency %d: %g, want %g", s, i, gf[i], hf[i])
			}
		}
		d := maxDiff(logits(t, gm, testTokens), logits(t, hm, testTokens))
		if d > 1e-4 {
			t.Errorf("%+v: logits differ by %g", s, d)
		}
		t.Logf("%+v → %+v, logits within %g", s, *gm.Config.RopeScaling, d)
	}
}

// TestLinearRopeScaling: a Llama model with linear rope scaling (DeepSeek
// Coder's factor 4) is written with rope.scaling.type "linear" and its
// factor, as llama.cpp's converter writes it, and read back to the same
// frequencies and logits; the older rope.scale_linear key reads the same.
// The scaling changes the logits (so the comparison can fail).
func TestLinearRopeScaling(t *testing.T) {
	tok := trainedTokenizer(t)
	spec := smallSpec(model.ArchLlama, tok.VocabSize())
	spec.RopeTheta = 100000
	plainDir := t.TempDir()
	if err := model.WriteRandomCheckpoint(plainDir, spec); err != nil {
		t.Fatal(err)
	}
	spec.RopeLinear = 4
	dir := t.TempDir()
	if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	hm := loadDir(t, dir)
	if hm.Config.RopeLinear != 4 {
		t.Fatalf("config.json's linear factor read as %v", hm.Config.RopeLinear)
	}
	cv := convert(t, dir, tok, F32, false)
	for _, kv := range cv.kvs {
		if kv.Key == "llama.rope.scaling.type" && kv.Value.String() != `"linear"` || kv.Key == "llama.rope.scaling.factor" && kv.Value.String() != "4" {
			t.Errorf("%s = %v", kv.Key, kv.Value)
		}
	}
	want := logits(t, hm, testTokens)
	for _, c := range []struct {
		name string
		edit func(cv *converted)
	}{
		{"rope.scaling.type", func(*converted) {}},
		{"rope.scale_linear", func(cv *converted) {
			dropKV(cv, "llama.rope.scaling.type")
			dropKV(cv, "llama.rope.scaling.factor")
			setKV(cv, "llama.rope.scale_linear", Float32(4))
		}},
	} {
		cv := convert(t, dir, tok, F32, false)
		c.edit(&cv)
		gm := loadGGUF(t, cv.write(t, filepath.Join(t.TempDir(), "m.gguf")))
		if gm.Config.RopeLinear != 4 {
			t.Errorf("%s: factor read as %v", c.name, gm.Config.RopeLinear)
		}
		if d := maxDiff(logits(t, gm, testTokens), want); d > 1e-4 {
			t.Errorf("%s: logits differ by %g", c.name, d)
		}
	}
	// clawrl's own writer (export) writes the factor too.
	src, err := model.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(t.TempDir(), "export.gguf")
	if err := WriteModel(path, src, tok, Q8_0); err != nil {
		t.Fatal(err)
	}
	if gm := loadGGUF(t, path); gm.Config.RopeLinear != 4 {
		t.Errorf("export: factor read back as %v", gm.Config.RopeLinear)
	}
	if d := maxDiff(logits(t, loadDir(t, plainDir), testTokens), want); d < 1e-3 {
		t.Errorf("linear scaling moved the logits by only %g", d)
	}
}

func TestModelTokenizer(t *testing.T) {
	tok := trainedTokenizer(t)
	dir := t.TempDir()
	if err := model.WriteRandomCheckpoint(dir, smallSpec(model.ArchQwen3, tok.VocabSize()+7)); err != nil {
		t.Fatal(err)
	}
	path := convert(t, dir, tok, Q8_0, false).write(t, filepath.Join(t.TempDir(), "m.gguf"))
	m, err := OpenModel(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got, err := m.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Hello, how are you today?", "<|im_start|>user\n2 + 3<|im_end|>", "ünïcödé 12345"} {
		if a, b := tok.Encode(s), got.Encode(s); !slices.Equal(a, b) {
			t.Errorf("%q: %v from the file, %v trained", s, b, a)
		}
	}
	eos, _ := got.EOS()
	if want, _ := tok.EOS(); eos != want || !m.Config().IsEOS(int(eos)) {
		t.Errorf("EOS %d, want %d; config EOS %v", eos, want, m.Config().EOSTokenIDs)
	}
	req := tokenizer.ChatRequest{Messages: []tokenizer.Message{{Role: "user", Content: "hi"}}, AddGenerationPrompt: true}
	a, _ := tok.ApplyChatTemplate(req)
	b, err := got.ApplyChatTemplate(req)
	if err != nil || a != b {
		t.Errorf("chat template: %q %v, want %q", b, err, a)
	}
	// The generated config.json reads back as the file's config.
	c, err := model.ParseConfig(m.ConfigJSON())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := model.LoadConfig(dir)
	c.EOSTokenIDs, want.EOSTokenIDs = nil, nil
	c.BOSTokenID, want.BOSTokenID = 0, 0
	if c.TorchDType != "bfloat16" { // a quantized model's dtype
		t.Errorf("torch_dtype %q", c.TorchDType)
	}
	c.TorchDType = want.TorchDType
	if fmt.Sprint(*c) != fmt.Sprint(*want) {
		t.Errorf("config.json gives\n%+v\nthe checkpoint's is\n%+v", *c, *want)
	}
}

// spmTokenizer loads the SentencePiece tokenizer scripts/fetch-testdata
// puts in .cache/llama2 (a real 32,000-token Llama 2 / Mistral one), or
// skips.
func spmTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok := spmTokenizerIfPresent(t)
	if tok == nil {
		t.Skip("SentencePiece tokenizer files absent: run scripts/fetch-testdata")
	}
	return tok
}

// spmTokenizerIfPresent is spmTokenizer, nil where the files are absent.
func spmTokenizerIfPresent(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	dir := filepath.Join("..", ".cache", "llama2", "package", "models")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		return nil
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestModelSPMTokenizer: a Llama model with a SentencePiece tokenizer
// goes into a GGUF file as llama.cpp's converter writes one
// (tokenizer.ggml.model "llama": tokens, scores, types,
// add_space_prefix) and reads back as the same tokenizer.
func TestModelSPMTokenizer(t *testing.T) {
	tok := spmTokenizer(t)
	dir := t.TempDir()
	if err := model.WriteRandomCheckpoint(dir, smallSpec(model.ArchLlama, tok.VocabSize())); err != nil {
		t.Fatal(err)
	}
	cv := convert(t, dir, tok, Q8_0, false)
	for _, kv := range cv.kvs {
		if kv.Key == KeyMerges || kv.Key == KeyTokenizerPre {
			t.Errorf("a SentencePiece vocabulary with %s", kv.Key)
		}
	}
	path := cv.write(t, filepath.Join(t.TempDir(), "m.gguf"))
	m, err := OpenModel(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got, err := m.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Hello, how are you today?", "<s>[INST] 2 + 3 [/INST] 5</s>", "  ünïcödé 12345 🦙\n\ttab", ""} {
		if a, b := tok.Encode(s), got.Encode(s); !slices.Equal(a, b) {
			t.Errorf("%q: %v from the file, %v from tokenizer.json", s, b, a)
		}
		if a, b := tok.Decode(tok.Encode(s)), got.Decode(got.Encode(s)); a != b {
			t.Errorf("%q decodes to %q from the file, %q from tokenizer.json", s, b, a)
		}
	}
	if bos, ok := got.BOS(); !ok || got.TokenString(bos) != "<s>" {
		t.Errorf("BOS %d %v", bos, ok)
	}
	// A raw prompt starts with BOS, as llama.cpp tokenizes one: as the
	// file says, and by default for a SentencePiece vocabulary.
	if !got.AddsBOS() {
		t.Error("the SentencePiece file adds no BOS to a raw prompt")
	}
	cv.kvs = slices.DeleteFunc(cv.kvs, func(kv KV) bool { return kv.Key == KeyAddBOS })
	m2, err := OpenModel(cv.write(t, filepath.Join(t.TempDir(), "nokey.gguf")))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if nk, err := m2.Tokenizer(); err != nil || !nk.AddsBOS() {
		t.Errorf("without %s: %v", KeyAddBOS, err)
	}
}

// TestBadModels: files that parse but are not models clawrl runs are
// refused with the path and what is wrong.
func TestBadModels(t *testing.T) {
	tok := trainedTokenizer(t)
	dir := t.TempDir()
	if err := model.WriteRandomCheckpoint(dir, smallSpec(model.ArchLlama, tok.VocabSize())); err != nil {
		t.Fatal(err)
	}
	base := convert(t, dir, tok, Q8_0, false)
	tensor := func(cv *converted, name string) *WriteTensor {
		for i := range cv.tensors {
			if cv.tensors[i].Name == name {
				return &cv.tensors[i]
			}
		}
		t.Fatalf("no tensor %s", name)
		return nil
	}
	cases := []struct {
		name  string
		edit  func(cv *converted)
		stage string // where it is refused: open, load or tokenizer
		text  string
	}{
		{"architecture we do not run", func(cv *converted) { setKV(cv, "general.architecture", String("gptneox")) }, "open", `architecture "gptneox"`},
		{"no architecture", func(cv *converted) { dropKV(cv, "general.architecture") }, "open", "general.architecture is missing"},
		{"missing key", func(cv *converted) { dropKV(cv, "llama.block_count") }, "open", "llama.block_count is missing"},
		{"key of the wrong type", func(cv *converted) { setKV(cv, "llama.block_count", String("2")) }, "open", "not an integer"},
		{"negative count", func(cv *converted) { setKV(cv, "llama.embedding_length", Int32(-256)) }, "open", "not an integer"},
		{"mixture of experts", func(cv *converted) { setKV(cv, "llama.expert_count", Uint32(8)) }, "open", "experts"},
		{"part of a split model", func(cv *converted) { setKV(cv, "split.count", Uint16(3)) }, "open", "one of 3 parts"},
		{"partial rotary", func(cv *converted) { setKV(cv, "llama.rope.dimension_count", Uint32(32)) }, "open", "partial rotary"},
		{"yarn", func(cv *converted) { setKV(cv, "llama.rope.scaling.type", String("yarn")) }, "open", `rope scaling "yarn"`},
		{"linear without factor", func(cv *converted) { setKV(cv, "llama.rope.scaling.type", String("linear")) }, "open", "without its factor"},
		{"linear below 1", func(cv *converted) { setKV(cv, "llama.rope.scale_linear", Float32(0.5)) }, "open", "must be a finite number ≥ 1"},
		{"two linear factors", func(cv *converted) {
			setKV(cv, "llama.rope.scaling.type", String("linear"))
			setKV(cv, "llama.rope.scaling.factor", Float32(2))
			setKV(cv, "llama.rope.scale_linear", Float32(4))
		}, "open", "linear rope scaling by 2"},
		{"heads that do not divide", func(cv *converted) { setKV(cv, "llama.attention.head_count_kv", Uint32(3)) }, "open", "not divisible"},
		{"missing tensor", func(cv *converted) {
			cv.tensors = slices.DeleteFunc(cv.tensors, func(w WriteTensor) bool { return w.Name == "blk.1.ffn_up.weight" })
		}, "open", "blk.1.ffn_up.weight (model.layers.1.mlp.up_proj.weight) is missing"},
		{"unknown tensor", func(cv *converted) {
			cv.tensors = append(cv.tensors, WriteTensor{Name: "blk.0.ffn_gate_exps.weight", Type: F32, Shape: []int{4}, Data: make([]byte, 16)})
		}, "open", "blk.0.ffn_gate_exps.weight is not part of"},
		{"rope_freqs that are not Llama 3's", func(cv *converted) {
			f := make([]byte, 4*32)
			for i := range 32 {
				binary.LittleEndian.PutUint32(f[4*i:], math.Float32bits(1+float32(i%3)))
			}
			cv.tensors = append(cv.tensors, WriteTensor{Name: KeyRopeFreqs, Type: F32, Shape: []int{32}, Data: f})
		}, "open", "not those of Llama 3"},
		{"tensor type we cannot read", func(cv *converted) {
			w := tensor(cv, "blk.0.attn_v.weight")
			w.Type, w.Data = IQ2_XXS, make([]byte, w.Shape[0]*w.Shape[1]/256*IQ2_XXS.TypeSize())
		}, "load", "is IQ2_XXS, which clawrl cannot read"},
		{"wrong shape", func(cv *converted) {
			w := tensor(cv, "blk.0.attn_v.weight")
			w.Shape = []int{w.Shape[1], w.Shape[0]}
		}, "load", "has shape"},
		{"SentencePiece tokenizer without scores", func(cv *converted) { setKV(cv, KeyTokenizerModel, String("llama")) }, "tokenizer", KeyScores + " is missing"},
		{"scores of the wrong type", func(cv *converted) {
			setKV(cv, KeyTokenizerModel, String("llama"))
			setKV(cv, KeyScores, Array([]string{"x"}))
		}, "tokenizer", "not an array of floats"},
		{"scores for other tokens", func(cv *converted) {
			setKV(cv, KeyTokenizerModel, String("llama"))
			setKV(cv, KeyScores, Array([]float32{1, 2}))
		}, "tokenizer", "2 scores"},
		{"unknown tokenizer model", func(cv *converted) { setKV(cv, KeyTokenizerModel, String("bert")) }, "tokenizer", `"bert" is not supported`},
		{"no tokenizer", func(cv *converted) { dropKV(cv, KeyTokenizerModel) }, "tokenizer", "holds no tokenizer"},
		{"unknown pre-tokenizer", func(cv *converted) { setKV(cv, KeyTokenizerPre, String("viking")) }, "tokenizer", `pre-tokenizer "viking"`},
		{"merges of the wrong type", func(cv *converted) { setKV(cv, KeyMerges, Array([]int32{1})) }, "tokenizer", "not an array of strings"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cv := base
			cv.kvs = slices.Clone(base.kvs)
			cv.tensors = slices.Clone(base.tensors)
			c.edit(&cv)
			path := cv.write(t, filepath.Join(t.TempDir(), "bad.gguf"))
			m, err := OpenModel(path)
			stage := "open"
			if err == nil {
				stage = "tokenizer"
				if _, err = m.Tokenizer(); err == nil {
					stage = "load"
					var lm *model.Model
					if lm, err = model.LoadFrom(cpu.New(), m); err == nil {
						lm.Close()
					}
				} else {
					m.Close()
				}
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if stage != c.stage || !strings.Contains(err.Error(), c.text) || !strings.Contains(err.Error(), path) {
				t.Errorf("refused at %s with %q; want at %s, with the path and %q", stage, err, c.stage, c.text)
			}
		})
	}
	// A truncated model file is refused as truncated.
	path := base.write(t, filepath.Join(t.TempDir(), "cut.gguf"))
	data, _ := os.ReadFile(path)
	os.WriteFile(path, data[:len(data)-100], 0o644)
	if _, err := OpenModel(path); !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), path) {
		t.Errorf("truncated model: %v", err)
	}
}

// TestWriteModel: WriteModel writes the file the converter of these tests
// writes, tensor for tensor, and it loads to the same logits.
func TestWriteModel(t *testing.T) {
	tok := trainedTokenizer(t)
	for _, arch := range []string{model.ArchLlama, model.ArchQwen2, model.ArchQwen3} {
		for _, typ := range []TensorType{BF16, Q8_0, Q4_K} {
			spec := smallSpec(arch, tok.VocabSize())
			if arch == model.ArchLlama {
				spec.RopeTheta = 500000
				spec.RopeScaling = &model.RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}
			}
			src, dir := randomSource(t, spec)
			path := filepath.Join(t.TempDir(), "w.gguf")
			if err := WriteModel(path, src, tok, typ); err != nil {
				t.Fatal(err)
			}
			ref := convert(t, dir, tok, typ, false).write(t, filepath.Join(t.TempDir(), "ref.gguf"))
			a, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Open(ref)
			if err != nil {
				t.Fatal(err)
			}
			for _, ti := range b.Tensors {
				x, _, err1 := a.Bytes(ti.Name)
				y, _, _ := b.Bytes(ti.Name)
				if err1 != nil || !slices.Equal(x, y) {
					t.Errorf("%s %s: tensor %s differs (%v)", arch, typ, ti.Name, err1)
				}
			}
			a.Close()
			b.Close()
			if d := maxDiff(logits(t, loadGGUF(t, path), testTokens), logits(t, loadGGUF(t, ref), testTokens)); d != 0 {
				t.Errorf("%s %s: logits differ by %g", arch, typ, d)
			}
		}
	}
	// Rows that are not whole K-quant blocks fall back to Q8_0, then F16.
	if matrixType(Q4_K, 96) != Q8_0 || matrixType(Q4_K, 48) != F16 || matrixType(Q8_0, 64) != Q8_0 {
		t.Error("fallback types")
	}
}

// TestPhi3GGUF: a Phi-3 model is written with llama.cpp's phi3 layout
// (fused attn_qkv and ffn_up, q and k not permuted, the sliding window)
// and read back to the same config and logits, in F32 and Q8_0, LongRoPE
// included; a file with only one of LongRoPE's factor tensors is refused.
func TestPhi3GGUF(t *testing.T) {
	tok := trainedTokenizer(t)
	spec := smallSpec(model.ArchPhi3, tok.VocabSize())
	src, dir := randomSource(t, spec)
	hm := loadDir(t, dir)
	want := logits(t, hm, testTokens)
	for _, typ := range []TensorType{F32, Q8_0} {
		path := filepath.Join(t.TempDir(), "phi3.gguf")
		if err := WriteModel(path, src, tok, typ); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		names := tensorNames(f)
		arch, _ := f.Get("general.architecture")
		f.Close()
		if arch.String() != `"phi3"` || !slices.Contains(names, "blk.0.attn_qkv.weight") || !slices.Contains(names, "blk.1.ffn_up.weight") ||
			slices.Contains(names, "blk.0.attn_q.weight") || slices.Contains(names, "blk.0.ffn_gate.weight") {
			t.Fatalf("%v: architecture %v, tensors %v", typ, arch, names)
		}
		gm := loadGGUF(t, path)
		if gm.Config.Architecture != model.ArchPhi3 {
			t.Errorf("%v: read back as %s", typ, gm.Config.Architecture)
		}
		sameLogits(t, gm, dir, typ, want)
	}

	path := filepath.Join(t.TempDir(), "phi3.gguf")
	if err := WriteModel(path, src, tok, F32); err != nil {
		t.Fatal(err)
	}
	kvs, tensors := readBack(t, path)
	tensors = append(tensors, WriteTensor{Name: "rope_factors_long.weight", Type: F32, Shape: []int{32}, Data: make([]byte, 128)})
	bad := filepath.Join(t.TempDir(), "longrope.gguf")
	if err := WriteFile(bad, kvs, tensors); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenModel(bad); err == nil || !strings.Contains(err.Error(), "LongRoPE needs both") {
		t.Errorf("a file with one of LongRoPE's factor tensors: %v", err)
	}

	// Partial rotary (Phi-4-mini): rope.dimension_count below the head's.
	pspec := smallSpec(model.ArchPhi3, tok.VocabSize())
	pspec.PartialRotary = 0.75
	psrc, pdir := randomSource(t, pspec)
	path = filepath.Join(t.TempDir(), "partial.gguf")
	if err := WriteModel(path, psrc, tok, Q8_0); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	nrot, _ := f.Get("phi3.rope.dimension_count")
	f.Close()
	if nrot.String() != "48" {
		t.Errorf("rope.dimension_count %v, want 48 of 64", nrot)
	}
	pm, qm := loadGGUF(t, path), loadQ8_0(t, pdir)
	if pm.Config.RotaryDim != 48 {
		t.Errorf("read back rotating %d dimensions", pm.Config.RotaryDim)
	}
	if d := maxDiff(logits(t, pm, testTokens), logits(t, qm, testTokens)); d > 1e-4 {
		t.Errorf("partial rotary Q8_0: logits differ by %g from the checkpoint quantized on load", d)
	}

	// LongRoPE (Phi-3.5): the factors as tensors, the original context and
	// the attention factor as keys, the model's context uncapped.
	short, long := make([]float64, 32), make([]float64, 32)
	for i := range short {
		short[i], long[i] = 1+float64(i)/8, 2+float64(i)/4
	}
	spec.MaxPositions, spec.LongRopeOriginal, spec.LongRopeShort, spec.LongRopeLong = 1024, 128, short, long
	src, dir = randomSource(t, spec)
	path = filepath.Join(t.TempDir(), "longrope.gguf")
	if err := WriteModel(path, src, tok, F32); err != nil {
		t.Fatal(err)
	}
	if f, err = Open(path); err != nil {
		t.Fatal(err)
	}
	ctx, _ := f.Get("phi3.context_length")
	orig, _ := f.Get("phi3.rope.scaling.original_context_length")
	f.Close()
	if ctx.String() != "1024" || orig.String() != "128" {
		t.Errorf("context_length %v, original_context_length %v", ctx, orig)
	}
	gm := loadGGUF(t, path)
	hm = loadDir(t, dir)
	if lr := gm.Config.LongRope; lr == nil || gm.Config.MaxPositions != 128 || !slices.Equal(lr.LongFactor, long) ||
		math.Abs(lr.AttnFactor-hm.Config.LongRope.AttnFactor) > 1e-6 {
		t.Errorf("read back: context %d, LongRope %+v", gm.Config.MaxPositions, lr)
	}
	if d := maxDiff(logits(t, gm, testTokens), logits(t, hm, testTokens)); d > 1e-4 {
		t.Errorf("LongRoPE: logits differ by %g", d)
	}
}

// TestPhi3RStrip: a SentencePiece file named as Phi-3 (general.name holding
// "phi3" or "phi-3") has its special tokens, but <unk>, <s> and
// <|endoftext|>, swallow the whitespace after them, as llama.cpp reads it
// (and as Phi-3's tokenizer.json says): the "\n" after <|user|> and
// <|end|> is not a token. Under another name it is. (llama.cpp's own
// Phi-3 file agrees: TestLlamaCppPhi3Specials.) ModelName gives an export
// its base model's name.
func TestPhi3RStrip(t *testing.T) {
	v, err := spmTokenizer(t).Vocab(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"<|endoftext|>", "<|user|>", "<|end|>", "<|assistant|>"} {
		v.Tokens, v.Types, v.Scores = append(v.Tokens, s), append(v.Types, tokenizer.TokenControl), append(v.Scores, 0)
	}
	read := func(name string) *tokenizer.Tokenizer {
		t.Helper()
		path := filepath.Join(t.TempDir(), "vocab.gguf")
		if err := WriteFile(path, append([]KV{{"general.name", String(name)}}, TokenizerMetadata(v)...), nil); err != nil {
			t.Fatal(err)
		}
		if got := ModelName(path); got != name {
			t.Errorf("ModelName %q, want %q", got, name)
		}
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		tok, err := ReadTokenizer(f)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	text := "<|user|>\nHi<|end|>\n<|assistant|>\n<|endoftext|>\n"
	newlines := func(tok *tokenizer.Tokenizer) (n int) {
		for _, id := range tok.Encode(text) {
			if strings.Contains(tok.TokenString(id), "<0x0A>") {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		name string
		want int
	}{{"Phi3", 1}, {"Phi-3-mini-4k-instruct", 1}, {"Llama 2", 4}} {
		if n := newlines(read(c.name)); n != c.want {
			t.Errorf("%s: %d newline tokens in %q, want %d", c.name, n, text, c.want)
		}
	}
	if got := ModelName("/models/Phi-3-mini-4k-instruct/"); got != "Phi-3-mini-4k-instruct" {
		t.Errorf("ModelName of a directory: %q", got)
	}
}
