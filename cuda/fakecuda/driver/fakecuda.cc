// fakecuda.cc: a stand-in for libcuda.so.1 (the subset of the CUDA driver
// API that package cuda binds), for machines without a GPU.
//
// "Device memory" is host memory: a CUdeviceptr is a host address returned
// by aligned_alloc, so copies are memcpy. Streams and events exist but
// every call completes before it returns. cuModuleLoadData keeps the PTX
// text only to check, at cuModuleGetFunction, that the kernel is in it; the
// kernel that runs is the same CUDA C source compiled for the host and
// linked into this library (kernels/*.cu with emu/emu.h), found by name,
// and cuLaunchKernel runs it on the emulator (emu_launch) with the launch's
// grid, block, dynamic shared memory and parameters.
//
// The rules a real driver enforces and a caller can get wrong are enforced
// too: cuInit first; a current context (per OS thread) for memory, module
// and launch calls; copies and frees only of allocated ranges; block and
// shared memory limits at launch (48 KiB of dynamic shared memory unless
// cuFuncSetAttribute raised it). Fresh allocations are filled with 0xff
// bytes (NaN as float) rather than zeros, as real memory is not cleared.
//
// Environment: CLAWRL_FAKECUDA_DEVICES (number of devices, default 1),
// CLAWRL_FAKECUDA_MEM (bytes per device, default 16 GiB).
//
// fakecudaLastError (not a CUDA symbol) returns the emulator's message for
// the last failed launch on the calling thread, which the Go binding adds
// to the error when the library has it.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "emu/emu.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999,
};

namespace {

struct ErrorText {
  int code;
  const char* name;
  const char* text;
};

const ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
    {CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

constexpr int kMaxDevices = 16;
constexpr int kSMs = 16;
constexpr int kSharedDefault = 48 << 10;
constexpr int kSharedOptin = 163 << 10;

struct Ctx {
  int dev;
  int refs;
  bool peer[kMaxDevices];
};

struct Stream {
  int dev;
};
struct Event {
  double ms;
  bool recorded;
};
struct Module {
  std::string image;  // the PTX text, or "fakecuda:host" for every host kernel
};
struct Func {
  std::string name;
  EmuKernelFn fn;
  int max_dyn_smem;
};

struct Alloc {
  size_t size;
  int dev;
};

std::mutex mu;  // guards everything below
bool initialized;
int ndev = 1;
size_t total_mem = (size_t)16 << 30;
size_t used[kMaxDevices];
Ctx* primary[kMaxDevices];
std::map<uintptr_t, Alloc> allocs;

thread_local Ctx* current;
thread_local std::string last_error;

int env_int(const char* name, long long def, long long* out) {
  const char* s = getenv(name);
  if (!s || !*s) {
    *out = def;
    return 0;
  }
  char* end;
  long long v = strtoll(s, &end, 10);
  if (*end || v < 0) return -1;
  *out = v;
  return 0;
}

double now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// range_ok reports whether [p, p+n) lies inside one allocation. mu held.
bool range_ok(CUdeviceptr p, size_t n) {
  auto it = allocs.upper_bound((uintptr_t)p);
  if (it == allocs.begin()) return false;
  --it;
  return (uintptr_t)p >= it->first && (uintptr_t)p + n <= it->first + it->second.size && n <= it->second.size;
}

CUresult need_ctx() {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!current) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

CUresult copy(CUdeviceptr dst, CUdeviceptr src, size_t n, bool dst_dev, bool src_dev) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (n == 0) return CUDA_SUCCESS;
  if ((dst_dev && !range_ok(dst, n)) || (src_dev && !range_ok(src, n)) || !dst || !src) return CUDA_ERROR_INVALID_VALUE;
  memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

}  // namespace

// ------------------------------------------------------------ errors, init

EXPORT CUresult cuGetErrorName(CUresult e, const char** s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& t : kErrors) {
    if (t.code == e) {
      *s = t.name;
      return CUDA_SUCCESS;
    }
  }
  *s = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult e, const char** s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& t : kErrors) {
    if (t.code == e) {
      *s = t.text;
      return CUDA_SUCCESS;
    }
  }
  *s = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

EXPORT const char* fakecudaLastError(void) { return last_error.c_str(); }

EXPORT CUresult cuInit(unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  long long n, m;
  if (env_int("CLAWRL_FAKECUDA_DEVICES", 1, &n) || n > kMaxDevices) return CUDA_ERROR_INVALID_VALUE;
  if (env_int("CLAWRL_FAKECUDA_MEM", (long long)16 << 30, &m)) return CUDA_ERROR_INVALID_VALUE;
  if (n == 0) return CUDA_ERROR_NO_DEVICE;
  if (!initialized) {
    ndev = (int)n;
    total_mem = (size_t)m;
    initialized = true;
  }
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int* v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = 13000;
  return CUDA_SUCCESS;
}

