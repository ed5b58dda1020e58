// Package cpu is the compute.Backend that runs on the host: tensors are Go
// slices and every op is a loop over them.
//
// The numeric inner loops are not here. They live in cpu/kernels, which
// provides matrix products (float32 activations against float32 or BF16
// weights), dot products, axpy, softmax pieces, number conversions and a
// fork-join pool, with assembly fast paths chosen at run time. This package
// is the layer above: it checks shapes, lays out the work of each
// transformer op (which rows, which heads, which cache slots), spreads it
// over cores with its worker pool (Options.Pool, kernels.Pool.For), and
// calls the kernels on the right sub-slices. The few loops that cpu/kernels
// does not have (the RoPE rotation, residual adds, row gathers, cache
// writes) are plain Go here and can move into kernels when they matter for
// speed. The exception is paged attention, whose AVX-512 kernels
// (attention_amd64.s) are here because they are made for the layout of the
// paged KV cache: they read keys and values in place through a table of row
// offsets (see attention.go).
//
// BF16 weights stay BF16 in memory and are widened inside the matrix
// kernels, halving the bytes read per decoded token. With
// Options.Precision set to kernels.PrecisionBF16, the forward products
// round their activations to BF16 and, where the CPU has AVX512_BF16,
// multiply BF16 by BF16 in hardware (see kernels.Precision). By default WeightF32
// and WeightBF16 copy the weights into memory of the backend's own (anonymous
// memory); with Options.ZeroCopyWeights they use the caller's slices in
// place, so a memory-mapped checkpoint costs no copy and no extra memory.
// Copying is the default because on the virtual machines this project
// builds on, reading weights from mapped file pages was measured 3 to 25
// times slower than from anonymous memory (decoding a 0.6B model: 0.4–6.6
// against 7.5–17 tokens/s), and the gap grew the longer the mapping lived.
//
// Quantized weights (Q8_0, Q4_0, Q4_1, Q5_1, IQ4_NL, Q6_16: compute.QuantBackend) are repacked when
// made into the panels of the kernels' quantized products (see
// cpu/kernels, quant.go): Linear and LinearMulti quantize their
// activations to int8 blocks and multiply with VPDPBUSD where the CPU has
// AVX-512 VNNI; Embedding, Convert and LinearBackwardInput dequantize rows.
//
// Scratch memory of the ops is pooled, so the decode steady state does not
// allocate per layer.
//
// The backward ops of compute.Trainer (train.go, dense_attention.go) are
// built from the same kernels: the input gradient of a linear layer is
// Sgemm of dy with the weight untransposed (a BF16 weight is widened a
// block of rows at a time), its weight gradient Sgemm of dyᵀ with x, and
// training attention works on blocks of query rows with Sgemm for q·kᵀ,
// P·v and their gradients. Their reductions are deterministic (see
// compute.Trainer).
package cpu

