package cli

import (
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/gguf"
	"github.com/clawrl/clawrl/safetensors"
	"github.com/clawrl/clawrl/weights"
)

// TestGemma3Model runs a Gemma 3 model (Gemma3ForCausalLM, a window of 8
// on its windowed layers) as a user does, on the real binary: its
// checkpoint and its BF16 GGUF file (gemma3) generate the same greedy
// text past the window; the daemon serving the GGUF file trains LoRA
// adapters on thumbs; serving the checkpoint with full fine-tuning,
// thumbs train versions, a restart resumes and trains on, and the trained
// version exports as a Hugging Face checkpoint (norms as w) and a GGUF
// file (norms as 1 + w, as llama.cpp's converter writes them) that
// generate.
//
// Gemma 2 (Gemma2ForCausalLM: soft-capped scores and logits, every other
// layer windowed) runs the same.
func TestGemma3Model(t *testing.T) {
	for _, arch := range []string{"Gemma3ForCausalLM", "Gemma2ForCausalLM"} {
		t.Run(arch, func(t *testing.T) { testGemmaModel(t, arch) })
	}
}

func testGemmaModel(t *testing.T, arch string) {
	bin := realBinary(t)
	dir := t.TempDir()
	hf := filepath.Join(dir, "gemma")
	if out, err := exec.Command(bin, "testmodel", hf, "--arch", arch, "--sliding-window", "8", "--gguf", "bf16").CombinedOutput(); err != nil {
		t.Fatalf("testmodel: %v\n%s", err, out)
	}
	gg := filepath.Join(hf, "model-bf16.gguf")
	generate := func(m string) string { return generateGreedy(t, bin, m, "Name three primes, please.", 16) }
	if a, b := generate(hf), generate(gg); a != b || strings.TrimSpace(a) == "" {
		t.Errorf("greedy generation: the checkpoint says %q, its BF16 GGUF %q", a, b)
	}

	var cfg string
	for _, c := range []struct{ name, model, extra string }{{"lora", gg, ""}, {"full", hf, "  lora_rank: 0\n"}} {
		var data string
		cfg, data = quickTrainConfig(t, dir, c.name, c.model, c.extra)
		d := startDaemon(t, bin, cfg, freePort(t))
		chatWithThumbs(t, d, "gemma", "Name a fruit.", 2, 1, "", nil)
		root := filepath.Join(data, "checkpoints")
		v := waitCheckpoint(t, d, root, 2)
		if adapters := weights.IsAdaptersOnly(filepath.Join(root, fmt.Sprintf("v%08d", v))); adapters != (c.name == "lora") {
			t.Errorf("%s: checkpoint of LoRA adapters only: %v", c.name, adapters)
		}
		if err := d.stop(); err != nil {
			t.Fatalf("daemon: %v\n%s", err, d.log)
		}
		if c.name == "lora" {
			continue
		}
		d = startDaemon(t, bin, cfg, freePort(t))
		if got := d.servedVersion(t); got != v {
			t.Errorf("after a restart the daemon serves version %d, want %d\n%s", got, v, d.log)
		}
		chatWithThumbs(t, d, "gemma-again", "Name a color.", 2, 1, "", nil)
		waitCheckpoint(t, d, root, v+1)
		d.stop()
	}

	out := filepath.Join(dir, "export-hf")
	if o, err := exec.Command(bin, "export", "--config", cfg, "--out", out).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, o)
	}
	outGG := filepath.Join(dir, "export.gguf")
	if o, err := exec.Command(bin, "export", "--config", cfg, "--format", "gguf", "--type", "q8_0", "--out", outGG).CombinedOutput(); err != nil {
		t.Fatalf("export gguf: %v\n%s", err, o)
	}
	ck, err := safetensors.OpenDir(out)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ck.Float32("model.layers.1.post_feedforward_layernorm.weight")
	w = slices.Clone(w) // a view of the mapped file
	ck.Close()
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(outGG)
	if err != nil {
		t.Fatal(err)
	}
	ga, _ := f.Get("general.architecture")
	onePlus, err := f.Float32("blk.1.post_ffw_norm.weight")
	onePlus = slices.Clone(onePlus) // a view of the mapped file
	f.Close()
	if want := map[string]string{"Gemma3ForCausalLM": `"gemma3"`, "Gemma2ForCausalLM": `"gemma2"`}[arch]; err != nil || ga.String() != want {
		t.Fatalf("GGUF export: architecture %v, post_ffw_norm: %v", ga, err)
	}
	for i := range w {
		if math.Abs(float64(onePlus[i]-1-w[i])) > 1e-6 {
			t.Fatalf("norm %d: GGUF %g, Hugging Face %g: not 1 + w", i, onePlus[i], w[i])
		}
	}
	for _, m := range []string{out, outGG} {
		if strings.TrimSpace(generate(m)) == "" {
			t.Errorf("generate --model %s said nothing", m)
		}
	}
}
