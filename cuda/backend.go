package cuda

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/clawrl/clawrl/compute"
)

// Backend is the compute.Backend of one GPU. Tensors are device
// allocations (a Slice is a view into its parent's); Write and WriteInt32
// copy host data in before they return; ops check shapes on the host
// (panicking like the CPU backend on a mismatch) and queue their kernels on
// the device's stream without waiting; Read and Synchronize wait and report
// the errors of the queued work.
//
// Errors that only the device sees: besides the driver's errors (a failed
// launch, a fault), kernels that index with values read from device memory
// (token ids, positions, cache slots, block tables) check them and record a
// bad one in an error word on the device; Read and Synchronize report it,
// naming the op, and clear it.
//
// Precision: products with BF16 weights and attention over a BF16 cache
// round their activation operand (x, q) to BF16 and add exact products in
// float32 (computetest.Options.BF16Products); F32 weights and caches
// compute in float32. exp and log use the GPU's approximate base-2
// instructions (a few ulp).
//
// A Backend is safe for concurrent use: ops from several goroutines run in
// the order they reach the device's worker. The model serialises its
// forward passes, so that order is the program's.
type Backend struct {
	dev  *Device
	name string

	errWord Ptr // int32 error bits written by kernels

	mu      sync.Mutex
	scratch Ptr // attention partial results
	scrLen  int // bytes

	// Tuning knobs, variables so that tests can reach every path.
	gemvMaxM    int // Linear uses the GEMV kernels up to this many rows (at most 8)
	gemmTile    int // 0: choose; 64 or 128: always the tensor-core kernel of that tile
	attnPath    int // 0: choose; attnDecode or attnPrefill: always that kernel
	minSplitLen int // fewest keys a split of a decode step covers
}

// Attention kernels Backend.attnPath can force.
const (
	attnDecode  = 1
	attnPrefill = 2
)

var _ compute.Backend = (*Backend)(nil)

// Open returns a backend on GPU index (an ordinal of Devices). Without a
// driver its error wraps ErrNoDriver.
func Open(index int) (*Backend, error) {
	d, err := OpenDevice(index)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		dev:         d,
		name:        fmt.Sprintf("cuda:%d (%s)", index, d.Info().Name),
		gemvMaxM:    8,
		minSplitLen: 256,
	}
	if b.errWord, err = d.Alloc(16); err == nil {
		err = d.Memset32(b.errWord, 0, 1)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("cuda: %w", err)
	}
	return b, nil
}

// Device is the GPU the backend runs on.
func (b *Backend) Device() *Device { return b.dev }

// Close waits for queued work and releases the backend's own memory and
// the device. Tensors must not be used afterwards.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.scratch != 0 {
		b.dev.Free(b.scratch)
		b.scratch = 0
	}
	b.mu.Unlock()
	b.dev.Free(b.errWord)
	return b.dev.Close()
}

// Name is "cuda:N (device name)".
func (b *Backend) Name() string { return b.name }

// tensor is a CUDA tensor: dtype, shape, and the device address of its
// first element. A tensor made by NewTensor or Weight* owns its
// allocation; a Slice shares its parent's.
type tensor struct {
	dt    compute.DType
	shape []int
	n     int // elements
	ptr   Ptr
	owner bool
	freed *bool // shared by a tensor and its views
}

func (t *tensor) DType() compute.DType { return t.dt }
func (t *tensor) Shape() []int         { return t.shape }

// bytes is the size of t's elements.
func (t *tensor) bytes() int { return t.n * t.dt.Size() }

func elems(shape []int) (int, error) {
	if len(shape) == 0 {
		return 0, fmt.Errorf("cuda: tensor needs at least one dimension")
	}
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("cuda: negative dimension in shape %s", compute.ShapeString(shape))
		}
		if d > 0 && n > (1<<40)/d {
			return 0, fmt.Errorf("cuda: shape %s too large", compute.ShapeString(shape))
		}
		n *= d
	}
	return n, nil
}

// alloc makes a tensor with storage of its own (uninitialised). Every
// allocation has at least 16 bytes, so an empty tensor has an address too.
func (b *Backend) alloc(dt compute.DType, shape []int) (*tensor, error) {
	if dt.Size() == 0 {
		return nil, fmt.Errorf("cuda: cannot allocate dtype %v", dt)
	}
	n, err := elems(shape)
	if err != nil {
		return nil, err
	}
	size := (max(n*dt.Size(), 16) + 15) &^ 15
	p, err := b.dev.Alloc(size)
	if err != nil {
		return nil, fmt.Errorf("cuda: tensor %v %s: %w", dt, compute.ShapeString(shape), err)
	}
	return &tensor{dt: dt, shape: append([]int(nil), shape...), n: n, ptr: p, owner: true, freed: new(bool)}, nil
}

