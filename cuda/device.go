package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/clawrl/clawrl/cuda/kernels"
)

// DeviceInfo describes one GPU.
type DeviceInfo struct {
	Index        int    // the ordinal, as in devices.*.gpus of config.yaml
	Name         string // e.g. "NVIDIA H100 80GB HBM3"
	Memory       uint64 // bytes of device memory
	SMs          int    // streaming multiprocessors
	Major, Minor int    // compute capability
	SharedOptin  int    // bytes of shared memory a block may use once a kernel opts in
}

// Device attributes read by DeviceInfo (CUdevice_attribute).
const (
	attrSMs         = 16
	attrMajor       = 75
	attrMinor       = 76
	attrSharedOptin = 97
)

// Devices lists the GPUs the driver sees. Without a driver its error wraps
// ErrNoDriver.
func Devices() ([]DeviceInfo, error) {
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	var n int32
	if err := d.check("cuDeviceGetCount", d.call(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	infos := make([]DeviceInfo, n)
	for i := range infos {
		if infos[i], err = d.deviceInfo(i); err != nil {
			return nil, err
		}
	}
	return infos, nil
}

// DriverVersion returns the CUDA version the driver supports, as
// 1000·major + 10·minor (12080 for CUDA 12.8).
func DriverVersion() (int, error) {
	d, err := loadDriver()
	if err != nil {
		return 0, err
	}
	var v int32
	if err := d.check("cuDriverGetVersion", d.call(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return 0, fmt.Errorf("cuda: %w", err)
	}
	return int(v), nil
}

func (d *driver) deviceInfo(i int) (DeviceInfo, error) {
	var dev int32
	if err := d.check("cuDeviceGet", d.call(d.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(i))); err != nil {
		return DeviceInfo{}, fmt.Errorf("cuda: device %d: %w", i, err)
	}
	info := DeviceInfo{Index: i}
	var name [256]byte
	if err := d.check("cuDeviceGetName", d.call(d.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(dev))); err != nil {
		return info, fmt.Errorf("cuda: device %d: %w", i, err)
	}
	info.Name = goString(&name[0])
	if err := d.check("cuDeviceTotalMem_v2", d.call(d.cuDeviceTotalMem, uintptr(unsafe.Pointer(&info.Memory)), uintptr(dev))); err != nil {
		return info, fmt.Errorf("cuda: device %d: %w", i, err)
	}
	for _, a := range []struct {
		attr int
		dst  *int
	}{{attrSMs, &info.SMs}, {attrMajor, &info.Major}, {attrMinor, &info.Minor}, {attrSharedOptin, &info.SharedOptin}} {
		var v int32
		if err := d.check("cuDeviceGetAttribute", d.call(d.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a.attr), uintptr(dev))); err != nil {
			return info, fmt.Errorf("cuda: device %d: attribute %d: %w", i, a.attr, err)
		}
		*a.dst = int(v)
	}
	return info, nil
}

// Ptr is a device address (CUdeviceptr).
type Ptr uint64

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z int }

// Device is one GPU with its primary context and a stream.
//
// The driver binds a context to an OS thread, so every driver call of a
// Device runs on one goroutine of its own, locked to its OS thread with the
// context current: the worker. Methods send it requests over a bounded
// channel; those that return results wait for them, and the work of the
// backend's ops is queued without waiting (errors are kept and reported by
// the next Synchronize). A Device is safe for concurrent use. Close stops
// the worker; the Device owns it.
type Device struct {
	drv  *driver
	info DeviceInfo
	w    *worker

	// Owned by the worker goroutine.
	ctx, stream uintptr
	mods        []uintptr          // loaded modules, in kernels.Modules() order
	entry       map[string]int     // kernel name → index in mods
	funcs       map[string]*kernel // looked-up kernels
	params      [maxParams]uint64  // the values of a launch's parameters
	paramPtrs   [maxParams]unsafe.Pointer
	sticky      error          // the first error of queued work since the last Synchronize
	launches    map[string]int // successful launches per kernel (for tests and diagnostics)
}

// kernel is a function of a loaded module.
type kernel struct {
	h      uintptr
	maxDyn int // dynamic shared memory the kernel is allowed (cuFuncSetAttribute)
}

const (
	maxParams     = 32
	defaultShared = 48 << 10 // dynamic shared memory without opting in
)

// OpenDevice retains device i's primary context, creates a stream and
// loads the embedded kernels.
func OpenDevice(i int) (*Device, error) {
	drv, err := loadDriver()
	if err != nil {
		return nil, err
	}
	info, err := drv.deviceInfo(i)
	if err != nil {
		return nil, err
	}
	d := &Device{drv: drv, info: info, entry: map[string]int{}, funcs: map[string]*kernel{}, launches: map[string]int{}}
	for j := range d.paramPtrs {
		d.paramPtrs[j] = unsafe.Pointer(&d.params[j])
	}
	d.w = newWorker()
	if err := d.w.do(d.open); err != nil {
		d.w.close()
		return nil, fmt.Errorf("cuda: device %d (%s): %w", i, info.Name, err)
	}
	return d, nil
}

// open runs on the worker: context, stream, modules.
func (d *Device) open() error {
	drv := d.drv
	var dev int32
	if err := drv.check("cuDeviceGet", drv.call(drv.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(d.info.Index))); err != nil {
		return err
	}
	if err := drv.check("cuDevicePrimaryCtxRetain", drv.call(drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&d.ctx)), uintptr(dev))); err != nil {
		return err
	}
	if err := drv.check("cuCtxSetCurrent", drv.call(drv.cuCtxSetCurrent, d.ctx)); err != nil {
		d.release()
		return err
	}
	if err := drv.check("cuStreamCreate", drv.call(drv.cuStreamCreate, uintptr(unsafe.Pointer(&d.stream)), 1)); err != nil { // CU_STREAM_NON_BLOCKING
		d.release()
		return err
	}
	for _, m := range kernels.Modules() {
		if err := d.loadModule(m.Name, m.PTX, m.Entries); err != nil {
			d.release()
			return err
		}
	}
	return nil
}

