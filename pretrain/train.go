// Package pretrain trains the small model bundled with clawrl from scratch,
// on the CPU: it draws its corpus of short assistant dialogues from
// package corpus, learns a byte-level BPE
// vocabulary on it, and trains a Llama-architecture model with next-token
// cross-entropy on the assistant replies, with AdamW, warm-up and cosine
// decay, gradient clipping, checkpoints that can be resumed bit for bit,
// a held-out loss, and a final evaluation through the serving engine
// (eval.go). `clawrl pretrain` is its command line.
//
// The training step is the model package's Trainable: Forward gives the
// log-probability of every target token, and the loss
//
//	L = −(1/N) Σ log p(target)     over the N trained tokens of the batch
//
// has ∂L/∂log p = −1/N at each trained token (0 elsewhere), which is what
// Pass.Backward takes.
package pretrain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/clawrl/clawrl/atomicfile"
	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/corpus"
	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/safetensors"
	"github.com/clawrl/clawrl/tokenizer"
	"github.com/clawrl/clawrl/trainer"
	"github.com/clawrl/clawrl/weights"
)

// Shape is the model's architecture.
type Shape struct {
	Hidden       int     `json:"hidden"`
	Intermediate int     `json:"intermediate"`
	Layers       int     `json:"layers"`
	Heads        int     `json:"heads"`
	KVHeads      int     `json:"kv_heads"`
	Vocab        int     `json:"vocab"` // vocabulary size to train (the tokenizer may stop short)
	MaxPositions int     `json:"max_positions"`
	RopeTheta    float64 `json:"rope_theta"`
	Tied         bool    `json:"tied"`
}

// Presets are the shapes known by name: "small" is the bundled model,
// "tiny" is for tests.
var Presets = map[string]Shape{
	"small": {Hidden: 256, Intermediate: 768, Layers: 8, Heads: 4, KVHeads: 2, Vocab: 6144, MaxPositions: 32768, RopeTheta: 100000},
	"tiny":  {Hidden: 32, Intermediate: 64, Layers: 1, Heads: 2, KVHeads: 1, Vocab: 384, MaxPositions: 2048, RopeTheta: 10000},
}

// Options configure a pretraining run. Start from DefaultOptions.
type Options struct {
	Out  string // where the finished checkpoint is written
	Work string // checkpoints of the run (resumable state)

	Shape Shape
	Seed  uint64

	Steps       int     // optimizer steps
	SeqLen      int     // longest conversation, in tokens (longer ones are skipped)
	Batch       int     // tokens per step = Batch × SeqLen (whole conversations, packed)
	LR          float64 // peak learning rate
	MinLR       float64 // floor of the cosine decay, as a fraction of LR
	Warmup      int     // linear warm-up steps
	WeightDecay float64 // decoupled, on matrices only (trainer.DecaysWeight)
	Beta1       float64
	Beta2       float64
	GradClip    float64 // global L2 norm bound (≤ 0: off)

	EvalEvery       int // held-out loss every this many steps
	HeldOutBatches  int // size of the held-out set, in batches
	CheckpointEvery int // save the run every this many steps

	TokenizerDocs int  // generated conversations the vocabulary learns from
	TextBytes     int  // bytes of public-domain text it learns from
	NoTexts       bool // do not read the Debian packages' text

	EvalArithmetic int // held-out arithmetic questions in the final evaluation
	EvalTools      int // held-out tool-use prompts
	EvalJudge      int // held-out judge prompts
	EvalFollow     int // held-out prompts per instruction kind and placement

	// Init, if set, is a checkpoint directory (this package's output, in
	// Hugging Face layout) the run starts from instead of a new vocabulary
	// and random weights: a continued pretraining on a changed corpus, as
	// the bundled model's later versions were made. Its shape replaces
	// Shape, except that Shape.Layers may be larger (up to twice as many):
	// the checkpoint is then grown to that depth by GrowDepth.
	Init string
	// Mix overrides the corpus mix: category → relative weight (0 leaves
	// a category out); categories not named keep their default weight.
	Mix map[string]float64

	// Resume continues the run saved in Work; without it a saved run is
	// an error unless Restart, which discards it.
	Resume, Restart bool
	// StopAfter, if > 0, stops after this many steps of this invocation as
	// if interrupted (a checkpoint is saved): for tests.
	StopAfter int

	Progress io.Writer // progress bar and messages (nil: none)
}

