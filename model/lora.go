package model

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/clawrl/clawrl/compute"
)

// LoRAConfig configures low-rank adapters (Hu et al., LoRA): each targeted
// projection y = x·Wᵀ becomes
//
//	y = x·Wᵀ + (Alpha/Rank)·(x·Aᵀ)·Bᵀ,   A [Rank, in], B [out, Rank]
//
// with W frozen (and shared with the base weight set, never copied) and
// only A and B trained. A starts Kaiming-uniform (uniform in ±1/sqrt(in),
// as PEFT's default), B at zero, so a fresh adapter changes nothing.
type LoRAConfig struct {
	Rank int
	// Alpha scales the adapters by Alpha/Rank; 0 means Alpha = Rank.
	Alpha float32
	// Targets are the projections to adapt, a subset of q, k, v, o, gate,
	// up, down (the _proj suffix is accepted too); empty means all seven.
	Targets []string
	// Seed seeds the initial A matrices (each from its own stream, by name).
	Seed uint64
	// MergeDType is the dtype of the matrices that Trainable.Snapshot merges
	// the adapters into: 0 or compute.F32 keeps them F32, so the set's
	// forward equals the Trainable's up to float32 rounding; compute.BF16
	// rounds W + (Alpha/Rank)·B·A to BF16, halving the memory a decode step
	// reads, but an update smaller than half a BF16 step of a weight
	// (about 0.2% of it) is then lost.
	MergeDType compute.DType
	// Unmerged makes Snapshot merge nothing: every adapted matrix stays
	// the base's, shared, and the set carries copies of the adapters,
	// which serving adds to its products (as it does over a quantized
	// matrix, always). Exact, and a decode step reads the base's bytes
	// plus the adapters' instead of a merged F32 copy's (twice a BF16
	// base's).
	Unmerged bool
}

// LoRA target indices, in the order of Trainable.Params.
const (
	targetQ = iota
	targetK
	targetV
	targetO
	targetGate
	targetUp
	targetDown
	numTargets
)

var targetNames = [numTargets]string{"q", "k", "v", "o", "gate", "up", "down"}

// targetModules are the Hugging Face module paths within a layer.
var targetModules = [numTargets]string{
	"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
	"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
}

// target returns the address of the weight matrix that target i adapts.
func (l *layer) target(i int) *compute.Tensor {
	switch i {
	case targetQ:
		return &l.Q
	case targetK:
		return &l.K
	case targetV:
		return &l.V
	case targetO:
		return &l.O
	case targetGate:
		return &l.Gate
	case targetUp:
		return &l.Up
	case targetDown:
		return &l.Down
	}
	panic(fmt.Sprintf("model: LoRA target %d", i))
}

// adapter is one projection's A and B and their gradients.
type adapter struct {
	A, B, dA, dB compute.Tensor
}

// loraTargets parses LoRAConfig.Targets.
func loraTargets(names []string) ([numTargets]bool, error) {
	var on [numTargets]bool
	if len(names) == 0 {
		for i := range on {
			on[i] = true
		}
		return on, nil
	}
	for _, n := range names {
		n = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(n)), "_proj")
		found := false
		for i, tn := range targetNames {
			if n == tn {
				on[i], found = true, true
			}
		}
		if !found {
			return on, fmt.Errorf("model: unknown LoRA target %q (want q, k, v, o, gate, up or down)", n)
		}
	}
	return on, nil
}

// loraName is the PEFT name of a LoRA matrix ("A" or "B").
func loraName(l, target int, which string) string {
	return fmt.Sprintf("base_model.model.model.layers.%d.%s.lora_%s.weight", l, targetModules[target], which)
}

// newAdapters makes the adapters of every layer for cfg.
func (t *Trainable) newAdapters(cfg *LoRAConfig) error {
	c, b := t.m.Config, t.tb
	if cfg.Rank < 1 {
		return fmt.Errorf("model: LoRA rank %d, want ≥ 1", cfg.Rank)
	}
	if cfg.Alpha < 0 || math.IsNaN(float64(cfg.Alpha)) || math.IsInf(float64(cfg.Alpha), 0) {
		return fmt.Errorf("model: LoRA alpha %v, want ≥ 0", cfg.Alpha)
	}
	if cfg.MergeDType != 0 && cfg.MergeDType != compute.F32 && cfg.MergeDType != compute.BF16 {
		return fmt.Errorf("model: LoRA merge dtype %v, want F32 or BF16", cfg.MergeDType)
	}
	on, err := loraTargets(cfg.Targets)
	if err != nil {
		return err
	}
	alpha := cfg.Alpha
	if alpha == 0 {
		alpha = float32(cfg.Rank)
	}
	t.scale = alpha / float32(cfg.Rank)
	r := cfg.Rank
	t.lora = make([][numTargets]*adapter, c.NumLayers)
	for l := range c.NumLayers {
		for i := range numTargets {
			if !on[i] {
				continue
			}
			w := *t.w.Layers[l].target(i)
			out, in := w.Shape()[0], w.Shape()[1]
			if r > min(in, out) {
				return fmt.Errorf("model: LoRA rank %d exceeds %s of shape %s", r, targetModules[i], compute.ShapeString(w.Shape()))
			}
			ad := &adapter{}
			for _, m := range []struct {
				dst  *compute.Tensor
				rows int
				cols int
			}{{&ad.A, r, in}, {&ad.B, out, r}, {&ad.dA, r, in}, {&ad.dB, out, r}} {
				x, err := b.NewTensor(compute.F32, m.rows, m.cols)
				if err != nil {
					return fmt.Errorf("model: LoRA adapter: %w", err)
				}
				t.owned = append(t.owned, x)
				*m.dst = x
			}
			nameA := loraName(l, i, "A")
			h := fnv.New64a()
			h.Write([]byte(nameA))
			rng := rand.New(rand.NewPCG(cfg.Seed, h.Sum64()))
			bound := 1 / math.Sqrt(float64(in))
			vals := make([]float32, r*in)
			for j := range vals {
				vals[j] = float32((2*rng.Float64() - 1) * bound)
			}
			b.Write(ad.A, vals)
			t.lora[l][i] = ad
			t.params = append(t.params,
				Param{Name: nameA, Value: ad.A, Grad: ad.dA},
				Param{Name: loraName(l, i, "B"), Value: ad.B, Grad: ad.dB})
		}
	}
	return nil
}

