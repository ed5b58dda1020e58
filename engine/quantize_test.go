package engine

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/trainer"
)

// TestQuantizeOnLoad opens the engine with model.quantize: the served
// model's layer matrices are quantized, it generates, a full fine-tuning
// trainer is refused with the keys named, and a LoRA trainer (the
// default) trains over the quantized base and publishes versions that
// serve (trainOverQuantized).
func TestQuantizeOnLoad(t *testing.T) {
	dir := testCheckpoint(t)
	for _, c := range []struct {
		key string
		dt  compute.DType
	}{{"q8_0", compute.Q8_0}, {"q4_0", compute.Q4_0}, {"iq4_nl", compute.IQ4_NL}} {
		cfg := Defaults()
		cfg.Model.Quantize = c.key
		if QuantizeType(cfg) != c.dt {
			t.Fatalf("%s: QuantizeType %v", c.key, QuantizeType(cfg))
		}
		e, err := Open(cfg, Options{Model: dir, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		quantized := 0
		for _, p := range e.Model().Weights().Params() {
			want := model.QuantizedType(e.Model().Config, p.Name, p.T.Shape(), c.dt)
			if want != 0 && p.T.DType() != want || want == 0 && p.T.DType().Quantized() {
				t.Errorf("%s: %s is %v, want %v", c.key, p.Name, p.T.DType(), want)
			}
			if p.T.DType() == c.dt {
				quantized++
			}
		}
		if quantized < 7*e.Model().Config.NumLayers {
			t.Errorf("%s: %d tensors of %v, want the %d layer matrices at least", c.key, quantized, c.dt, 7*e.Model().Config.NumLayers)
		}
		prompt := e.Tokenizer().Encode("hello world! the quick brown")
		if got, _ := greedy(t, e.Scheduler(), prompt, 8); len(got) == 0 {
			t.Errorf("%s: generated nothing", c.key)
		}
		if _, err := e.NewTrainer(trainer.DefaultOptions()); err == nil || !strings.Contains(err.Error(), "model.quantize") || !strings.Contains(err.Error(), "lora_rank") {
			t.Errorf("%s: full fine-tuning over a quantized base: %v", c.key, err)
		}
		trainOverQuantized(t, e, prompt, c.dt)
		e.Close()

		m, err := LoadModel(cfg, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Weights().Params() {
			if p.Name == "model.layers.1.mlp.down_proj.weight" && p.T.DType() != c.dt {
				t.Errorf("%s: LoadModel's %s is %v", c.key, p.Name, p.T.DType())
			}
		}
		m.Close()
	}
}

// trainOverQuantized trains a LoRA trainer (config.yaml's rank and alpha)
// over e's quantized base on one rewarded response for a few steps,
// publishing each: the
// versions keep the base's quantized matrices and serve the adapters
// unmerged, the scheduler generates on the newest, and the rewarded
// response has become more likely.
func trainOverQuantized(t *testing.T, e *Engine, prompt []int32, dt compute.DType) {
	t.Helper()
	opts := trainer.DefaultOptions()
	opts.LoRARank, opts.LoRAAlpha, opts.LR = 16, 32, 1e-2
	tr, err := e.NewTrainer(opts)
	if err != nil {
		t.Fatalf("%v: LoRA trainer over the quantized base: %v", dt, err)
	}
	target := e.Tokenizer().Encode(" over the lazy dog. hello world!")
	score := func(w *model.Weights) float64 {
		kv, err := e.Model().NewKVCache(model.KVCacheOptions{BlockSize: 16, Budget: 4 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer kv.Close()
		sc, err := e.Model().LogProbsWith(w, kv, []model.ScoreRequest{{Prompt: prompt, Response: target}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, lp := range sc[0].LogProbs {
			sum += float64(lp)
		}
		return sum / float64(len(target))
	}
	before := score(e.Model().Weights())
	var last uint64
	for range 3 {
		met, err := tr.Step([]trainer.Sample{{Prompt: prompt, Response: target, Reward: 1, Version: tr.Version()}})
		if err != nil || !met.Applied {
			t.Fatalf("%v: step over the quantized base: %+v, %v", dt, met, err)
		}
		v, err := tr.Publish(e.Versions())
		if err != nil {
			t.Fatal(err)
		}
		last = v.Number()
	}
	v, err := e.Versions().Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Versions().Release(v)
	if v.Number() != last {
		t.Fatalf("%v: serving version %d, published %d", dt, v.Number(), last)
	}
	w := v.Weights()
	if n := w.Adapters(); n != 7*e.Model().Config.NumLayers {
		t.Errorf("%v: the version serves %d unmerged adapters, want %d", dt, n, 7*e.Model().Config.NumLayers)
	}
	for i, p := range w.Params() {
		if p.T != e.Model().Weights().Params()[i].T {
			t.Errorf("%v: %s is not the base's tensor", dt, p.Name)
		}
	}
	after := score(w)
	t.Logf("%v: mean log p of the rewarded response %.3f → %.3f after 3 steps", dt, before, after)
	if !(after > before+0.1) {
		t.Errorf("%v: mean log p of the rewarded response %.3f → %.3f", dt, before, after)
	}
	if _, ver := greedy(t, e.Scheduler(), prompt, 8); ver != last {
		t.Errorf("%v: generated on version %d, want %d", dt, ver, last)
	}
}