// DefaultOptions are those of the bundled model.
func DefaultOptions() Options {
	return Options{
		Shape: Presets["small"], Seed: 1,
		Steps: 4000, SeqLen: 1024, Batch: 4, LR: 1.5e-3, MinLR: 0.1, Warmup: 100, WeightDecay: 0.1,
		Beta1: 0.9, Beta2: 0.95, GradClip: 1,
		EvalEvery: 100, HeldOutBatches: 4, CheckpointEvery: 50,
		TokenizerDocs: 40000, TextBytes: 3 << 20,
		EvalArithmetic: 300, EvalTools: 200, EvalJudge: 200, EvalFollow: 20,
	}
}

// Validate reports options out of range.
func (o *Options) Validate() error {
	var errs []error
	bad := func(name string, v any, want string) { errs = append(errs, fmt.Errorf("%s = %v: %s", name, v, want)) }
	s := o.Shape
	if s.Hidden < 8 || s.Layers < 1 || s.Heads < 1 || s.KVHeads < 1 || s.Heads%s.KVHeads != 0 || s.Hidden%s.Heads != 0 || (s.Hidden/s.Heads)%2 != 0 || s.Intermediate < 1 {
		bad("shape", fmt.Sprintf("%+v", s), "needs hidden ≥ 8 divisible by heads, an even head size, heads divisible by kv heads")
	}
	if s.Vocab < 256+len(corpus.SpecialTokens)+1 {
		bad("--vocab", s.Vocab, fmt.Sprintf("must exceed %d (bytes and special tokens)", 256+len(corpus.SpecialTokens)))
	}
	if s.MaxPositions < o.SeqLen {
		bad("--context", s.MaxPositions, "must be at least --seq-len")
	}
	if o.Steps < 1 {
		bad("--steps", o.Steps, "must be ≥ 1")
	}
	if o.SeqLen < 16 {
		bad("--seq-len", o.SeqLen, "must be ≥ 16")
	}
	if o.Batch < 1 {
		bad("--batch", o.Batch, "must be ≥ 1")
	}
	if !(o.LR > 0) || math.IsInf(o.LR, 0) {
		bad("--lr", o.LR, "must be positive")
	}
	if o.MinLR < 0 || o.MinLR > 1 {
		bad("--min-lr", o.MinLR, "must lie in [0, 1]")
	}
	if o.Warmup < 0 {
		bad("--warmup", o.Warmup, "must be ≥ 0")
	}
	if o.EvalEvery < 1 || o.CheckpointEvery < 1 || o.HeldOutBatches < 1 {
		bad("--eval-every/--checkpoint-every", fmt.Sprint(o.EvalEvery, o.CheckpointEvery), "must be ≥ 1")
	}
	if o.TokenizerDocs < 10 {
		bad("tokenizer docs", o.TokenizerDocs, "must be ≥ 10")
	}
	if o.Out == "" || o.Work == "" {
		bad("--out/--work", o.Out+" "+o.Work, "both must be set")
	}
	if o.Resume && o.Restart {
		errs = append(errs, errors.New("--resume and --restart exclude each other"))
	}
	for cat, w := range o.Mix {
		if !slices.Contains(corpus.Categories, cat) {
			bad("--mix", cat, "unknown category (known: "+strings.Join(corpus.Categories, ", ")+")")
		}
		if !(w >= 0) || math.IsInf(w, 0) {
			bad("--mix "+cat, w, "weight must be a finite number ≥ 0")
		}
	}
	return errors.Join(errs...)
}

