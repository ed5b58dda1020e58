package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/safetensors"
	"github.com/clawrl/clawrl/weights"
)

// stateFormat is the version of the trainer state layout.
const stateFormat = 1

// Prefixes of the tensors in trainer_state.safetensors: the trained value
// (full fine-tuning: the F32 master copy of every weight; LoRA: the
// adapters) and the two AdamW moments of each parameter.
const (
	valuePrefix = "value/"
	adamMPrefix = "adam_m/"
	adamVPrefix = "adam_v/"
)

// stateJSON is trainer_state.json: the trainer's scalars. There is no RNG
// state because the trainer draws no random numbers (LoRA adapters are
// initialised from lora.seed by the model, once, and then restored).
type stateJSON struct {
	Format   int         `json:"format"`
	Step     int64       `json:"step"`
	Samples  int64       `json:"samples"`
	Tokens   int64       `json:"tokens"`
	Skipped  int64       `json:"skipped"`
	LastLoss float64     `json:"last_loss"`
	Version  uint64      `json:"version"`
	LoRA     *loraJSON   `json:"lora,omitempty"`
	Params   []paramJSON `json:"params"`
	Options  Options     `json:"options"` // for the record; the running options win
	// Baseline is the running mean of binary rewards (Options.BaselineWindow);
	// absent in checkpoints from before it existed, which start it afresh.
	Baseline *baselineJSON `json:"reward_baseline,omitempty"`
}

type baselineJSON struct {
	Mean    float64 `json:"mean"` // the uncorrected exponential mean (rewardMean.m)
	Rewards int64   `json:"rewards"`
}

type loraJSON struct {
	Rank    int      `json:"rank"`
	Alpha   float64  `json:"alpha"`
	Targets []string `json:"targets"`
	Seed    uint64   `json:"seed"`
}

type paramJSON struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
}

// CheckpointOptions say where and what Save writes besides the weights and
// the trainer state.
type CheckpointOptions struct {
	Root string // checkpoint root directory (config: checkpoint.dir)
	Keep int    // newest checkpoints kept (config: checkpoint.keep); ≤ 0 keeps all
	// ConfigJSON is the model's config.json, copied into the checkpoint so
	// it loads as a model.
	ConfigJSON []byte
	// ExtraFiles are copied verbatim (tokenizer.json,
	// tokenizer_config.json, generation_config.json), so that other tools
	// can load the checkpoint too.
	ExtraFiles map[string][]byte
	// Base identifies the base model (weights.Meta.Base); Save records it
	// in the manifest and Restore refuses a checkpoint of another base.
	Base string
	// Adapters, when set, makes a LoRA trainer's checkpoints hold the
	// adapters only (in the trainer state), over this base, with no
	// model.safetensors (weights.AdapterBase); LoadAdapted rebuilds the
	// version's weights from them. Full fine-tuning ignores it.
	Adapters *weights.AdapterBase
}

// Save writes a checkpoint of the trainer's current version, which must be
// the one it published last, with no step since (its weights are what the
// trainer state continues from), taken from store: config.json, the
// version's weights as model.safetensors (not for LoRA with
// co.Adapters set: the adapters in the trainer state are the version), the
// trainer state (parameters in F32, AdamW moments, counters), and the
// extra files. The version is held
// while it is written. See weights.Save for how the checkpoint is made
// crash-safe. Step waits while Save runs; serving does not.
func (t *Trainer) Save(store *weights.Store, co CheckpointOptions) (*weights.Checkpoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errors.New("trainer: closed")
	}
	if t.dirty || t.restored != nil {
		return nil, fmt.Errorf("trainer: save: the parameters have no published version (trained or restored since); publish first")
	}
	v, err := store.AcquireNumber(t.version)
	if err != nil {
		return nil, fmt.Errorf("trainer: save: %w", err)
	}
	defer store.Release(v)
	if len(co.ConfigJSON) == 0 {
		return nil, errors.New("trainer: save: no config.json")
	}
	st := stateJSON{
		Format: stateFormat, Step: t.step, Samples: t.samples, Tokens: t.tokens, Skipped: t.skipped,
		LastLoss: t.lastLoss, Version: t.version, Options: t.opts,
	}
	if t.baseline.n > 0 {
		st.Baseline = &baselineJSON{Mean: t.baseline.m, Rewards: t.baseline.n}
	}
	if t.opts.LoRARank > 0 {
		st.LoRA = &loraJSON{Rank: t.opts.LoRARank, Alpha: t.opts.LoRAAlpha, Targets: t.opts.LoRATargets, Seed: t.opts.LoRASeed}
	}
	var tensors []safetensors.WriteTensor
	for i, p := range t.params {
		shape := slices.Clone(p.Value.Shape())
		st.Params = append(st.Params, paramJSON{Name: p.Name, Shape: shape})
		for _, x := range []struct {
			prefix string
			t      compute.Tensor
		}{{valuePrefix, p.Value}, {adamMPrefix, t.mom[i].m}, {adamVPrefix, t.mom[i].v}} {
			tensors = append(tensors, safetensors.WriteTensor{
				Name: x.prefix + p.Name, DType: safetensors.F32, Shape: shape, Stream: t.streamTensor(x.t),
			})
		}
	}
	sj, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("trainer: save: %w", err)
	}
	adaptersOnly := co.Adapters != nil && t.opts.LoRARank > 0
	files := []weights.File{{Name: weights.ConfigFile, Write: bytesWriter(co.ConfigJSON)}}
	if !adaptersOnly {
		files = append(files, weights.WeightsFile(t.b, v.Weights()))
	}
	files = append(files,
		weights.File{Name: weights.StateTensorsFile, Create: func(path string) error {
			return safetensors.WriteFile(path, tensors, map[string]string{"format": "clawrl-trainer-state"})
		}},
		weights.File{Name: weights.StateJSONFile, Write: bytesWriter(append(sj, '\n'))})
	names := make([]string, 0, len(co.ExtraFiles))
	for name := range co.ExtraFiles {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		files = append(files, weights.File{Name: name, Write: bytesWriter(co.ExtraFiles[name])})
	}
	info := weights.InfoOf(v)
	if co.Base != "" {
		info.Meta.Base = co.Base
	}
	if adaptersOnly {
		a := *co.Adapters
		info.Adapters = &a
	}
	c, err := weights.Save(co.Root, info, files, co.Keep)
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	return c, nil
}

