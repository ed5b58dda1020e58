package engine

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/model"
)

// TestQuantizeOnLoad opens the engine with model.quantize: the served
// model's layer matrices are quantized, it generates, and a trainer is
// refused with the key named.
func TestQuantizeOnLoad(t *testing.T) {
	dir := testCheckpoint(t)
	for _, c := range []struct {
		key string
		dt  compute.DType
	}{{"q8_0", compute.Q8_0}, {"q4_0", compute.Q4_0}} {
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
		if _, err := e.NewTrainer(TrainerOptions(cfg)); err == nil || !strings.Contains(err.Error(), "model.quantize") {
			t.Errorf("%s: NewTrainer over a quantized base: %v", c.key, err)
		}
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
