package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/safetensors"
	"github.com/clawrl/clawrl/trainer"
	"github.com/clawrl/clawrl/trainer/trainertest"
	"github.com/clawrl/clawrl/weights"
)

const testBase = "tiny-base-0123"

// trained writes a random BF16 base model, trains it two steps (LoRA rank 4
// or full fine-tuning) and checkpoints the result; it returns the base
// directory and the verified checkpoint.
func trained(t *testing.T, lora bool) (string, *weights.Checkpoint) {
	return trainedSteps(t, lora, 2)
}

// trainedSteps is trained with steps optimizer steps.
func trainedSteps(t *testing.T, lora bool, steps int) (string, *weights.Checkpoint) {
	return trainedWith(t, lora, steps, map[string][]byte{"tokenizer.json": []byte(`{"model":{}}`), "tokenizer_config.json": []byte(`{}`)}, 64)
}

// trainedWith is trainedSteps with the tokenizer files given (a stand-in
// tokenizer.json for the tests that only copy it) and a vocabulary of
// vocab.
func trainedWith(t *testing.T, lora bool, steps int, tokFiles map[string][]byte, vocab int) (string, *weights.Checkpoint) {
	t.Helper()
	base := t.TempDir()
	spec := model.RandomSpec{
		Arch: model.ArchQwen3, Hidden: 32, Intermediate: 64, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 16,
		Vocab: vocab, MaxPositions: 128, DType: "bfloat16", Seed: 7, InitStd: 0.2,
		ExtraFiles: tokFiles,
	}
	if err := model.WriteRandomCheckpoint(base, spec); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(cpu.New(), base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	o := trainer.DefaultOptions()
	o.LR, o.WarmupSteps, o.WeightDecay = 1e-2, 0, 0
	if lora {
		o.LoRARank, o.LoRAAlpha = 4, 8
	}
	tr, err := trainer.New(m, m.Weights(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	trainertest.Steps(t, tr, steps, 64, 5, 4, 3)
	store := weights.NewStore(weights.StoreOptions{})
	t.Cleanup(store.Close)
	if _, err := tr.Publish(store); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(base, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tr.Save(store, trainer.CheckpointOptions{
		Root: filepath.Join(t.TempDir(), "checkpoints"), ConfigJSON: cfg, Base: testBase,
		ExtraFiles: map[string][]byte{"tokenizer.json": spec.ExtraFiles["tokenizer.json"], "tokenizer_config.json": spec.ExtraFiles["tokenizer_config.json"], "generation_config.json": []byte(`{"do_sample":true}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return base, c
}

// scores loads the model in dir and scores fixed requests.
func scores(t *testing.T, dir string) [][]float32 {
	t.Helper()
	m, err := model.Load(cpu.New(), dir)
	if err != nil {
		t.Fatalf("loading %s: %v", dir, err)
	}
	defer m.Close()
	kv, err := m.NewKVCache(model.KVCacheOptions{Budget: m.Config.KVBytesPerToken(compute.F32) * 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	reqs := []model.ScoreRequest{{Prompt: []int32{1, 5, 9, 12}, Response: []int32{3, 40, 7}}, {Prompt: []int32{60, 2}, Response: []int32{8, 8, 30, 31}}}
	out, err := m.LogProbsBatch(kv, reqs, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lps [][]float32
	for _, s := range out {
		lps = append(lps, s.LogProbs)
	}
	return lps
}

func maxDiff(a, b [][]float32) float64 {
	var d float64
	for i := range a {
		for j := range a[i] {
			d = math.Max(d, math.Abs(float64(a[i][j]-b[i][j])))
		}
	}
	return d
}

// dtypes returns the dtypes of the tensors of a safetensors file.
func dtypes(t *testing.T, path string) map[safetensors.DType]int {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[safetensors.DType]int{}
	for _, n := range f.Names() {
		info, _ := f.Info(n)
		out[info.DType]++
	}
	return out
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// TestModelExport exports a LoRA-trained BF16 model in each dtype and
// checks that it loads as the checkpoint's function: exactly (auto), to
// float32 rounding (f32) or to BF16 rounding (bf16), with config.json's
// torch_dtype naming what was written and nothing of the trainer's state.
func TestModelExport(t *testing.T) {
	base, c := trained(t, true)
	want := scores(t, c.Dir())
	for _, tt := range []struct {
		dtype     DType
		torch     string
		tensors   []safetensors.DType
		tolerance float64
	}{
		{DTypeAuto, "float32", []safetensors.DType{safetensors.BF16, safetensors.F32}, 0},
		{DTypeF32, "float32", []safetensors.DType{safetensors.F32}, 1e-4},
		{DTypeBF16, "bfloat16", []safetensors.DType{safetensors.BF16}, 0.05},
	} {
		t.Run(string(tt.dtype), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "exported")
			res, err := Model(c, out, Options{DType: tt.dtype, BaseDir: base})
			if err != nil {
				t.Fatal(err)
			}
			if res.Version != c.Manifest.Version || res.DType != tt.torch || res.Dir != out {
				t.Errorf("result %+v", res)
			}
			wantFiles := []string{CardFile, "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
			if !slices.Equal(res.Files, wantFiles) {
				t.Errorf("files %v, want %v", res.Files, wantFiles)
			}
			ents, _ := os.ReadDir(out)
			if len(ents) != len(wantFiles) {
				t.Errorf("%d entries in %s, want %d", len(ents), out, len(wantFiles))
			}
			if got := readJSON(t, filepath.Join(out, "config.json"))["torch_dtype"]; got != tt.torch {
				t.Errorf("torch_dtype %v, want %s", got, tt.torch)
			}
			var got []safetensors.DType
			for d := range dtypes(t, filepath.Join(out, "model.safetensors")) {
				got = append(got, d)
			}
			slices.Sort(got)
			slices.Sort(tt.tensors)
			if !slices.Equal(got, tt.tensors) {
				t.Errorf("tensor dtypes %v, want %v", got, tt.tensors)
			}
			// The tokenizer comes from the checkpoint; what it lacks, from the base.
			if b, _ := os.ReadFile(filepath.Join(out, "tokenizer_config.json")); string(b) != "{}" {
				t.Errorf("tokenizer_config.json %q, want the base's", b)
			}
			if d := maxDiff(scores(t, out), want); d > tt.tolerance || math.IsNaN(d) {
				t.Errorf("log-probs differ from the checkpoint's by %g, want ≤ %g", d, tt.tolerance)
			}
			card, _ := os.ReadFile(filepath.Join(out, CardFile))
			for _, s := range []string{"library_name: transformers", "| weight version | 1 |", "| optimizer steps since the base | 2 |", testBase, tt.torch} {
				if !strings.Contains(string(card), s) {
					t.Errorf("model card lacks %q:\n%s", s, card)
				}
			}
		})
	}
}

// TestAdapterExport checks the PEFT adapter against the merged weights:
// W + (lora_alpha/r)·B·A, computed in float64 from the base and the
// exported adapter, is the checkpoint's model.safetensors.
func TestAdapterExport(t *testing.T) {
	base, c := trained(t, true)
	out := filepath.Join(t.TempDir(), "adapter")
	res, err := Adapter(c, out, Options{BaseDir: base, BaseFingerprint: testBase})
	if err != nil {
		t.Fatal(err)
	}
	if res.DType != "float32" {
		t.Errorf("adapter dtype %s", res.DType)
	}
	ac := readJSON(t, filepath.Join(out, AdapterConfigFile))
	r, alpha := ac["r"].(float64), ac["lora_alpha"].(float64)
	if r != 4 || alpha != 8 || ac["peft_type"] != "LORA" || ac["task_type"] != "CAUSAL_LM" || ac["base_model_name_or_path"] != base {
		t.Errorf("adapter_config %v", ac)
	}
	targets := ac["target_modules"].([]any)
	if len(targets) != 7 || targets[0] != "q_proj" || targets[6] != "down_proj" {
		t.Errorf("target_modules %v", targets)
	}
	if _, err := os.Stat(filepath.Join(out, "model.safetensors")); err == nil {
		t.Error("an adapter export holds model.safetensors")
	}

	ad, err := safetensors.Open(filepath.Join(out, AdapterModelFile))
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	bw, err := safetensors.OpenDir(base)
	if err != nil {
		t.Fatal(err)
	}
	defer bw.Close()
	merged, err := safetensors.Open(c.Path(weights.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	defer merged.Close()
	if n := len(ad.Names()); n != 2*7*2 {
		t.Fatalf("%d adapter tensors, want 28", n)
	}
	checked, moved := 0, 0
	for _, name := range ad.Names() {
		if !strings.HasSuffix(name, ".lora_A.weight") {
			continue
		}
		if !strings.HasPrefix(name, "base_model.model.model.layers.") {
			t.Fatalf("adapter tensor %q: not a PEFT name", name)
		}
		module := strings.TrimPrefix(strings.TrimSuffix(name, ".lora_A.weight"), "base_model.model.")
		bName := strings.TrimSuffix(name, "lora_A.weight") + "lora_B.weight"
		ai, _ := ad.Info(name)
		a, _ := ad.Float32(name)
		b, err := ad.Float32(bName)
		if err != nil {
			t.Fatal(err)
		}
		w, err := bw.Float32(module + ".weight")
		if err != nil {
			t.Fatal(err)
		}
		got, err := merged.Float32(module + ".weight")
		if err != nil {
			t.Fatal(err)
		}
		rank, in := ai.Shape[0], ai.Shape[1]
		outDim := len(w) / in
		for o := range outDim {
			for i := range in {
				var d float64
				for k := range rank {
					d += float64(b[o*rank+k]) * float64(a[k*in+i])
				}
				ref := float64(w[o*in+i]) + alpha/r*d
				if math.Abs(ref-float64(got[o*in+i])) > 1e-5*math.Max(1, math.Abs(ref)) {
					t.Fatalf("%s[%d,%d]: base + adapter = %g, the merged weight is %g", module, o, i, ref, got[o*in+i])
				}
				if got[o*in+i] != w[o*in+i] {
					moved++
				}
			}
		}
		checked++
	}
	if checked != 14 || moved == 0 {
		t.Errorf("checked %d matrices, %d weights moved by training (want 14, > 0)", checked, moved)
	}
}

// TestExportRefuses covers what an export refuses, and that a refused
// export leaves nothing behind.
func TestExportRefuses(t *testing.T) {
	base, c := trained(t, true)
	_, full := trained(t, false)
	parent := t.TempDir()
	full1 := filepath.Join(parent, "full")
	if err := os.Mkdir(full1, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(full1, "keep.txt"), []byte("x"), 0o644)
	mine := filepath.Join(parent, "mine")
	os.Mkdir(mine, 0o755)
	os.WriteFile(filepath.Join(mine, "thesis.txt"), []byte("years of work"), 0o644)
	file := filepath.Join(parent, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, tt := range []struct {
		name string
		do   func() error
		want string
	}{
		{"non-empty destination", func() error { _, err := Model(c, full1, Options{}); return err }, "pass --force"},
		{"destination is a file", func() error { _, err := Model(c, file, Options{}); return err }, "not a directory"},
		{"inside the checkpoint", func() error { _, err := Model(c, filepath.Join(c.Dir(), "x"), Options{}); return err }, "inside the checkpoint"},
		{"the checkpoint itself", func() error { _, err := Model(c, c.Dir(), Options{Force: true}); return err }, "inside the checkpoint"},
		{"the checkpoint root, forced", func() error { _, err := Model(c, filepath.Dir(c.Dir()), Options{Force: true}); return err }, "holds the checkpoint"},
		{"a link to the checkpoint root, forced", func() error {
			link := filepath.Join(parent, "link")
			if err := os.Symlink(filepath.Dir(c.Dir()), link); err != nil {
				t.Skip(err)
			}
			_, err := Model(c, link, Options{Force: true})
			return err
		}, "holds the checkpoint"},
		{"inside a link to the checkpoint", func() error {
			link := filepath.Join(parent, "link2")
			if err := os.Symlink(c.Dir(), link); err != nil {
				t.Skip(err)
			}
			_, err := Model(c, filepath.Join(link, "sub"), Options{})
			return err
		}, "inside the checkpoint"},
		{"a directory of other files, forced", func() error { _, err := Model(c, mine, Options{Force: true}); return err }, "not a clawrl export"},
		{"bad dtype", func() error { _, err := Model(c, filepath.Join(parent, "d"), Options{DType: "fp8"}); return err }, `dtype "fp8"`},
		{"adapter of full fine-tuning", func() error { _, err := Adapter(full, filepath.Join(parent, "a"), Options{}); return err }, "without LoRA"},
		{"adapter of another base", func() error {
			_, err := Adapter(c, filepath.Join(parent, "b"), Options{BaseDir: base, BaseFingerprint: "other-base"})
			return err
		}, "an adapter applies only to its own base"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(full1, "keep.txt")); string(b) != "x" {
		t.Error("a refused export touched the destination")
	}
	if b, _ := os.ReadFile(filepath.Join(mine, "thesis.txt")); string(b) != "years of work" {
		t.Error("--force deleted a directory that was not an export")
	}
	if _, err := weights.Open(c.Dir()); err != nil {
		t.Errorf("the checkpoint after the refused exports: %v", err)
	}

	// --force replaces an earlier export whole (a full export with an
	// adapter export, here).
	exp := filepath.Join(parent, "exp")
	if _, err := Model(c, exp, Options{}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(exp, "stale.txt"), []byte("x"), 0o644)
	if _, err := Adapter(c, exp, Options{Force: true}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"stale.txt": false, "model.safetensors": false, AdapterModelFile: true} {
		if _, err := os.Stat(filepath.Join(exp, name)); (err == nil) != want {
			t.Errorf("after --force, %s present: %v, want %v", name, err == nil, want)
		}
	}

	// A file changed after the checkpoint was verified fails the export,
	// naming it, and leaves no destination and no temporary directory.
	path := c.Path("tokenizer.json")
	b, _ := os.ReadFile(path)
	b[0] ^= 1
	os.WriteFile(path, b, 0o644)
	dest := filepath.Join(parent, "late")
	_, err := Model(c, dest, Options{})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "changed since it was verified") {
		t.Errorf("export of a file changed after verification: %v", err)
	}
	if _, err := os.Stat(dest); err == nil {
		t.Error("a failed export left its destination")
	}
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("a failed export left %s", e.Name())
		}
	}
	// And weights.Open now refuses the checkpoint, naming the file.
	if _, err := weights.Open(c.Dir()); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("reopening the corrupted checkpoint: %v", err)
	}
}

// TestExportTokenizer: a checkpoint without tokenizer.json takes the base's,
// and with neither the export is refused.
func TestExportTokenizer(t *testing.T) {
	base, c := trained(t, true)
	// Drop tokenizer.json from the checkpoint (manifest and file) by
	// republishing it without.
	var files []weights.File
	for _, f := range c.Manifest.Files {
		if f.Name == "tokenizer.json" {
			continue
		}
		src := c.Path(f.Name)
		files = append(files, weights.File{Name: f.Name, Create: func(path string) error {
			b, err := os.ReadFile(src)
			if err != nil {
				return err
			}
			return os.WriteFile(path, b, 0o644)
		}})
	}
	info := c.Info()
	info.Version++
	bare, err := weights.Save(filepath.Dir(c.Dir()), info, files, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "e")
	if _, err := Model(bare, out, Options{BaseDir: base}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "tokenizer.json")); string(b) != `{"model":{}}` {
		t.Errorf("tokenizer.json %q, want the base's", b)
	}
	_, err = Model(bare, filepath.Join(t.TempDir(), "f"), Options{})
	if err == nil || !strings.Contains(err.Error(), "no tokenizer.json") {
		t.Errorf("export without any tokenizer: %v", err)
	}
}

func TestParseDType(t *testing.T) {
	for in, want := range map[string]DType{"": DTypeAuto, "auto": DTypeAuto, "F32": DTypeF32, "float32": DTypeF32, "bf16": DTypeBF16, "bfloat16": DTypeBF16} {
		if got, err := ParseDType(in); err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"fp16", "int8", "f64"} {
		if _, err := ParseDType(in); err == nil {
			t.Errorf("ParseDType(%q) accepted", in)
		}
	}
}

// TestModelExportFull: the default export copies the checkpoint's weights
// byte for byte, and its torch_dtype holds every value exactly. Full
// fine-tuning trains the norm weights, which the backend holds in F32, so
// it says float32; the untrained base (BF16 matrices, norms widened to
// F32 from BF16) says bfloat16, which loses nothing and halves memory.
func TestModelExportFull(t *testing.T) {
	for _, tt := range []struct {
		steps int
		torch string
	}{{2, "float32"}, {0, "bfloat16"}} {
		_, c := trainedSteps(t, false, tt.steps)
		out := filepath.Join(t.TempDir(), "full")
		res, err := Model(c, out, Options{}) // DType "" is auto
		if err != nil {
			t.Fatal(err)
		}
		if res.DType != tt.torch || readJSON(t, filepath.Join(out, "config.json"))["torch_dtype"] != tt.torch {
			t.Errorf("%d steps: dtype %s, want %s", tt.steps, res.DType, tt.torch)
		}
		a, _ := os.ReadFile(c.Path("model.safetensors"))
		b, _ := os.ReadFile(filepath.Join(out, "model.safetensors"))
		if !bytes.Equal(a, b) {
			t.Errorf("%d steps: the default export rewrote model.safetensors", tt.steps)
		}
		if d := maxDiff(scores(t, out), scores(t, c.Dir())); d != 0 {
			t.Errorf("%d steps: log-probs differ by %g", tt.steps, d)
		}
	}
}

func TestBF16Exact(t *testing.T) {
	for _, tt := range []struct {
		vals []float32
		want bool
	}{
		{[]float32{0, 1, -2.5, 0.15625, float32(math.Inf(1))}, true},
		{[]float32{1, 1.0000001}, false},
		{[]float32{safetensors.BF16ToFloat32(0x3f81) + 1e-7}, false},
		{nil, true},
	} {
		if got := bf16Exact(safetensors.EncodeFloat32(tt.vals)); got != tt.want {
			t.Errorf("bf16Exact(%v) = %v", tt.vals, got)
		}
	}
}

// TestShardedExport: weights over MaxShardBytes are split into shards (a
// tensor larger than the limit alone in its own) with an index that maps
// every tensor, and load and score exactly as the checkpoint.
func TestShardedExport(t *testing.T) {
	_, c := trained(t, true)
	want := scores(t, c.Dir())
	for _, dtype := range []DType{DTypeAuto, DTypeBF16} {
		out := filepath.Join(t.TempDir(), "sharded")
		const limit = 6000
		res, err := Model(c, out, Options{DType: dtype, MaxShardBytes: limit})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(res.Files, "model.safetensors") || !slices.Contains(res.Files, safetensors.IndexFile) {
			t.Fatalf("%s: files %v", dtype, res.Files)
		}
		idx := readJSON(t, filepath.Join(out, safetensors.IndexFile))
		wm := idx["weight_map"].(map[string]any)
		shards := map[string]int64{}
		var sum int64
		for name, shard := range wm {
			f, err := safetensors.Open(filepath.Join(out, shard.(string)))
			if err != nil {
				t.Fatal(err)
			}
			info, ok := f.Info(name)
			f.Close()
			if !ok {
				t.Fatalf("%s is not in %s", name, shard)
			}
			shards[shard.(string)] += info.Len() * int64(info.DType.Size())
			sum += info.Len() * int64(info.DType.Size())
		}
		n := len(shards)
		if n < 3 {
			t.Errorf("%s: %d shards, want several", dtype, n)
		}
		for shard, size := range shards {
			if !strings.HasSuffix(shard, fmt.Sprintf("-of-%05d.safetensors", n)) {
				t.Errorf("shard name %s", shard)
			}
			f, _ := safetensors.Open(filepath.Join(out, shard))
			if size > limit && len(f.Names()) > 1 {
				t.Errorf("%s: shard %s holds %d bytes in %d tensors, over the limit %d", dtype, shard, size, len(f.Names()), limit)
			}
			f.Close()
		}
		total, _ := idx["metadata"].(map[string]any)["total_size"].(float64)
		if int64(total) != sum {
			t.Errorf("%s: total_size %v, the tensors hold %d", dtype, total, sum)
		}
		tol := 0.0
		if dtype == DTypeBF16 {
			tol = 0.05
		}
		if d := maxDiff(scores(t, out), want); d > tol {
			t.Errorf("%s: sharded log-probs differ by %g", dtype, d)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "5GB": 5e9, "500MB": 5e8, "1.5GiB": 3 << 29, "2048": 2048, "10 KiB": 10240, "7b": 7} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1GB", "five", "1TBB", "NaN", "1e30GB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

// FuzzParseSize: any string parses to a non-negative size or an error,
// never a panic; a size it prints back parses to itself.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"5GB", "0", "1.5GiB", "12 kb", "-3", "1e400", "GB", " 7B "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
		if m, err := ParseSize(fmt.Sprint(n)); err != nil || m != n {
			t.Fatalf("ParseSize(%d) = %d, %v", n, m, err)
		}
	})
}