// loadModule loads PTX (NUL-terminated) on the worker.
func (d *Device) loadModule(name string, image []byte, entries []string) error {
	var h uintptr
	if err := d.drv.check("cuModuleLoadData", d.drv.call(d.drv.cuModuleLoadData, uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&image[0])))); err != nil {
		return fmt.Errorf("loading kernels %s: %w", name, err)
	}
	d.mods = append(d.mods, h)
	for _, e := range entries {
		d.entry[e] = len(d.mods) - 1
	}
	return nil
}

// release undoes open, on the worker.
func (d *Device) release() {
	drv := d.drv
	for _, m := range d.mods {
		drv.call(drv.cuModuleUnload, m)
	}
	d.mods = nil
	if d.stream != 0 {
		drv.call(drv.cuStreamDestroy, d.stream)
		d.stream = 0
	}
	if d.ctx != 0 {
		drv.call(drv.cuCtxSetCurrent, 0)
		var dev int32
		drv.call(drv.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(d.info.Index))
		drv.call(drv.cuDevicePrimaryCtxRelease, uintptr(dev))
		d.ctx = 0
	}
}

// Info describes the device.
func (d *Device) Info() DeviceInfo { return d.info }

// Close waits for queued work, releases the stream, the modules and the
// context, and stops the worker. Memory not freed is released with the
// context only when no other user holds it.
func (d *Device) Close() error {
	err := d.w.do(func() error {
		err := d.drv.check("cuStreamSynchronize", d.drv.call(d.drv.cuStreamSynchronize, d.stream))
		d.release()
		return err
	})
	d.w.close()
	if errors.Is(err, errClosed) {
		return nil
	}
	return err
}

// Alloc allocates n bytes of device memory (uninitialised).
func (d *Device) Alloc(n int) (Ptr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("cuda: Alloc of %d bytes", n)
	}
	var p Ptr
	err := d.w.do(func() error {
		return d.drv.check("cuMemAlloc_v2", d.drv.call(d.drv.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)))
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: allocating %d bytes on device %d: %w", n, d.info.Index, err)
	}
	return p, nil
}

