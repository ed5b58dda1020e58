package engine

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/clawrl/clawrl/bundled"
	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/trainer"
	"github.com/clawrl/clawrl/weights"
)

// AdapterBase is what a checkpoint of LoRA adapters only records of the
// model the engine serves (weights.AdapterBase): its absolute path and
// model.quantize as it applied to it (auto where it requantized, none where
// auto did nothing), so that the adapters are applied to the base loaded
// as it was for training.
func (e *Engine) AdapterBase() (*weights.AdapterBase, error) {
	path, err := filepath.Abs(e.dir)
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %w", e.dir, err)
	}
	q := e.cfg.Model.Quantize
	if q == "auto" && !AutoRequantize(e.cfg, e.dir) {
		q = "none"
	}
	return &weights.AdapterBase{Path: path, Quantize: q}, nil
}

// OpenAdapted opens checkpoint c, one of LoRA adapters only
// (weights.Checkpoint.AdaptersOnly), as a Source of its version's weights:
// the base model it names, loaded on the CPU as it was for training, with
// the adapters applied as the trainer published them
// (trainer.LoadAdapted), its tensors as a checkpoint file would hold them
// (model.Weights.FileTensors: adapted matrices merged in F32). It refuses
// a base that is missing or is no longer the model the adapters were
// trained on (its fingerprint, BaseFingerprint, differs). Close the source
// to free the base and the weights.
func OpenAdapted(c *weights.Checkpoint) (model.Source, error) {
	a := c.Manifest.Adapters
	if a == nil {
		return nil, fmt.Errorf("engine: checkpoint %s holds its weights, not LoRA adapters only", c.Dir())
	}
	path := a.Path
	if _, err := os.Stat(path); err != nil {
		// The bundled model is wherever this binary extracts it (another
		// user's cache, another machine).
		if c.Manifest.Meta.Base != bundledFingerprint() {
			return nil, fmt.Errorf("checkpoint %s holds LoRA adapters over the base model %s, which cannot be read (%w): put the base model back there to load the checkpoint",
				c.Dir(), a.Path, err)
		}
		if path, err = bundled.Dir(); err != nil {
			return nil, fmt.Errorf("checkpoint %s: its base, the bundled model: %w", c.Dir(), err)
		}
	}
	if want := c.Manifest.Meta.Base; want != "" {
		got, err := BaseFingerprint(path)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: its base model: %w", c.Dir(), err)
		}
		if got != want {
			return nil, fmt.Errorf("checkpoint %s holds LoRA adapters trained over the base model %s (fingerprint %s), and the model there now is %s: adapters apply only to their own base",
				c.Dir(), path, want, got)
		}
	}
	cfg := Defaults()
	switch q := (config.Model{Quantize: a.Quantize}); {
	case q.Quantize == "", q.Quantize == "none":
	case q.Quantize == "auto", q.QuantizesOnLoad():
		cfg.Model.Quantize = a.Quantize
		cfg.Trainer.LoRARank = 1 // auto requantizes under LoRA only; these adapters are LoRA
	default:
		return nil, fmt.Errorf("checkpoint %s: its manifest names model.quantize %q for the base, which this build does not know", c.Dir(), a.Quantize)
	}
	m, _, err := loadHostNoting(cfg, path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: loading its base model: %w", c.Dir(), err)
	}
	w, err := trainer.LoadAdapted(m, c)
	if err != nil {
		m.Close()
		return nil, err
	}
	return w.Source(c.Dir(), func() error { w.Free(); return m.Close() }), nil
}

// openAdapted verifies the checkpoint of LoRA adapters only at dir and
// opens it (OpenAdapted).
func openAdapted(dir string) (model.Source, error) {
	c, err := weights.Open(dir)
	if err != nil {
		return nil, err
	}
	return OpenAdapted(c)
}