func bytesWriter(b []byte) func(io.Writer) error {
	return func(w io.Writer) error { _, err := w.Write(b); return err }
}

// streamTensor writes an F32 device tensor's little-endian bytes, reading
// it to the host only while it is written.
func (t *Trainer) streamTensor(x compute.Tensor) func(io.Writer) error {
	return func(w io.Writer) error {
		buf := make([]float32, compute.Len(x))
		if err := t.b.Read(buf, x); err != nil {
			return err
		}
		_, err := w.Write(safetensors.EncodeFloat32(buf))
		return err
	}
}

// Restore sets the trainer to the state saved in checkpoint c: parameters,
// AdamW moments, step count and counters, and the version number. The
// trainer must have been made with the same base model and the same LoRA
// settings as the one that saved it (a mismatch in parameter names or
// shapes is refused). With the same batches afterwards, a restored trainer
// produces bit-identical parameters to one that never stopped (on the same
// backend and thread count). Nothing changes if Restore fails.
func (t *Trainer) Restore(c *weights.Checkpoint) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("trainer: closed")
	}
	st, err := readState(c)
	if err != nil {
		return fmt.Errorf("trainer: restore: %w", err)
	}
	if err := t.checkLoRA(st.LoRA); err != nil {
		return fmt.Errorf("trainer: restore: %s: %w", c.Dir(), err)
	}
	// Everything is checked before anything is written.
	err = loadStateTensors(t.b, c, st, t.params, []string{valuePrefix, adamMPrefix, adamVPrefix},
		func(i, k int) compute.Tensor {
			return [...]compute.Tensor{t.params[i].Value, t.mom[i].m, t.mom[i].v}[k]
		})
	if err != nil {
		return fmt.Errorf("trainer: restore: %w", err)
	}
	t.tr.ZeroGrad()
	t.step, t.samples, t.tokens, t.skipped, t.lastLoss = st.Step, st.Samples, st.Tokens, st.Skipped, st.LastLoss
	t.baseline = rewardMean{}
	if b := st.Baseline; b != nil && b.Rewards > 0 && !math.IsNaN(b.Mean) && !math.IsInf(b.Mean, 0) {
		t.baseline = rewardMean{m: b.Mean, n: b.Rewards}
	}
	info := c.Info()
	info.Meta.Note = "resumed from " + c.Dir()
	t.version, t.dirty, t.restored = info.Version, false, &info
	if !t.lineage.Known(info.Version) {
		t.lineage.Add(info.Version, info.Parent, st.Step)
	}
	return nil
}

// readState reads and checks checkpoint c's trainer_state.json.
func readState(c *weights.Checkpoint) (*stateJSON, error) {
	if !c.Has(weights.StateJSONFile) || !c.Has(weights.StateTensorsFile) {
		return nil, fmt.Errorf("checkpoint %s holds no trainer state", c.Dir())
	}
	raw, err := c.ReadFile(weights.StateJSONFile)
	if err != nil {
		return nil, err
	}
	var st stateJSON
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path(weights.StateJSONFile), err)
	}
	if st.Format != stateFormat {
		return nil, fmt.Errorf("%s: format %d, want %d", c.Path(weights.StateJSONFile), st.Format, stateFormat)
	}
	return &st, nil
}

