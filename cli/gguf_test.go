package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/clawrl/clawrl/bundled"
	"github.com/clawrl/clawrl/gguf"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
	"github.com/clawrl/clawrl/weights"
)

// TestGGUF runs GGUF files as a user does, on the real binary: a
// testmodel checkpoint converted to GGUF generates with `clawrl generate
// --model FILE.gguf` what the checkpoint generates (BF16: the same
// weights); `clawrl serve --model FILE.gguf` learns from thumbs over a
// Q4_0 file (LoRA over the quantized matrices, the versions serving the
// adapters unmerged: qloraServes) and over a BF16 one, writes checkpoints
// that carry a config.json and the tokenizer made from the file (so
// `generate --model CHECKPOINT` loads them) and resumes them after a
// restart on the same GGUF base; damaged files and architectures clawrl
// does not run are refused with the path and the reason.
func TestGGUF(t *testing.T) {
	bin := realBinary(t)
	dir := t.TempDir()
	hf := filepath.Join(dir, "hf")
	if out, err := exec.Command(bin, "testmodel", hf).CombinedOutput(); err != nil {
		t.Fatalf("testmodel: %v\n%s", err, out)
	}
	bf16, q8, q4 := filepath.Join(dir, "tiny-bf16.gguf"), filepath.Join(dir, "tiny-q8_0.gguf"), filepath.Join(dir, "tiny-q4_0.gguf")
	writeGGUF(t, hf, map[string]gguf.TensorType{bf16: gguf.BF16, q8: gguf.Q8_0, q4: gguf.Q4_0})

	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("trainer:\n  batch_size: 2\n  max_wait: 100ms\nreward:\n  votes: 1\n  hint_votes: 0\n  max_tokens: 8\ndata:\n  dir: %s\n", data)), 0o600)
	clawrl := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append(args, "--config", cfg)...).CombinedOutput()
		return string(out), err
	}
	generate := func(m string, extra ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"generate", "--config", cfg, "--model", m, "-t", "0", "-n", "12", "--prompt", "The quick"}, extra...)...)
		out, err := cmd.Output() // the text alone, without the log
		if err != nil {
			t.Fatalf("generate --model %s: %v\n%s", m, err, out)
		}
		return string(out)
	}
	if a, b := generate(hf), generate(bf16); a != b {
		t.Errorf("greedy generation: the checkpoint says %q, its BF16 GGUF %q", a, b)
	}
	if out := generate(q8, "--chat"); strings.TrimSpace(out) == "" {
		t.Errorf("generate --model %s --chat said nothing", q8)
	}

	// The Q4_0 file serves and trains (LoRA over its quantized matrices).
	qloraServes(t, bin, q4, filepath.Join(dir, "q4"))

	// The BF16 file serves and trains.
	os.WriteFile(cfg, []byte(fmt.Sprintf("model:\n  path: %s\ntrainer:\n  batch_size: 2\n  max_wait: 100ms\nreward:\n  votes: 1\n  hint_votes: 0\n  max_tokens: 8\ndata:\n  dir: %s\n", bf16, data)), 0o600)
	d := startDaemon(t, bin, cfg, freePort(t))
	chatWithThumbs(t, d, "g", "Name a fruit.", 2, 1, "", nil)
	root := filepath.Join(data, "checkpoints")
	var ns []uint64
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ns, _ = weights.List(root); len(ns) > 0 && ns[0] >= 2 { // version 1 is the base's
			break
		}
	}
	if len(ns) == 0 || ns[0] < 2 {
		t.Fatalf("no trained checkpoint after two thumbs up\n%s", d.log)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, d.log)
	}
	c, _, err := weights.OpenLatest(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json"} {
		if !c.Has(f) {
			t.Errorf("the checkpoint of a GGUF base lacks %s", f)
		}
	}
	if out := generate(c.Dir()); strings.TrimSpace(out) == "" {
		t.Errorf("generate --model %s said nothing", c.Dir())
	}
	// A restart on the same GGUF base resumes the lineage.
	d = startDaemon(t, bin, cfg, freePort(t))
	if v := d.servedVersion(t); v < ns[0] {
		t.Errorf("after a restart: version %d, the trainer made %d", v, ns[0])
	}
	d.kill()

	// Refused files.
	whole, _ := os.ReadFile(q8)
	cut := filepath.Join(dir, "cut.gguf")
	os.WriteFile(cut, whole[:len(whole)/2], 0o644)
	neox := filepath.Join(dir, "neox.gguf")
	if err := gguf.WriteFile(neox, []gguf.KV{{Key: "general.architecture", Value: gguf.String("gptneox")}}, nil); err != nil {
		t.Fatal(err)
	}
	notGGUF := filepath.Join(dir, "model.bin")
	os.WriteFile(notGGUF, []byte("PK\x03\x04 a zip file"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"generate", "--model", cut, "--prompt", "x"}, "truncated"},
		{[]string{"generate", "--model", neox, "--prompt", "x"}, `architecture "gptneox"`},
		{[]string{"generate", "--model", notGGUF, "--prompt", "x"}, "not a GGUF file"},
		{[]string{"serve", "--model", cut, "--port", fmt.Sprint(freePort(t))}, "truncated"},
	} {
		out, err := clawrl(tc.args...)
		path := tc.args[2]
		if err == nil || !strings.Contains(out, tc.want) || !strings.Contains(out, path) {
			t.Errorf("clawrl %v: %v, want an error with %s and %q\n%s", tc.args, err, path, tc.want, out)
		}
	}
}

