package model

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/clawrl/clawrl/compute"
)

// Training.
//
// A Trainable holds trainable parameters over a frozen base weight set:
// with full fine-tuning an F32 master copy of every tensor, with LoRA the
// adapters only. Its Forward runs the model over whole samples (prompt and
// response, each sample's tokens attending to its own earlier tokens, no KV
// cache) and keeps what Backward needs in a Pass; Backward turns
// ∂loss/∂logp at each response token into gradients of the parameters.
// The optimizer is the caller's (package trainer), through the backend's
// compute.Trainer ops on Param.Value and Param.Grad.
//
// The backward pass, layer by layer, mirrors Model.block in reverse:
//
//	dx = ∂L/∂(layer output)
//	dact = dx·Wdown;  dgate, dup = silu_mul'(dact);  dh = dgate·Wgate + dup·Wup
//	dx += rmsnorm'(dh)                                   (post_attention_layernorm)
//	datt = dx·Wo;  dq, dk, dv = attention'(datt)
//	dq, dk = rope⁻¹(dq), rope⁻¹(dk);  q/k norm' (Qwen3)
//	dh = dq·Wq + dk·Wk + dv·Wv
//	dx += rmsnorm'(dh)                                   (input_layernorm)
//
// with every linear layer also adding its weight gradient dyᵀ·x (full) or
// its adapters' gradients (LoRA).
//
// Memory: logits exist only at response positions, a bounded number of
// rows at a time in the forward (LogProbs needs whole rows), and a tile of
// rows × vocabulary columns at a time in the backward, which recomputes
// them rather than keeping [responses, vocab] floats (about 9 and 2 MiB
// for a vocabulary of 151,936); attention holds at most a block of query
// rows' scores at once. Without checkpointing a Pass keeps 2·hidden + 2·qdim + 2·kvdim +
// 2·intermediate + heads floats per token per layer (+ qdim + kvdim with
// q/k norms, + 7·rank with LoRA); the norms' outputs and the MLP activation
// are recomputed in Backward. With checkpointing it keeps hidden floats per
// token per layer, plus one layer's activations during Backward.

// TrainOptions configure a Trainable.
type TrainOptions struct {
	// LoRA trains low-rank adapters over the frozen base; nil trains every
	// parameter (full fine-tuning, on F32 master copies).
	LoRA *LoRAConfig
	// Checkpointing keeps only each layer's input in a Pass and recomputes
	// the layer's activations during Backward (a second forward pass, about
	// a third more arithmetic), for long samples. Gradients are bit-for-bit
	// the same either way.
	Checkpointing bool
}

// Param is one trainable F32 tensor and its gradient.
type Param struct {
	Name        string
	Value, Grad compute.Tensor
}

// TrainSample is a prompt and a response to it; the model is trained on
// the log-probabilities of the response tokens.
type TrainSample struct {
	Prompt, Response []int32
}

// Trainable is a set of trainable parameters over a frozen base weight set
// of a model. Its methods serialise on the Trainable; they may run while
// the model serves other weight sets (Run, LogProbsWith) from other
// goroutines. The caller must not update parameters (the optimizer) while
// a Forward, Backward or Snapshot of the same Trainable runs.
type Trainable struct {
	m    *Model
	tb   compute.Trainer
	opts TrainOptions

	baseRefs []*tensorRef // references to the base set's tensors, held until Free
	base     *weights     // the base set's tensors
	w        *weights     // what the forward reads: master copies (full) or base (LoRA)
	grad     *weights     // full: gradients, shaped like w; nil for LoRA
	lora     [][numTargets]*adapter
	scale    float32 // LoRA alpha/rank
	params   []Param
	owned    []compute.Tensor

	mu     sync.Mutex
	arenas []*arena // activation memory of freed passes, for reuse
	freed  bool

	slice atomic.Pointer[Slicer] // nil: passes run without sharing the machine
}

// Slicer shares the machine between training passes and serving:
// priority.Gate. A forward or backward pass takes it (Train) and, at every
// boundary inside a layer (after the q, k and v projections, after
// attention, after the MLP's gate and up projections) and between layers,
// Yield may hand it to serving and take it back. Snapshot does not take it:
// a merge is short, and a version waiting for a gap in serving would reach
// users late. Yield's argument is the release that Train or the previous Yield
// returned.
type Slicer interface {
	Train() (release func())
	Yield(release func()) func()
}

// SetSlicer makes the Trainable's passes hold s a layer at a time (nil:
// not at all).
func (t *Trainable) SetSlicer(s Slicer) {
	if s == nil {
		t.slice.Store(nil)
		return
	}
	t.slice.Store(&s)
}

func (t *Trainable) slicer() Slicer {
	if s := t.slice.Load(); s != nil {
		return *s
	}
	return noSlicer{}
}

// noSlicer lets every pass through.
type noSlicer struct{}

func (noSlicer) Train() func()               { return func() {} }
func (noSlicer) Yield(release func()) func() { return release }

