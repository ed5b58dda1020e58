package pretrain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/corpus"
	"github.com/clawrl/clawrl/tokenizer"
)

func TestLearningRate(t *testing.T) {
	o := DefaultOptions()
	o.Steps, o.Warmup, o.LR, o.MinLR = 100, 10, 1, 0.1
	for _, c := range []struct {
		step int
		want float64
	}{{1, 0.1}, {10, 1}, {55, 0.55}, {100, 0.1}} {
		if got := o.LearningRate(c.step); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("step %d: lr %g, want %g", c.step, got, c.want)
		}
	}
}

func TestPretrainLowersLoss(t *testing.T) {
	o := tinyOptions(t.TempDir())
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	first, last := rep.Train[0].Loss, rep.TrainLoss
	if !(last < first-0.5) || !(rep.HeldOut[len(rep.HeldOut)-1].Loss < rep.HeldOut[0].Loss) {
		t.Errorf("loss %.3f → %.3f, held-out %+v: no progress", first, last, rep.HeldOut)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json", "report.json", "TRAINING.md", "loss.png"} {
		if _, err := os.Stat(filepath.Join(o.Out, f)); err != nil {
			t.Error(err)
		}
	}
	if rep.Eval == nil || rep.Eval.Arithmetic.N != 4 || rep.Eval.Tools.N != 2 || len(rep.Eval.Samples) != len(corpus.SampleConversations()) {
		t.Errorf("evaluation %+v", rep.Eval)
	}
	tok, err := tokenizer.Load(o.Out)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := tok.ChatTemplate(""); s != corpus.ChatTemplate {
		t.Error("the saved tokenizer lost the chat template")
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(o.Out, "config.json"))
	if err := json.Unmarshal(b, &cfg); err != nil || cfg["torch_dtype"] != "bfloat16" || cfg["architectures"].([]any)[0] != "LlamaForCausalLM" {
		t.Errorf("config.json: %v %v", cfg, err)
	}
	// A finished run is not started over by accident.
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Errorf("second run: %v, want a --resume/--restart error", err)
	}

	// A continued run (--init) starts from the trained weights and keeps
	// the vocabulary: its first loss is near where the first run ended.
	c := tinyOptions(t.TempDir())
	c.Init, c.Steps, c.Warmup = o.Out, 5, 1
	c.Mix = map[string]float64{corpus.CatJudgeSession: 20}
	if c.Shape, err = ShapeOf(o.Out); err != nil || c.Shape.Hidden != o.Shape.Hidden {
		t.Fatalf("shape of %s: %+v %v", o.Out, c.Shape, err)
	}
	rc, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if got := rc.Train[0].Loss; !(got < first-0.5) {
		t.Errorf("continued run's first loss %.3f; a fresh run's was %.3f, the first run ended at %.3f", got, first, last)
	}
	a, _ := os.ReadFile(filepath.Join(o.Out, "tokenizer.json"))
	b2, _ := os.ReadFile(filepath.Join(c.Out, "tokenizer.json"))
	if !bytes.Equal(a, b2) {
		t.Error("the continued run changed the vocabulary")
	}
	// Only the depth of an --init checkpoint may change.
	bad := c
	bad.Restart, bad.Shape.Hidden = true, c.Shape.Hidden*2
	if _, err := Run(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "only the depth may grow") {
		t.Errorf("--init with another hidden size: %v", err)
	}
	c.Mix = map[string]float64{"nope": 1}
	if _, err := Run(context.Background(), c); err == nil || !strings.Contains(err.Error(), "unknown category") {
		t.Errorf("bad --mix: %v", err)
	}
}

// TestResumeBitIdentical interrupts a run and resumes it: the parameters,
// optimizer state and loss curve equal those of a run never interrupted.
func TestResumeBitIdentical(t *testing.T) {
	dir := t.TempDir()
	a := tinyOptions(filepath.Join(dir, "a"))
	a.Steps, a.EvalArithmetic, a.EvalTools, a.EvalJudge = 12, 1, 1, 1
	if _, err := Run(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	b := a
	b.Out, b.Work = filepath.Join(dir, "b", "out"), filepath.Join(dir, "b", "work")
	b.StopAfter = 7
	if _, err := Run(context.Background(), b); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupted run: %v", err)
	}
	b.StopAfter, b.Resume = 0, true
	if _, err := Run(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join("work", ckptDir, stateST), filepath.Join("out", "model.safetensors")} {
		x, err1 := os.ReadFile(filepath.Join(dir, "a", f))
		y, err2 := os.ReadFile(filepath.Join(dir, "b", f))
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs after resuming (%v, %v)", f, err1, err2)
		}
	}
	sa, sb := loadState(a.Work), loadState(b.Work)
	if sa == nil || sb == nil || len(sa.Train) != len(sb.Train) {
		t.Fatal("states missing")
	}
	for i := range sa.Train {
		if sa.Train[i].Loss != sb.Train[i].Loss {
			t.Fatalf("step %d: loss %v vs %v", i+1, sa.Train[i].Loss, sb.Train[i].Loss)
		}
	}
	// Other options do not resume the run.
	c := b
	c.LR *= 2
	if _, err := Run(context.Background(), c); err == nil || !strings.Contains(err.Error(), "other options") {
		t.Errorf("resume with another lr: %v", err)
	}
}

func TestLossPlot(t *testing.T) {
	var train, held []Point
	for i := 1; i <= 100; i++ {
		train = append(train, Point{Step: i, Loss: 5 / math.Sqrt(float64(i))})
		if i%20 == 0 {
			held = append(held, Point{Step: i, Loss: 5.2 / math.Sqrt(float64(i))})
		}
	}
	png, err := LossPlot(train, held)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("LossPlot: %v", err)
	}
}

func tinyOptions(dir string) Options {
	o := DefaultOptions()
	o.Shape = Presets["tiny"]
	o.Out, o.Work = filepath.Join(dir, "out"), filepath.Join(dir, "work")
	o.Steps, o.SeqLen, o.Batch, o.LR, o.Warmup = 40, 384, 2, 3e-3, 4
	o.EvalEvery, o.CheckpointEvery, o.HeldOutBatches = 10, 5, 1
	o.TokenizerDocs, o.NoTexts = 200, true
	o.EvalArithmetic, o.EvalTools, o.EvalJudge = 4, 2, 2
	return o
}