// ------------------------------------------------------------------ devices

EXPORT CUresult cuDeviceGetCount(int* n) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = ndev;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, len, "clawrl fake CUDA device");
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice d) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = total_mem;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice d) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case 1: *v = 1024; break;                 // MAX_THREADS_PER_BLOCK
    case 2: case 3: *v = 1024; break;         // MAX_BLOCK_DIM_X, _Y
    case 4: *v = 64; break;                   // MAX_BLOCK_DIM_Z
    case 5: *v = 2147483647; break;           // MAX_GRID_DIM_X
    case 6: case 7: *v = 65535; break;        // MAX_GRID_DIM_Y, _Z
    case 8: *v = kSharedDefault; break;       // MAX_SHARED_MEMORY_PER_BLOCK
    case 10: *v = 32; break;                  // WARP_SIZE
    case 16: *v = kSMs; break;                // MULTIPROCESSOR_COUNT
    case 36: *v = 1593000; break;             // MEMORY_CLOCK_RATE (kHz)
    case 37: *v = 5120; break;                // GLOBAL_MEMORY_BUS_WIDTH (bits)
    case 39: *v = 2048; break;                // MAX_THREADS_PER_MULTIPROCESSOR
    case 75: *v = 8; break;                   // COMPUTE_CAPABILITY_MAJOR
    case 76: *v = 0; break;                   // COMPUTE_CAPABILITY_MINOR
    case 81: *v = 164 << 10; break;           // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    case 82: *v = 65536; break;               // MAX_REGISTERS_PER_MULTIPROCESSOR
    case 97: *v = kSharedOptin; break;        // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceCanAccessPeer(int* can, CUdevice d, CUdevice peer) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= ndev || peer < 0 || peer >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  if (!can) return CUDA_ERROR_INVALID_VALUE;
  *can = d != peer;
  return CUDA_SUCCESS;
}

// ----------------------------------------------------------------- contexts

EXPORT CUresult cuDevicePrimaryCtxRetain(Ctx** c, CUdevice d) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (!primary[d]) primary[d] = new Ctx{d, 0, {}};
  primary[d]->refs++;
  *c = primary[d];
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  if (!primary[d] || primary[d]->refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  primary[d]->refs--;  // the context stays, as a released primary context may be retained again
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return cuDevicePrimaryCtxRelease_v2(d); }

EXPORT CUresult cuCtxSetCurrent(Ctx* c) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (c) {
    bool ok = false;
    for (int d = 0; d < ndev; d++) ok = ok || primary[d] == c;
    if (!ok) return CUDA_ERROR_INVALID_CONTEXT;
  }
  current = c;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(Ctx** c) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *c = current;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) {
  std::lock_guard<std::mutex> l(mu);
  return need_ctx();
}

EXPORT CUresult cuCtxEnablePeerAccess(Ctx* peer, unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!peer || flags) return CUDA_ERROR_INVALID_VALUE;
  if (peer == current) return CUDA_ERROR_INVALID_DEVICE;
  if (current->peer[peer->dev]) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  current->peer[peer->dev] = true;
  return CUDA_SUCCESS;
}

// ------------------------------------------------------------------- memory

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
  int d = current->dev;
  size_t rounded = (n + 255) & ~(size_t)255;
  if (rounded < n || used[d] + rounded > total_mem) return CUDA_ERROR_OUT_OF_MEMORY;
  void* mem = aligned_alloc(256, rounded);
  if (!mem) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(mem, 0xff, rounded);
  used[d] += rounded;
  allocs[(uintptr_t)mem] = Alloc{rounded, d};
  *p = (CUdeviceptr)(uintptr_t)mem;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (p == 0) return CUDA_SUCCESS;
  auto it = allocs.find((uintptr_t)p);
  if (it == allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  used[it->second.dev] -= it->second.size;
  allocs.erase(it);
  free((void*)(uintptr_t)p);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t* free_b, size_t* total_b) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!free_b || !total_b) return CUDA_ERROR_INVALID_VALUE;
  *total_b = total_mem;
  *free_b = total_mem - used[current->dev];
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return copy(dst, (CUdeviceptr)(uintptr_t)src, n, true, false);
}
EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return copy((CUdeviceptr)(uintptr_t)dst, src, n, false, true);
}
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(dst, src, n, true, true); }
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, Stream*) {
  return cuMemcpyHtoD_v2(dst, src, n);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, Stream*) {
  return cuMemcpyDtoH_v2(dst, src, n);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, Stream*) {
  return cuMemcpyDtoD_v2(dst, src, n);
}

EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, Ctx* dctx, CUdeviceptr src, Ctx* sctx, size_t n) {
  if (!dctx || !sctx) return CUDA_ERROR_INVALID_CONTEXT;
  return copy(dst, src, n, true, true);
}
EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, Ctx* dctx, CUdeviceptr src, Ctx* sctx, size_t n, Stream*) {
  return cuMemcpyPeer(dst, dctx, src, sctx, n);
}

EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned v, size_t count) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (count == 0) return CUDA_SUCCESS;
  if ((dst & 3) || count > SIZE_MAX / 4 || !range_ok(dst, count * 4)) return CUDA_ERROR_INVALID_VALUE;
  uint32_t* p = (uint32_t*)(uintptr_t)dst;
  for (size_t i = 0; i < count; i++) p[i] = v;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t count, Stream*) {
  return cuMemsetD32_v2(dst, v, count);
}

// ---------------------------------------------------------- streams, events

EXPORT CUresult cuStreamCreate(Stream** s, unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!s || flags > 1) return CUDA_ERROR_INVALID_VALUE;
  *s = new Stream{current->dev};
  return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamDestroy_v2(Stream* s) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  delete s;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamSynchronize(Stream*) {
  std::lock_guard<std::mutex> l(mu);
  return need_ctx();
}

EXPORT CUresult cuEventCreate(Event** e, unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  (void)flags;
  *e = new Event{0, false};
  return CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord(Event* e, Stream*) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  e->ms = now_ms();
  e->recorded = true;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuEventSynchronize(Event* e) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
EXPORT CUresult cuEventElapsedTime(float* ms, Event* start, Event* end) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  if (!start || !end || !start->recorded || !end->recorded) return CUDA_ERROR_INVALID_HANDLE;
  *ms = (float)(end->ms - start->ms);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy_v2(Event* e) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  delete e;
  return CUDA_SUCCESS;
}

// ----------------------------------------------------------- modules, launch

EXPORT CUresult cuModuleLoadData(Module** m, const void* image) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!m || !image) return CUDA_ERROR_INVALID_VALUE;
  std::string text((const char*)image);
  if (text != "fakecuda:host" && text.find(".version") == std::string::npos) return CUDA_ERROR_INVALID_IMAGE;
  *m = new Module{text};
  return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(Module* m) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  delete m;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(Func** f, Module* m, const char* name) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!f || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  // A PTX module has the kernel if it declares its entry; the host build
  // must have it too (a kernel in the PTX but not in the sources compiled
  // here means stale PTX or a missing source).
  if (m->image != "fakecuda:host" && m->image.find(".entry " + std::string(name) + "(") == std::string::npos)
    return CUDA_ERROR_NOT_FOUND;
  EmuKernelFn fn = emu_find(name);
  if (!fn) return CUDA_ERROR_NOT_FOUND;
  *f = new Func{name, fn, kSharedDefault};
  return CUDA_SUCCESS;
}

EXPORT CUresult cuFuncSetAttribute(Func* f, int attr, int value) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = need_ctx()) return r;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  switch (attr) {
    case 8:  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
      if (value < 0 || value > kSharedOptin) return CUDA_ERROR_INVALID_VALUE;
      f->max_dyn_smem = value;
      return CUDA_SUCCESS;
    case 9:  // CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuLaunchKernel(Func* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned smem, Stream* stream, void** params, void** extra) {
  (void)stream;
  {
    std::lock_guard<std::mutex> l(mu);
    if (CUresult r = need_ctx()) return r;
  }
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (extra) return CUDA_ERROR_NOT_SUPPORTED;
  if (gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535 || gx > 2147483647u) return CUDA_ERROR_INVALID_VALUE;
  if (bx == 0 || by == 0 || bz == 0 || bx > 1024 || by > 1024 || bz > 64) return CUDA_ERROR_INVALID_VALUE;
  if ((unsigned long long)bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  if ((int)smem > f->max_dyn_smem) return CUDA_ERROR_INVALID_VALUE;
  char err[512];
  if (emu_launch(f->fn, params, dim3{gx, gy, gz}, dim3{bx, by, bz}, smem, err, sizeof err) != 0) {
    last_error = f->name + ": " + err;
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  last_error.clear();
  return CUDA_SUCCESS;
}