// NewTrainable makes trainable parameters over the weight set base (nil:
// the checkpoint's) of m: F32 master copies of every tensor, or LoRA
// adapters (opts.LoRA). The model's backend must implement
// compute.Trainer. The Trainable holds references to base's tensors until
// Free, so freeing base meanwhile is safe.
//
// Over a quantized base (Q8_0, Q4_0, Q4_1 matrices) only LoRA trains, as QLoRA
// does: the base stays quantized and frozen, the adapters, their
// gradients and the optimizer's state are F32. The forward pass runs the
// quantized products as serving does (activations quantized to Q8_0
// blocks), so its log-probs are the served ones; the backward pass takes
// the input gradients through the exactly dequantized matrices
// (LinearBackwardInput), which treats the forward's rounding of the
// activations as the identity (a straight-through estimator; QLoRA, which
// multiplies by the dequantized matrix in BF16, rounds differently). Full
// fine-tuning over a quantized base is refused: it would train F32 master
// copies of every matrix, the memory the quantized base saves.
func (m *Model) NewTrainable(base *Weights, opts TrainOptions) (*Trainable, error) {
	tb, ok := m.b.(compute.Trainer)
	if !ok {
		return nil, fmt.Errorf("model: backend %s cannot train (it does not implement compute.Trainer)", m.b.Name())
	}
	if _, ok := tb.(compute.GemmaTrainer); !ok && m.Config.Activation == ActGELUTanh {
		return nil, fmt.Errorf("model: backend %s cannot train %s (compute.GemmaTrainer is not built for it)", m.b.Name(), m.Config.Architecture)
	}
	if base == nil {
		base = m.base
		if base == nil {
			return nil, errors.New("model: model is closed")
		}
	}
	if base.m != m.owner() {
		return nil, errors.New("model: the weight set belongs to another model")
	}
	if name, dt := quantizedIn(m.Config, base.w); name != "" && opts.LoRA == nil {
		return nil, fmt.Errorf("model: full fine-tuning over a quantized base is not supported (%s is %v): train LoRA adapters over it (as QLoRA), or load the checkpoint unquantized", name, dt)
	}
	if base.w.lora != nil {
		return nil, errors.New("model: the weight set serves unmerged LoRA adapters (a snapshot over a quantized base); train over the checkpoint's set")
	}
	refs, err := base.retain()
	if err != nil {
		return nil, err
	}
	t := &Trainable{m: m, tb: tb, opts: opts, baseRefs: refs, base: base.w}
	if opts.LoRA != nil {
		cfg := *opts.LoRA
		t.opts.LoRA = &cfg
		t.w = base.w
		err = t.newAdapters(&cfg)
	} else {
		err = t.newMaster()
	}
	if err != nil {
		t.Free()
		return nil, err
	}
	return t, nil
}

// newMaster makes the F32 master copies of every base tensor and their
// zeroed gradients.
func (t *Trainable) newMaster() error {
	c, b := t.m.Config, t.tb
	src := map[string]compute.Tensor{}
	walkWeights(c, t.base, func(name string, _ []int, f *compute.Tensor) error {
		src[name] = *f
		return nil
	})
	t.w = &weights{Layers: make([]layer, c.NumLayers)}
	t.grad = &weights{Layers: make([]layer, c.NumLayers)}
	gradOf := map[string]compute.Tensor{}
	err := walkWeights(c, t.w, func(name string, shape []int, f *compute.Tensor) error {
		v, err := b.NewTensor(compute.F32, shape...)
		if err != nil {
			return fmt.Errorf("model: master copy of %s: %w", name, err)
		}
		t.owned = append(t.owned, v)
		b.Convert(v, src[name])
		g, err := b.NewTensor(compute.F32, shape...)
		if err != nil {
			return fmt.Errorf("model: gradient of %s: %w", name, err)
		}
		t.owned = append(t.owned, g)
		*f = v
		gradOf[name] = g
		t.params = append(t.params, Param{Name: name, Value: v, Grad: g})
		return nil
	})
	if err != nil {
		return err
	}
	walkWeights(c, t.grad, func(name string, _ []int, f *compute.Tensor) error {
		*f = gradOf[name]
		return nil
	})
	if c.TieWordEmbeddings {
		t.w.Output, t.grad.Output = t.w.Embed, t.grad.Embed
	}
	return nil
}

// Model is the model the Trainable trains.
func (t *Trainable) Model() *Model { return t.m }

// Params lists the trainable tensors and their gradients, F32, in a fixed
// order. Full fine-tuning: every tensor of the model under its Hugging
// Face name, in the order of Weights.Params (a tied output projection is
// the embedding, listed once). LoRA: lora_A and lora_B of every adapted
// projection, layer by layer in the order q, k, v, o, gate, up, down, under
// PEFT's names (base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight).
func (t *Trainable) Params() []Param { return t.params }

// ZeroGrad sets every gradient to zero.
func (t *Trainable) ZeroGrad() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.params {
		t.tb.Zero(p.Grad)
	}
}

// Free releases the parameters, gradients and activation memory and the
// references to the base set. Passes of the Trainable must be freed first.
func (t *Trainable) Free() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.freed {
		return
	}
	t.freed = true
	for _, x := range t.owned {
		t.tb.Free(x)
	}
	t.owned, t.params = nil, nil
	for _, a := range t.arenas {
		a.free(t.tb)
	}
	t.arenas = nil
	for _, r := range t.baseRefs {
		r.release(t.tb)
	}
	t.baseRefs = nil
}

// ReleaseActivations frees the activation memory that freed passes left
// for reuse (after an unusually long batch, say). Live passes keep theirs.
func (t *Trainable) ReleaseActivations() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.arenas {
		a.free(t.tb)
	}
	t.arenas = nil
}

// SetMergeDType sets how Snapshot makes LoRA versions from now on: merged
// into matrices of dtype dt (LoRAConfig.MergeDType: F32 or BF16), or, with
// dt 0, not merged (LoRAConfig.Unmerged). The training itself does not
// change: it runs on the adapters.
func (t *Trainable) SetMergeDType(dt compute.DType) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.opts.LoRA == nil {
		return errors.New("model: a merge dtype for a trainable without LoRA adapters")
	}
	if dt != 0 && dt != compute.F32 && dt != compute.BF16 {
		return fmt.Errorf("model: LoRA merge dtype %v (F32, BF16, or 0: unmerged)", dt)
	}
	c := *t.opts.LoRA
	c.Unmerged = dt == 0
	if dt != 0 {
		c.MergeDType = dt
	}
	t.opts.LoRA = &c
	return nil
}

