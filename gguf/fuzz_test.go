package gguf

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
)

// allocated is the bytes allocated on the heap so far (cheaper to read
// than runtime.MemStats, which stops the world).
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// FuzzParse feeds arbitrary bytes to Parse: it must never panic, and a
// file it accepts must describe tensors that lie inside it and that
// Dequantize reads without fault; whatever the bytes declare, parsing
// allocates no more than a small multiple of their length.
func FuzzParse(f *testing.F) {
	// Seeds: files the writer makes (metadata of every type, a tensor of
	// every readable type), a small model-like file, and damaged ones.
	var full bytes.Buffer
	var ts []WriteTensor
	rng := rand.New(rand.NewPCG(7, 8))
	for _, typ := range testTypes { // one block of each
		n := max(typ.BlockSize(), 2)
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		size, _ := EncodedSize(typ, n)
		data := make([]byte, size)
		Quantize(data, x, typ)
		ts = append(ts, WriteTensor{Name: typ.String(), Type: typ, Shape: []int{n}, Data: data})
	}
	if err := Write(&full, sampleKVs(), ts); err != nil {
		f.Fatal(err)
	}
	f.Add(full.Bytes())
	var small bytes.Buffer
	q := make([]byte, 34*2)
	Quantize(q, make([]float32, 64), Q8_0)
	if err := Write(&small, []KV{{"general.architecture", String("qwen3")}, {"tokenizer.ggml.tokens", Array([]string{"a", "b"})}, {KeyAlignment, Uint32(64)}},
		[]WriteTensor{{Name: "token_embd.weight", Type: Q8_0, Shape: []int{2, 32}, Data: q}, {Name: "output_norm.weight", Type: F32, Shape: []int{4}, Data: make([]byte, 16)}}); err != nil {
		f.Fatal(err)
	}
	f.Add(small.Bytes())
	f.Add(full.Bytes()[:len(full.Bytes())/2])
	f.Add([]byte("GGUF"))
	f.Add(new(raw).head(3, 0, 1).str("k").u32(9).u32(9).u64(1).u32(8).u64(2).str("x").str("y").Bytes())
	f.Add(new(raw).head(3, 2, 0).tensor("a", Q4_K, 0, 256).tensor("b", Q6_K, 160, 256).data(512))
	f.Add(new(raw).head(2, 1, 1).str(KeyAlignment).u32(4).u32(8).tensor("a", BF16, 8, 3).data(64))

	f.Fuzz(func(t *testing.T, data []byte) {
		before := allocated()
		h, err := Parse(data)
		if grew := allocated() - before; grew > uint64(64*len(data)+1<<20) {
			t.Fatalf("parsing %d bytes allocated %d bytes", len(data), grew)
		}
		if err != nil {
			return
		}
		for _, ti := range h.Tensors {
			end := uint64(h.DataOffset) + ti.Offset + ti.Size
			if end > uint64(len(data)) || uint64(h.DataOffset)+ti.Offset < uint64(h.DataOffset) {
				t.Fatalf("tensor %q: [%d+%d, %d) outside %d bytes", ti.Name, h.DataOffset, ti.Offset, end, len(data))
			}
			if !ti.Type.Readable() || ti.Elems() > 1<<16 {
				continue
			}
			b := data[uint64(h.DataOffset)+ti.Offset : end]
			if err := Dequantize(make([]float32, ti.Elems()), b, ti.Type); err != nil {
				t.Fatalf("tensor %q: %v", ti.Name, err)
			}
		}
		for _, kv := range h.KV {
			_ = kv.Value.String()
		}
	})
}

// metaKeys are the metadata keys FuzzModelMetadata sets, with the
// architecture prefix where {a} stands.
var metaKeys = []string{
	"{a}.context_length", "{a}.embedding_length", "{a}.block_count", "{a}.feed_forward_length",
	"{a}.attention.head_count", "{a}.attention.head_count_kv", "{a}.attention.key_length", "{a}.attention.value_length",
	"{a}.rope.dimension_count", "{a}.rope.freq_base", "{a}.rope.scaling.type", "{a}.rope.scaling.factor", "{a}.rope.scale_linear",
	"{a}.rope.scaling.original_context_length", "{a}.rope.scaling.attn_factor", "{a}.attention.sliding_window",
	"{a}.attention.layer_norm_rms_epsilon", "{a}.expert_count", "general.architecture",
	KeyTokenizerPre, "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token",
	"tokenizer.ggml.model", "tokenizer.chat_template",
	"{a}.attention.sliding_window_pattern", "{a}.rope.freq_base_swa", "{a}.final_logit_softcapping",
	"{a}.logit_scale", "{a}.embedding_scale", "{a}.residual_scale", "{a}.attention.scale",
	"{a}.attn_logit_softcapping",
}

