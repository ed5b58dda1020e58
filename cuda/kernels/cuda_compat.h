// cuda_compat.h: the small slice of CUDA C that clawrl's kernels are written
// against, in two modes.
//
//   Device mode: clang -x cuda --cuda-device-only -nocudainc -nocudalib
//   (see build-ptx.sh). There are no CUDA headers, so the keywords
//   (__global__, __shared__, ...), the built-in index variables and the
//   warp intrinsics are defined here from clang's own attributes and NVVM
//   builtins, and the tensor-core product is inline PTX.
//
//   Host mode: any C++17 compiler (g++, clang++), for the emulator that the
//   fake libcuda (cuda/fakecuda) runs kernels on. The index variables,
//   barriers, shuffles and mma.sync come from the emulation runtime
//   (emu/emu.h), which runs the threads of a block as fibers.
//
// Kernels include this header and nothing else from CUDA, so the same source
// is the PTX that a GPU runs and the C++ that the tests run.
//
// Differences from CUDA C a kernel must respect:
//   - dynamic shared memory is declared with DYNAMIC_SHARED(type, name), not
//     `extern __shared__ type name[]`;
//   - math goes through the helpers below (exp_f, log_f, sqrt_f, ...): there
//     is no libdevice, so expf() and friends do not exist on the device;
//   - blocks are one-dimensional in the thread index (threadIdx.x only is
//     used by the warp helpers: lane = threadIdx.x % 32).
#ifndef CLAWRL_CUDA_COMPAT_H
#define CLAWRL_CUDA_COMPAT_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDA__) && defined(__CUDA_ARCH__)
#define CUDA_DEVICE_MODE 1
#endif

#define FULL_MASK 0xffffffffu

#ifdef CUDA_DEVICE_MODE
// ---------------------------------------------------------------- device mode

#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __host__ __attribute__((host))
#define __forceinline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __align__(n) __attribute__((aligned(n)))
#define DEVICE_FN static __device__ __forceinline__ inline

// threadIdx, blockIdx, blockDim, gridDim, warpSize: clang's own header,
// which reads the PTX special registers (%tid, %ctaid, ...).
#include <__clang_cuda_builtin_vars.h>

#define DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]

// __syncthreads is a clang builtin for NVPTX (bar.sync 0).
DEVICE_FN void __syncwarp(unsigned mask = FULL_MASK) { __nvvm_bar_warp_sync(mask); }

// Shuffles: shfl.sync with the segment mask c of the PTX instruction, which
// encodes the width (((32 - width) << 8) | 31 for bfly, down and idx).
DEVICE_FN float __shfl_xor_sync(unsigned mask, float v, int lane_mask, int width = 32) {
  return __nvvm_shfl_sync_bfly_f32(mask, v, lane_mask, ((32 - width) << 8) | 31);
}
DEVICE_FN int __shfl_xor_sync(unsigned mask, int v, int lane_mask, int width = 32) {
  return __nvvm_shfl_sync_bfly_i32(mask, v, lane_mask, ((32 - width) << 8) | 31);
}
DEVICE_FN float __shfl_down_sync(unsigned mask, float v, unsigned delta, int width = 32) {
  return __nvvm_shfl_sync_down_f32(mask, v, delta, ((32 - width) << 8) | 31);
}
DEVICE_FN int __shfl_down_sync(unsigned mask, int v, unsigned delta, int width = 32) {
  return __nvvm_shfl_sync_down_i32(mask, v, delta, ((32 - width) << 8) | 31);
}
DEVICE_FN float __shfl_sync(unsigned mask, float v, int src_lane, int width = 32) {
  return __nvvm_shfl_sync_idx_f32(mask, v, src_lane, ((32 - width) << 8) | 31);
}
DEVICE_FN int __shfl_sync(unsigned mask, int v, int src_lane, int width = 32) {
  return __nvvm_shfl_sync_idx_i32(mask, v, src_lane, ((32 - width) << 8) | 31);
}

// Math without libdevice. exp and log go through the hardware's base-2
// approximations (ex2.approx, lg2.approx: a few ulp); sqrt and division are
// IEEE-rounded.
DEVICE_FN float exp_f(float x) { return __nvvm_ex2_approx_ftz_f(x * 1.4426950408889634f); }
DEVICE_FN float log_f(float x) { return __nvvm_lg2_approx_f(x) * 0.6931471805599453f; }
DEVICE_FN float sqrt_f(float x) { return __nvvm_sqrt_rn_f(x); }
DEVICE_FN float max_f(float a, float b) { return __nvvm_fmax_f(a, b); }
DEVICE_FN float min_f(float a, float b) { return __nvvm_fmin_f(a, b); }
DEVICE_FN float fma_f(float a, float b, float c) { return __nvvm_fma_rn_f(a, b, c); }