// Snapshot returns an immutable weight set for serving the current
// parameters. Full fine-tuning: a copy of the master weights, each
// converted back to the base tensor's dtype (BF16 rounds to nearest even).
// LoRA: the base set's tensors shared (reference counted), except each
// adapted matrix, replaced by a merged copy W + (Alpha/Rank)·B·A in
// LoRAConfig.MergeDType; an adapted quantized matrix stays shared and the
// set carries a copy of its adapter, served unmerged (see snapshotLoRA).
// Free the set when it is no longer served.
func (t *Trainable) Snapshot() (*Weights, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.freed {
		return nil, errors.New("model: Snapshot of a freed Trainable")
	}
	if t.lora != nil {
		return t.snapshotLoRA()
	}
	m, b := t.m, t.tb
	base := map[string]compute.Tensor{}
	walkWeights(m.Config, t.base, func(name string, _ []int, f *compute.Tensor) error {
		base[name] = *f
		return nil
	})
	master := map[string]compute.Tensor{}
	walkWeights(m.Config, t.w, func(name string, _ []int, f *compute.Tensor) error {
		master[name] = *f
		return nil
	})
	sb := setBuilder{w: &weights{Layers: make([]layer, m.Config.NumLayers)}}
	err := walkWeights(m.Config, sb.w, func(name string, shape []int, f *compute.Tensor) error {
		x, err := b.NewTensor(base[name].DType(), shape...)
		if err != nil {
			return fmt.Errorf("model: snapshot of %s: %w", name, err)
		}
		b.Convert(x, master[name])
		*f = sb.own(x)
		return nil
	})
	if err != nil {
		sb.abort(b)
		return nil, err
	}
	return sb.done(m), nil
}

// arena is the activation memory of a Pass: tensors by role, reused by
// later passes when large enough.
type arena struct {
	bufs map[string]*arenaBuf
}

type arenaBuf struct {
	t          compute.Tensor // allocated [rows, cols] (cols 0: a vector)
	rows, cols int
	dt         compute.DType
}

// get returns a tensor of rows × cols (a vector when cols is 0) for key;
// its contents are undefined.
func (a *arena) get(b compute.Backend, key string, dt compute.DType, rows, cols int) (compute.Tensor, error) {
	bf := a.bufs[key]
	if bf == nil || bf.dt != dt || bf.cols != cols || bf.rows < rows {
		if bf != nil {
			b.Free(bf.t)
		}
		var t compute.Tensor
		var err error
		if cols == 0 {
			t, err = b.NewTensor(dt, rows)
		} else {
			t, err = b.NewTensor(dt, rows, cols)
		}
		if err != nil {
			delete(a.bufs, key)
			return nil, fmt.Errorf("model: activation memory (%s, %d×%d): %w", key, rows, cols, err)
		}
		bf = &arenaBuf{t: t, rows: rows, cols: cols, dt: dt}
		a.bufs[key] = bf
	}
	if bf.rows == rows {
		return bf.t, nil
	}
	return b.Slice(bf.t, 0, rows), nil
}

func (a *arena) free(b compute.Backend) {
	for _, bf := range a.bufs {
		b.Free(bf.t)
	}
	a.bufs = nil
}

// layerActs are the activations of one layer that Backward reads.
type layerActs struct {
	h1         compute.Tensor // input_layernorm output [T, hidden]
	qpre, kpre compute.Tensor // q, k before the q/k norms (Qwen3), else nil
	q, k, v    compute.Tensor // after norms and RoPE
	att, lse   compute.Tensor // attention output [T, qdim] and log-normalisers [T, heads]
	xmid       compute.Tensor // residual stream after attention [T, hidden]
	h2         compute.Tensor // post_attention_layernorm output
	gate, up   compute.Tensor // MLP projections [T, inter]
	act        compute.Tensor // silu(gate)·up
	// oatt, omlp are o_proj's and down_proj's outputs before their norms
	// (sandwich norms), else nil.
	oatt, omlp compute.Tensor
	u          [numTargets]compute.Tensor
}

// Pass is one forward pass of a Trainable over a batch of samples, with
// what Backward needs. LogProbs[i][j] is log p(Response_j | Prompt,
// Response_<j) of sample i, and Entropy[i][j] the entropy of the model's
// distribution at that position (nats), both under the current parameters.
type Pass struct {
	LogProbs [][]float32
	Entropy  [][]float32
	// Tokens is the number of positions the pass ran (Σ len(Prompt) +
	// len(Response) − 1: a response's last token is never an input).
	Tokens int

	t        *Trainable
	ar       *arena
	lens     []int // response lengths
	rows     int   // T: positions
	resp     int   // R: response tokens
	ids      compute.Tensor
	pos      compute.Tensor
	rowIdx   compute.Tensor // I32 [R]: the row predicting each response token
	targets  compute.Tensor // I32 [R]
	hTargets []int32        // targets on the host, for logitsBackward's tiles
	attn     compute.DenseAttention
	xs       []compute.Tensor // layer inputs x_0 … x_L [T, hidden]
	acts     []layerActs      // per layer; nil with checkpointing
	hsel     compute.Tensor   // x_L at the response rows [R, hidden]
	hfin     compute.Tensor   // after the final norm
	lse      compute.Tensor   // log-normaliser per response row [R]
	// logitsKept: all the response rows' logits fit one chunk, and the
	// arena's logits buffer still holds them for Backward.
	logitsKept bool

	projs             [3]proj // block scratch
	backwarded, freed bool
	// release gives back the Slicer's hold while a forward or backward
	// runs; yield replaces it at slice boundaries.
	release func()
}