// stateLoad is one tensor of the trainer state to write into dst.
type stateLoad struct {
	dst  compute.Tensor
	vals []float32
}

// loadStateTensors checks that the parameters st lists are params (names
// and shapes, in order) and reads, for parameter i, the tensor of each
// prefix k from c's trainer_state.safetensors, to be written into dst(i,
// k), and writes them there once all are read. The values are views of
// the mapped file.
func loadStateTensors(b compute.Backend, c *weights.Checkpoint, st *stateJSON, params []model.Param, prefixes []string, dst func(i, k int) compute.Tensor) error {
	if len(st.Params) != len(params) {
		return fmt.Errorf("%s: %d parameters saved, the trainer has %d", c.Dir(), len(st.Params), len(params))
	}
	path := c.Path(weights.StateTensorsFile)
	f, err := safetensors.Open(path)
	if err != nil {
		return err
	}
	defer f.Close() // after the writes: the values are views of the file
	var loads []stateLoad
	for i, p := range params {
		if sp := st.Params[i]; sp.Name != p.Name || !slices.Equal(sp.Shape, p.Value.Shape()) {
			return fmt.Errorf("%s: parameter %d is %s %v, the trainer's is %s %v", c.Dir(), i, sp.Name, sp.Shape, p.Name, p.Value.Shape())
		}
		for k, prefix := range prefixes {
			name := prefix + p.Name
			info, ok := f.Info(name)
			if !ok {
				return fmt.Errorf("%s: tensor %q missing", path, name)
			}
			if info.DType != safetensors.F32 || !slices.Equal(info.Shape, p.Value.Shape()) {
				return fmt.Errorf("%s: tensor %q is %s %v, want F32 %v", path, name, info.DType, info.Shape, p.Value.Shape())
			}
			vals, err := f.Float32(name)
			if err != nil {
				return err
			}
			loads = append(loads, stateLoad{dst(i, k), vals})
		}
	}
	for _, l := range loads {
		b.Write(l.dst, l.vals)
	}
	return b.Synchronize()
}

// LoadAdapted returns the weights of the version that checkpoint c holds
// as LoRA adapters only (weights.Checkpoint.AdaptersOnly): m's base set
// with the saved adapters applied as the trainer that saved them published
// the version (Trainable.Snapshot: merged in the saved lora merge dtype,
// or served unmerged over quantized matrices). m must hold the base the
// checkpoint names, loaded as it was for training. The caller frees the
// set.
func LoadAdapted(m *model.Model, c *weights.Checkpoint) (*model.Weights, error) {
	st, err := readState(c)
	if err != nil {
		return nil, fmt.Errorf("trainer: loading adapters: %w", err)
	}
	l := st.LoRA
	if l == nil || l.Rank <= 0 {
		return nil, fmt.Errorf("trainer: loading adapters: %s: the trainer state holds no LoRA adapters", c.Dir())
	}
	lc := &model.LoRAConfig{Rank: l.Rank, Alpha: float32(l.Alpha), Targets: l.Targets, Seed: l.Seed, MergeDType: compute.F32}
	if st.Options.LoRAMergeDType == "bfloat16" {
		lc.MergeDType = compute.BF16
	}
	tr, err := m.NewTrainable(nil, model.TrainOptions{LoRA: lc})
	if err != nil {
		return nil, fmt.Errorf("trainer: loading adapters of %s: %w", c.Dir(), err)
	}
	defer tr.Free()
	params := tr.Params()
	if err := loadStateTensors(m.Backend(), c, st, params, []string{valuePrefix}, func(i, _ int) compute.Tensor { return params[i].Value }); err != nil {
		return nil, fmt.Errorf("trainer: loading adapters: %w", err)
	}
	w, err := tr.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("trainer: loading adapters of %s: %w", c.Dir(), err)
	}
	return w, nil
}

// checkLoRA compares saved LoRA settings with the trainer's.
func (t *Trainer) checkLoRA(l *loraJSON) error {
	o := t.opts
	switch {
	case l == nil && o.LoRARank == 0:
		return nil
	case l == nil:
		return fmt.Errorf("saved by full fine-tuning, the trainer uses LoRA rank %d", o.LoRARank)
	case o.LoRARank == 0:
		return fmt.Errorf("saved with LoRA rank %d, the trainer does full fine-tuning", l.Rank)
	case l.Rank != o.LoRARank || l.Alpha != o.LoRAAlpha || !slices.Equal(l.Targets, o.LoRATargets):
		return fmt.Errorf("saved with LoRA rank %d alpha %g targets %v, the trainer has rank %d alpha %g targets %v",
			l.Rank, l.Alpha, l.Targets, o.LoRARank, o.LoRAAlpha, o.LoRATargets)
	}
	return nil
}