// LearningRate is the learning rate of step (1-based): linear warm-up to
// LR, then cosine decay to MinLR·LR at the last step.
func (o *Options) LearningRate(step int) float64 {
	if step <= o.Warmup {
		return o.LR * float64(step) / float64(max(o.Warmup, 1))
	}
	span := max(o.Steps-o.Warmup, 1)
	p := math.Min(1, float64(step-o.Warmup)/float64(span))
	return o.LR * (o.MinLR + (1-o.MinLR)*0.5*(1+math.Cos(math.Pi*p)))
}

// adamEps is the ε of pretraining's AdamW.
const adamEps = 1e-8

// adamW is the run's optimizer: the trainer package's AdamW, which decays
// matrices only (trainer.DecaysWeight).
func (o *Options) adamW() trainer.AdamW {
	return trainer.AdamW{Beta1: o.Beta1, Beta2: o.Beta2, Eps: adamEps, WeightDecay: o.WeightDecay, GradClip: o.GradClip}
}

// fingerprint is what a resumed run must share with the saved one.
func (o *Options) fingerprint() string {
	b, _ := json.Marshal(struct {
		Shape                                             Shape
		Seed                                              uint64
		SeqLen, Batch, Warmup                             int
		LR, MinLR, WeightDecay, Beta1, Beta2, GradClip    float64
		HeldOutBatches, TokenizerDocs, TextBytes, Threads int
		NoTexts                                           bool
		Init                                              string             `json:",omitempty"`
		Mix                                               map[string]float64 `json:",omitempty"`
	}{o.Shape, o.Seed, o.SeqLen, o.Batch, o.Warmup, o.LR, o.MinLR, o.WeightDecay, o.Beta1, o.Beta2, o.GradClip,
		o.HeldOutBatches, o.TokenizerDocs, o.TextBytes, engine.Threads(), o.NoTexts, o.Init, o.Mix})
	return string(b)
}

// ErrInterrupted is returned when a run stops early (its context ended, or
// StopAfter); the run is saved and continues with Resume.
var ErrInterrupted = errors.New("pretraining interrupted")

// Point is one step of the loss curve.
type Point struct {
	Step     int     `json:"step"`
	Loss     float64 `json:"loss"`
	LR       float64 `json:"lr,omitempty"`
	GradNorm float64 `json:"grad_norm,omitempty"`
	Tokens   int     `json:"tokens,omitempty"` // positions in the step's forward pass
	Targets  int     `json:"targets,omitempty"`
}

// state is the saved run, besides the tensors.
type state struct {
	Format      int      `json:"format"`
	Fingerprint string   `json:"fingerprint"`
	Step        int      `json:"step"`
	Tokens      int64    `json:"tokens"`
	Targets     int64    `json:"targets"`
	Seconds     float64  `json:"seconds"` // training time so far (resumes add up)
	Train       []Point  `json:"train"`
	HeldOut     []Point  `json:"held_out"`
	Texts       []string `json:"texts"`
}

const stateFormat = 1

// Files of the work directory.
const (
	initDir    = "init" // tokenizer and the random initial checkpoint
	ckptDir    = "ckpt" // the latest saved state
	stateJSON  = "state.json"
	stateST    = "state.safetensors"
	valuePre   = "value/"
	adamMPre   = "adam_m/"
	adamVPre   = "adam_v/"
	initFormat = "clawrl-pretrain"
	initMark   = "INIT_FROM" // in Work/init: the --init checkpoint it was copied from
)

// copyFile copies src to dst (atomically).
func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(dst, 0o644, data)
}

// ShapeOf reads the shape of the checkpoint in dir (for --init).
func ShapeOf(dir string) (Shape, error) {
	c, err := model.LoadConfig(dir)
	if err != nil {
		return Shape{}, err
	}
	return Shape{Hidden: c.HiddenSize, Intermediate: c.IntermediateSize, Layers: c.NumLayers, Heads: c.NumHeads, KVHeads: c.NumKVHeads,
		Vocab: c.VocabSize, MaxPositions: c.MaxPositions, RopeTheta: c.RopeTheta, Tied: c.TieWordEmbeddings}, nil
}