// yield is a slice boundary inside a forward or backward: the pass may
// give the machine to serving here (see Slicer).
func (p *Pass) yield() {
	if p.release != nil {
		p.release = p.t.slicer().Yield(p.release)
	}
}

// hold takes the Slicer for a forward or backward; the returned func gives
// it back.
func (p *Pass) hold() (done func()) {
	p.release = p.t.slicer().Train()
	return func() {
		p.release()
		p.release = nil
	}
}

// logitRows is how many rows of logits the training forward computes at
// once (LogProbs needs whole rows of the vocabulary): about 8 MiB of them,
// between 16 and maxLogitRows rows. For a vocabulary of 151,936 that is 16
// rows, 9.3 MiB (it was 110 rows, 64 MiB, when the backward recomputed
// the logits a chunk of rows at a time as well).
func logitRows(vocab int) int { return min(maxLogitRows, max(16, (2<<20)/vocab)) }

// maxLogitRows caps logitRows (a variable so that tests can force several
// chunks).
var maxLogitRows = 1024

// logitTile is the shape of the tiles in which Backward recomputes the
// logits of rows response rows over a vocabulary of vocab: up to
// logitTileRows rows by a multiple of logitTileCols columns, about 2 MiB
// (logitTileFloats).
// A tile's columns are whole blocks of LinearBackwardInput's (512 rows of
// a BF16 or quantized matrix of width up to 2048), so cutting the
// vocabulary into tiles sums dhfin in the order one product over the
// whole matrix does.
func logitTile(rows, vocab int) (tileRows, tileCols int) {
	tileRows = max(1, min(rows, logitTileRows))
	tileCols = max(logitTileCols, (logitTileFloats/tileRows)/logitTileCols*logitTileCols)
	return tileRows, min(tileCols, vocab)
}

// logitTileRows, logitTileCols and logitTileFloats shape logitTile
// (variables so that tests can force several tiles).
var logitTileRows, logitTileCols, logitTileFloats = 256, 512, 1 << 19

// logitsBackward is the backward of the output projection over the
// response rows when the forward's logits are gone: it recomputes them a
// tile of rows × vocabulary columns at a time, turns each tile into its
// share of dLogits (LogProbsBackward with the targets shifted to the
// tile's columns; a target in another tile adds no one-hot term) and
// multiplies it back through the same rows of the output matrix into
// dhfin, adding the output matrix's gradient into dOut when it is
// trained. Over a quantized (or BF16) matrix each tile's rows are
// dequantized once, where recomputing and multiplying back whole rows of
// logits a chunk of rows at a time dequantized the whole matrix once per
// chunk, and the tiles take a few MiB where the chunks took 64.
func (p *Pass) logitsBackward(dhfin, dlp, dOut compute.Tensor, f *fetch) error {
	t := p.t
	b, V, R := t.tb, t.m.Config.VocabSize, p.resp
	tr, tc := logitTile(R, V)
	tgt := f.get("tiletargets", compute.I32, tr, 0)
	if f.err != nil {
		return f.err
	}
	shifted := make([]int32, tr)
	for r0 := 0; r0 < R; r0 += tr {
		r1 := min(r0+tr, R)
		hf, dhf := b.Slice(p.hfin, r0, r1), b.Slice(dhfin, r0, r1)
		lse, dl, tg := b.Slice(p.lse, r0, r1), b.Slice(dlp, r0, r1), b.Slice(tgt, 0, r1-r0)
		for v0 := 0; v0 < V; v0 += tc {
			v1 := min(v0+tc, V)
			key := "logittile"
			if v1-v0 != tc {
				key = "logittile.last" // its own buffer: the arena keeps one shape per key
			}
			lg := f.get(key, compute.F32, r1-r0, v1-v0)
			if f.err != nil {
				return f.err
			}
			w := b.Slice(t.w.Output, v0, v1)
			b.Linear(lg, hf, w, nil)
			t.m.capLogits(lg)
			for i, id := range p.hTargets[r0:r1] {
				shifted[i] = id - int32(v0)
				if id < int32(v0) || id >= int32(v1) {
					shifted[i] = -1
				}
			}
			b.WriteInt32(tg, shifted[:r1-r0])
			dlg := p.logitsGrad(lg, lse, tg, dl, "d"+key, f)
			if f.err != nil {
				return f.err
			}
			b.LinearBackwardInput(dhf, dlg, w, v0 > 0)
			if dOut != nil {
				b.LinearBackwardWeight(b.Slice(dOut, v0, v1), dlg, hf)
			}
		}
	}
	return nil
}

// logitsGrad is the gradient of the log-probs with respect to the
// pre-cap logits lg (rows of the vocabulary, or a tile of it): written
// over lg (LogProbsBackward in place); with soft-capped logits
// (Config.FinalSoftcap) into a buffer of its own, the arena's under key,
// since the cap's derivative reads the capped values lg holds.
func (p *Pass) logitsGrad(lg, lse, targets, dlp compute.Tensor, key string, f *fetch) compute.Tensor {
	b, c := p.t.tb, p.t.m.Config
	if c.FinalSoftcap <= 0 {
		b.LogProbsBackward(lg, lg, lse, targets, dlp)
		return lg
	}
	sh := lg.Shape()
	dlg := f.get(key, compute.F32, sh[0], sh[1])
	if f.err != nil {
		return nil
	}
	b.LogProbsBackward(dlg, lg, lse, targets, dlp)
	b.(compute.Softcap).SoftcapBackward(dlg, lg, float32(c.FinalSoftcap))
	return dlg
}

