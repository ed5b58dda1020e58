// common.cuh: helpers shared by the backend's kernels.
#ifndef CLAWRL_COMMON_CUH
#define CLAWRL_COMMON_CUH

#include "cuda_compat.h"

// Error bits. Kernels that index with values read from the device (token
// ids, positions, cache slots, block tables) check them and, for a bad one,
// set a bit in the backend's error word instead of touching memory out of
// bounds; the backend reports the word at the next Synchronize or Read.
// Keep in sync with errorBits in backend.go.
#define ERR_EMBEDDING_ID 1
#define ERR_ROPE_POSITION 2
#define ERR_KV_SLOT 4
#define ERR_GATHER_INDEX 8
#define ERR_ATTENTION_META 16

#define NEG_INF (-__builtin_inff())

DEVICE_FN int min_i(int a, int b) { return a < b ? a : b; }
DEVICE_FN int max_i(int a, int b) { return a > b ? a : b; }

// Element access for tensors that are F32 or BF16 (weights, KV caches):
// ld widens exactly, st rounds to nearest even.
DEVICE_FN float ld(const float* p, size_t i) { return p[i]; }
DEVICE_FN float ld(const uint16_t* p, size_t i) { return bf16_to_f32(p[i]); }
DEVICE_FN void st(float* p, size_t i, float v) { p[i] = v; }
DEVICE_FN void st(uint16_t* p, size_t i, float v) { p[i] = f32_to_bf16(v); }

// tanh_f is tanh from exp_f: 1 − 2/(e^{2|x|} + 1) with x's sign, and
// below |x| = 1/8, where that form cancels, its Taylor series to x⁷
// (the next term is under 2e-10 relative there). Soft-caps use it.
DEVICE_FN float tanh_f(float x) {
  float a = x < 0.0f ? -x : x;
  float t;
  if (a < 0.125f) {
    float a2 = a * a;
    t = a * (1.0f + a2 * (-1.0f / 3 + a2 * (2.0f / 15 + a2 * (-17.0f / 315))));
  } else {
    t = 1.0f - 2.0f / (exp_f(2.0f * a) + 1.0f);
  }
  return x < 0.0f ? -t : t;
}

// round_bf16 rounds a float to the nearest BF16 value (ties to even).
DEVICE_FN float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// 16-byte loads of global memory (the address must be 16-byte aligned).
#ifdef CUDA_DEVICE_MODE
DEVICE_FN f32x4 ld_f32x4(const float* p) { return *(const f32x4*)p; }
DEVICE_FN u32x4 ld_u32x4(const uint16_t* p) { return *(const u32x4*)p; }
#else
DEVICE_FN f32x4 ld_f32x4(const float* p) {
  f32x4 v;
  memcpy(&v, p, 16);
  return v;
}
DEVICE_FN u32x4 ld_u32x4(const uint16_t* p) {
  u32x4 v;
  memcpy(&v, p, 16);
  return v;
}
#endif

// kv_index is compute.Attention.KVIndex: the element of a cache tensor at
// which key/value head g of slot starts. The cache is made of blocks of bs
// slots, head-major inside a block.
DEVICE_FN size_t kv_index(int slot, int g, int kvheads, int hd, int bs) {
  return ((size_t)(slot / bs) * kvheads + g) * bs * hd + (size_t)(slot % bs) * hd;
}

#endif  // CLAWRL_COMMON_CUH