// run is a pretraining run in progress.
type run struct {
	o     Options
	st    state
	gen   *corpus.Generator
	tok   *tokenizer.Tokenizer
	m     *model.Model
	tb    compute.Trainer
	tr    *model.Trainable
	ps    []model.Param
	mom   [][2]compute.Tensor
	held  []corpus.Encoded
	texts *corpus.Texts
}

// Run trains (or resumes) and writes the finished checkpoint to Out, with
// the report; the evaluation runs on the written checkpoint.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	start := time.Now()
	r, err := open(o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.train(ctx); err != nil {
		return nil, err
	}
	if err := r.export(); err != nil {
		return nil, err
	}
	r.printf("\nwrote %s; evaluating it through the serving engine\n", o.Out)
	rep, err := r.report(ctx, time.Since(start))
	if err != nil {
		return nil, err
	}
	return rep, nil
}

func (r *run) printf(format string, args ...any) {
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, format, args...)
	}
}

// open prepares the run: a fresh one (vocabulary, random model) or a saved
// one.
func open(o Options) (*run, error) {
	r := &run{o: o}
	var texts *corpus.Texts
	if !o.NoTexts {
		t, err := corpus.LoadTexts()
		if err != nil {
			return nil, err
		}
		texts = t
	}
	r.texts = texts
	r.gen = corpus.NewGenerator(texts)
	if err := r.gen.SetMix(o.Mix); err != nil {
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	var srcs []string
	if texts != nil {
		srcs = texts.Sources
	}

	saved := loadState(o.Work)
	switch {
	case saved != nil && o.Resume:
		if saved.Fingerprint != o.fingerprint() {
			return nil, fmt.Errorf("pretrain: the run saved in %s was started with other options (or thread count): %s; now %s", o.Work, saved.Fingerprint, o.fingerprint())
		}
		if !slices.Equal(saved.Texts, srcs) {
			return nil, fmt.Errorf("pretrain: the run saved in %s read other public-domain text (%q; now %q)", o.Work, saved.Texts, srcs)
		}
		r.st = *saved
		r.printf("resuming %s at step %d of %d\n", o.Work, r.st.Step, o.Steps)
	case saved != nil && !o.Restart:
		return nil, fmt.Errorf("pretrain: %s holds a run at step %d; continue it with --resume or discard it with --restart", o.Work, saved.Step)
	default:
		if o.Resume {
			r.printf("nothing to resume in %s; starting a new run\n", o.Work)
		}
		if err := os.RemoveAll(o.Work); err != nil {
			return nil, fmt.Errorf("pretrain: %w", err)
		}
		r.st = state{Format: stateFormat, Fingerprint: o.fingerprint(), Texts: srcs}
		if err := r.initialise(); err != nil {
			return nil, err
		}
	}
	if err := r.load(); err != nil {
		r.close()
		return nil, err
	}
	if saved != nil && o.Resume {
		if err := r.restore(); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

// initialise trains the vocabulary and writes the random initial model
// into Work/init, or copies the Init checkpoint there.
func (r *run) initialise() error {
	o := r.o
	dir := filepath.Join(o.Work, initDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pretrain: %w", err)
	}
	if o.Init != "" {
		from, err := ShapeOf(o.Init)
		if err != nil {
			return fmt.Errorf("pretrain: --init: %w", err)
		}
		want := from
		want.Layers = o.Shape.Layers
		if want != o.Shape {
			return fmt.Errorf("pretrain: --init %s has shape %+v; the run asks for %+v (only the depth may grow)", o.Init, from, o.Shape)
		}
		if o.Shape.Layers != from.Layers {
			if err := GrowDepth(o.Init, dir, o.Shape.Layers); err != nil {
				return err
			}
			return atomicfile.WriteBytes(filepath.Join(dir, initMark), 0o644, []byte(o.Init+"\n"))
		}
		for _, name := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
			if err := copyFile(filepath.Join(o.Init, name), filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("pretrain: --init: %w", err)
			}
		}
		return atomicfile.WriteBytes(filepath.Join(dir, initMark), 0o644, []byte(o.Init+"\n"))
	}
	render, err := corpus.NewRenderer()
	if err != nil {
		return err
	}
	t0 := time.Now()
	rng := rand.New(rand.NewPCG(o.Seed, 0x70c))
	docs, err := corpus.TokenizerDocs(r.gen, render, rng, o.TokenizerDocs, r.texts, o.TextBytes)
	if err != nil {
		return err
	}
	tok, err := tokenizer.Train(slices.Values(docs), corpus.TokenizerOptions(o.Shape.Vocab))
	if err != nil {
		return fmt.Errorf("pretrain: vocabulary: %w", err)
	}
	r.printf("vocabulary: %d tokens from %d documents in %s\n", tok.VocabSize(), len(docs), time.Since(t0).Round(time.Millisecond))
	eos, _ := tok.EOS()
	pad, _ := tok.PAD()
	spec := o.Shape.spec(tok.VocabSize(), o.Seed)
	spec.EOSTokenIDs = []int{int(eos)}
	bos := int(pad) // as Qwen2.5: <|endoftext|>; the template never writes it
	spec.BOSTokenID = &bos
	if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
		return fmt.Errorf("pretrain: %w", err)
	}
	return tok.Save(dir)
}

// spec is the model.RandomSpec of the shape with vocabulary vocab.
func (s Shape) spec(vocab int, seed uint64) model.RandomSpec {
	return model.RandomSpec{
		Arch: model.ArchLlama, Hidden: s.Hidden, Intermediate: s.Intermediate, Layers: s.Layers, Heads: s.Heads, KVHeads: s.KVHeads,
		Vocab: vocab, MaxPositions: s.MaxPositions, RopeTheta: s.RopeTheta, RMSNormEps: 1e-5, DType: "bfloat16", Tied: s.Tied,
		Seed: seed, InitStd: 0.02,
	}
}

// load opens the initial model, its trainable F32 copy and the optimizer
// state, and builds the held-out set.
func (r *run) load() error {
	dir := filepath.Join(r.o.Work, initDir)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	r.tok = tok
	m, err := engine.LoadModel(nil, dir)
	if err != nil {
		return err
	}
	r.m = m
	r.tb = m.Backend().(compute.Trainer)
	tr, err := m.NewTrainable(nil, model.TrainOptions{})
	if err != nil {
		return err
	}
	r.tr = tr
	r.ps = tr.Params()
	// GPT-2's initialisation: the projections that write into the residual
	// stream start smaller, by 1/√(2·layers). A run from a trained
	// checkpoint keeps its weights.
	if r.o.Init == "" {
		scale := float32(1 / math.Sqrt(2*float64(m.Config.NumLayers)))
		for _, p := range r.ps {
			if hasSuffix(p.Name, "o_proj.weight", "down_proj.weight") {
				r.tb.Scale(p.Value, scale)
			}
		}
	}
	for _, p := range r.ps {
		mt, err := r.tb.NewTensor(compute.F32, p.Value.Shape()...)
		if err != nil {
			return err
		}
		vt, err := r.tb.NewTensor(compute.F32, p.Value.Shape()...)
		if err != nil {
			r.tb.Free(mt)
			return err
		}
		r.tb.Zero(mt)
		r.tb.Zero(vt)
		r.mom = append(r.mom, [2]compute.Tensor{mt, vt})
	}
	// The held-out set: conversations of the held-out split, in the
	// corpus's category mix, from their own random stream.
	rng := rand.New(rand.NewPCG(r.o.Seed, 0x4e1d))
	budget := r.o.Batch * r.o.SeqLen
	for range r.o.HeldOutBatches {
		used := 0
		for used < budget {
			cat := r.gen.Next(rng).Category
			ex := r.gen.HeldOutExample(rng, cat)
			e, err := corpus.Encode(tok, ex)
			if err != nil {
				return err
			}
			if len(e.IDs) > r.o.SeqLen || e.Targets() == 0 {
				continue
			}
			r.held = append(r.held, e)
			used += len(e.IDs)
		}
	}
	return nil
}

func hasSuffix(s string, suffixes ...string) bool {
	for _, x := range suffixes {
		if len(s) >= len(x) && s[len(s)-len(x):] == x {
			return true
		}
	}
	return false
}

func (r *run) close() {
	for _, mm := range r.mom {
		r.tb.Free(mm[0])
		r.tb.Free(mm[1])
	}
	r.mom = nil
	if r.tr != nil {
		r.tr.Free()
		r.tr = nil
	}
	if r.m != nil {
		r.m.Close()
		r.m = nil
	}
}

// batch returns the conversations of step (1-based): drawn from the
// step's own random stream, so that a resumed run sees the same data.
func (r *run) batch(step int) ([]corpus.Encoded, error) {
	rng := rand.New(rand.NewPCG(r.o.Seed, uint64(step)))
	budget := r.o.Batch * r.o.SeqLen
	var out []corpus.Encoded
	used := 0
	for tries := 0; ; tries++ {
		e, err := corpus.Encode(r.tok, r.gen.Next(rng))
		if err != nil {
			return nil, err
		}
		if len(e.IDs) > r.o.SeqLen || e.Targets() == 0 {
			if tries > 1000 && len(out) == 0 {
				return nil, fmt.Errorf("pretrain: no conversation fits --seq-len %d", r.o.SeqLen)
			}
			continue
		}
		if used+len(e.IDs) > budget {
			if len(out) == 0 {
				continue
			}
			return out, nil
		}
		out = append(out, e)
		used += len(e.IDs)
	}
}

// forward runs a pass over es and returns it with the summed negative
// log-likelihood of the targets and their count.
func (r *run) forward(es []corpus.Encoded) (*model.Pass, float64, int, error) {
	samples := make([]model.TrainSample, len(es))
	for i, e := range es {
		samples[i] = model.TrainSample{Prompt: e.IDs[:1], Response: e.IDs[1:]}
	}
	p, err := r.tr.Forward(samples)
	if err != nil {
		return nil, 0, 0, err
	}
	nll, n := 0.0, 0
	for i, e := range es {
		for j, lp := range p.LogProbs[i] {
			if e.Train[j+1] {
				nll -= float64(lp)
				n++
			}
		}
	}
	return p, nll, n, nil
}

// step trains on one batch and returns its point of the loss curve.
func (r *run) step(step int) (Point, error) {
	es, err := r.batch(step)
	if err != nil {
		return Point{}, err
	}
	p, nll, n, err := r.forward(es)
	if err != nil {
		return Point{}, err
	}
	loss := nll / float64(n)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		p.Free()
		return Point{}, fmt.Errorf("pretrain: step %d: loss is %g; lower --lr and resume from the last checkpoint", step, loss)
	}
	d := make([][]float32, len(es))
	g := float32(-1 / float64(n))
	for i, e := range es {
		d[i] = make([]float32, len(e.IDs)-1)
		for j := range d[i] {
			if e.Train[j+1] {
				d[i][j] = g
			}
		}
	}
	err = p.Backward(d)
	tokens := p.Tokens
	p.Free()
	if err != nil {
		return Point{}, err
	}
	grads := make([]compute.Tensor, len(r.ps))
	for i, q := range r.ps {
		grads[i] = q.Grad
	}
	ss, err := r.tb.SumSquares(grads...)
	if err != nil {
		return Point{}, err
	}
	norm := math.Sqrt(ss)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return Point{}, fmt.Errorf("pretrain: step %d: gradient norm is %g; lower --lr and resume from the last checkpoint", step, norm)
	}
	lr := r.o.LearningRate(step)
	opt := r.o.adamW()
	for i, q := range r.ps {
		opt.Update(r.tb, q, r.mom[i][0], r.mom[i][1], step, lr, norm)
	}
	r.tr.ZeroGrad()
	if err := r.tb.Synchronize(); err != nil {
		return Point{}, err
	}
	return Point{Step: step, Loss: loss, LR: lr, GradNorm: norm, Tokens: tokens, Targets: n}, nil
}