// FuzzModelMetadata opens small model files (a Phi-3 model with LongRoPE
// and partial rotary, a Llama with linear rope scaling, a Gemma 3 with
// windowed layers, a Granite with its multipliers, a Gemma 2 with its
// soft-caps) with one metadata
// value replaced by an arbitrary one of any type, or removed: OpenModel
// must refuse the file with an error or describe a model that loads and
// runs a forward pass, and never panic. Values that describe a model
// too large to load in a test (a context of more than 2^20 positions, say)
// are left to OpenModel's and ParseConfig's own checks.
func FuzzModelMetadata(f *testing.F) {
	tok := trainedTokenizer(f)
	dir := f.TempDir()
	var files []string
	for i, edit := range []func(*model.RandomSpec){
		func(s *model.RandomSpec) {
			short := make([]float64, 12)
			for i := range short {
				short[i] = 1 + float64(i)/8
			}
			s.Arch, s.PartialRotary, s.MaxPositions, s.LongRopeOriginal, s.LongRopeShort, s.LongRopeLong = model.ArchPhi3, 0.75, 512, 64, short, short
		},
		func(s *model.RandomSpec) { s.RopeLinear = 4 },
		func(s *model.RandomSpec) {
			s.Arch, s.Layers, s.SlidingWindow, s.SlidingPattern, s.LocalRopeTheta = model.ArchGemma3, 3, 16, 3, 100
		},
		func(s *model.RandomSpec) {
			s.Arch, s.EmbeddingMultiplier, s.AttentionMultiplier, s.ResidualMultiplier, s.LogitsScaling = model.ArchGranite, 12, 0.03, 0.2, 8
		},
		func(s *model.RandomSpec) {
			s.Arch, s.Layers, s.SlidingWindow, s.AttnSoftcap, s.FinalSoftcap = model.ArchGemma2, 2, 16, 50, 30
		},
	} {
		spec := model.RandomSpec{Arch: model.ArchLlama, Hidden: 64, Intermediate: 64, Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 32,
			Vocab: tok.VocabSize(), MaxPositions: 128, DType: "float32", Seed: 3, InitStd: 0.05}
		edit(&spec)
		src, _ := randomSource(f, spec)
		path := filepath.Join(dir, fmt.Sprintf("m%d.gguf", i))
		if err := WriteModel(path, src, tok, Q8_0); err != nil {
			f.Fatal(err)
		}
		files = append(files, path)
	}
	f.Add(uint8(0), uint8(0), uint8(0), uint64(4096), 1.5, "linear")
	f.Add(uint8(1), uint8(8), uint8(0), uint64(32), 0.0, "")
	f.Add(uint8(0), uint8(13), uint8(1), uint64(0), -1.0, "")
	f.Add(uint8(1), uint8(10), uint8(2), uint64(0), 0.0, "yarn")
	f.Add(uint8(0), uint8(19), uint8(2), uint64(0), 0.0, "deepseek-coder")
	f.Add(uint8(0), uint8(14), uint8(1), uint64(0), math.NaN(), "")
	f.Add(uint8(1), uint8(5), uint8(4), uint64(0), 0.0, "")
	f.Add(uint8(2), uint8(25), uint8(0), uint64(0), 0.0, "")
	f.Add(uint8(2), uint8(2), uint8(0), uint64(1<<31-1), 0.0, "")
	f.Add(uint8(2), uint8(27), uint8(1), uint64(0), 30.0, "")
	f.Add(uint8(3), uint8(28), uint8(1), uint64(0), math.Inf(1), "")
	f.Add(uint8(3), uint8(31), uint8(5), uint64(0), 0.0, "")
	f.Add(uint8(4), uint8(32), uint8(1), uint64(0), -50.0, "")
	f.Add(uint8(4), uint8(26), uint8(1), uint64(0), 0.0, "")
	f.Fuzz(func(t *testing.T, file, key, typ uint8, u uint64, x float64, s string) {
		kvs, tensors := readBack(t, files[int(file)%len(files)])
		var arch Value
		for _, kv := range kvs {
			if kv.Key == "general.architecture" {
				arch = kv.Value
			}
		}
		name := strings.ReplaceAll(metaKeys[int(key)%len(metaKeys)], "{a}", strings.Trim(arch.String(), `"`))
		var v Value
		switch typ % 6 {
		case 0:
			v = Uint32(uint32(u))
		case 1:
			v = Float32(float32(x))
		case 2:
			v = String(s)
		case 3:
			v = Int32(int32(u))
		case 4:
			v = Uint64(u)
		}
		kvs = slices.DeleteFunc(kvs, func(kv KV) bool { return kv.Key == name })
		if typ%6 != 5 {
			kvs = append(kvs, KV{name, v})
		}
		path := filepath.Join(t.TempDir(), "m.gguf")
		if err := WriteFile(path, kvs, tensors); err != nil {
			return // a value the writer refuses
		}
		m, err := OpenModel(path)
		if err != nil {
			return
		}
		c := m.Config()
		if c.MaxPositions > 1<<20 || c.NumParams() > 1<<24 {
			m.Close()
			return // too large for a test to load, not wrong
		}
		if _, err := m.Tokenizer(); err != nil {
			m.Close()
			return
		}
		lm, err := model.LoadFrom(cpu.New(), m)
		if err != nil {
			return
		}
		defer lm.Close()
		logits(t, lm, []int32{1, 2, 3}[:min(3, c.MaxPositions)])
	})
}