// NewTensor allocates a zero-filled tensor.
func (b *Backend) NewTensor(dt compute.DType, shape ...int) (compute.Tensor, error) {
	t, err := b.alloc(dt, shape)
	if err != nil {
		return nil, err
	}
	if err := b.dev.Memset32(t.ptr, 0, (t.bytes()+3)/4); err != nil {
		b.dev.Free(t.ptr)
		return nil, fmt.Errorf("cuda: zeroing tensor %v %s: %w", dt, compute.ShapeString(shape), err)
	}
	return t, nil
}

// WeightF32 copies data to a new device tensor.
func (b *Backend) WeightF32(data []float32, shape ...int) (compute.Tensor, error) {
	return weight(b, compute.F32, data, shape)
}

// WeightBF16 copies BF16 bits to a new device tensor.
func (b *Backend) WeightBF16(data []uint16, shape ...int) (compute.Tensor, error) {
	return weight(b, compute.BF16, data, shape)
}

func weight[T any](b *Backend, dt compute.DType, data []T, shape []int) (compute.Tensor, error) {
	n, err := elems(shape)
	if err != nil {
		return nil, err
	}
	if n != len(data) {
		return nil, fmt.Errorf("cuda: weight of shape %s needs %d values, got %d", compute.ShapeString(shape), n, len(data))
	}
	t, err := b.alloc(dt, shape)
	if err != nil {
		return nil, err
	}
	if err := Upload(b.dev, t.ptr, data); err != nil {
		b.dev.Free(t.ptr)
		return nil, fmt.Errorf("cuda: uploading weight %s: %w", compute.ShapeString(shape), err)
	}
	return t, nil
}

// Slice returns rows [lo, hi) of t as a view of its storage.
func (b *Backend) Slice(t compute.Tensor, lo, hi int) compute.Tensor {
	x := b.must(t, 0, "Slice")
	if lo < 0 || hi < lo || hi > x.shape[0] {
		panic(fmt.Sprintf("cuda: Slice [%d,%d) of %d rows", lo, hi, x.shape[0]))
	}
	c := compute.Cols(x)
	return &tensor{
		dt: x.dt, shape: append([]int{hi - lo}, x.shape[1:]...), n: (hi - lo) * c,
		ptr: x.ptr + Ptr(lo*c*x.dt.Size()), freed: x.freed,
	}
}

// Free releases t's device memory once the queued work is done; freeing a
// view does nothing (its parent owns the memory).
func (b *Backend) Free(t compute.Tensor) {
	x, ok := t.(*tensor)
	if !ok || x == nil || !x.owner || *x.freed {
		return
	}
	*x.freed = true
	b.dev.Free(x.ptr)
}

// Write copies src into an F32 tensor.
func (b *Backend) Write(dst compute.Tensor, src []float32) {
	d := b.must(dst, compute.F32, "Write")
	if len(src) != d.n {
		panic(fmt.Sprintf("cuda: Write of %d values into %d", len(src), d.n))
	}
	b.upload(d, unsafe.Pointer(unsafe.SliceData(src)), 4*len(src), "Write")
}

// WriteInt32 copies src into an I32 tensor.
func (b *Backend) WriteInt32(dst compute.Tensor, src []int32) {
	d := b.must(dst, compute.I32, "WriteInt32")
	if len(src) != d.n {
		panic(fmt.Sprintf("cuda: WriteInt32 of %d values into %d", len(src), d.n))
	}
	b.upload(d, unsafe.Pointer(unsafe.SliceData(src)), 4*len(src), "WriteInt32")
}