// qloraServes runs `clawrl serve` on the quantized GGUF file gg with
// training on (the default, LoRA rank 16) in dir: thumbs train versions
// that are served (X-Weight-Version) and checkpointed; the checkpoint
// exports as a model (the dequantized matrices with the adapters merged,
// F32) that generates, and as a PEFT adapter; a restart on the same file
// serves the newest checkpoint's version and keeps training.
func qloraServes(t *testing.T, bin, gg, dir string) (firstLog string) {
	t.Helper()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "config.yaml")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(cfg, []byte(fmt.Sprintf("model:\n  path: %s\ntrainer:\n  batch_size: 2\n  max_wait: 100ms\nreward:\n  votes: 1\n  hint_votes: 0\n  max_tokens: 8\ndata:\n  dir: %s\n", gg, data)), 0o600)
	root := filepath.Join(data, "checkpoints")
	// trained waits for the daemon to log a checkpoint of a version after
	// at least, and returns its number.
	trained := func(d *daemon, after uint64) uint64 {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
			if ns, _ := weights.List(root); len(ns) > 0 && ns[0] > after {
				return ns[0]
			}
			if !waitLog(d, "checkpoint saved", time.Until(deadline)) {
				break
			}
		}
		d.dumpGoroutines()
		t.Fatalf("no checkpoint of a version after %d\n%s", after, d.log)
		return 0
	}

	d := startDaemon(t, bin, cfg, freePort(t))
	if id := servedModel(d.url); id != filepath.Base(gg) {
		t.Errorf("served model id %q", id)
	}
	base := startupVersion(t, d)
	chatWithThumbs(t, d, "q", "Name a fruit.", 2, 1, "", nil)
	v := trained(d, base) // version 1 is the base's
	if got := d.servedVersion(t); got < v {
		t.Errorf("serving version %d, the trainer checkpointed %d", got, v)
	}
	if !strings.Contains(d.log.String(), "trained and published a new version") {
		t.Errorf("no published version in the log\n%s", d.log)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, d.log)
	}
	firstLog = d.log.String()
	c, _, err := weights.OpenLatest(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "tokenizer.json", "trainer_state.safetensors"} {
		if !c.Has(f) {
			t.Errorf("the checkpoint over a quantized GGUF base lacks %s", f)
		}
	}
	// The checkpoint holds the adapters only and names the file (abs).
	if a := c.Manifest.Adapters; c.Has("model.safetensors") || a == nil || a.Path != gg {
		t.Errorf("the LoRA checkpoint holds model.safetensors %v and names the base %+v, want adapters only over %s", c.Has("model.safetensors"), a, gg)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append(args, "--config", cfg)...).CombinedOutput()
		if err != nil {
			t.Fatalf("clawrl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	merged, adapter := filepath.Join(dir, "merged"), filepath.Join(dir, "adapter")
	run("export", "--out", merged)
	run("export", "--adapter", "--out", adapter)
	if _, err := os.Stat(filepath.Join(adapter, "adapter_model.safetensors")); err != nil {
		t.Errorf("export --adapter: %v", err)
	}
	cmd := exec.Command(bin, "generate", "--config", cfg, "--model", merged, "-t", "0", "-n", "8", "--chat", "--prompt", "Name a fruit.")
	fromExport, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(fromExport)) == "" {
		t.Errorf("generate --model %s (the merged export): %v %q", merged, err, fromExport)
	}
	// A GGUF export merges the adapters into the base too.
	ggOut := filepath.Join(dir, "merged.gguf")
	run("export", "--format", "gguf", "--type", "q8_0", "--out", ggOut)
	if out, err := exec.Command(bin, "generate", "--config", cfg, "--model", ggOut, "-t", "0", "-n", "8", "--chat", "--prompt", "Name a fruit.").Output(); err != nil || strings.TrimSpace(string(out)) == "" {
		t.Errorf("generate --model %s (the GGUF export): %v %q", ggOut, err, out)
	}
	// The checkpoint itself loads as a model: its base with the adapters
	// applied, the weights the export holds.
	// It says that the adapters are merged into float32 there, and what
	// keeps the base quantized.
	cmd = exec.Command(bin, "generate", "--config", cfg, "--model", c.Dir(), "-t", "0", "-n", "8", "--chat", "--prompt", "Name a fruit.")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil || string(out) != string(fromExport) {
		t.Errorf("generate --model %s (the checkpoint): %v %q, from the merged export %q", c.Dir(), err, out, fromExport)
	}
	if !strings.Contains(stderr.String(), "served merged into float32") || !strings.Contains(stderr.String(), "--format gguf") {
		t.Errorf("generate --model %s (adapters over a quantized base) did not say they are merged into float32:\n%s", c.Dir(), stderr.String())
	}

	// A restart on the same file resumes the newest checkpoint and trains on.
	d = startDaemon(t, bin, cfg, freePort(t))
	if got := startupVersion(t, d); got != c.Info().Version {
		t.Errorf("after a restart: serving version %d, the newest checkpoint is %d\n%s", got, c.Info().Version, d.log)
	}
	if !strings.Contains(d.log.String(), "resumed the newest checkpoint") {
		t.Errorf("no resume in the log\n%s", d.log)
	}
	chatWithThumbs(t, d, "q2", "Name a colour.", 2, 1, "", nil)
	v2 := trained(d, c.Info().Version)
	if got := d.servedVersion(t); got < v2 {
		t.Errorf("after the restart: serving version %d, the trainer checkpointed %d", got, v2)
	}
	t.Logf("%s: base version %d, trained and served %d, checkpoint %s; after a restart served %d and trained on to %d",
		filepath.Base(gg), base, v, filepath.Base(c.Dir()), c.Info().Version, v2)
	d.kill()

	// The checkpoint holds adapters only: with its base file gone, a merged
	// export is refused, naming the file, and works again once it is back.
	moved := gg + ".moved"
	if err := os.Rename(gg, moved); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "export", "--config", cfg, "--checkpoint", c.Dir(), "--out", filepath.Join(dir, "merged-gone")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), gg) || !strings.Contains(string(out), "cannot be read") {
		t.Errorf("export with the base file gone: %v\n%s", err, out)
	}
	if err := os.Rename(moved, gg); err != nil {
		t.Fatal(err)
	}
	run("export", "--checkpoint", c.Dir(), "--out", filepath.Join(dir, "merged-back"))
	return firstLog
}

