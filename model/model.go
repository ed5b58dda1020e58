package model

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/clawrl/clawrl/compute"
)

// Model is a loaded transformer: its config, the weights of its checkpoint
// on a backend, the rotary tables, and scratch activations reused from one
// forward pass to the next. Forward, Run and the LogProbs methods may be
// called from several goroutines; they run one at a time. Other weight sets
// (versions) of the same model are Weights values (see Weights); training
// runs through a Trainable (see NewTrainable).
type Model struct {
	Config *Config

	b        compute.Backend
	root     *Model         // the loaded model a View runs over; nil for that model
	src      Source         // the checkpoint, closed by Close
	w        *weights       // the checkpoint's tensors (base.w)
	base     *Weights       // the checkpoint's weight set
	cos, sin compute.Tensor // [MaxPositions, HeadDim/2]
	// cosL, sinL are the windowed layers' tables (Config.LocalRopeTheta);
	// nil when those layers use cos and sin.
	cosL, sinL compute.Tensor
	owned      []compute.Tensor // freed by Close

	mu sync.Mutex
	s  scratch

	runWaiting atomic.Int32           // Run calls waiting for mu (LogProbsWith lets one go first)
	runEntered atomic.Int64           // Run calls that got mu
	scoreChunk atomic.Int32           // LogProbsWith's tokens per round (0: DefaultScoreChunk)
	scoreSlice atomic.Pointer[Slicer] // LogProbsWith's rounds are training slices of it
}

// SetScoreSlicer makes every round of LogProbsWith (teacher, reference
// and KL passes: training work) a slice of s (priority.Gate), so that
// scoring waits for serving as a training pass does; nil: rounds only let
// a waiting Run go first.
func (m *Model) SetScoreSlicer(s Slicer) {
	if s == nil {
		m.scoreSlice.Store(nil)
		return
	}
	m.scoreSlice.Store(&s)
}

// DefaultScoreChunk is LogProbsWith's default round: the scheduler's
// default prefill chunk.
const DefaultScoreChunk = 512

// SetScoreChunk sets how many tokens one round of LogProbsWith runs
// before it lets serving in (n < 1: DefaultScoreChunk).
func (m *Model) SetScoreChunk(n int) {
	m.scoreChunk.Store(int32(max(n, 0)))
}

// ScoreChunk is LogProbsWith's round in tokens.
func (m *Model) ScoreChunk() int {
	if n := m.scoreChunk.Load(); n > 0 {
		return int(n)
	}
	return DefaultScoreChunk
}

// yieldToRun lets a Run call that waits for the model's lock have it
// first: a scoring pass between two rounds. It waits for one Run only, so
// a stream of them cannot starve the pass.
func (m *Model) yieldToRun() {
	if m.runWaiting.Load() == 0 {
		return
	}
	entered := m.runEntered.Load()
	for m.runEntered.Load() == entered && m.runWaiting.Load() > 0 {
		runtime.Gosched()
	}
}

// Load reads dir/config.json and the checkpoint's safetensors files and
// puts the weights on backend b. The checkpoint files stay mapped until
// Close, because a backend may use F32 and BF16 weights in place (the CPU
// backend does with cpu.Options.ZeroCopyWeights).
func Load(b compute.Backend, dir string) (*Model, error) {
	src, err := OpenDir(dir)
	if err != nil {
		return nil, err
	}
	return LoadFrom(b, src)
}