// heldOutLoss is the mean loss per target token over the held-out set.
func (r *run) heldOutLoss() (float64, error) {
	budget := r.o.Batch * r.o.SeqLen
	nll, n := 0.0, 0
	for i := 0; i < len(r.held); {
		j, used := i, 0
		for j < len(r.held) && (j == i || used+len(r.held[j].IDs) <= budget) {
			used += len(r.held[j].IDs)
			j++
		}
		p, s, k, err := r.forward(r.held[i:j])
		if err != nil {
			return 0, err
		}
		p.Free()
		nll += s
		n += k
		i = j
	}
	return nll / float64(max(n, 1)), nil
}

// train runs the steps left.
func (r *run) train(ctx context.Context) error {
	o := r.o
	if r.st.Step >= o.Steps {
		return nil
	}
	bar := newProgress(o.Progress, o.Steps)
	ran := 0
	for s := r.st.Step + 1; s <= o.Steps; s++ {
		t0 := time.Now()
		pt, err := r.step(s)
		if err != nil {
			return err
		}
		took := time.Since(t0)
		r.st.Seconds += took.Seconds()
		r.st.Step = s
		r.st.Tokens += int64(pt.Tokens)
		r.st.Targets += int64(pt.Targets)
		r.st.Train = append(r.st.Train, pt)
		if s%o.EvalEvery == 0 || s == o.Steps {
			hl, err := r.heldOutLoss()
			if err != nil {
				return err
			}
			r.st.HeldOut = append(r.st.HeldOut, Point{Step: s, Loss: hl})
		}
		bar.update(s, pt, r.lastHeldOut(), float64(pt.Tokens)/took.Seconds(), r.st.Seconds)
		ran++
		stop := ctx.Err() != nil || (o.StopAfter > 0 && ran >= o.StopAfter)
		if s%o.CheckpointEvery == 0 || s == o.Steps || stop {
			if err := r.save(); err != nil {
				return err
			}
		}
		if stop && s < o.Steps {
			bar.done()
			r.printf("stopped at step %d; saved in %s (continue with --resume)\n", s, o.Work)
			return ErrInterrupted
		}
	}
	bar.done()
	return nil
}