// Forward runs the model with the trainable parameters over samples and
// returns a Pass holding the response tokens' log-probabilities and
// entropies and the activations for Backward. Free the Pass after use.
func (t *Trainable) Forward(samples []TrainSample) (*Pass, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.freed {
		return nil, errors.New("model: Forward of a freed Trainable")
	}
	c := t.m.Config
	if len(samples) == 0 {
		return nil, errors.New("model: Forward of no samples")
	}
	var hIDs, hPos, hStart, hRows, hTargets []int32
	hStart = append(hStart, 0)
	lens := make([]int, len(samples))
	for i, s := range samples {
		if len(s.Prompt) == 0 || len(s.Response) == 0 {
			return nil, fmt.Errorf("model: sample %d needs a non-empty prompt and response", i)
		}
		n := len(s.Prompt) + len(s.Response) - 1
		if n > c.MaxPositions {
			return nil, fmt.Errorf("model: sample %d has %d positions, beyond max_position_embeddings %d", i, n, c.MaxPositions)
		}
		for _, id := range s.Prompt {
			if id < 0 || int(id) >= c.VocabSize {
				return nil, fmt.Errorf("model: sample %d: token id %d outside the vocabulary of %d", i, id, c.VocabSize)
			}
		}
		for _, id := range s.Response {
			if id < 0 || int(id) >= c.VocabSize {
				return nil, fmt.Errorf("model: sample %d: token id %d outside the vocabulary of %d", i, id, c.VocabSize)
			}
		}
		start := int32(len(hIDs))
		hIDs = append(append(hIDs, s.Prompt...), s.Response[:len(s.Response)-1]...)
		for p := range n {
			hPos = append(hPos, int32(p))
		}
		for j := range s.Response {
			hRows = append(hRows, start+int32(len(s.Prompt)-1+j))
		}
		hTargets = append(hTargets, s.Response...)
		hStart = append(hStart, int32(len(hIDs)))
		lens[i] = len(s.Response)
	}

	ar := t.takeArena()
	p := &Pass{t: t, ar: ar, lens: lens, rows: len(hIDs), resp: len(hRows), Tokens: len(hIDs)}
	p.hTargets = hTargets
	if err := p.forward(hIDs, hPos, hStart, hRows, hTargets); err != nil {
		t.arenas = append(t.arenas, ar)
		return nil, err
	}
	return p, nil
}

func (t *Trainable) takeArena() *arena {
	if n := len(t.arenas); n > 0 {
		a := t.arenas[n-1]
		t.arenas = t.arenas[:n-1]
		return a
	}
	return &arena{bufs: map[string]*arenaBuf{}}
}

// fetch gets tensors from a pass's arena, remembering the first error (and
// returning nil after it), so that a run of gets needs one check.
type fetch struct {
	p   *Pass
	err error
}

func (f *fetch) get(key string, dt compute.DType, rows, cols int) compute.Tensor {
	if f.err != nil {
		return nil
	}
	t, err := f.p.ar.get(f.p.t.tb, key, dt, rows, cols)
	f.err = err
	return t
}

// layerActs returns the activation tensors of layer l: the layer's own
// without checkpointing, one shared set with it.
func (p *Pass) layerActs(l int, f *fetch) layerActs {
	c, T := p.t.m.Config, p.rows
	key := func(name string) string {
		if p.t.opts.Checkpointing {
			return name
		}
		return fmt.Sprintf("%s.%d", name, l)
	}
	// The norms' outputs and the MLP activation are cheap to recompute
	// from the inputs kept (layerBackward does), so all layers share theirs.
	a := layerActs{
		h1:   f.get("h1", compute.F32, T, c.HiddenSize),
		q:    f.get(key("q"), compute.F32, T, c.QDim()),
		k:    f.get(key("k"), compute.F32, T, c.KVDim()),
		v:    f.get(key("v"), compute.F32, T, c.KVDim()),
		att:  f.get(key("att"), compute.F32, T, c.QDim()),
		lse:  f.get(key("lse"), compute.F32, T, c.NumHeads),
		xmid: f.get(key("xmid"), compute.F32, T, c.HiddenSize),
		h2:   f.get("h2", compute.F32, T, c.HiddenSize),
		gate: f.get(key("gate"), compute.F32, T, c.IntermediateSize),
		up:   f.get(key("up"), compute.F32, T, c.IntermediateSize),
		act:  f.get("act", compute.F32, T, c.IntermediateSize),
	}
	if c.QKNorm {
		a.qpre = f.get(key("qpre"), compute.F32, T, c.QDim())
		a.kpre = f.get(key("kpre"), compute.F32, T, c.KVDim())
	}
	if c.SandwichNorms {
		a.oatt = f.get(key("oatt"), compute.F32, T, c.HiddenSize)
		a.omlp = f.get(key("omlp"), compute.F32, T, c.HiddenSize)
	}
	if p.t.lora != nil {
		for i, ad := range p.t.lora[l] {
			if ad != nil {
				a.u[i] = f.get(key("u"+targetNames[i]), compute.F32, T, p.t.opts.LoRA.Rank)
			}
		}
	}
	return a
}