DEVICE_FN int atomic_or(int* p, int v) { return __nvvm_atom_or_gen_i(p, v); }
DEVICE_FN float atomic_add(float* p, float v) { return __nvvm_atom_add_gen_f(p, v); }

// mma_bf16_16816 is one warp-wide tensor-core product D = A·B + D of a 16×16
// BF16 tile A (row-major) by a 16×8 BF16 tile B (column-major), accumulated
// in float: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32. Every lane
// holds a fragment of A (a[4], two BF16 per register, the lower index in the
// low half), of B (b[2]) and of D (d[4]) in the layout of the PTX ISA
// ("Matrix Fragments for mma.m16n8k16 with floating point type"); with
// g = lane / 4 and t = lane % 4:
//
//   a[0] = A[g  ][2t..2t+1]     a[1] = A[g+8][2t..2t+1]
//   a[2] = A[g  ][2t+8..2t+9]   a[3] = A[g+8][2t+8..2t+9]
//   b[0] = B[2t..2t+1  ][g]     b[1] = B[2t+8..2t+9][g]
//   d[0] = D[g][2t]  d[1] = D[g][2t+1]  d[2] = D[g+8][2t]  d[3] = D[g+8][2t+1]
//
// All 32 lanes of the warp must execute it together.
DEVICE_FN void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#else
// ------------------------------------------------------------------ host mode

#include <math.h>
#include <string.h>

#include "emu/emu.h"

#define __device__
#define __global__
#define __host__
// A __shared__ variable is one per block. The emulator runs the blocks of
// a launch one after another on one OS thread, so a function-local static
// that is thread_local (one copy per emulating thread) is exactly that.
#define __shared__ static thread_local
#define __forceinline__
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define DEVICE_FN static inline

#define DYNAMIC_SHARED(T, name) T* name = (T*)emu_dynamic_smem()

// Same formulas as the device, with the C library's exp2 and log2.
DEVICE_FN float exp_f(float x) { return exp2f(x * 1.4426950408889634f); }
DEVICE_FN float log_f(float x) { return log2f(x) * 0.6931471805599453f; }
DEVICE_FN float sqrt_f(float x) { return sqrtf(x); }
DEVICE_FN float max_f(float a, float b) { return fmaxf(a, b); }
DEVICE_FN float min_f(float a, float b) { return fminf(a, b); }
DEVICE_FN float fma_f(float a, float b, float c) { return fmaf(a, b, c); }

// The threads of a block run one at a time and switch only at barriers,
// shuffles and mma, so a plain read-modify-write is atomic.
DEVICE_FN int atomic_or(int* p, int v) {
  int old = *p;
  *p = old | v;
  return old;
}
DEVICE_FN float atomic_add(float* p, float v) {
  float old = *p;
  *p = old + v;
  return old;
}

DEVICE_FN void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  emu_mma_bf16_16816(d, a, b);
}

#endif  // CUDA_DEVICE_MODE

// ------------------------------------------------------------ both modes

// bf16_to_f32 widens BF16 bits exactly.
DEVICE_FN float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// f32_to_bf16 rounds to nearest even; a NaN stays a (quiet) NaN.
DEVICE_FN uint16_t f32_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

// pack_bf16x2 puts two BF16 values in one register, lo in the low half (the
// element order of mma fragments).
DEVICE_FN uint32_t pack_bf16x2(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

DEVICE_FN float bits_f32(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// Vector types for 16-byte loads (ld.global.v4).
struct __align__(16) f32x4 { float x, y, z, w; };
struct __align__(16) u32x4 { uint32_t x, y, z, w; };

// warp_sum and warp_max reduce over the 32 lanes of a warp; every lane gets
// the result.
DEVICE_FN float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
  return v;
}
DEVICE_FN float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = max_f(v, __shfl_xor_sync(FULL_MASK, v, o));
  return v;
}

// block_sum reduces v over a block of blockDim.x threads (a multiple of 32,
// at most 1024) and returns the sum to every thread. scratch is 32 floats of
// shared memory; the call ends with a barrier so scratch may be reused.
DEVICE_FN float block_sum(float v, float* scratch) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}

DEVICE_FN float block_max(float v, float* scratch) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : -__builtin_inff();
  v = warp_max(v);
  __syncthreads();
  return v;
}

#endif  // CLAWRL_CUDA_COMPAT_H