func (r *run) lastHeldOut() float64 {
	if n := len(r.st.HeldOut); n > 0 {
		return r.st.HeldOut[n-1].Loss
	}
	return math.NaN()
}

// save writes the run's state into Work/ckpt, atomically: a new directory
// is written and synced, then swapped in by renames (atomicfile.ReplaceDir).
func (r *run) save() error {
	dir := filepath.Join(r.o.Work, ckptDir)
	tmp := dir + ".tmp"
	old := dir + ".old"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("pretrain: save: %w", err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("pretrain: save: %w", err)
	}
	var ts []safetensors.WriteTensor
	for i, p := range r.ps {
		for _, x := range []struct {
			pre string
			t   compute.Tensor
		}{{valuePre, p.Value}, {adamMPre, r.mom[i][0]}, {adamVPre, r.mom[i][1]}} {
			t := x.t
			ts = append(ts, safetensors.WriteTensor{Name: x.pre + p.Name, DType: safetensors.F32, Shape: slices.Clone(t.Shape()),
				Stream: func(w io.Writer) error {
					v, err := model.ReadTensor(r.tb, t)
					if err != nil {
						return err
					}
					_, err = w.Write(safetensors.EncodeFloat32(v))
					return err
				}})
		}
	}
	if err := safetensors.WriteFile(filepath.Join(tmp, stateST), ts, map[string]string{"format": initFormat}); err != nil {
		return fmt.Errorf("pretrain: save: %w", err)
	}
	js, err := json.Marshal(r.st)
	if err != nil {
		return fmt.Errorf("pretrain: save: %w", err)
	}
	if err := atomicfile.WriteBytes(filepath.Join(tmp, stateJSON), 0o644, js); err != nil {
		return fmt.Errorf("pretrain: save: %w", err)
	}
	// ckpt.old holds the previous state until the new one is in place
	// (savedDir falls back on it).
	if err := atomicfile.ReplaceDir(tmp, dir, old); err != nil {
		return fmt.Errorf("pretrain: save: %w", err)
	}
	return nil
}