func (p *Pass) forward(hIDs, hPos, hStart, hRows, hTargets []int32) error {
	t := p.t
	b, c, T, R := t.tb, t.m.Config, p.rows, p.resp
	f := &fetch{p: p}
	p.ids = f.get("ids", compute.I32, T, 0)
	p.pos = f.get("pos", compute.I32, T, 0)
	start := f.get("seqstart", compute.I32, len(hStart), 0)
	p.rowIdx = f.get("rowidx", compute.I32, R, 0)
	p.targets = f.get("targets", compute.I32, R, 0)
	p.xs = make([]compute.Tensor, c.NumLayers+1)
	for l := range p.xs {
		p.xs[l] = f.get(fmt.Sprintf("x.%d", l), compute.F32, T, c.HiddenSize)
	}
	tmp := f.get("dh", compute.F32, T, c.HiddenSize) // layerBackward's dh: the forward does not need it
	if !t.opts.Checkpointing {
		p.acts = make([]layerActs, c.NumLayers)
		for l := range p.acts {
			p.acts[l] = p.layerActs(l, f)
		}
	}
	p.hsel = f.get("hsel", compute.F32, R, c.HiddenSize)
	p.hfin = f.get("hfin", compute.F32, R, c.HiddenSize)
	p.lse = f.get("lselogits", compute.F32, R, 0)
	logp := f.get("logp", compute.F32, R, 0)
	ent := f.get("entropy", compute.F32, R, 0)
	if f.err != nil {
		return f.err
	}
	b.WriteInt32(p.ids, hIDs)
	b.WriteInt32(p.pos, hPos)
	b.WriteInt32(start, hStart)
	b.WriteInt32(p.rowIdx, hRows)
	b.WriteInt32(p.targets, hTargets)
	p.attn = compute.DenseAttention{
		Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim,
		Scale: c.AttentionScale(), Window: c.SlidingWindow, Softcap: float32(c.AttnSoftcap), Seqs: len(hStart) - 1, SeqStart: start,
	}

	// The pass holds the machine a part of a layer at a time (see Slicer).
	defer p.hold()()
	b.Embedding(p.xs[0], t.w.Embed, p.ids)
	if c.EmbedScale > 0 && c.EmbedScale != 1 {
		b.Scale(p.xs[0], float32(c.EmbedScale))
	}
	var shared layerActs
	for l := range c.NumLayers {
		if l > 0 {
			p.yield()
		}
		a := &shared
		if p.acts != nil {
			a = &p.acts[l]
		} else if l == 0 {
			shared = p.layerActs(0, f)
			if f.err != nil {
				return f.err
			}
		}
		p.layerForward(l, p.xs[l], p.xs[l+1], tmp, a)
	}

	// Logits at the response rows only, a chunk at a time.
	p.yield()
	eps := float32(c.RMSNormEps)
	b.Embedding(p.hsel, p.xs[c.NumLayers], p.rowIdx)
	b.RMSNorm(p.hfin, p.hsel, t.w.Norm, eps)
	if s := c.logitScale(); s != 1 {
		b.Scale(p.hfin, s) // logits / logits_scaling (Granite)
	}
	chunk := logitRows(c.VocabSize)
	for r0 := 0; r0 < R; r0 += chunk {
		r1 := min(r0+chunk, R)
		lg := f.get("logits", compute.F32, r1-r0, c.VocabSize)
		if f.err != nil {
			return f.err
		}
		b.Linear(lg, b.Slice(p.hfin, r0, r1), t.w.Output, nil)
		t.m.capLogits(lg)
		b.LogProbs(b.Slice(logp, r0, r1), b.Slice(ent, r0, r1), b.Slice(p.lse, r0, r1), lg, b.Slice(p.targets, r0, r1))
	}
	p.logitsKept = R <= chunk
	lps, ents := make([]float32, R), make([]float32, R)
	if err := b.Read(lps, logp); err != nil {
		return fmt.Errorf("model: reading log-probs: %w", err)
	}
	if err := b.Read(ents, ent); err != nil {
		return fmt.Errorf("model: reading entropies: %w", err)
	}
	p.LogProbs, p.Entropy = make([][]float32, len(p.lens)), make([][]float32, len(p.lens))
	off := 0
	for i, n := range p.lens {
		p.LogProbs[i] = lps[off : off+n : off+n]
		p.Entropy[i] = ents[off : off+n : off+n]
		off += n
	}
	return nil
}

// linear computes dst = x·wᵀ + bias, plus the adapter's scale·(x·Aᵀ)·Bᵀ
// (x·Aᵀ kept in u) when ad is set.
func (t *Trainable) linear(dst, x, w, bias compute.Tensor, ad *adapter, u compute.Tensor) {
	t.tb.Linear(dst, x, w, bias)
	if ad != nil {
		t.tb.Linear(u, x, ad.A, nil)
		t.tb.MatMul(dst, u, ad.B, false, true, t.scale, 1)
	}
}

// adapters returns layer l's adapters (all nil for full fine-tuning).
func (t *Trainable) adapters(l int) *[numTargets]*adapter {
	if t.lora == nil {
		return &[numTargets]*adapter{}
	}
	return &t.lora[l]
}

// layerForward runs layer l from xin into xout (tmp is scratch [T,
// hidden]), writing the activations into a: Model.block with each
// product's adapter and dense attention over each sample.
func (p *Pass) layerForward(l int, xin, xout, tmp compute.Tensor, a *layerActs) {
	qpre, kpre := a.q, a.k
	if p.t.m.Config.QKNorm {
		qpre, kpre = a.qpre, a.kpre
	}
	io := &blockIO{xin: xin, xmid: a.xmid, xout: xout, h1: a.h1, h2: a.h2, qpre: qpre, kpre: kpre, q: a.q, k: a.k,
		v: a.v, att: a.att, out: tmp, outMLP: tmp, gate: a.gate, up: a.up, act: a.act, pos: p.pos}
	if p.t.m.Config.SandwichNorms {
		io.out, io.outMLP, io.normed = a.oatt, a.omlp, tmp
	}
	p.t.m.block(trainPass{p: p, a: a}, l, &p.t.w.Layers[l], io, &p.projs)
}