// Free releases memory from Alloc once the queued work (which may use it)
// is done.
func (d *Device) Free(p Ptr) error {
	return d.w.do(func() error { return d.free(p) })
}

// free runs on the worker. An error of the queued work it waits for is
// kept for the next Synchronize.
func (d *Device) free(p Ptr) error {
	if err := d.drv.check("cuStreamSynchronize", d.drv.call(d.drv.cuStreamSynchronize, d.stream)); err != nil && d.sticky == nil {
		d.sticky = err
	}
	return d.drv.check("cuMemFree_v2", d.drv.call(d.drv.cuMemFree, uintptr(p)))
}

// MemInfo returns the free and total bytes of device memory.
func (d *Device) MemInfo() (free, total uint64, err error) {
	err = d.w.do(func() error {
		return d.drv.check("cuMemGetInfo_v2", d.drv.call(d.drv.cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))))
	})
	return free, total, err
}

// Upload copies src into device memory at dst, in stream order. src may be
// reused when it returns.
func Upload[T any](d *Device, dst Ptr, src []T) error {
	if len(src) == 0 {
		return nil
	}
	n := len(src) * int(unsafe.Sizeof(src[0]))
	return d.w.do(func() error { return d.upload(dst, unsafe.Pointer(&src[0]), n) })
}

// upload runs on the worker. From pageable host memory the driver has
// copied src (to a staging buffer) when the call returns.
func (d *Device) upload(dst Ptr, src unsafe.Pointer, n int) error {
	return d.drv.check("cuMemcpyHtoDAsync_v2", d.drv.call(d.drv.cuMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), d.stream))
}

// Download waits for the queued work and copies device memory at src into
// dst. It reports the first error of queued work, as Synchronize does.
func Download[T any](d *Device, dst []T, src Ptr) error {
	if len(dst) == 0 {
		return d.Synchronize()
	}
	n := len(dst) * int(unsafe.Sizeof(dst[0]))
	return d.w.do(func() error { return d.download(unsafe.Pointer(&dst[0]), src, n) })
}

// download runs on the worker.
func (d *Device) download(dst unsafe.Pointer, src Ptr, n int) error {
	drv := d.drv
	if err := drv.check("cuMemcpyDtoHAsync_v2", drv.call(drv.cuMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), d.stream)); err != nil {
		return d.takeSticky(err)
	}
	return d.takeSticky(drv.check("cuStreamSynchronize", drv.call(drv.cuStreamSynchronize, d.stream)))
}

// takeSticky returns the first error of queued work, or else err, and
// clears it. On the worker.
func (d *Device) takeSticky(err error) error {
	if d.sticky != nil {
		err = d.sticky
		d.sticky = nil
	}
	return err
}

// CopyDevice copies n bytes between device addresses, in stream order.
func (d *Device) CopyDevice(dst, src Ptr, n int) error {
	return d.w.do(func() error { return d.copyDevice(dst, src, n) })
}

func (d *Device) copyDevice(dst, src Ptr, n int) error {
	return d.drv.check("cuMemcpyDtoDAsync_v2", d.drv.call(d.drv.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), d.stream))
}

// Memset32 sets n 32-bit words at dst to v, in stream order.
func (d *Device) Memset32(dst Ptr, v uint32, n int) error {
	return d.w.do(func() error { return d.memset32(dst, v, n) })
}

func (d *Device) memset32(dst Ptr, v uint32, n int) error {
	return d.drv.check("cuMemsetD32Async", d.drv.call(d.drv.cuMemsetD32Async, uintptr(dst), uintptr(v), uintptr(n), d.stream))
}

// EnablePeer lets this device's kernels and copies reach peer's memory
// (enabling it twice is not an error).
func (d *Device) EnablePeer(peer *Device) error {
	return d.w.do(func() error {
		err := d.drv.check("cuCtxEnablePeerAccess", d.drv.call(d.drv.cuCtxEnablePeerAccess, peer.ctx, 0))
		if isCode(err, errPeerAlreadyActive) {
			return nil
		}
		return err
	})
}