// LoadFrom puts the weights of src (a checkpoint directory, a GGUF file)
// on backend b. The model owns src from then on: it closes src on Close,
// or at once when loading fails.
func LoadFrom(b compute.Backend, src Source) (*Model, error) {
	c := src.Config()
	if sw, ok := b.(compute.SlidingWindow); c.SlidingWindow > 0 && (!ok || !sw.SlidingWindow()) {
		capped := *c
		capped.MaxPositions, capped.SlidingWindow, capped.CappedToWindow = c.SlidingWindow, 0, true
		c = &capped
	}
	w, made, err := loadWeights(b, c, src, false)
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("model: %w", err)
	}
	m := &Model{Config: c, b: b, src: src, w: w}
	m.base = newBaseWeights(m, w, made)
	if err := m.needOps(); err != nil {
		m.Close()
		return nil, err
	}
	half := c.HeadDim / 2
	type table struct {
		dst  *compute.Tensor
		vals []float32
	}
	cos, sin := ropeTables(c.RopeFrequencies(), c.MaxPositions, c.RopeScale())
	tabs := []table{{&m.cos, cos}, {&m.sin, sin}}
	if c.LocalRopeTheta > 0 && c.WindowLayers != nil {
		cosL, sinL := ropeTables(c.localRopeFrequencies(), c.MaxPositions, 1)
		tabs = append(tabs, table{&m.cosL, cosL}, table{&m.sinL, sinL})
	}
	for _, tab := range tabs {
		t, err := b.NewTensor(compute.F32, c.MaxPositions, half)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("model: rotary table: %w", err)
		}
		b.Write(t, tab.vals)
		*tab.dst = t
		m.owned = append(m.owned, t)
	}
	return m, nil
}

// capLogits soft-caps logits (Config.FinalSoftcap, Gemma 2's
// final_logit_softcapping), when the model does.
func (m *Model) capLogits(lg compute.Tensor) {
	if c := m.Config.FinalSoftcap; c > 0 {
		m.b.(compute.Softcap).Softcap(lg, float32(c))
	}
}

// needOps checks that the backend runs the ops the config needs beyond a
// Llama block's.
func (m *Model) needOps() error {
	c := m.Config
	if _, ok := m.b.(compute.Gemma); !ok && c.Activation == ActGELUTanh {
		return fmt.Errorf("model: backend %s does not run %s's GELU MLP (compute.Gemma is not built for it)", m.b.Name(), c.Architecture)
	}
	if _, ok := m.b.(compute.Softcap); !ok && (c.AttnSoftcap > 0 || c.FinalSoftcap > 0) {
		return fmt.Errorf("model: backend %s does not soft-cap attention scores and logits, which %s needs (compute.Softcap is not built for it)", m.b.Name(), c.Architecture)
	}
	if _, ok := m.b.(compute.Scaler); !ok && c.scales() {
		return fmt.Errorf("model: backend %s does not scale tensors, which %s's embedding, residual or logit multipliers need (compute.Scaler is not built for it)", m.b.Name(), c.Architecture)
	}
	return nil
}

// ropeFor is the rotary tables of layer l.
func (m *Model) ropeFor(l int) (cos, sin compute.Tensor) {
	if m.cosL != nil && m.Config.localRope(l) {
		return m.cosL, m.sinL
	}
	return m.cos, m.sin
}

// View returns a model over m's weights and weight sets that runs on
// backend b, with scratch memory and a lock of its own: a devices group
// (the trainer, the judge) computes through its view, on its own worker
// pool, without waiting for the passes of another group. b must use
// tensors of m's backend (for the CPU, cpu.Backend.WithPool). Weight sets
// and Trainables made through a view belong to the loaded model, so that
// every view can run them; KV caches belong to the view that made them.
// Closing a view frees its scratch memory only; the loaded model must
// outlive its views.
func (m *Model) View(b compute.Backend) *Model {
	r := m.owner()
	return &Model{Config: r.Config, b: b, root: r, w: r.w, base: r.base, cos: r.cos, sin: r.sin, cosL: r.cosL, sinL: r.sinL}
}

// owner is the loaded model: m itself, or the model a view runs over.
func (m *Model) owner() *Model {
	if m.root != nil {
		return m.root
	}
	return m
}

// Backend is the backend the model runs on.
func (m *Model) Backend() compute.Backend { return m.b }

