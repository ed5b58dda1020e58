// gemm.cu: the products of linear layers, C[m][n] = Σ_k A[m][k]·W[n][k] +
// bias[n], with activations A in F32 [M, K] and the weight W as checkpoints
// store it, [N, K] (so C = A·Wᵀ), accumulated in float.
//
// With a BF16 weight the activations are rounded to BF16 (nearest even)
// before they are multiplied, on every path, so that the products are
// exact BF16×BF16 in float and a decode step (GEMV) computes the same
// products as a prefill (tensor cores); only the order of the float sums
// differs. This is compute.Backend's "BF16 products" precision, as the CPU
// backend's PrecisionBF16.
//
//   gemv_*    M ≤ GEMV_MAX_M (decode): bound by reading W once; one warp per
//             output column, 16-byte loads of W, x from L1/L2.
//   gemm_f32  F32 weights, larger M: a SIMT tiled product (64×64 tiles).
//   gemm_bf16_* BF16 weights, larger M: tensor cores (mma.sync m16n8k16),
//             BM×BN tiles of C per block, BK = 32 per step through shared
//             memory.
//
// vec = 1 tells a kernel that K is a multiple of 8 and A and W are 16-byte
// aligned, so it may use vector loads.
#include "common.cuh"

// ------------------------------------------------------------------- GEMV

#define GEMV_MAX_M 8
#define GEMV_WARPS 8  // output columns per block