// CopyFromPeer copies n bytes from src on device peer to dst on d, in d's
// stream order. Work queued on peer that writes src must be done
// (peer.Synchronize) first.
func (d *Device) CopyFromPeer(dst Ptr, peer *Device, src Ptr, n int) error {
	return d.w.do(func() error {
		return d.drv.check("cuMemcpyPeerAsync", d.drv.call(d.drv.cuMemcpyPeerAsync, uintptr(dst), d.ctx, uintptr(src), peer.ctx, uintptr(n), d.stream))
	})
}

// Synchronize waits until the queued work is done and returns the first
// error raised by it since the last call (a failed launch, a fault).
func (d *Device) Synchronize() error {
	return d.w.do(func() error {
		return d.takeSticky(d.drv.check("cuStreamSynchronize", d.drv.call(d.drv.cuStreamSynchronize, d.stream)))
	})
}

// Launch launches kernel name on the stream and returns the launch's
// error (a fault while it runs shows at the next Synchronize). Arguments
// match the kernel's parameters in order: Ptr (or uint64) for a pointer,
// int32 or int for an int, uint32, float32.
func (d *Device) Launch(name string, grid, block Dim3, shared int, args ...any) error {
	vals, err := packArgs(args)
	if err != nil {
		return fmt.Errorf("cuda: launching %s: %w", name, err)
	}
	return d.w.do(func() error { return d.launch(name, grid, block, shared, vals) })
}

// packArgs turns kernel arguments into parameter values (the low bytes of
// each word are the C value).
func packArgs(args []any) ([]uint64, error) {
	if len(args) > maxParams {
		return nil, fmt.Errorf("%d parameters (at most %d)", len(args), maxParams)
	}
	vals := make([]uint64, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case Ptr:
			vals[i] = uint64(v)
		case uint64:
			vals[i] = v
		case int:
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf("parameter %d: %d does not fit an int", i, v)
			}
			vals[i] = uint64(uint32(int32(v)))
		case int32:
			vals[i] = uint64(uint32(v))
		case uint32:
			vals[i] = uint64(v)
		case float32:
			vals[i] = uint64(math.Float32bits(v))
		default:
			return nil, fmt.Errorf("parameter %d: unsupported type %T", i, a)
		}
	}
	return vals, nil
}

// function returns kernel name, looked up once. On the worker.
func (d *Device) function(name string) (*kernel, error) {
	if k := d.funcs[name]; k != nil {
		return k, nil
	}
	mods := d.mods
	if i, ok := d.entry[name]; ok {
		mods = d.mods[i : i+1]
	}
	var err error
	for _, m := range mods {
		var h uintptr
		err = d.drv.check("cuModuleGetFunction", d.drv.call(d.drv.cuModuleGetFunction, uintptr(unsafe.Pointer(&h)), m, uintptr(unsafe.Pointer(cString(name)))))
		if err == nil {
			k := &kernel{h: h, maxDyn: defaultShared}
			d.funcs[name] = k
			return k, nil
		}
	}
	if err == nil {
		err = errors.New("no kernels loaded")
	}
	return nil, fmt.Errorf("kernel %s: %w", name, err)
}

// cString returns s as a NUL-terminated byte slice's first byte.
func cString(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}