// Close frees the checkpoint's weights and the scratch memory and unmaps
// the checkpoint. Every weight set and Trainable of the model must be freed
// before, or not used after: they may share the checkpoint's tensors.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.root != nil { // a view: its scratch only
		m.s.free(m.b)
		return nil
	}
	for _, t := range m.owned {
		m.b.Free(t)
	}
	m.owned = nil
	if m.base != nil {
		m.base.release()
		m.base = nil
	}
	m.s.free(m.b)
	if m.src != nil {
		err := m.src.Close()
		m.src = nil
		return err
	}
	return nil
}

// NewKVCache allocates a KV cache shaped for this model on its backend.
func (m *Model) NewKVCache(opts KVCacheOptions) (*KVCache, error) {
	return NewKVCache(m.b, m.Config, opts)
}

// Step is one sequence's part of a batched forward pass: Tokens are
// appended to Seq at positions Seq.Len(), Seq.Len()+1, ... A prefill chunk
// has many tokens, a decode step one.
type Step struct {
	Seq    *Sequence
	Tokens []int32
}

// Output chooses which logits Forward returns.
type Output int

const (
	// LastLogits returns one row per step: the logits after its last new
	// token, for sampling the next one.
	LastLogits Output = iota
	// AllLogits returns one row per new token, in step order, for scoring.
	AllLogits
)

// Forward runs the model with the checkpoint's weights: it is
// Run(m.Weights(), steps, out, dst).
func (m *Model) Forward(steps []Step, out Output, dst []float32) ([]float32, error) {
	return m.Run(m.base, steps, out, dst)
}

// Run runs the model with the weight set w over a batch: every step's
// tokens are appended to its sequence (their keys and values written into the cache) and the
// logits chosen by out are written to dst, which is grown if needed and
// returned, row-major with Config.VocabSize columns.
//
// All matrix products run over the concatenation of the batch's new tokens,
// so a batch of decode steps shares one pass over the weights.
//
// If the KV cache has no room, Forward returns an error wrapping
// ErrCacheFull and no sequence changes; so does any other invalid batch
// (positions at or beyond max_position_embeddings, unknown token ids). An
// error while reading the logits back (a device failure) comes after the
// sequences have advanced.
//
// The keys and values already in a sequence's cache were computed by
// whatever weights were used then: a generation should keep the weight set
// it started with (consecutive calls may use different sets for different
// batches). w must belong to m and stay unfreed for the call; a nil w is
// the checkpoint's set. Run on a freed set returns an error.
func (m *Model) Run(w *Weights, steps []Step, out Output, dst []float32) ([]float32, error) {
	if out != LastLogits && out != AllLogits {
		return dst, fmt.Errorf("model: unknown output kind %d", out)
	}
	w, err := m.acquire(w)
	if err != nil {
		return dst, err
	}
	defer w.unlock()
	ws := w.w
	m.runWaiting.Add(1)
	m.mu.Lock()
	m.runEntered.Add(1)
	m.runWaiting.Add(-1)
	defer m.mu.Unlock()
	x, err := m.run(ws, steps)
	if err != nil {
		return dst, err
	}
	var rows []int32
	if out == LastLogits {
		rows = m.s.hRows[:0]
		for i := range steps {
			rows = append(rows, m.s.hQStart[i+1]-1)
		}
		m.s.hRows = rows
	}
	return m.logits(ws, x, rows, dst)
}

