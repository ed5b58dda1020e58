// selftest.cu: small kernels that exercise the thread model itself (shared
// memory and barriers, warp shuffles, dynamic shared memory, the
// tensor-core fragment layout). The tests run them on the emulator, and
// the GPU check on the hardware, against the same host references.
#include "cuda_compat.h"

// selftest_block_sum: out[b] = Σ in[b·n + i] for i < n, one block per row,
// through block_sum (shuffles within warps, shared memory and barriers
// across them).
extern "C" __global__ void selftest_block_sum(float* out, const float* in, int n) {
  __shared__ float scratch[32];
  const float* row = in + (size_t)blockIdx.x * n;
  float s = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += row[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

// selftest_warp: for every warp of the launch, with v = in[thread]:
//   out[4·thread + 0] = Σ v over the warp (xor butterfly)
//   out[4·thread + 1] = v of lane (lane + 3) % 32 (indexed shuffle)
//   out[4·thread + 2] = v of lane + 1, or v for lane 31 (shuffle down)
//   out[4·thread + 3] = Σ over the 8-lane segment (xor with width 8)
extern "C" __global__ void selftest_warp(float* out, const float* in) {
  int tid = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x & 31;
  float v = in[tid];
  float s = warp_sum(v);
  float rot = __shfl_sync(FULL_MASK, v, (lane + 3) & 31);
  float down = __shfl_down_sync(FULL_MASK, v, 1);
  float seg = v;
  for (int o = 4; o > 0; o >>= 1) seg += __shfl_xor_sync(FULL_MASK, seg, o, 8);
  out[4 * tid + 0] = s;
  out[4 * tid + 1] = rot;
  out[4 * tid + 2] = down;
  out[4 * tid + 3] = seg;
}

// selftest_reverse: each block reverses its blockDim.x elements through
// dynamic shared memory (written, barrier, read back in the other order).
extern "C" __global__ void selftest_reverse(float* out, const float* in) {
  DYNAMIC_SHARED(float, buf);
  int base = blockIdx.x * blockDim.x;
  buf[threadIdx.x] = in[base + threadIdx.x];
  __syncthreads();
  out[base + threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

// selftest_mma: one warp computes D = A·Wᵀ + C with one mma.sync, for A
// [16][16] (F32, rounded to BF16), W [8][16] (BF16 bits, the column-major B
// of the product: B[k][n] = W[n][k]) and C, D [16][8] (F32), all row-major.
// The fragments are loaded by the PTX ISA's table (g = lane/4, t = lane%4).
extern "C" __global__ void selftest_mma(float* d, const float* a, const uint16_t* w, const float* c) {
  int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  uint32_t fa[4], fb[2];
  // A fragment: rows g and g+8, columns 2t, 2t+1 and 2t+8, 2t+9.
  fa[0] = pack_bf16x2(f32_to_bf16(a[g * 16 + 2 * t]), f32_to_bf16(a[g * 16 + 2 * t + 1]));
  fa[1] = pack_bf16x2(f32_to_bf16(a[(g + 8) * 16 + 2 * t]), f32_to_bf16(a[(g + 8) * 16 + 2 * t + 1]));
  fa[2] = pack_bf16x2(f32_to_bf16(a[g * 16 + 2 * t + 8]), f32_to_bf16(a[g * 16 + 2 * t + 9]));
  fa[3] = pack_bf16x2(f32_to_bf16(a[(g + 8) * 16 + 2 * t + 8]), f32_to_bf16(a[(g + 8) * 16 + 2 * t + 9]));
  // B fragment: column g (row g of W), rows (k) 2t, 2t+1 and 2t+8, 2t+9.
  fb[0] = pack_bf16x2(w[g * 16 + 2 * t], w[g * 16 + 2 * t + 1]);
  fb[1] = pack_bf16x2(w[g * 16 + 2 * t + 8], w[g * 16 + 2 * t + 9]);
  // C/D fragment: rows g and g+8, columns 2t and 2t+1.
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  mma_bf16_16816(acc, fa, fb);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}