// savedDir is the directory of the latest complete saved state: ckpt, or
// ckpt.old when a save was cut short between its renames.
func savedDir(work string) string {
	for _, d := range []string{ckptDir, ckptDir + ".old"} {
		p := filepath.Join(work, d)
		if _, err := os.Stat(filepath.Join(p, stateJSON)); err == nil {
			return p
		}
	}
	return ""
}

func loadState(work string) *state {
	dir := savedDir(work)
	if dir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, stateJSON))
	if err != nil {
		return nil
	}
	var st state
	if json.Unmarshal(b, &st) != nil || st.Format != stateFormat {
		return nil
	}
	return &st
}

// restore loads the saved parameters and optimizer moments.
func (r *run) restore() error {
	dir := savedDir(r.o.Work)
	f, err := safetensors.Open(filepath.Join(dir, stateST))
	if err != nil {
		return fmt.Errorf("pretrain: resume: %w", err)
	}
	defer f.Close()
	for i, p := range r.ps {
		for _, x := range []struct {
			pre string
			t   compute.Tensor
		}{{valuePre, p.Value}, {adamMPre, r.mom[i][0]}, {adamVPre, r.mom[i][1]}} {
			v, err := f.Float32(x.pre + p.Name)
			if err != nil {
				return fmt.Errorf("pretrain: resume: %w", err)
			}
			if len(v) != compute.Len(x.t) {
				return fmt.Errorf("pretrain: resume: %s%s has %d values, want %d", x.pre, p.Name, len(v), compute.Len(x.t))
			}
			r.tb.Write(x.t, v)
		}
	}
	return r.tb.Synchronize()
}