// snapshotLoRA makes a weight set sharing every base tensor except the
// adapted matrices. An adapted F32 or BF16 matrix is replaced by a merged
// copy W + scale·B·A (in LoRAConfig.MergeDType). An adapted quantized
// matrix (Q8_0, Q4_0, Q4_1) stays shared, and the set carries copies of its
// adapter's A and B, which serving adds to its product unmerged (as
// llama.cpp's --lora does): quantizing the merged matrix again would round
// away updates far smaller than a quantization step (at Q4_0 about a
// seventh of the largest weight of a block of 32), and a merged F32 copy
// would take eight times the quantized matrix's memory.
func (t *Trainable) snapshotLoRA() (*Weights, error) {
	m, b := t.m, t.tb
	baseRefs := map[compute.Tensor]*tensorRef{}
	for _, r := range t.baseRefs {
		baseRefs[r.t] = r
	}
	mergeDT := t.opts.LoRA.MergeDType
	if mergeDT == 0 {
		mergeDT = compute.F32
	}
	sb := setBuilder{w: &weights{Layers: make([]layer, m.Config.NumLayers)}}
	// Every field starts as the base tensor; then the merged ones are
	// replaced.
	src := map[string]compute.Tensor{}
	walkWeights(m.Config, t.w, func(name string, _ []int, f *compute.Tensor) error {
		src[name] = *f
		return nil
	})
	unmerged := t.opts.LoRA.Unmerged
	merged := map[compute.Tensor]bool{}
	for l := range t.lora {
		for i, ad := range t.lora[l] {
			if w := *t.w.Layers[l].target(i); ad != nil && !w.DType().Quantized() && !unmerged {
				merged[w] = true
			}
		}
	}
	walkWeights(m.Config, sb.w, func(name string, _ []int, f *compute.Tensor) error {
		if s := src[name]; !merged[s] {
			*f = sb.share(baseRefs[s])
		}
		return nil
	})
	fail := func(err error) (*Weights, error) {
		sb.abort(b)
		return nil, fmt.Errorf("model: snapshot of LoRA adapters: %w", err)
	}
	for l := range t.lora {
		for i, ad := range t.lora[l] {
			if ad == nil {
				continue
			}
			w := *t.w.Layers[l].target(i)
			if w.DType().Quantized() || unmerged {
				A, err := copyF32(b, ad.A)
				if err != nil {
					return fail(err)
				}
				sb.own(A)
				B, err := copyF32(b, ad.B)
				if err != nil {
					return fail(err)
				}
				sb.own(B)
				if sb.w.lora == nil {
					sb.w.lora, sb.w.loraScale = make([][numTargets]*adapter, m.Config.NumLayers), t.scale
				}
				sb.w.lora[l][i] = &adapter{A: A, B: B}
				continue
			}
			shape := w.Shape()
			f32, err := b.NewTensor(compute.F32, shape...)
			if err != nil {
				return fail(err)
			}
			b.Convert(f32, w)
			b.MatMul(f32, ad.B, ad.A, false, false, t.scale, 1)
			out := f32
			if mergeDT == compute.BF16 {
				bf, err := b.NewTensor(compute.BF16, shape...)
				if err != nil {
					b.Free(f32)
					return fail(err)
				}
				b.Convert(bf, f32)
				b.Free(f32)
				out = bf
			}
			*sb.w.Layers[l].target(i) = sb.own(out)
		}
	}
	return sb.done(m), nil
}

// copyF32 returns a new F32 tensor holding x's values.
func copyF32(b compute.Backend, x compute.Tensor) (compute.Tensor, error) {
	c, err := b.NewTensor(compute.F32, x.Shape()...)
	if err != nil {
		return nil, err
	}
	b.Copy(c, x)
	return c, nil
}

// loraRank is the rank of the set's unmerged adapters (0: none).
func (w *weights) loraRank() int {
	for _, l := range w.lora {
		for _, ad := range l {
			if ad != nil {
				return ad.A.Shape()[0]
			}
		}
	}
	return 0
}

// Adapters reports how many matrices of the set carry an unmerged LoRA
// adapter (those over quantized matrices; see Trainable.Snapshot).
func (w *Weights) Adapters() int {
	n := 0
	for _, l := range w.w.lora {
		for _, ad := range l {
			if ad != nil {
				n++
			}
		}
	}
	return n
}
