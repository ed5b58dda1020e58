package cuda

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cuda/fakecuda"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/trainer"
	"github.com/clawrl/clawrl/trainer/trainertest"
	"github.com/clawrl/clawrl/weights"
)

// CheckpointEnv names the directory where TestGPUCheckCheckpoint writes a
// trained weight version; BaseEnv the checkpoint it trains.
const (
	CheckpointEnv = "CLAWRL_GPU_CHECK_CHECKPOINT"
	BaseEnv       = "CLAWRL_GPU_CHECK_BASE"
)

// TestGPUCheckCheckpoint is a step of scripts/gpu-check, skipped unless
// CLAWRL_GPU_CHECK_CHECKPOINT names a directory: it trains the model of
// CLAWRL_GPU_CHECK_BASE (a small random checkpoint with a tokenizer, from
// clawrl testmodel) two LoRA steps on the CPU and saves the version under
// that directory as the daemon checkpoints one, so that the script can
// export it (clawrl export --checkpoint) and check that Hugging Face
// transformers loads the export and computes clawrl's logits. It lives
// here because this test binary is what the script carries to the GPU box.
func TestGPUCheckCheckpoint(t *testing.T) {
	root, base := os.Getenv(CheckpointEnv), os.Getenv(BaseEnv)
	if root == "" {
		t.Skip("a step of scripts/gpu-check (" + CheckpointEnv + " unset)")
	}
	if base == "" {
		t.Fatal(BaseEnv + " must name the checkpoint to train")
	}
	m, err := model.Load(cpu.New(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	o := trainer.DefaultOptions()
	o.LR, o.WarmupSteps, o.WeightDecay = 1e-2, 0, 0
	o.LoRARank, o.LoRAAlpha = 4, 8
	tr, err := trainer.New(m, m.Weights(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	trainertest.Steps(t, tr, 2, m.Config.VocabSize, 6, 5, 3)
	store := weights.NewStore(weights.StoreOptions{})
	defer store.Close()
	if _, err := tr.Publish(store); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(base, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	extra := map[string][]byte{}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if b, err := os.ReadFile(filepath.Join(base, f)); err == nil {
			extra[f] = b
		}
	}
	c, err := tr.Save(store, trainer.CheckpointOptions{Root: root, ConfigJSON: cfg, ExtraFiles: extra, Base: "gpu-check"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint: %s", c.Dir())
}

// TestGPUCheckDryRun runs scripts/gpu-check --fake, the hardware check's
// dry run on the fake libcuda, with binaries built from this tree: every
// step that needs no torch runs (the torch steps report that they skip)
// and the report is written. Package cuda's tests themselves are left out
// (GPU_CHECK_SKIP=conformance): they run beside it. It builds clawrl, so
// -short skips it.
func TestGPUCheckDryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds clawrl and runs scripts/gpu-check --fake")
	}
	if realDriver() || os.Getenv("GPU_CHECK_INSIDE") != "" {
		t.Skip("inside a GPU check")
	}
	for _, tool := range []string{"bash", "python3", "go", "gzip", "timeout", "awk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the dry run needs %s", tool)
		}
	}
	lib := fakecuda.Build(t)
	dist, work, out := t.TempDir(), filepath.Join(t.TempDir(), "work"), t.TempDir()
	for _, args := range [][]string{
		{"build", "-o", filepath.Join(dist, "clawrl"), "github.com/clawrl/clawrl"},
		{"test", "-c", "-o", filepath.Join(dist, "cuda.test"), "."},
	} {
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	cmd := exec.Command("bash", "../scripts/gpu-check", "--fake")
	cmd.Env = append(os.Environ(), "GPU_CHECK_DIST="+dist, "GPU_CHECK_WORK="+work, "GPU_CHECK_FAKE_LIB="+lib,
		"GPU_CHECK_SKIP=conformance", "OUT="+out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("scripts/gpu-check --fake: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	report, err := os.ReadFile(filepath.Join(out, "gpu-check.txt"))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := os.ReadFile(filepath.Join(work, "steps.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"devices": "ok", "conformance": "skipped", "testmodel": "ok", "write-model": "skipped", "prompt": "ok",
		"logits": "ok", "compare": "skipped", "bench-gpu": "ok", "bench-16k": "ok", "kernels": "ok", "torch-bench": "skipped",
		"bench-cpu": "ok", "export-train": "ok", "export": "ok", "export-prompt": "ok", "export-logits": "ok",
		"export-check": "skipped", "logits-cpu": "ok", "compare-cpu": "ok", "selftest": "ok",
	}
	for _, line := range strings.Split(strings.TrimSpace(string(steps)), "\n") {
		f := strings.Split(line, "\t")
		if w, ok := want[f[0]]; ok && f[1] != w {
			t.Errorf("step %s: %s, want %s (%s)", f[0], f[1], w, f[3])
		}
		delete(want, f[0])
	}
	for name := range want {
		if name != "nvidia-smi" {
			t.Errorf("step %s did not run", name)
		}
	}
	for _, s := range []string{"DRY RUN", "clawrl fake CUDA device", "greedy equal 12/12", "decode, batch 4", "version copy, CPU to GPU",
		"prefill, 256-token context", "== Goals"} {
		if !bytes.Contains(report, []byte(s)) {
			t.Errorf("the report has no %q:\n%s", s, report)
		}
	}
	t.Logf("steps (name, status, seconds):\n%s", steps)
	if t.Failed() {
		t.Logf("progress:\n%s", stderr.String())
	}
}