template <bool BF16W>
static __device__ void gemv(float* C, const float* A, const void* Wv, const float* bias, int M, int N, int K, int vec) {
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int n = blockIdx.x * GEMV_WARPS + warp;
  if (n >= N) return;  // whole warps leave together
  float acc[GEMV_MAX_M];
#pragma unroll
  for (int m = 0; m < GEMV_MAX_M; m++) acc[m] = 0.0f;

  if (vec) {
    // Each lane takes 8 consecutive k per step: a warp reads 512 bytes of a
    // BF16 row (1 KiB of an F32 row) per step, coalesced.
    for (int k = lane * 8; k < K; k += 256) {
      float w[8];
      if (BF16W) {
        u32x4 p = ld_u32x4((const uint16_t*)Wv + (size_t)n * K + k);
        uint32_t words[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
          w[2 * i] = bits_f32(words[i] << 16);
          w[2 * i + 1] = bits_f32(words[i] & 0xffff0000u);
        }
      } else {
        f32x4 lo = ld_f32x4((const float*)Wv + (size_t)n * K + k);
        f32x4 hi = ld_f32x4((const float*)Wv + (size_t)n * K + k + 4);
        w[0] = lo.x, w[1] = lo.y, w[2] = lo.z, w[3] = lo.w;
        w[4] = hi.x, w[5] = hi.y, w[6] = hi.z, w[7] = hi.w;
      }
#pragma unroll
      for (int m = 0; m < GEMV_MAX_M; m++) {
        if (m < M) {
          f32x4 lo = ld_f32x4(A + (size_t)m * K + k);
          f32x4 hi = ld_f32x4(A + (size_t)m * K + k + 4);
          float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
          float s = acc[m];
#pragma unroll
          for (int i = 0; i < 8; i++) s = fma_f(BF16W ? round_bf16(x[i]) : x[i], w[i], s);
          acc[m] = s;
        }
      }
    }
  } else {
    for (int k = lane; k < K; k += 32) {
      float w = BF16W ? ld((const uint16_t*)Wv, (size_t)n * K + k) : ld((const float*)Wv, (size_t)n * K + k);
#pragma unroll
      for (int m = 0; m < GEMV_MAX_M; m++) {
        if (m < M) {
          float x = A[(size_t)m * K + k];
          acc[m] = fma_f(BF16W ? round_bf16(x) : x, w, acc[m]);
        }
      }
    }
  }
  float b = bias ? bias[n] : 0.0f;
#pragma unroll
  for (int m = 0; m < GEMV_MAX_M; m++) {
    if (m < M) {
      float s = warp_sum(acc[m]);
      if (lane == 0) C[(size_t)m * N + n] = s + b;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256)
    gemv_bf16(float* C, const float* A, const uint16_t* W, const float* bias, int M, int N, int K, int vec) {
  gemv<true>(C, A, W, bias, M, N, K, vec);
}
extern "C" __global__ void __launch_bounds__(256)
    gemv_f32(float* C, const float* A, const float* W, const float* bias, int M, int N, int K, int vec) {
  gemv<false>(C, A, W, bias, M, N, K, vec);
}

// --------------------------------------------------------------- SIMT F32

// gemm_f32: 64×64 tiles of C per block of 256 threads, each thread 4×4 of
// them; A and W pass through shared memory in steps of 16 k, stored
// k-major so that a thread reads its 4 rows and 4 columns as broadcasts.
extern "C" __global__ void __launch_bounds__(256)
    gemm_f32(float* C, const float* A, const float* W, const float* bias, int M, int N, int K) {
  __shared__ float As[16][64 + 4];  // As[k][m]
  __shared__ float Ws[16][64 + 4];  // Ws[k][n]
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += 16) {
    for (int i = threadIdx.x; i < 64 * 16; i += 256) {
      int r = i / 16, kk = i % 16;  // consecutive threads read consecutive k of a row
      As[kk][r] = (m0 + r < M && k0 + kk < K) ? A[(size_t)(m0 + r) * K + k0 + kk] : 0.0f;
      Ws[kk][r] = (n0 + r < N && k0 + kk < K) ? W[(size_t)(n0 + r) * K + k0 + kk] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; kk++) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        a[i] = As[kk][ty * 4 + i];
        b[i] = Ws[kk][tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fma_f(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    int m = m0 + ty * 4 + i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      int n = n0 + tx * 4 + j;
      if (n < N) C[(size_t)m * N + n] = acc[i][j] + (bias ? bias[n] : 0.0f);
    }
  }
}

// ---------------------------------------------------------- tensor cores

// gemm_bf16_mma computes a BM×BN tile of C with WM×WN warps, each warp a
// (BM/WM)×(BN/WN) sub-tile made of m16n8 tiles of mma.sync m16n8k16.
//
// Per step of BK = 32 k, the block stages A (rounded to BF16) and W in
// shared memory as 32-bit words holding BF16 pairs (k, k+1), rows padded to
// LDW = 20 words so that the fragment loads below fall in distinct banks
// (row g of a fragment starts at bank 20·g mod 32: 0, 20, 8, 28, 16, 4, 24,
// 12, and the 4 lanes t of a row add t).
//
// Fragments, from the PTX ISA (g = lane / 4, t = lane % 4; a word holds
// the pair of k = 2t, 2t+1 or 2t+8, 2t+9 of the 16 k of an mma step ks):
//   A tile at row r0:  a[0] = A[r0+g][ks+2t..]    a[1] = A[r0+g+8][ks+2t..]
//                      a[2] = A[r0+g][ks+2t+8..]  a[3] = A[r0+g+8][ks+2t+8..]
//   B tile at column n0 (B[k][n] = W[n][k], a row of W is a column of B):
//                      b[0] = W[n0+g][ks+2t..]    b[1] = W[n0+g][ks+2t+8..]
//   C tile:            c[0], c[1] = C[r0+g][n0+2t], C[r0+g][n0+2t+1]
//                      c[2], c[3] = C[r0+g+8][n0+2t], C[r0+g+8][n0+2t+1]
#define MMA_BK 32
#define MMA_LDW (MMA_BK / 2 + 4)  // words per staged row

// mma_load reads the step at k0 of the tiles of A (BM rows) and W (BN
// rows) into registers: AL loads of 4 floats and WL loads of 8 BF16 per
// thread, zeros past the edges.
template <int AL, int WL, int NT>
DEVICE_FN void mma_load(float (&xa)[AL][4], uint32_t (&xw)[WL][4], const float* A, const uint16_t* W, int M, int N, int K,
                        int m0, int n0, int k0, int vec) {
#pragma unroll
  for (int l = 0; l < AL; l++) {
    int c = threadIdx.x + l * NT;
    int r = c / (MMA_BK / 4), kq = (c % (MMA_BK / 4)) * 4;
    int m = m0 + r, k = k0 + kq;
    xa[l][0] = xa[l][1] = xa[l][2] = xa[l][3] = 0.0f;
    if (m < M) {
      if (vec) {
        if (k < K) {
          f32x4 v = ld_f32x4(A + (size_t)m * K + k);
          xa[l][0] = v.x, xa[l][1] = v.y, xa[l][2] = v.z, xa[l][3] = v.w;
        }
      } else {
#pragma unroll
        for (int i = 0; i < 4; i++)
          if (k + i < K) xa[l][i] = A[(size_t)m * K + k + i];
      }
    }
  }
#pragma unroll
  for (int l = 0; l < WL; l++) {
    int c = threadIdx.x + l * NT;
    int r = c / (MMA_BK / 8), ko = (c % (MMA_BK / 8)) * 8;
    int n = n0 + r, k = k0 + ko;
    xw[l][0] = xw[l][1] = xw[l][2] = xw[l][3] = 0;
    if (n < N) {
      if (vec) {
        if (k < K) {
          u32x4 v = ld_u32x4(W + (size_t)n * K + k);
          xw[l][0] = v.x, xw[l][1] = v.y, xw[l][2] = v.z, xw[l][3] = v.w;
        }
      } else {
#pragma unroll
        for (int i = 0; i < 4; i++) {
          uint16_t lo = k + 2 * i < K ? W[(size_t)n * K + k + 2 * i] : 0;
          uint16_t hi = k + 2 * i + 1 < K ? W[(size_t)n * K + k + 2 * i + 1] : 0;
          xw[l][i] = pack_bf16x2(lo, hi);
        }
      }
    }
  }
}

// mma_store puts the loaded tiles in shared memory, A rounded to BF16.
template <int AL, int WL, int NT>
DEVICE_FN void mma_store(const float (&xa)[AL][4], const uint32_t (&xw)[WL][4], uint32_t* As, uint32_t* Bs) {
#pragma unroll
  for (int l = 0; l < AL; l++) {
    int c = threadIdx.x + l * NT;
    int r = c / (MMA_BK / 4), kq = (c % (MMA_BK / 4)) * 4;
    As[r * MMA_LDW + kq / 2] = pack_bf16x2(f32_to_bf16(xa[l][0]), f32_to_bf16(xa[l][1]));
    As[r * MMA_LDW + kq / 2 + 1] = pack_bf16x2(f32_to_bf16(xa[l][2]), f32_to_bf16(xa[l][3]));
  }
#pragma unroll
  for (int l = 0; l < WL; l++) {
    int c = threadIdx.x + l * NT;
    int r = c / (MMA_BK / 8), ko = (c % (MMA_BK / 8)) * 8;
#pragma unroll
    for (int i = 0; i < 4; i++) Bs[r * MMA_LDW + ko / 2 + i] = xw[l][i];
  }
}

template <int BM, int BN, int WM, int WN>
static __device__ void gemm_bf16_mma(float* C, const float* A, const uint16_t* W, const float* bias, int M, int N, int K,
                                     int vec) {
  constexpr int NT = WM * WN * 32;
  constexpr int TM = BM / WM, TN = BN / WN;  // warp tile
  constexpr int MI = TM / 16, NI = TN / 8;   // mma tiles per warp
  __shared__ uint32_t As[BM * MMA_LDW];
  __shared__ uint32_t Bs[BN * MMA_LDW];

  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  int wm = warp / WN, wn = warp % WN;
  int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; i++)
#pragma unroll
    for (int j = 0; j < NI; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

  // The next step's tiles are loaded from global memory into registers
  // (xa, xw) while the tensor cores work on the current one from shared
  // memory, so that the loads' latency hides behind the products.
  constexpr int AL = BM * (MMA_BK / 4) / NT;  // 4-float loads of A per thread
  constexpr int WL = BN * (MMA_BK / 8) / NT;  // 8-BF16 loads of W per thread
  float xa[AL][4];
  uint32_t xw[WL][4];
  mma_load<AL, WL, NT>(xa, xw, A, W, M, N, K, m0, n0, 0, vec);
  mma_store<AL, WL, NT>(xa, xw, As, Bs);
  __syncthreads();
  for (int k0 = 0; k0 < K; k0 += MMA_BK) {
    bool more = k0 + MMA_BK < K;
    if (more) mma_load<AL, WL, NT>(xa, xw, A, W, M, N, K, m0, n0, k0 + MMA_BK, vec);

#pragma unroll
    for (int ks = 0; ks < MMA_BK; ks += 16) {
      uint32_t a[MI][4], b[NI][2];
#pragma unroll
      for (int i = 0; i < MI; i++) {
        const uint32_t* p = As + (wm * TM + i * 16 + g) * MMA_LDW + ks / 2 + t;
        a[i][0] = p[0];
        a[i][1] = p[8 * MMA_LDW];
        a[i][2] = p[4];
        a[i][3] = p[8 * MMA_LDW + 4];
      }
#pragma unroll
      for (int j = 0; j < NI; j++) {
        const uint32_t* p = Bs + (wn * TN + j * 8 + g) * MMA_LDW + ks / 2 + t;
        b[j][0] = p[0];
        b[j][1] = p[4];
      }
#pragma unroll
      for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++) mma_bf16_16816(acc[i][j], a[i], b[j]);
    }
    __syncthreads();  // every warp is done with the tiles
    if (more) {
      mma_store<AL, WL, NT>(xa, xw, As, Bs);
      __syncthreads();
    }
  }

#pragma unroll
  for (int i = 0; i < MI; i++) {
#pragma unroll
    for (int j = 0; j < NI; j++) {
      int n = n0 + wn * TN + j * 8 + 2 * t;
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int m = m0 + wm * TM + i * 16 + g + (e >= 2 ? 8 : 0);
        int nn = n + (e & 1);
        if (m < M && nn < N) C[(size_t)m * N + nn] = acc[i][j][e] + (bias ? bias[nn] : 0.0f);
      }
    }
  }
}

// 64×64 tiles with 4 warps (2×2, 32×32 each): for products with few tiles.
extern "C" __global__ void __launch_bounds__(128)
    gemm_bf16_64x64(float* C, const float* A, const uint16_t* W, const float* bias, int M, int N, int K, int vec) {
  gemm_bf16_mma<64, 64, 2, 2>(C, A, W, bias, M, N, K, vec);
}

// 128×128 tiles with 8 warps (2×4, 64×32 each): for large products.
extern "C" __global__ void __launch_bounds__(256)
    gemm_bf16_128x128(float* C, const float* A, const uint16_t* W, const float* bias, int M, int N, int K, int vec) {
  gemm_bf16_mma<128, 128, 2, 4>(C, A, W, bias, M, N, K, vec);
}