// Backward accumulates into the parameters' gradients the gradient of a
// loss whose derivative with respect to each response token's
// log-probability is dLogProbs[i][j] (shaped like Pass.LogProbs). It may be
// called once per Pass.
func (p *Pass) Backward(dLogProbs [][]float32) error {
	t := p.t
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case p.freed || t.freed:
		return errors.New("model: Backward of a freed Pass")
	case p.backwarded:
		return errors.New("model: Backward called twice on a Pass")
	case len(dLogProbs) != len(p.lens):
		return fmt.Errorf("model: Backward with %d gradient rows for %d samples", len(dLogProbs), len(p.lens))
	}
	host := make([]float32, 0, p.resp)
	for i, d := range dLogProbs {
		if len(d) != p.lens[i] {
			return fmt.Errorf("model: Backward: sample %d has %d gradients for %d response tokens", i, len(d), p.lens[i])
		}
		host = append(host, d...)
	}
	p.backwarded = true

	b, c, T, R := t.tb, t.m.Config, p.rows, p.resp
	eps := float32(c.RMSNormEps)
	f := &fetch{p: p}
	dlp := f.get("dlogp", compute.F32, R, 0)
	dhfin := f.get("dhfin", compute.F32, R, c.HiddenSize)
	dhsel := f.get("dhsel", compute.F32, R, c.HiddenSize)
	dx := f.get("dx", compute.F32, T, c.HiddenSize)
	if f.err != nil {
		return f.err
	}
	b.Write(dlp, host)
	defer p.hold()()
	g := t.grad
	if g == nil {
		g = &weights{Layers: make([]layer, c.NumLayers)} // LoRA: no base gradients
	}

	// Output projection and final norm: from the forward's logits if its
	// single chunk is still there, else recomputed a tile of the
	// vocabulary at a time (see logitsBackward).
	if p.logitsKept {
		lg := f.get("logits", compute.F32, R, c.VocabSize)
		if f.err != nil {
			return f.err
		}
		dlg := p.logitsGrad(lg, p.lse, p.targets, dlp, "dlogits", f)
		if f.err != nil {
			return f.err
		}
		b.LinearBackwardInput(dhfin, dlg, t.w.Output, false)
		if g.Output != nil {
			b.LinearBackwardWeight(g.Output, dlg, p.hfin)
		}
	} else if err := p.logitsBackward(dhfin, dlp, g.Output, f); err != nil {
		return err
	}
	if s := c.logitScale(); s != 1 {
		b.Scale(dhfin, s)
	}
	b.RMSNormBackward(dhsel, g.Norm, dhfin, p.hsel, t.w.Norm, eps, false)
	b.Zero(dx)
	b.EmbeddingBackward(dx, dhsel, p.rowIdx)

	var shared layerActs
	var tmp compute.Tensor
	if p.acts == nil {
		shared = p.layerActs(0, f)
		tmp = f.get("dh", compute.F32, T, c.HiddenSize) // shared with layerBackward, which overwrites it after the recompute
		if f.err != nil {
			return f.err
		}
	}
	for l := c.NumLayers - 1; l >= 0; l-- {
		p.yield()
		a := &shared
		if p.acts != nil {
			a = &p.acts[l]
		} else {
			p.layerForward(l, p.xs[l], tmp, tmp, a) // recompute; tmp doubles as the (unused) output
		}
		if err := p.layerBackward(l, dx, a, &g.Layers[l], f); err != nil {
			return err
		}
	}
	if g.Embed != nil {
		if c.EmbedScale > 0 && c.EmbedScale != 1 {
			b.Scale(dx, float32(c.EmbedScale))
		}
		b.EmbeddingBackward(g.Embed, dx, p.ids)
	}
	return nil
}

// linearBack is the backward of Trainable.linear: dx (+)= dy·w (+ the
// adapter's path), and the gradients of w, bias and the adapter where
// they are trained (dw, db non-nil; ad non-nil, with du scratch [T, rank]).
// The gradients that read x come first, so that without accumulate dx may
// be x (layerBackward writes the MLP's dact over its act).
func (t *Trainable) linearBack(dx compute.Tensor, accumulate bool, dy, x, w, dw, db compute.Tensor, ad *adapter, u, du compute.Tensor) {
	b := t.tb
	if dw != nil {
		b.LinearBackwardWeight(dw, dy, x)
	}
	if db != nil {
		b.BiasBackward(db, dy)
	}
	if ad != nil {
		b.MatMul(ad.dB, dy, u, true, false, t.scale, 1)  // dB += s·dyᵀ·u
		b.MatMul(du, dy, ad.B, false, false, t.scale, 0) // du = s·dy·B
		b.LinearBackwardWeight(ad.dA, du, x)             // dA += duᵀ·x
	}
	b.LinearBackwardInput(dx, dy, w, accumulate)
	if ad != nil {
		b.LinearBackwardInput(dx, du, ad.A, true) // dx += du·A
	}
}

