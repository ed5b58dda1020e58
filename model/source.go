package model

import (
	"fmt"
	"slices"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/safetensors"
)

// Source is a checkpoint the model loads from: its config and its tensors
// by Hugging Face name, in Hugging Face layout. A checkpoint directory of
// safetensors files is one (OpenDir); a GGUF file is another (package
// gguf).
type Source interface {
	// Config is the checkpoint's model config.
	Config() *Config
	// Tensor returns the named tensor ("model.layers.0.self_attn.q_proj.weight").
	Tensor(name string) (SourceTensor, error)
	// String names the checkpoint for messages (its path).
	String() string
	// Close releases the source; views it handed out must not be used
	// after.
	Close() error
}

// SourceTensor is one tensor of a Source, row-major with the outermost
// dimension first.
type SourceTensor struct {
	// Path is the file that holds the tensor, for messages.
	Path  string
	Shape []int
	// BF16 holds the bits of a tensor stored in BF16, nil otherwise.
	BF16 []uint16
	// Float32 returns the values as float32: as stored, widened or
	// dequantized; view reports that they point into memory the source
	// owns (a mapped file), valid until its Close, rather than being a
	// copy.
	Float32 func() (vals []float32, view bool, err error)
	// View reports that BF16 and Blocks point into memory the source
	// owns, as Float32's view does.
	View bool
	// Format and Blocks hold a tensor stored in a block-quantized format
	// as it is stored: Format names it as GGUF does ("Q8_0", "Q4_0",
	// "Q4_K"), Blocks are its blocks, row after row (a view when View).
	// Empty for a tensor that is not quantized. A backend that computes
	// with quantized weights can take them as they are; any other loads
	// Float32's values.
	Format string
	Blocks []byte
	// Reblock, when set, returns the tensor's blocks rewritten, without
	// going through float values, in a block format a
	// compute.QuantBackend multiplies, and that format (a GGUF file's
	// Q4_K as compute.Q4_1, Q6_K as compute.Q6_16), or an error where a
	// block does not fit it. Requantize prefers it to quantizing the
	// values again.
	Reblock func() (compute.DType, []byte, error)
	// Rows, when set, writes rows [lo, hi) of a matrix (Shape[0] rows) as
	// Float32 gives them into dst (len (hi−lo)·Shape[1]): a tensor stored
	// in a block format decoded a few rows at a time instead of whole.
	Rows func(dst []float32, lo, hi int) error
}

// WithConfig is src with its config replaced by c: a choice made at load
// (Config.LongContext), its tensors unchanged.
func WithConfig(src Source, c *Config) Source { return configSource{src, c} }

type configSource struct {
	Source
	c *Config
}

func (s configSource) Config() *Config { return s.c }

// OpenDir opens a checkpoint directory of safetensors files as a Source:
// config.json and model.safetensors (or its shards).
func OpenDir(dir string) (Source, error) {
	c, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return &dirSource{c: c, ck: ck}, nil
}

// dirSource is a safetensors checkpoint directory.
type dirSource struct {
	c  *Config
	ck *safetensors.Checkpoint
}

func (s *dirSource) Config() *Config { return s.c }
func (s *dirSource) String() string  { return s.ck.Dir() }
func (s *dirSource) Close() error    { return s.ck.Close() }

func (s *dirSource) Tensor(name string) (SourceTensor, error) {
	f, info, err := s.ck.Find(name)
	if err != nil {
		return SourceTensor{}, err
	}
	t := SourceTensor{Path: f.Path(), Shape: info.Shape, View: true}
	if info.DType == safetensors.BF16 {
		if t.BF16, err = f.Uint16(name); err != nil {
			return SourceTensor{}, err
		}
	}
	t.Float32 = func() ([]float32, bool, error) {
		vals, err := f.Float32(name) // a view for F32, a widened copy otherwise
		return vals, info.DType == safetensors.F32, err
	}
	return t, nil
}

// Source returns a Source of the set's tensors as FileTensors lists them
// (what a checkpoint file of the set would hold, without writing one), for
// loading the set as a model of its own: on another backend, quantized, or
// written out by an exporter. Its tensors' values are copies, so a model
// loaded from it does not refer to the set. name names it in messages;
// the first Close runs onClose (nil: nothing), which may free the set, and
// later ones do nothing. The set must outlive every use of the source.
func (w *Weights) Source(name string, onClose func() error) Source {
	byName := map[string]FileTensor{}
	for _, t := range w.FileTensors() {
		byName[t.Name] = t
	}
	return &setSource{c: w.m.Config, name: name, tensors: byName, onClose: onClose}
}

// setSource is Weights.Source.
type setSource struct {
	c       *Config
	name    string
	tensors map[string]FileTensor
	onClose func() error
}

func (s *setSource) Config() *Config { return s.c }
func (s *setSource) String() string  { return s.name }

func (s *setSource) Close() error {
	if f := s.onClose; f != nil {
		s.onClose = nil
		return f()
	}
	return nil
}

func (s *setSource) Tensor(name string) (SourceTensor, error) {
	ft, ok := s.tensors[name]
	if !ok {
		return SourceTensor{}, fmt.Errorf("model: %s: no tensor %q", s.name, name)
	}
	t := SourceTensor{Path: s.name, Shape: slices.Clone(ft.Shape)}
	t.Float32 = func() ([]float32, bool, error) {
		vals, err := ft.Read()
		return vals, false, err
	}
	if ft.DType == compute.BF16 {
		vals, err := ft.Read()
		if err != nil {
			return SourceTensor{}, err
		}
		t.BF16 = make([]uint16, len(vals))
		for i, v := range vals {
			t.BF16[i] = safetensors.Float32ToBF16(v) // exact: the values are BF16 numbers
		}
	}
	return t, nil
}