// export writes the trained model to Out: config.json, model.safetensors
// (BF16), tokenizer.json, tokenizer_config.json, generation_config.json.
func (r *run) export() error {
	o := r.o
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("pretrain: %w", err)
	}
	w, err := r.tr.Snapshot() // BF16, as the initial checkpoint
	if err != nil {
		return err
	}
	defer w.Free()
	// WeightsFile writes with safetensors.WriteFile, which is atomic.
	wf := weights.WeightsFile(r.tb, w)
	if err := wf.Create(filepath.Join(o.Out, wf.Name)); err != nil {
		return fmt.Errorf("pretrain: export: %w", err)
	}
	cfg, err := os.ReadFile(filepath.Join(o.Work, initDir, "config.json"))
	if err != nil {
		return fmt.Errorf("pretrain: export: %w", err)
	}
	eos, _ := r.tok.EOS()
	pad, _ := r.tok.PAD()
	gen := fmt.Sprintf("{\n  \"eos_token_id\": %d,\n  \"pad_token_id\": %d,\n  \"do_sample\": true,\n  \"temperature\": 0.7,\n  \"top_p\": 0.9\n}\n", eos, pad)
	for name, data := range map[string][]byte{"config.json": cfg, "generation_config.json": []byte(gen)} {
		if err := atomicfile.WriteBytes(filepath.Join(o.Out, name), 0o644, data); err != nil {
			return fmt.Errorf("pretrain: export: %w", err)
		}
	}
	return r.tok.Save(o.Out)
}
