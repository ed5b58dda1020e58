// elementwise.cu: the memory-bound ops of the forward pass: residual adds,
// the SwiGLU and GELU gates, scales and soft-caps, BF16 conversions, row gathers (embeddings and
// activation rows), single-element gathers, RoPE and KV-cache writes.
// They are one thread per element (or per pair, per row) and grid-stride
// loops where the count is open-ended: coalesced loads reach the memory
// bandwidth without more cleverness.
#include "common.cuh"

// add_f32: dst = a + b over n elements (dst may be a or b).
extern "C" __global__ void add_f32(float* dst, const float* a, const float* b, int n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = a[i] + b[i];
}

// silu_mul_f32: dst = silu(gate)·up = gate / (1 + e^-gate) · up (dst may be
// gate or up).
extern "C" __global__ void silu_mul_f32(float* dst, const float* gate, const float* up, int n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x) {
    float g = gate[i];
    dst[i] = g / (1.0f + exp_f(-g)) * up[i];
  }
}

// gelu_mul_f32: dst = gelu(gate)·up with GELU's tanh form,
// 0.5·g·(1 + tanh(z)), z = √(2/π)·(g + 0.044715·g³) (Gemma's MLP; dst may
// be gate or up), computed as g·σ(2z) = g / (1 + e^(−2z)), the same
// value without 1 + tanh's cancellation for negative g.
extern "C" __global__ void gelu_mul_f32(float* dst, const float* gate, const float* up, int n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x) {
    float g = gate[i];
    float z2 = 1.5957691216057308f * (g + 0.044715f * g * g * g);
    dst[i] = g / (1.0f + exp_f(-z2)) * up[i];
  }
}

// scale_f32: x *= alpha over n elements (Gemma's embedding scale,
// Granite's multipliers).
extern "C" __global__ void scale_f32(float* x, float alpha, int n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x)
    x[i] *= alpha;
}

// softcap_f32: x = cap·tanh(x/cap) over n elements (Gemma 2's logits);
// softcap_backward_f32: dx *= 1 − (y/cap)², y the capped values.
extern "C" __global__ void softcap_f32(float* x, float cap, int n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = cap * tanh_f(x[i] / cap);
}
extern "C" __global__ void softcap_backward_f32(float* dx, const float* y, float cap, int n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x) {
    float u = y[i] / cap;
    dx[i] *= 1.0f - u * u;
  }
}

// convert_f32_bf16 rounds n floats to BF16 (nearest even); convert_bf16_f32
// widens n BF16 values exactly.
extern "C" __global__ void convert_f32_bf16(uint16_t* dst, const float* src, int n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = f32_to_bf16(src[i]);
}
extern "C" __global__ void convert_bf16_f32(float* dst, const uint16_t* src, int n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = bf16_to_f32(src[i]);
}

// embedding: dst[i] = table[ids[i]] for i < n, rows of cols elements; one
// block per id (blockIdx.x + gridDim.x·blockIdx.y, so more than 65535 ids
// fit). An id outside [0, rows) sets ERR_EMBEDDING_ID and writes zeros.
template <typename T>
static __device__ void embedding(float* dst, const T* table, const int* ids, int n, int rows, int cols, int* err) {
  int i = blockIdx.x + gridDim.x * blockIdx.y;
  if (i >= n) return;
  int id = ids[i];
  float* out = dst + (size_t)i * cols;
  if (id < 0 || id >= rows) {
    if (threadIdx.x == 0) atomic_or(err, ERR_EMBEDDING_ID);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = 0.0f;
    return;
  }
  const T* row = table + (size_t)id * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = ld(row, c);
}
extern "C" __global__ void embedding_f32(float* dst, const float* table, const int* ids, int n, int rows, int cols, int* err) {
  embedding(dst, table, ids, n, rows, cols, err);
}
extern "C" __global__ void embedding_bf16(float* dst, const uint16_t* table, const int* ids, int n, int rows, int cols, int* err) {
  embedding(dst, table, ids, n, rows, cols, err);
}