import (
	"fmt"
	"sync"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// Backend runs compute ops on the host. The zero value is not usable; call
// New. It implements compute.Trainer. Its ops hold no state between calls
// (only a pool of scratch buffers), so they may be called from several
// goroutines at once on different tensors, as serving and training do;
// each op spreads its own work over its pool's threads (Options.Pool).
type Backend struct {
	opts    Options
	pool    *kernels.Pool // opts.Pool, or kernels.Default()
	scratch sync.Pool     // *[]float32 buffers for attention scores and softmax chunks
}

// Options configure a Backend.
type Options struct {
	// ZeroCopyWeights makes WeightF32 and WeightBF16 use the caller's
	// slices instead of copying them (see the package doc).
	ZeroCopyWeights bool

	// Pool is the worker pool every op spreads its work over (nil:
	// kernels.Default(), whose budget kernels.SetThreads sets). The
	// daemon gives each devices group (serving, judge, trainer) a backend
	// with its own pool; tensors made by one backend may be used by
	// another, so the groups share the weights.
	Pool *kernels.Pool

	// Precision is how the forward products with BF16 weights (Linear,
	// LinearMulti) treat their activations (see kernels.Precision). The
	// zero value keeps them in float32. The backward ops compute in
	// float32 either way.
	Precision kernels.Precision
}

// New returns a CPU backend with default options: its ops run on
// kernels.Default(), whose number of threads kernels.SetThreads sets.
func New() *Backend { return NewWithOptions(Options{}) }

// NewWithOptions returns a CPU backend configured by opts.
func NewWithOptions(opts Options) *Backend {
	pool := opts.Pool
	if pool == nil {
		pool = kernels.Default()
	}
	return &Backend{opts: opts, pool: pool, scratch: sync.Pool{New: func() any { s := make([]float32, 0, 4096); return &s }}}
}

// WithPool returns a backend with b's options whose ops run on p instead:
// a devices group's view of the same weights (tensors of b work with it).
func (b *Backend) WithPool(p *kernels.Pool) *Backend {
	o := b.opts
	o.Pool = p
	return NewWithOptions(o)
}

// Pool is the worker pool b's ops run on.
func (b *Backend) Pool() *kernels.Pool { return b.pool }

// hostCopy copies src into memory from alloc (the kernels allocator advises
// huge pages for big buffers: decode reads weights 20–25% faster with them),
// in parallel chunks.
func hostCopy[T any](src []T, alloc func(int) []T) []T {
	dst := alloc(len(src))
	parallelCopy(dst, src)
	return dst
}

var (
	_ compute.Backend      = (*Backend)(nil)
	_ compute.QuantBackend = (*Backend)(nil)
	_ compute.BF16Reader   = (*Backend)(nil)
)

// tensor is the CPU tensor: exactly one of the slices (or q, for a
// quantized dtype) is set, matching dt, and its length is the product of
// shape.
type tensor struct {
	dt    compute.DType
	shape []int
	f32   []float32
	u16   []uint16
	i32   []int32
	q     *kernels.QMatrix // quantized: rows shape[0], columns the rest
	kv8   []byte           // a Q8_0 KV cache (NewKVCacheTensor): ggml blocks in element order
}

// live reports whether x still has its storage (it was not freed).
func (x *tensor) live() bool {
	return x.f32 != nil || x.u16 != nil || x.i32 != nil || x.q != nil || x.kv8 != nil
}

// quantType is the kernels' format of a quantized dtype.
func quantType(dt compute.DType) kernels.QuantType {
	switch dt {
	case compute.Q4_0:
		return kernels.QuantQ4_0
	case compute.Q4_1:
		return kernels.QuantQ4_1
	case compute.Q5_1:
		return kernels.QuantQ5_1
	case compute.IQ4_NL:
		return kernels.QuantIQ4NL
	case compute.Q6_16:
		return kernels.QuantQ6_16
	}
	return kernels.QuantQ8_0
}

func (t *tensor) DType() compute.DType { return t.dt }
func (t *tensor) Shape() []int         { return t.shape }

// Float32s returns the host storage of an F32 tensor made by a CPU backend
// (no copy). It lets tests and host-side code read activations directly.
func Float32s(t compute.Tensor) []float32 { return must(t, compute.F32, "Float32s").f32 }

// Name reports the backend, its thread count and, when not float32, the
// precision of its BF16 products.
// SlidingWindow reports that Attention and DenseAttention honour a
// sliding window (compute.SlidingWindow): the Sgemm path masks the keys
// before it.
func (b *Backend) SlidingWindow() bool { return true }

func (b *Backend) Name() string {
	if b.opts.Precision != kernels.PrecisionF32 {
		return fmt.Sprintf("cpu (%d threads, %v products)", b.pool.Threads(), b.opts.Precision)
	}
	return fmt.Sprintf("cpu (%d threads)", b.pool.Threads())
}

func checkShape(shape []int) (int, error) {
	if len(shape) == 0 {
		return 0, fmt.Errorf("cpu: tensor needs at least one dimension")
	}
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("cpu: negative dimension in shape %s", compute.ShapeString(shape))
		}
		if d > 0 && n > (1<<50)/d {
			return 0, fmt.Errorf("cpu: shape %s too large", compute.ShapeString(shape))
		}
		n *= d
	}
	return n, nil
}

