// emu.h: a CUDA thread model on the host, for running kernels without a GPU.
//
// A launch runs the blocks of its grid one after another on the calling OS
// thread. The threads of a block are fibers (cooperative coroutines with
// stacks of their own): a thread runs until it reaches a barrier
// (__syncthreads), a warp-collective operation (__syncwarp, a shuffle,
// mma.sync) or its end, and then the next thread runs. So:
//
//   - __syncthreads suspends a thread until every thread of the block that
//     has not exited has reached a barrier (as bar.sync 0 counts arrivals);
//   - a shuffle deposits the lane's value, waits until every lane of its
//     mask has deposited, and reads its partner's value: the lanes of a warp
//     exchange values in lockstep, as on the hardware;
//   - mma.sync gathers the fragments of all 32 lanes and computes each
//     lane's part of D from the fragment layouts of the PTX ISA;
//   - __shared__ variables are per block (see cuda_compat.h) and dynamic
//     shared memory is a per-launch buffer of the launch's size.
//
// Between two such points a thread runs alone, so memory is sequentially
// consistent. The threads of a block run in increasing order between two
// barriers in half of the blocks and in decreasing order in the others, so
// a data race between threads of a block that a barrier should have
// ordered shows as a wrong result rather than passing by chance.
// Misuse is reported, not hung on: lanes of a warp that disagree on a
// collective (kind or mask), a shuffle from a lane that did not take part,
// or a block whose threads all wait and can never be released (deadlock)
// fail the launch with a message.
#ifndef CLAWRL_EMU_H
#define CLAWRL_EMU_H

#include <stddef.h>
#include <stdint.h>

struct dim3 {
  unsigned x, y, z;
};
typedef dim3 uint3;

// EmuThread is what a fiber knows about itself.
struct EmuThread {
  dim3 tid;      // threadIdx
  unsigned lin;  // linear thread index in the block
};

extern thread_local EmuThread* emu_self;
extern thread_local dim3 emu_block_idx, emu_block_dim, emu_grid_dim;

#define threadIdx (emu_self->tid)
#define blockIdx (emu_block_idx)
#define blockDim (emu_block_dim)
#define gridDim (emu_grid_dim)
#define warpSize 32

void __syncthreads(void);
void __syncwarp(unsigned mask = 0xffffffffu);

// emu_shfl is the one shuffle of the emulator: kind is one of EMU_SHFL_*.
enum { EMU_SHFL_IDX = 1, EMU_SHFL_UP, EMU_SHFL_DOWN, EMU_SHFL_XOR };
uint32_t emu_shfl(unsigned mask, uint32_t v, int kind, int arg, int width);

static inline uint32_t emu_f2u(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
static inline float emu_u2f(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

static inline float __shfl_xor_sync(unsigned m, float v, int x, int w = 32) {
  return emu_u2f(emu_shfl(m, emu_f2u(v), EMU_SHFL_XOR, x, w));
}
static inline int __shfl_xor_sync(unsigned m, int v, int x, int w = 32) {
  return (int)emu_shfl(m, (uint32_t)v, EMU_SHFL_XOR, x, w);
}
static inline float __shfl_down_sync(unsigned m, float v, unsigned d, int w = 32) {
  return emu_u2f(emu_shfl(m, emu_f2u(v), EMU_SHFL_DOWN, (int)d, w));
}
static inline int __shfl_down_sync(unsigned m, int v, unsigned d, int w = 32) {
  return (int)emu_shfl(m, (uint32_t)v, EMU_SHFL_DOWN, (int)d, w);
}
static inline float __shfl_up_sync(unsigned m, float v, unsigned d, int w = 32) {
  return emu_u2f(emu_shfl(m, emu_f2u(v), EMU_SHFL_UP, (int)d, w));
}
static inline float __shfl_sync(unsigned m, float v, int src, int w = 32) {
  return emu_u2f(emu_shfl(m, emu_f2u(v), EMU_SHFL_IDX, src, w));
}
static inline int __shfl_sync(unsigned m, int v, int src, int w = 32) {
  return (int)emu_shfl(m, (uint32_t)v, EMU_SHFL_IDX, src, w);
}

// emu_mma_bf16_16816 is mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// with D = C (d is read as C and overwritten with D): see cuda_compat.h for
// the fragment layout.
void emu_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]);

// emu_dynamic_smem is the current launch's dynamic shared memory.
void* emu_dynamic_smem(void);

// emu_fail aborts the current launch with a message (a kernel-side trap).
[[noreturn]] void emu_fail(const char* msg);

// ------------------------------------------------------------------ launching

// An EmuKernelFn runs one thread of a kernel: it unpacks the launch's
// parameters (cuLaunchKernel's kernelParams) and calls the kernel.
typedef void (*EmuKernelFn)(void** params);

// emu_launch runs a grid. It returns 0, or -1 with a message in err.
int emu_launch(EmuKernelFn fn, void** params, dim3 grid, dim3 block, size_t dyn_smem, char* err,
               size_t errlen);

// The registry of host-compiled kernels, filled by static constructors (see
// EMU_KERNEL) when the fake driver's shared object is loaded.
void emu_register(const char* name, EmuKernelFn fn);
EmuKernelFn emu_find(const char* name);

#ifdef __cplusplus
#include <tuple>
#include <type_traits>
#include <utility>

// emu_invoke calls kernel k with its parameters unpacked from params as
// cuLaunchKernel does: params[i] points at the value of the i-th parameter.
template <typename... A, size_t... I>
static inline void emu_invoke_(void (*k)(A...), void** params, std::index_sequence<I...>) {
  k(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(params[I])...);
}
template <typename... A>
static inline void emu_invoke(void (*k)(A...), void** params) {
  emu_invoke_(k, params, std::index_sequence_for<A...>{});
}

struct EmuRegistrar {
  EmuRegistrar(const char* name, EmuKernelFn fn) { emu_register(name, fn); }
};

// EMU_KERNEL(name) registers the kernel name with a launch thunk whose
// parameter unpacking the compiler derives from the kernel's signature.
#define EMU_KERNEL(name) \
  static EmuRegistrar emu_reg_##name(#name, [](void** p) { emu_invoke(name, p); });
#endif

#endif  // CLAWRL_EMU_H