// gather_f32: dst[i] = x[i·cols + idx[i]] for i < rows. An index outside
// [0, cols) sets ERR_GATHER_INDEX and writes 0.
extern "C" __global__ void gather_f32(float* dst, const float* x, const int* idx, int rows, int cols, int* err) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  int j = idx[i];
  if (j < 0 || j >= cols) {
    atomic_or(err, ERR_GATHER_INDEX);
    dst[i] = 0.0f;
    return;
  }
  dst[i] = x[(size_t)i * cols + j];
}

// rope_f32 rotates x [rows, cols] in place: in every head of head_dim
// elements, element j pairs with j + head_dim/2 and the pair turns by the
// angle of the row's position (rotate-half, as Hugging Face checkpoints):
//   x1' = x1·cos − x2·sin,  x2' = x2·cos + x1·sin
// with cos, sin [max_pos, head_dim/2]. One block per row (blockIdx.x +
// gridDim.x·blockIdx.y), one thread per pair. A position outside
// [0, max_pos) sets ERR_ROPE_POSITION and leaves the row.
extern "C" __global__ void rope_f32(float* x, const int* pos, const float* cos_t, const float* sin_t, int rows, int cols,
                                    int head_dim, int max_pos, int* err) {
  int r = blockIdx.x + gridDim.x * blockIdx.y;
  if (r >= rows) return;
  int p = pos[r];
  if (p < 0 || p >= max_pos) {
    if (threadIdx.x == 0) atomic_or(err, ERR_ROPE_POSITION);
    return;
  }
  int half = head_dim / 2;
  const float* c = cos_t + (size_t)p * half;
  const float* s = sin_t + (size_t)p * half;
  float* row = x + (size_t)r * cols;
  for (int i = threadIdx.x; i < cols / 2; i += blockDim.x) {
    int h = i / half, j = i % half;
    float* x1 = row + h * head_dim + j;
    float* x2 = x1 + half;
    float a = *x1, b = *x2;
    *x1 = a * c[j] - b * s[j];
    *x2 = b * c[j] + a * s[j];
  }
}

// store_kv writes the rows of k and v ([tokens, kvheads·hd]) into the cache
// at the slots given, in the layout of kv_index; a BF16 cache rounds to
// nearest even. One block per token (blockIdx.x + gridDim.x·blockIdx.y). A
// slot outside [0, nslots) sets ERR_KV_SLOT and writes nothing.
template <typename T>
static __device__ void store_kv(T* kc, T* vc, const float* k, const float* v, const int* slots, int tokens, int kvheads,
                                int hd, int bs, int nslots, int* err) {
  int t = blockIdx.x + gridDim.x * blockIdx.y;
  if (t >= tokens) return;
  int slot = slots[t];
  if (slot < 0 || slot >= nslots) {
    if (threadIdx.x == 0) atomic_or(err, ERR_KV_SLOT);
    return;
  }
  int w = kvheads * hd;
  for (int e = threadIdx.x; e < w; e += blockDim.x) {
    int g = e / hd, d = e % hd;
    size_t dst = kv_index(slot, g, kvheads, hd, bs) + d;
    st(kc, dst, k[(size_t)t * w + e]);
    st(vc, dst, v[(size_t)t * w + e]);
  }
}
extern "C" __global__ void store_kv_f32(float* kc, float* vc, const float* k, const float* v, const int* slots, int tokens,
                                        int kvheads, int hd, int bs, int nslots, int* err) {
  store_kv(kc, vc, k, v, slots, tokens, kvheads, hd, bs, nslots, err);
}
extern "C" __global__ void store_kv_bf16(uint16_t* kc, uint16_t* vc, const float* k, const float* v, const int* slots,
                                         int tokens, int kvheads, int hd, int bs, int nslots, int* err) {
  store_kv(kc, vc, k, v, slots, tokens, kvheads, hd, bs, nslots, err);
}