// NewTensor allocates a zero-filled tensor on the Go heap.
func (b *Backend) NewTensor(dt compute.DType, shape ...int) (compute.Tensor, error) {
	n, err := checkShape(shape)
	if err != nil {
		return nil, err
	}
	t := &tensor{dt: dt, shape: append([]int(nil), shape...)}
	switch dt {
	case compute.F32:
		t.f32 = kernels.AllocF32(n) // huge pages for big buffers (KV cache)
	case compute.BF16, compute.F16:
		t.u16 = kernels.AllocBF16(n)
	case compute.I32:
		t.i32 = make([]int32, n)
	case compute.Q8_0, compute.Q4_0, compute.Q4_1, compute.Q5_1, compute.IQ4_NL, compute.Q6_16:
		cols := 1
		for _, d := range shape[1:] {
			cols *= d
		}
		if len(shape) < 2 {
			return nil, fmt.Errorf("cpu: a %v tensor needs rows and columns, not shape %s", dt, compute.ShapeString(shape))
		}
		if t.q, err = kernels.NewQMatrix(quantType(dt), shape[0], cols); err != nil {
			return nil, fmt.Errorf("cpu: %v tensor %s: %w", dt, compute.ShapeString(shape), err)
		}
	default:
		return nil, fmt.Errorf("cpu: cannot allocate dtype %v", dt)
	}
	return t, nil
}

// NewKVCacheTensor allocates a zero-filled Q8_0 KV cache tensor [slots,
// width] (compute.QuantKVBackend): ggml's blocks in the order of the
// elements, not the panels of a quantized weight.
func (b *Backend) NewKVCacheTensor(dt compute.DType, slots, width int) (compute.Tensor, error) {
	if dt != compute.Q8_0 {
		return nil, fmt.Errorf("cpu: a quantized KV cache is Q8_0, not %v", dt)
	}
	n, err := checkShape([]int{slots, width})
	if err != nil {
		return nil, err
	}
	if width%compute.QK != 0 || width == 0 {
		return nil, fmt.Errorf("cpu: a Q8_0 KV cache needs rows of a multiple of %d values, not %d", compute.QK, width)
	}
	return &tensor{dt: dt, shape: []int{slots, width}, kv8: kernels.AllocBytes(dt.Bytes(n))}, nil
}

// WeightF32 makes an F32 weight from a copy of data, or from data itself
// with Options.ZeroCopyWeights.
func (b *Backend) WeightF32(data []float32, shape ...int) (compute.Tensor, error) {
	n, err := checkShape(shape)
	if err != nil {
		return nil, err
	}
	if n != len(data) {
		return nil, fmt.Errorf("cpu: weight of shape %s needs %d values, got %d", compute.ShapeString(shape), n, len(data))
	}
	data = data[:n:n]
	if !b.opts.ZeroCopyWeights {
		data = hostCopy(data, kernels.AllocF32)
	}
	return &tensor{dt: compute.F32, shape: append([]int(nil), shape...), f32: data}, nil
}

// WeightBF16 makes a BF16 weight from a copy of data, or from data itself
// with Options.ZeroCopyWeights.
func (b *Backend) WeightBF16(data []uint16, shape ...int) (compute.Tensor, error) {
	n, err := checkShape(shape)
	if err != nil {
		return nil, err
	}
	if n != len(data) {
		return nil, fmt.Errorf("cpu: weight of shape %s needs %d values, got %d", compute.ShapeString(shape), n, len(data))
	}
	data = data[:n:n]
	if !b.opts.ZeroCopyWeights {
		data = hostCopy(data, kernels.AllocBF16)
	}
	return &tensor{dt: compute.BF16, shape: append([]int(nil), shape...), u16: data}, nil
}