// run validates the batch, reserves cache blocks, and runs every layer over
// the batch's tokens. It returns the last layer's output [tokens, hidden]
// (before the final norm); m.s.hQStart holds each step's first row.
func (m *Model) run(w *weights, steps []Step) (compute.Tensor, error) {
	c, b, s := m.Config, m.b, &m.s
	if m.root == nil && m.src == nil { // a view relies on its model outliving it
		return nil, errors.New("model: model is closed")
	}
	if len(steps) == 0 {
		return nil, errors.New("model: empty batch")
	}
	var kv *KVCache
	total := 0
	for i, st := range steps {
		switch {
		case st.Seq == nil:
			return nil, fmt.Errorf("model: step %d has no sequence", i)
		case len(st.Tokens) == 0:
			return nil, fmt.Errorf("model: step %d has no tokens", i)
		case kv == nil:
			kv = st.Seq.kv
			if kv.b != m.b || kv.layers != c.NumLayers || kv.width != c.KVDim() || kv.k == nil {
				return nil, errors.New("model: the sequence's KV cache was not made for this model")
			}
		case st.Seq.kv != kv:
			return nil, fmt.Errorf("model: step %d uses a different KV cache", i)
		}
		if end := st.Seq.n + len(st.Tokens); end > c.MaxPositions {
			return nil, fmt.Errorf("model: step %d would reach position %d, beyond max_position_embeddings %d", i, end-1, c.MaxPositions)
		}
		for _, id := range st.Tokens {
			if id < 0 || int(id) >= c.VocabSize {
				return nil, fmt.Errorf("model: step %d: token id %d outside the vocabulary of %d", i, id, c.VocabSize)
			}
		}
		for _, other := range steps[:i] {
			if other.Seq == st.Seq {
				return nil, fmt.Errorf("model: step %d repeats a sequence of the batch", i)
			}
		}
		total += len(st.Tokens)
	}

	// Reserve cache room for every step, or for none.
	reserved := s.hReserved[:0]
	for i, st := range steps {
		n, err := st.Seq.reserve(len(st.Tokens))
		if err != nil {
			for j := range i {
				steps[j].Seq.unreserve(reserved[j])
			}
			return nil, err
		}
		reserved = append(reserved, n)
	}
	s.hReserved = reserved

	// Host-side metadata: ids, positions and cache slots per token, query
	// ranges, context lengths and block tables per sequence.
	bs := kv.blockSize
	maxBlocks := 0
	for _, st := range steps {
		maxBlocks = max(maxBlocks, len(st.Seq.blocks))
	}
	s.hIDs, s.hPos, s.hSlots = s.hIDs[:0], s.hPos[:0], s.hSlots[:0]
	s.hQStart, s.hCtx, s.hTable = append(s.hQStart[:0], 0), s.hCtx[:0], s.hTable[:0]
	for _, st := range steps {
		seq := st.Seq
		for j, id := range st.Tokens {
			p := seq.n + j
			s.hIDs = append(s.hIDs, id)
			s.hPos = append(s.hPos, int32(p))
			s.hSlots = append(s.hSlots, seq.blocks[p/bs]*int32(bs)+int32(p%bs))
		}
		s.hQStart = append(s.hQStart, int32(len(s.hIDs)))
		s.hCtx = append(s.hCtx, int32(seq.n+len(st.Tokens)))
		s.hTable = append(s.hTable, seq.blocks...)
		for range maxBlocks - len(seq.blocks) {
			s.hTable = append(s.hTable, 0)
		}
	}

	var tb compute.Trainer
	rank := 0
	if w.lora != nil {
		var ok bool
		if tb, ok = b.(compute.Trainer); !ok {
			for j, st := range steps {
				st.Seq.unreserve(reserved[j])
			}
			return nil, fmt.Errorf("model: backend %s cannot serve a weight set with unmerged LoRA adapters (it does not implement compute.Trainer)", b.Name())
		}
		rank = w.loraRank()
	}
	views, err := s.views(b, c, total, len(steps), maxBlocks, rank)
	if err != nil {
		for j, st := range steps {
			st.Seq.unreserve(reserved[j])
		}
		return nil, fmt.Errorf("model: scratch memory: %w", err)
	}
	b.WriteInt32(views.ids, s.hIDs)
	b.WriteInt32(views.pos, s.hPos)
	b.WriteInt32(views.slots, s.hSlots)
	b.WriteInt32(views.qstart, s.hQStart)
	b.WriteInt32(views.ctx, s.hCtx)
	b.WriteInt32(views.table, s.hTable)
	attn := &s.attn
	*attn = compute.Attention{
		Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim,
		Scale: c.AttentionScale(), Window: c.SlidingWindow, Softcap: float32(c.AttnSoftcap),
		BlockSize: bs, Seqs: len(steps), MaxBlocks: maxBlocks,
		QueryStart: views.qstart, ContextLen: views.ctx, BlockTable: views.table,
	}

	x := views.x
	b.Embedding(x, w.Embed, views.ids)
	if c.EmbedScale > 0 && c.EmbedScale != 1 {
		b.(compute.Scaler).Scale(x, float32(c.EmbedScale))
	}
	sp := &servePass{b: b, c: c, kv: kv, v: &views, attn: attn, outs: &s.outs, lora: w.lora, scale: w.loraScale, tb: tb}
	io := &blockIO{xin: x, xmid: x, xout: x, h1: views.h, h2: views.h, qpre: views.q, kpre: views.k, q: views.q, k: views.k,
		v: views.v, att: views.att, out: views.out, outMLP: views.out, normed: views.out, gate: views.gate, up: views.up, act: views.gate, pos: views.pos}
	for l := range w.Layers {
		m.block(sp, l, &w.Layers[l], io, &s.projs)
	}
	for _, st := range steps {
		st.Seq.n += len(st.Tokens)
	}
	return x, nil
}