// layerBackward turns dx = ∂L/∂(layer l's output) into ∂L/∂(its input) in
// place, adding the layer's parameter gradients into g (nil fields are not
// trained). The activations in a are consumed.
func (p *Pass) layerBackward(l int, dx compute.Tensor, a *layerActs, g *layer, f *fetch) error {
	t := p.t
	b, c, w, ad := t.tb, t.m.Config, &t.w.Layers[l], t.adapters(l)
	T, eps := p.rows, float32(c.RMSNormEps)
	dh := f.get("dh", compute.F32, T, c.HiddenSize)
	datt := f.get("datt", compute.F32, T, c.QDim())
	dq := f.get("dq", compute.F32, T, c.QDim())
	dk := f.get("dk", compute.F32, T, c.KVDim())
	dv := f.get("dv", compute.F32, T, c.KVDim())
	var du compute.Tensor
	if t.lora != nil {
		du = f.get("du", compute.F32, T, t.opts.LoRA.Rank)
	}
	if f.err != nil {
		return f.err
	}
	xin := p.xs[l]
	gelu := c.Activation == ActGELUTanh
	h1, h2 := a.h1, a.h2 // the projections' inputs
	if c.PostNormsOnly {
		h1, h2 = xin, a.xmid
	}
	if p.acts != nil { // shared by all layers: recompute this layer's
		if !c.PostNormsOnly {
			b.RMSNorm(a.h1, xin, w.AttnNorm, eps)
			b.RMSNorm(a.h2, a.xmid, w.MLPNorm, eps)
		}
		if gelu {
			b.(compute.GemmaTrainer).GELUMul(a.act, a.gate, a.up)
		} else {
			b.SiLUMul(a.act, a.gate, a.up)
		}
	}

	// MLP: x_out = x_mid + down(silu(gate(h2))·up(h2)), h2 = norm(x_mid)
	// (with sandwich norms x_out = x_mid + norm(down(...)), and GELU for
	// SiLU in Gemma). dact takes a.act's place once down's gradients have
	// read it, and after SiLUMulBackward a.gate and a.up hold their own
	// gradients. dh holds the gradient of a sandwich norm's input until
	// the product that reads it is done.
	dy := dx
	if c.SandwichNorms {
		b.RMSNormBackward(dh, g.PostMLPNorm, dx, a.omlp, w.PostMLPNorm, eps, false)
		dy = dh
	} else if r := c.residualScale(); r != 1 {
		b.Copy(dh, dx)
		b.Scale(dh, r)
		dy = dh
	}
	dact := a.act
	t.linearBack(dact, false, dy, a.act, w.Down, g.Down, g.DownBias, ad[targetDown], a.u[targetDown], du)
	p.yield()
	if gelu {
		b.(compute.GemmaTrainer).GELUMulBackward(a.gate, a.up, dact, a.gate, a.up)
	} else {
		b.SiLUMulBackward(a.gate, a.up, dact, a.gate, a.up)
	}
	t.linearBack(dh, false, a.gate, h2, w.Gate, g.Gate, g.GateBias, ad[targetGate], a.u[targetGate], du)
	t.linearBack(dh, true, a.up, h2, w.Up, g.Up, g.UpBias, ad[targetUp], a.u[targetUp], du)
	if c.PostNormsOnly {
		b.AddScaled(dx, dh, 1)
	} else {
		b.RMSNormBackward(dx, g.MLPNorm, dh, a.xmid, w.MLPNorm, eps, true)
	}
	p.yield()

	// Attention: x_mid = x_in + o(attention(rope(q), rope(k), v)) with q, k,
	// v projections of h1 = norm(x_in) (and per-head norms of q and k).
	dy = dx
	if c.SandwichNorms {
		b.RMSNormBackward(dh, g.PostAttnNorm, dx, a.oatt, w.PostAttnNorm, eps, false)
		dy = dh
	} else if r := c.residualScale(); r != 1 {
		b.Copy(dh, dx)
		b.Scale(dh, r)
		dy = dh
	}
	t.linearBack(datt, false, dy, a.att, w.O, g.O, g.OBias, ad[targetO], a.u[targetO], du)
	p.yield()
	p.attn.Window = c.LayerWindow(l)
	b.DenseAttentionBackward(dq, dk, dv, datt, a.att, a.lse, a.q, a.k, a.v, &p.attn)
	p.yield()
	if c.rotates(l) {
		cos, sin := t.m.ropeFor(l)
		b.RoPEBackward(dq, p.pos, cos, sin, c.HeadDim)
		b.RoPEBackward(dk, p.pos, cos, sin, c.HeadDim)
	}
	if c.QKNorm {
		b.RMSNormBackward(dq, g.QNorm, dq, a.qpre, w.QNorm, eps, false)
		b.RMSNormBackward(dk, g.KNorm, dk, a.kpre, w.KNorm, eps, false)
	}
	t.linearBack(dh, false, dq, h1, w.Q, g.Q, g.QBias, ad[targetQ], a.u[targetQ], du)
	t.linearBack(dh, true, dk, h1, w.K, g.K, g.KBias, ad[targetK], a.u[targetK], du)
	t.linearBack(dh, true, dv, h1, w.V, g.V, g.VBias, ad[targetV], a.u[targetV], du)
	if c.PostNormsOnly {
		b.AddScaled(dx, dh, 1)
	} else {
		b.RMSNormBackward(dx, g.AttnNorm, dh, xin, w.AttnNorm, eps, true)
	}
	return nil
}

// Free returns the pass's activation memory to its Trainable for reuse.
func (p *Pass) Free() {
	t := p.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if p.freed {
		return
	}
	p.freed = true
	if t.freed {
		p.ar.free(t.tb)
	} else {
		t.arenas = append(t.arenas, p.ar)
	}
	p.ar, p.xs, p.acts = nil, nil, nil
}