// WeightQuant makes a quantized weight from ggml blocks (see package
// compute), repacked into the panels of the quantized kernels: the
// blocks are not referred to afterwards, whatever Options.ZeroCopyWeights
// says.
func (b *Backend) WeightQuant(dt compute.DType, blocks []byte, shape ...int) (compute.Tensor, error) {
	n, err := checkShape(shape)
	if err != nil {
		return nil, err
	}
	if !dt.Quantized() {
		return nil, fmt.Errorf("cpu: WeightQuant of dtype %v, which is not quantized", dt)
	}
	rows := shape[0]
	cols := 1
	for _, d := range shape[1:] {
		cols *= d
	}
	if len(shape) < 2 || cols%compute.QK != 0 || cols == 0 {
		return nil, fmt.Errorf("cpu: a %v weight needs rows of a multiple of %d values, not shape %s", dt, compute.QK, compute.ShapeString(shape))
	}
	if len(blocks) != dt.Bytes(n) {
		return nil, fmt.Errorf("cpu: %v weight of shape %s needs %d bytes of blocks, got %d", dt, compute.ShapeString(shape), dt.Bytes(n), len(blocks))
	}
	q, err := b.pool.PackQuant(quantType(dt), blocks, rows, cols)
	if err != nil {
		return nil, fmt.Errorf("cpu: %v weight of shape %s: %w", dt, compute.ShapeString(shape), err)
	}
	return &tensor{dt: dt, shape: append([]int(nil), shape...), q: q}, nil
}

// Slice returns rows [lo, hi) of t sharing its storage.
func (b *Backend) Slice(t compute.Tensor, lo, hi int) compute.Tensor {
	x := t.(*tensor)
	if lo < 0 || hi < lo || hi > x.shape[0] {
		panic(fmt.Sprintf("cpu: Slice [%d,%d) of %d rows", lo, hi, x.shape[0]))
	}
	c := compute.Cols(x)
	v := &tensor{dt: x.dt, shape: append([]int{hi - lo}, x.shape[1:]...)}
	switch {
	case x.f32 != nil:
		v.f32 = x.f32[lo*c : hi*c : hi*c]
	case x.u16 != nil:
		v.u16 = x.u16[lo*c : hi*c : hi*c]
	case x.i32 != nil:
		v.i32 = x.i32[lo*c : hi*c : hi*c]
	case x.q != nil:
		v.q = x.q.Rows(lo, hi)
	case x.kv8 != nil:
		rb := compute.Q8_0.Bytes(c)
		v.kv8 = x.kv8[lo*rb : hi*rb : hi*rb]
	}
	return v
}

// Free drops the tensor's reference to its storage; the garbage collector
// reclaims it once no view refers to it.
func (b *Backend) Free(t compute.Tensor) {
	if x, ok := t.(*tensor); ok && x != nil {
		x.f32, x.u16, x.i32, x.q, x.kv8 = nil, nil, nil, nil, nil
	}
}

// Write copies src into an F32 tensor.
func (b *Backend) Write(dst compute.Tensor, src []float32) {
	d := must(dst, compute.F32, "Write")
	if len(src) != len(d.f32) {
		panic(fmt.Sprintf("cpu: Write of %d values into %d", len(src), len(d.f32)))
	}
	copy(d.f32, src)
}

// WriteInt32 copies src into an I32 tensor.
func (b *Backend) WriteInt32(dst compute.Tensor, src []int32) {
	d := must(dst, compute.I32, "WriteInt32")
	if len(src) != len(d.i32) {
		panic(fmt.Sprintf("cpu: WriteInt32 of %d values into %d", len(src), len(d.i32)))
	}
	copy(d.i32, src)
}

// Read copies an F32 tensor to dst (on every core when it is large: a
// version's matrices are gigabytes).
func (b *Backend) Read(dst []float32, src compute.Tensor) error {
	s := must(src, compute.F32, "Read")
	if len(dst) != len(s.f32) {
		return fmt.Errorf("cpu: Read of %d values into %d", len(s.f32), len(dst))
	}
	parallelCopy(dst, s.f32)
	return nil
}

