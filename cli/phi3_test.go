package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clawrl/clawrl/gguf"
	"github.com/clawrl/clawrl/safetensors"
	"github.com/clawrl/clawrl/weights"
)

// TestPhi3Model runs a Phi-3 model (Phi3ForCausalLM: fused qkv_proj and
// gate_up_proj) as a user does, on the real binary: its checkpoint and
// its GGUF file (phi3, fused attn_qkv and ffn_up) generate the same greedy
// text; the daemon serving the GGUF file trains LoRA adapters on thumbs
// (which export --adapter refuses to write for PEFT, which would adapt the
// fused matrices as one);
// serving the checkpoint with full fine-tuning, thumbs train versions
// whose checkpoints hold the fused tensors, a restart resumes from them
// and trains on, and the trained version exports as a Hugging Face
// checkpoint and a GGUF file, both in Phi-3's layout, that generate.
func TestPhi3Model(t *testing.T) {
	bin := realBinary(t)
	dir := t.TempDir()
	hf := filepath.Join(dir, "fused") // not "phi3": llama.cpp (and clawrl) would give a file of that name Phi-3's rstrip special tokens
	if out, err := exec.Command(bin, "testmodel", hf, "--arch", "Phi3ForCausalLM", "--gguf", "bf16").CombinedOutput(); err != nil {
		t.Fatalf("testmodel: %v\n%s", err, out)
	}
	fused := func(path string) {
		t.Helper()
		ck, err := safetensors.OpenDir(path)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		names := strings.Join(ck.Names(), " ")
		if !strings.Contains(names, "model.layers.0.self_attn.qkv_proj.weight") || !strings.Contains(names, "model.layers.0.mlp.gate_up_proj.weight") || strings.Contains(names, "q_proj") {
			t.Errorf("%s holds %s, not Phi-3's fused tensors", path, names)
		}
	}
	fused(hf)
	gg := filepath.Join(hf, "model-bf16.gguf")
	generate := func(m string) string { return generateGreedy(t, bin, m, "Name three primes.", 12) }
	if a, b := generate(hf), generate(gg); a != b || strings.TrimSpace(a) == "" {
		t.Errorf("greedy generation: the checkpoint says %q, its BF16 GGUF %q", a, b)
	}

	// LoRA over the GGUF file (the default), and full fine-tuning of the
	// checkpoint, whose versions' checkpoints hold the fused tensors.
	var cfg string
	for _, c := range []struct{ name, model, extra string }{{"lora", gg, ""}, {"full", hf, "  lora_rank: 0\n"}} {
		var data string
		cfg, data = quickTrainConfig(t, dir, c.name, c.model, c.extra)
		d := startDaemon(t, bin, cfg, freePort(t))
		chatWithThumbs(t, d, "phi3", "Name a fruit.", 2, 1, "", nil)
		root := filepath.Join(data, "checkpoints")
		v := waitCheckpoint(t, d, root, 2)
		ck := filepath.Join(root, fmt.Sprintf("v%08d", v))
		if adapters := weights.IsAdaptersOnly(ck); adapters != (c.name == "lora") {
			t.Errorf("%s: checkpoint of LoRA adapters only: %v", c.name, adapters)
		}
		if c.name == "lora" {
			d.stop()
			// PEFT would adapt Phi-3's fused matrices as one: refused.
			o, err := exec.Command(bin, "export", "--config", cfg, "--adapter", "--out", filepath.Join(dir, "peft")).CombinedOutput()
			if err == nil || !strings.Contains(string(o), "qkv_proj") || !strings.Contains(string(o), "export the merged model") {
				t.Errorf("export --adapter of a Phi-3 model: %v\n%s", err, o)
			}
			continue
		}
		fused(ck)
		if err := d.stop(); err != nil {
			t.Fatalf("daemon: %v\n%s", err, d.log)
		}
		// A restart resumes from the fused checkpoint and trains on.
		d = startDaemon(t, bin, cfg, freePort(t))
		if got := d.servedVersion(t); got != v {
			t.Errorf("after a restart the daemon serves version %d, want %d\n%s", got, v, d.log)
		}
		chatWithThumbs(t, d, "phi3-again", "Name a color.", 2, 1, "", nil)
		waitCheckpoint(t, d, root, v+1)
		d.stop()
	}

	out := filepath.Join(dir, "export-hf")
	if o, err := exec.Command(bin, "export", "--config", cfg, "--out", out).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, o)
	}
	fused(out)
	raw, _ := os.ReadFile(filepath.Join(out, "config.json"))
	if !strings.Contains(string(raw), "Phi3ForCausalLM") {
		t.Errorf("exported config.json: %s", raw)
	}
	outGG := filepath.Join(dir, "export.gguf")
	if o, err := exec.Command(bin, "export", "--config", cfg, "--format", "gguf", "--type", "q8_0", "--out", outGG).CombinedOutput(); err != nil {
		t.Fatalf("export gguf: %v\n%s", err, o)
	}
	f, err := gguf.Open(outGG)
	if err != nil {
		t.Fatal(err)
	}
	arch, _ := f.Get("general.architecture")
	var names []string
	for _, ti := range f.Tensors {
		names = append(names, ti.Name)
	}
	f.Close()
	if arch.String() != `"phi3"` || !slices.Contains(names, "blk.0.attn_qkv.weight") {
		t.Errorf("GGUF export: architecture %v, tensors %v", arch, names)
	}
	for _, m := range []string{out, outGG} {
		if strings.TrimSpace(generate(m)) == "" {
			t.Errorf("generate --model %s said nothing", m)
		}
	}
}

// waitCheckpoint waits (two minutes at most) until the newest checkpoint
// under root is of version min or later, and returns its version.
func waitCheckpoint(t *testing.T, d *daemon, root string, min uint64) uint64 {
	t.Helper()
	for deadline := time.Now().Add(120 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ns, _ := weights.List(root); len(ns) > 0 && ns[0] >= min {
			return ns[0]
		}
	}
	t.Fatalf("no checkpoint of version %d after two minutes\n%s", min, d.log)
	return 0
}

// generateGreedy runs `clawrl generate` on model m with the chat template,
// greedy, for n tokens, and returns what it printed.
func generateGreedy(t *testing.T, bin, m, prompt string, n int) string {
	t.Helper()
	out, err := exec.Command(bin, "generate", "--model", m, "-t", "0", "-n", fmt.Sprint(n), "--chat", "--prompt", prompt).Output()
	if err != nil {
		t.Fatalf("generate --model %s: %v\n%s", m, err, out)
	}
	return string(out)
}

// quickTrainConfig writes dir/name.yaml: a daemon serving model that
// trains after every two samples, one judge vote and no hints, extra
// added to its trainer section, data in dir/data-name. It returns the
// config's path and the data directory.
func quickTrainConfig(t *testing.T, dir, name, model, extra string) (cfg, data string) {
	t.Helper()
	data = filepath.Join(dir, "data-"+name)
	cfg = filepath.Join(dir, name+".yaml")
	yaml := fmt.Sprintf("model:\n  path: %s\ntrainer:\n  batch_size: 2\n  max_wait: 100ms\n%sreward:\n  votes: 1\n  hint_votes: 0\n  max_tokens: 8\ndata:\n  dir: %s\n", model, extra, data)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, data
}