// writeGGUF writes the checkpoint directory hf, with its tokenizer, as a
// GGUF file at each path of files in that path's type.
func writeGGUF(t *testing.T, hf string, files map[string]gguf.TensorType) {
	t.Helper()
	tok, err := tokenizer.Load(hf)
	if err != nil {
		t.Fatal(err)
	}
	src, err := model.OpenDir(hf)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for path, typ := range files {
		if err := gguf.WriteModel(path, src, tok, typ); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGGUFKQuant: a Q4_K file (the bundled model, whose rows are whole
// K-quant blocks) serves with its Q4_K matrices rewritten as Q4_1 blocks
// (model.quantize: auto; the log says so), and trains, exports, restarts
// and trains on over them as over a Q4_0 file (qloraServes).
func TestGGUFKQuant(t *testing.T) {
	bin := realBinary(t)
	dir := t.TempDir()
	hf, err := bundled.Dir()
	if err != nil {
		t.Fatal(err)
	}
	gg := filepath.Join(dir, "bundled-q4_k.gguf")
	writeGGUF(t, hf, map[string]gguf.TensorType{gg: gguf.Q4_K})
	log := qloraServes(t, bin, gg, filepath.Join(dir, "q4_k"))
	if !regexp.MustCompile(`"requantized":"Q4_K×\d+ → Q4_1"`).MatchString(log) {
		t.Errorf("the model-loaded line does not say the Q4_K matrices were rewritten as Q4_1\n%s", log)
	}
}