// launch runs on the worker.
func (d *Device) launch(name string, grid, block Dim3, shared int, vals []uint64) error {
	k, err := d.function(name)
	if err != nil {
		return err
	}
	if shared > k.maxDyn {
		if err := d.drv.check("cuFuncSetAttribute", d.drv.call(d.drv.cuFuncSetAttribute, k.h, 8, uintptr(shared))); err != nil { // MAX_DYNAMIC_SHARED_SIZE_BYTES
			return fmt.Errorf("kernel %s: %d bytes of shared memory: %w", name, shared, err)
		}
		k.maxDyn = shared
	}
	copy(d.params[:], vals)
	gx, gy, gz := max(grid.X, 1), max(grid.Y, 1), max(grid.Z, 1)
	bx, by, bz := max(block.X, 1), max(block.Y, 1), max(block.Z, 1)
	r := d.drv.call(d.drv.cuLaunchKernel, k.h, uintptr(gx), uintptr(gy), uintptr(gz), uintptr(bx), uintptr(by), uintptr(bz),
		uintptr(shared), d.stream, uintptr(unsafe.Pointer(&d.paramPtrs[0])), 0)
	if err := d.drv.check("cuLaunchKernel", r); err != nil {
		return fmt.Errorf("kernel %s (grid %v, block %v, %d bytes shared): %w", name, grid, block, shared, err)
	}
	d.launches[name]++
	return nil
}

// Launches returns how many times each kernel has been launched.
func (d *Device) Launches() map[string]int {
	m := map[string]int{}
	d.w.do(func() error {
		for k, v := range d.launches {
			m[k] = v
		}
		return nil
	})
	return m
}

// enqueue queues f on the worker without waiting; its error is kept for
// the next Synchronize (or Download). It reports only a closed device.
func (d *Device) enqueue(f func() error) error {
	return d.w.post(func() {
		if err := f(); err != nil && d.sticky == nil {
			d.sticky = err
		}
	})
}

// TimeQueued times the device work that f queues, with events on the
// stream, and waits for it.
func (d *Device) TimeQueued(f func() error) (time.Duration, error) {
	drv := d.drv
	var start, end uintptr
	err := d.w.do(func() error {
		if err := drv.check("cuEventCreate", drv.call(drv.cuEventCreate, uintptr(unsafe.Pointer(&start)), 0)); err != nil {
			return err
		}
		if err := drv.check("cuEventCreate", drv.call(drv.cuEventCreate, uintptr(unsafe.Pointer(&end)), 0)); err != nil {
			return err
		}
		return drv.check("cuEventRecord", drv.call(drv.cuEventRecord, start, d.stream))
	})
	defer d.w.do(func() error {
		for _, e := range []uintptr{start, end} {
			if e != 0 {
				drv.call(drv.cuEventDestroy, e)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := f(); err != nil {
		return 0, err
	}
	var ms float32
	err = d.w.do(func() error {
		if err := drv.check("cuEventRecord", drv.call(drv.cuEventRecord, end, d.stream)); err != nil {
			return err
		}
		if err := drv.check("cuEventSynchronize", drv.call(drv.cuEventSynchronize, end)); err != nil {
			return err
		}
		if err := d.takeSticky(nil); err != nil {
			return err
		}
		return drv.check("cuEventElapsedTime", drv.call(drv.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), start, end))
	})
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}

// ------------------------------------------------------------------ worker

var errClosed = errors.New("cuda: device is closed")

// worker is a goroutine locked to an OS thread that runs requests in
// order. Its owner stops it with close.
type worker struct {
	mu     sync.RWMutex // read-held while sending, so that close does not race a send
	closed bool
	reqs   chan func()
	done   chan struct{}
}

// workerQueue bounds the requests waiting for a worker: a caller that
// queues faster than the driver takes them waits.
const workerQueue = 4096

func newWorker() *worker {
	w := &worker{reqs: make(chan func(), workerQueue), done: make(chan struct{})}
	go w.loop()
	return w
}

func (w *worker) loop() {
	// The thread keeps a CUDA context current: it is not returned to the
	// scheduler's pool (a goroutine that exits locked ends its thread).
	runtime.LockOSThread()
	defer close(w.done)
	for f := range w.reqs {
		f()
	}
}

// post queues f.
func (w *worker) post(f func()) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return errClosed
	}
	w.reqs <- f
	return nil
}

// do runs f on the worker and waits for its result.
func (w *worker) do(f func() error) error {
	ch := make(chan error, 1)
	if err := w.post(func() { ch <- f() }); err != nil {
		return err
	}
	return <-ch
}

// close stops the worker after the queued requests and waits for it.
func (w *worker) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.reqs)
	}
	w.mu.Unlock()
	<-w.done
}
