package cuda

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNoDriver is wrapped by the error of every entry point when the CUDA
// driver library cannot be loaded (no NVIDIA driver on the machine).
var ErrNoDriver = errors.New("no CUDA driver found (libcuda.so.1)")

// LibraryEnv names the environment variable that overrides the driver
// library's path (the tests point it at the fake driver of cuda/fakecuda).
const LibraryEnv = "CLAWRL_LIBCUDA"

const defaultLibrary = "libcuda.so.1"

// Error is a failed driver call: the call's name and CUDA's status, with
// the status's name and description from the driver (cuGetErrorName,
// cuGetErrorString).
type Error struct {
	Call   string // e.g. "cuMemAlloc_v2"
	Code   int    // the CUresult
	Name   string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Text   string // e.g. "out of memory"
	Detail string // more from the fake driver's emulator, when there is any
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s: %s", e.Call, e.Name, e.Text)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// CUDA status codes the package looks at.
const (
	errOutOfMemory       = 2
	errNotFound          = 500
	errPeerAlreadyActive = 704
)

// result is a CUresult.
type result int32

// driver is the loaded libcuda: the addresses of the functions it binds.
// Calls go through purego.SyscallN (no cgo).
type driver struct {
	path string

	cuInit, cuDriverGetVersion                                    uintptr
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName                uintptr
	cuDeviceTotalMem, cuDeviceGetAttribute, cuDeviceCanAccessPeer uintptr
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease           uintptr
	cuCtxSetCurrent, cuCtxSynchronize, cuCtxEnablePeerAccess      uintptr
	cuMemAlloc, cuMemFree, cuMemGetInfo                           uintptr
	cuMemcpyHtoD, cuMemcpyDtoH, cuMemcpyDtoD                      uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync       uintptr
	cuMemcpyPeer, cuMemcpyPeerAsync                               uintptr
	cuMemsetD32, cuMemsetD32Async                                 uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize          uintptr
	cuEventCreate, cuEventRecord, cuEventSynchronize              uintptr
	cuEventElapsedTime, cuEventDestroy                            uintptr
	cuModuleLoadData, cuModuleGetFunction, cuModuleUnload         uintptr
	cuFuncSetAttribute, cuLaunchKernel                            uintptr
	cuGetErrorName, cuGetErrorString                              uintptr
	fakeLastError                                                 uintptr // only in the fake driver
}

// symbols lists every bound function: its field and the names to try, the
// versioned name first.
func (d *driver) symbols() []struct {
	field *uintptr
	names []string
} {
	type sym = struct {
		field *uintptr
		names []string
	}
	return []sym{
		{&d.cuInit, []string{"cuInit"}},
		{&d.cuDriverGetVersion, []string{"cuDriverGetVersion"}},
		{&d.cuDeviceGetCount, []string{"cuDeviceGetCount"}},
		{&d.cuDeviceGet, []string{"cuDeviceGet"}},
		{&d.cuDeviceGetName, []string{"cuDeviceGetName"}},
		{&d.cuDeviceTotalMem, []string{"cuDeviceTotalMem_v2"}},
		{&d.cuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}},
		{&d.cuDeviceCanAccessPeer, []string{"cuDeviceCanAccessPeer"}},
		{&d.cuDevicePrimaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
		{&d.cuDevicePrimaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{&d.cuCtxSetCurrent, []string{"cuCtxSetCurrent"}},
		{&d.cuCtxSynchronize, []string{"cuCtxSynchronize"}},
		{&d.cuCtxEnablePeerAccess, []string{"cuCtxEnablePeerAccess"}},
		{&d.cuMemAlloc, []string{"cuMemAlloc_v2"}},
		{&d.cuMemFree, []string{"cuMemFree_v2"}},
		{&d.cuMemGetInfo, []string{"cuMemGetInfo_v2"}},
		{&d.cuMemcpyHtoD, []string{"cuMemcpyHtoD_v2"}},
		{&d.cuMemcpyDtoH, []string{"cuMemcpyDtoH_v2"}},
		{&d.cuMemcpyDtoD, []string{"cuMemcpyDtoD_v2"}},
		{&d.cuMemcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}},
		{&d.cuMemcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2"}},
		{&d.cuMemcpyDtoDAsync, []string{"cuMemcpyDtoDAsync_v2"}},
		{&d.cuMemcpyPeer, []string{"cuMemcpyPeer"}},
		{&d.cuMemcpyPeerAsync, []string{"cuMemcpyPeerAsync"}},
		{&d.cuMemsetD32, []string{"cuMemsetD32_v2"}},
		{&d.cuMemsetD32Async, []string{"cuMemsetD32Async"}},
		{&d.cuStreamCreate, []string{"cuStreamCreate"}},
		{&d.cuStreamDestroy, []string{"cuStreamDestroy_v2"}},
		{&d.cuStreamSynchronize, []string{"cuStreamSynchronize"}},
		{&d.cuEventCreate, []string{"cuEventCreate"}},
		{&d.cuEventRecord, []string{"cuEventRecord"}},
		{&d.cuEventSynchronize, []string{"cuEventSynchronize"}},
		{&d.cuEventElapsedTime, []string{"cuEventElapsedTime"}},
		{&d.cuEventDestroy, []string{"cuEventDestroy_v2"}},
		{&d.cuModuleLoadData, []string{"cuModuleLoadData"}},
		{&d.cuModuleGetFunction, []string{"cuModuleGetFunction"}},
		{&d.cuModuleUnload, []string{"cuModuleUnload"}},
		{&d.cuFuncSetAttribute, []string{"cuFuncSetAttribute"}},
		{&d.cuLaunchKernel, []string{"cuLaunchKernel"}},
		{&d.cuGetErrorName, []string{"cuGetErrorName"}},
		{&d.cuGetErrorString, []string{"cuGetErrorString"}},
	}
}

var (
	driversMu sync.Mutex
	drivers   = map[string]*driver{} // by library path; a library is loaded once per process
)

// loadDriver loads and initialises the driver library (CLAWRL_LIBCUDA or
// libcuda.so.1), once per path.
func loadDriver() (*driver, error) {
	path := os.Getenv(LibraryEnv)
	via := ""
	if path == "" {
		path = defaultLibrary
	} else {
		via = " (" + LibraryEnv + "=" + path + ")"
	}
	driversMu.Lock()
	defer driversMu.Unlock()
	if d := drivers[path]; d != nil {
		return d, nil
	}
	lib, err := dlopen(path)
	if err != nil {
		return nil, fmt.Errorf("cuda: %w%s: %v", ErrNoDriver, via, err)
	}
	d := &driver{path: path}
	for _, s := range d.symbols() {
		for _, n := range s.names {
			if p, err := dlsym(lib, n); err == nil && p != 0 {
				*s.field = p
				break
			}
		}
		if *s.field == 0 {
			return nil, fmt.Errorf("cuda: driver %s has no %s (a driver older than CUDA 11?)", path, s.names[0])
		}
	}
	if p, err := dlsym(lib, "fakecudaLastError"); err == nil {
		d.fakeLastError = p
	}
	if err := d.check("cuInit", d.call(d.cuInit, 0)); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	drivers[path] = d
	return d, nil
}

// call calls a driver function. The arguments are uintptrs; a pointer
// converted in the argument list of call is kept alive and in place for
// the call, as for syscall.Syscall.
//
//go:uintptrescapes
func (d *driver) call(fn uintptr, args ...uintptr) result {
	r, _, _ := purego.SyscallN(fn, args...)
	return result(int32(uint32(r)))
}

// check turns a non-success status into an *Error naming call.
func (d *driver) check(call string, r result) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: call, Code: int(r), Name: fmt.Sprintf("CUDA error %d", int(r)), Text: "unknown error"}
	var s *byte // a C string, written by the driver
	if d.call(d.cuGetErrorName, uintptr(r), uintptr(unsafe.Pointer(&s))) == 0 && s != nil {
		e.Name = goString(s)
	}
	s = nil
	if d.call(d.cuGetErrorString, uintptr(r), uintptr(unsafe.Pointer(&s))) == 0 && s != nil {
		e.Text = goString(s)
	}
	if d.fakeLastError != 0 && call == "cuLaunchKernel" {
		p, _, _ := purego.SyscallN(d.fakeLastError)
		if msg := goString(*(**byte)(unsafe.Pointer(&p))); msg != "" {
			e.Detail = "emulator: " + msg
		}
	}
	return e
}

// goString copies the NUL-terminated C string at p (at most 4 KiB of it).
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for i := 0; i < 4096; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// isCode reports whether err is a driver error with status code.
func isCode(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}