// upload copies n bytes at src into d before it returns; a failure is kept
// for the next Synchronize (the ops have no error result).
func (b *Backend) upload(d *tensor, src unsafe.Pointer, n int, op string) {
	if n == 0 {
		return
	}
	err := b.dev.w.do(func() error {
		if err := b.dev.upload(d.ptr, src, n); err != nil && b.dev.sticky == nil {
			b.dev.sticky = fmt.Errorf("%s: %w", op, err)
		}
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
}

// Read copies an F32 tensor to dst once the queued work is done.
func (b *Backend) Read(dst []float32, src compute.Tensor) error {
	s := b.must(src, compute.F32, "Read")
	if len(dst) != s.n {
		return fmt.Errorf("cuda: Read of %d values into %d", s.n, len(dst))
	}
	err := b.dev.w.do(func() error {
		if len(dst) == 0 {
			return b.finish(nil)
		}
		return b.finish(b.dev.download(unsafe.Pointer(&dst[0]), s.ptr, 4*len(dst)))
	})
	if err != nil {
		return fmt.Errorf("cuda: Read: %w", err)
	}
	return nil
}

// Synchronize waits for the queued work and reports its errors.
func (b *Backend) Synchronize() error {
	err := b.dev.w.do(func() error {
		drv := b.dev.drv
		return b.finish(b.dev.takeSticky(drv.check("cuStreamSynchronize", drv.call(drv.cuStreamSynchronize, b.dev.stream))))
	})
	if err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	return nil
}

// errorBits name the bits of the kernels' error word (common.cuh).
var errorBits = []struct {
	bit  int32
	what string
}{
	{1, "Embedding: an id outside the table"},
	{2, "RoPE: a position outside the rotary tables"},
	{4, "StoreKV: a slot outside the cache"},
	{8, "Gather: an index outside the row"},
	{16, "Attention: block table or lengths outside the cache"},
}

// finish runs on the worker after the stream is synchronized: it returns
// err, or else the kernels' error word as an error (and clears it).
func (b *Backend) finish(err error) error {
	if err != nil {
		return err
	}
	var w int32
	drv := b.dev.drv
	if err := drv.check("cuMemcpyDtoH_v2", drv.call(drv.cuMemcpyDtoH, uintptr(unsafe.Pointer(&w)), uintptr(b.errWord), 4)); err != nil {
		return err
	}
	if w == 0 {
		return nil
	}
	var msgs []string
	for _, e := range errorBits {
		if w&e.bit != 0 {
			msgs = append(msgs, e.what)
		}
	}
	if err := b.dev.memset32(b.errWord, 0, 1); err != nil {
		return err
	}
	return fmt.Errorf("invalid device data: %s", strings.Join(msgs, "; "))
}

// Copy copies src into dst (same dtype and number of elements).
func (b *Backend) Copy(dst, src compute.Tensor) {
	d, s := b.must(dst, 0, "Copy dst"), b.must(src, 0, "Copy src")
	if d.dt != s.dt || d.n != s.n {
		panic(fmt.Sprintf("cuda: Copy of %v %s into %v %s", s.dt, compute.ShapeString(s.shape), d.dt, compute.ShapeString(d.shape)))
	}
	if d.n == 0 || d.ptr == s.ptr {
		return
	}
	n := d.bytes()
	b.queue("Copy", func() error { return b.dev.copyDevice(d.ptr, s.ptr, n) })
}

// must returns t as a live tensor of this package, of dtype dt (any dtype
// for 0), panicking with the op's name otherwise.
func (b *Backend) must(t compute.Tensor, dt compute.DType, op string) *tensor {
	x, ok := t.(*tensor)
	if !ok || x == nil {
		panic(fmt.Sprintf("cuda: %s: tensor %T was not made by the cuda backend", op, t))
	}
	if dt != 0 && x.dt != dt {
		panic(fmt.Sprintf("cuda: %s: dtype %v, want %v", op, x.dt, dt))
	}
	if *x.freed {
		panic(fmt.Sprintf("cuda: %s: tensor used after Free", op))
	}
	return x
}

// weightOf returns an F32 or BF16 tensor.
func (b *Backend) weightOf(t compute.Tensor, op string) *tensor {
	x := b.must(t, 0, op)
	if x.dt != compute.F32 && x.dt != compute.BF16 {
		panic(fmt.Sprintf("cuda: %s: dtype %v, want F32 or BF16", op, x.dt))
	}
	return x
}

// queue queues device work of an op; its error surfaces at the next
// Synchronize or Read. A closed device is a programming error.
func (b *Backend) queue(op string, f func() error) {
	err := b.dev.enqueue(func() error {
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
}

// launch queues a kernel launch.
func (b *Backend) launch(op, kernel string, grid, block Dim3, shared int, args ...any) {
	vals, err := packArgs(args)
	if err != nil {
		panic(fmt.Sprintf("cuda: %s: kernel %s: %v", op, kernel, err))
	}
	b.queue(op, func() error { return b.dev.launch(kernel, grid, block, shared, vals) })
}

// rowGrid is a grid of n blocks (n ≥ 1) that fits the limit of 2³¹−1 in x
// and 65535 in y; kernels take their index as blockIdx.x +
// gridDim.x·blockIdx.y and return past n.
func rowGrid(n int) Dim3 {
	n = max(n, 1)
	if n <= 1<<16 {
		return Dim3{n, 1, 1}
	}
	x := 1 << 16
	return Dim3{x, (n + x - 1) / x, 1}
}

// elemGrid is a grid for a grid-stride loop over n elements with blocks of
// threads.
func elemGrid(n, threads int) Dim3 {
	return Dim3{min(max((n+threads-1)/threads, 1), 1<<16), 1, 1}
}

// scratchFor returns device scratch of at least n bytes, kept between
// calls. The caller holds no other reference to older scratch: it is freed
// (after the queued work) when it grows.
func (b *Backend) scratchFor(n int) (Ptr, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n <= b.scrLen {
		return b.scratch, nil
	}
	if b.scratch != 0 {
		b.dev.Free(b.scratch)
		b.scratch, b.scrLen = 0, 0
	}
	n = max(n, 1<<20)
	p, err := b.dev.Alloc(n)
	if err != nil {
		return 0, err
	}
	b.scratch, b.scrLen = p, n
	return p, nil
}