// logitChunk is how many rows of logits are computed at once; it bounds
// the scratch memory of scoring long sequences with large vocabularies.
const logitChunk = 32

// logits applies the final norm and the output projection to the rows of x
// listed in rows (all rows when rows is nil) and copies the logits to dst.
func (m *Model) logits(w *weights, x compute.Tensor, rows []int32, dst []float32) ([]float32, error) {
	h, err := m.finalHidden(w, x, rows)
	if err != nil {
		return dst, err
	}
	n, vocab := compute.Rows(h), m.Config.VocabSize
	if cap(dst) < n*vocab {
		dst = make([]float32, n*vocab)
	}
	dst = dst[:n*vocab]
	for r0 := 0; r0 < n; r0 += logitChunk {
		r1 := min(r0+logitChunk, n)
		lg, err := m.s.logits.view(m.b, compute.F32, r1-r0, vocab)
		if err != nil {
			return dst, fmt.Errorf("model: scratch memory: %w", err)
		}
		hr := h
		if r0 > 0 || r1 < n {
			hr = m.b.Slice(h, r0, r1)
		}
		m.b.Linear(lg, hr, w.Output, nil)
		m.capLogits(lg)
		if err := m.b.Read(dst[r0*vocab:r1*vocab], lg); err != nil {
			return dst, fmt.Errorf("model: reading logits: %w", err)
		}
	}
	return dst, nil
}

// finalHidden selects rows of x (all when rows is nil) and applies the
// final norm.
func (m *Model) finalHidden(w *weights, x compute.Tensor, rows []int32) (compute.Tensor, error) {
	b, c := m.b, m.Config
	n := compute.Rows(x)
	if rows != nil {
		n = len(rows)
	}
	h, err := m.s.final.view(b, compute.F32, n, c.HiddenSize)
	if err != nil {
		return nil, fmt.Errorf("model: scratch memory: %w", err)
	}
	src := x
	if rows != nil {
		idx, err := m.s.rows.view(b, compute.I32, n, 0)
		if err != nil {
			return nil, fmt.Errorf("model: scratch memory: %w", err)
		}
		b.WriteInt32(idx, rows)
		b.Embedding(h, x, idx)
		src = h
	}
	b.RMSNorm(h, src, w.Norm, float32(c.RMSNormEps))
	if s := c.logitScale(); s != 1 {
		b.(compute.Scaler).Scale(h, s) // logits / logits_scaling (Granite)
	}
	return h, nil
}
