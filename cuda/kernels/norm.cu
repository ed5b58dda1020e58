// norm.cu: row reductions: RMSNorm and log-softmax.
#include "common.cuh"

// rmsnorm_block_f32 normalises groups of g elements, one block per group
// (blockIdx.x + gridDim.x·blockIdx.y < groups), for long groups (a hidden
// state row):
//   dst = x / sqrt(mean(x²) + eps) · w
// dst may be x: every thread reads its own elements again after the sum
// and before it writes them.
extern "C" __global__ void rmsnorm_block_f32(float* dst, const float* x, const float* w, int groups, int g, float eps) {
  __shared__ float scratch[32];
  int grp = blockIdx.x + gridDim.x * blockIdx.y;
  if (grp >= groups) return;
  const float* in = x + (size_t)grp * g;
  float* out = dst + (size_t)grp * g;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < g; i += blockDim.x) ss += in[i] * in[i];
  ss = block_sum(ss, scratch);
  float inv = 1.0f / sqrt_f(ss / (float)g + eps);
  for (int i = threadIdx.x; i < g; i += blockDim.x) out[i] = in[i] * inv * w[i];
}

// rmsnorm_warp_f32 is rmsnorm_block_f32 for short groups (a head of q or
// k, Qwen3's q/k norms): one warp per group, blockDim.x/32 groups per block.
extern "C" __global__ void rmsnorm_warp_f32(float* dst, const float* x, const float* w, int groups, int g, float eps) {
  int grp = (blockIdx.x + gridDim.x * blockIdx.y) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (grp >= groups) return;  // whole warps leave together
  const float* in = x + (size_t)grp * g;
  float* out = dst + (size_t)grp * g;
  float ss = 0.0f;
  for (int i = lane; i < g; i += 32) ss += in[i] * in[i];
  ss = warp_sum(ss);
  float inv = 1.0f / sqrt_f(ss / (float)g + eps);
  for (int i = lane; i < g; i += 32) out[i] = in[i] * inv * w[i];
}

// log_softmax_f32: dst = x − max − log Σ e^(x − max) for every row of cols
// elements, one block per row (blockIdx.x + gridDim.x·blockIdx.y < rows).
// dst may be x.
extern "C" __global__ void log_softmax_f32(float* dst, const float* x, int rows, int cols) {
  __shared__ float scratch[32];
  int r = blockIdx.x + gridDim.x * blockIdx.y;
  if (r >= rows) return;
  const float* in = x + (size_t)r * cols;
  float* out = dst + (size_t)r * cols;
  float m = NEG_INF;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) m = max_f(m, in[i]);
  m = block_max(m, scratch);
  float s = 0.0f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) s += exp_f(in[i] - m);
  s = block_sum(s, scratch);
  float ls = log_f(s);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) out[i] = (in[i] - m) - ls;
}