// ReadBF16 copies a BF16 tensor's bits to dst (compute.BF16Reader).
func (b *Backend) ReadBF16(dst []uint16, src compute.Tensor) error {
	s := must(src, compute.BF16, "ReadBF16")
	if len(dst) != len(s.u16) {
		return fmt.Errorf("cpu: ReadBF16 of %d values into %d", len(s.u16), len(dst))
	}
	parallelCopy(dst, s.u16)
	return nil
}

// parallelCopy copies src to dst, in chunks over the cores when src is
// large.
func parallelCopy[T any](dst, src []T) {
	const chunk = 1 << 20
	if len(src) <= chunk {
		copy(dst, src)
		return
	}
	kernels.ParallelFor((len(src)+chunk-1)/chunk, 1, func(lo, hi int) {
		copy(dst[lo*chunk:min(hi*chunk, len(src))], src[lo*chunk:min(hi*chunk, len(src))])
	})
}

// Copy copies src into dst.
func (b *Backend) Copy(dst, src compute.Tensor) {
	d, s := dst.(*tensor), src.(*tensor)
	if d.dt != s.dt || compute.Len(d) != compute.Len(s) {
		panic(fmt.Sprintf("cpu: Copy of %v %s into %v %s", s.dt, compute.ShapeString(s.shape), d.dt, compute.ShapeString(d.shape)))
	}
	if s.q != nil {
		d.q.CopyFrom(s.q)
		return
	}
	copy(d.f32, s.f32)
	copy(d.u16, s.u16)
	copy(d.i32, s.i32)
	copy(d.kv8, s.kv8)
}

// Synchronize returns nil: CPU ops complete before they return.
func (b *Backend) Synchronize() error { return nil }

// must returns t as a CPU tensor of dtype dt, panicking with the op's name
// otherwise.
func must(t compute.Tensor, dt compute.DType, op string) *tensor {
	x, ok := t.(*tensor)
	if !ok || x == nil {
		panic(fmt.Sprintf("cpu: %s: tensor %T was not made by the cpu backend", op, t))
	}
	if x.dt != dt {
		panic(fmt.Sprintf("cpu: %s: dtype %v, want %v", op, x.dt, dt))
	}
	if !x.live() && compute.Len(x) > 0 {
		panic(fmt.Sprintf("cpu: %s: tensor used after Free", op))
	}
	return x
}

// mustArg is must for the operand arg of op, naming it "op arg" in the
// panic; unlike must(t, dt, op+" "+arg) it builds no string when all is
// well (ops called hundreds of times per decode step should not allocate).
func mustArg(t compute.Tensor, dt compute.DType, op, arg string) *tensor {
	if x, ok := t.(*tensor); ok && x != nil && x.dt == dt && x.live() {
		return x
	}
	return must(t, dt, op+" "+arg)
}

// weight returns a weight tensor of dtype F32, BF16 or quantized.
func weight(t compute.Tensor, op string) *tensor {
	x, ok := t.(*tensor)
	if !ok || x == nil {
		panic(fmt.Sprintf("cpu: %s: tensor %T was not made by the cpu backend", op, t))
	}
	if x.dt != compute.F32 && x.dt != compute.BF16 && !x.dt.Quantized() {
		panic(fmt.Sprintf("cpu: %s: weight dtype %v, want F32, BF16, Q8_0, Q4_0, Q4_1, Q5_1, IQ4_NL or Q6_16", op, x.dt))
	}
	if !x.live() && compute.Len(x) > 0 {
		panic(fmt.Sprintf("cpu: %s: tensor used after Free", op))
	}
	return x
}

// getScratch returns a pooled float32 buffer of length n; put it back with
// putScratch.
func (b *Backend) getScratch(n int) *[]float32 {
	p := b.scratch.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n, n+n/4)
	}
	*p = (*p)[:n]
	return p
}

func (b *Backend) putScratch(p *[]float32) { b.scratch.Put(p) }
