// attention.cu: causal grouped-query attention over the paged KV cache
// (compute.Attention): a batch of sequences whose new tokens' queries are
// packed in q, each sequence's keys and values in cache blocks listed by
// its row of the block table, in the head-major block layout of kv_index.
// With window > 0 the query at position p sees keys p − window + 1 through
// p only (Mistral's and Gemma's sliding windows); with softcap > 0 each
// scaled score s becomes softcap·tanh(s/softcap) (Gemma 2).
//
// Both kernels use the online softmax (flash attention): keys are visited
// in tiles, and each query row keeps a running maximum m, a running
// denominator l and an unnormalised output o:
//   m' = max(m, max_j s_j),  p_j = e^(s_j − m'),
//   l  = l·e^(m − m') + Σ p_j,  o = o·e^(m − m') + Σ p_j·v_j
// and writes o / l at the end, so no score matrix is ever held.
//
// Precision: with a BF16 cache the queries are rounded to BF16 before their
// products with the keys, so that every q·k is a sum of exact BF16
// products (compute's "BF16 products"); the scale multiplies the scores
// after. Probabilities and values multiply in float.
//
//   attn_decode_*   one block per (query row, query head, split of the
//                   keys): for decode steps, where there are few query rows
//                   and the work is reading the cache. The keys of a long
//                   context are split over several blocks (flash-decoding)
//                   whose partial results attn_combine merges. Inside a
//                   block, each warp takes tiles of 32 keys: lane i scores
//                   key i, then every lane accumulates its 1/32 of the head
//                   dimension over the tile's 32 values.
//   attn_prefill_*  one block per tile of PF_BQ query rows of one sequence
//                   and one key/value head: the rows stack the query heads
//                   that share the key/value head, for consecutive tokens
//                   (row = token·group + head in group), so each key and
//                   value tile is read once per group and token tile.
#include "common.cuh"

#define MAX_HEAD_DIM 256

// dot8 adds the products of 8 queries with 8 consecutive cache values at
// p (16-byte aligned) to acc.
DEVICE_FN float dot8(const float* q, const float* p, float acc) {
  f32x4 lo = ld_f32x4(p), hi = ld_f32x4(p + 4);
  acc = fma_f(q[0], lo.x, acc);
  acc = fma_f(q[1], lo.y, acc);
  acc = fma_f(q[2], lo.z, acc);
  acc = fma_f(q[3], lo.w, acc);
  acc = fma_f(q[4], hi.x, acc);
  acc = fma_f(q[5], hi.y, acc);
  acc = fma_f(q[6], hi.z, acc);
  return fma_f(q[7], hi.w, acc);
}
DEVICE_FN float dot8(const float* q, const uint16_t* p, float acc) {
  u32x4 v = ld_u32x4(p);
  uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    acc = fma_f(q[2 * i], bits_f32(w[i] << 16), acc);
    acc = fma_f(q[2 * i + 1], bits_f32(w[i] & 0xffff0000u), acc);
  }
  return acc;
}

// seq_of_row returns the sequence whose query rows include r: the last s
// with qstart[s] <= r.
DEVICE_FN int seq_of_row(const int* qstart, int seqs, int r) {
  int lo = 0, hi = seqs - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (qstart[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// ------------------------------------------------------------------ decode

#define DEC_WARPS 4

// attn_decode computes query row blockIdx.x, head blockIdx.y, over keys
// k_lo + [split·split_len, (split+1)·split_len) ∩ [k_lo, pos] for split
// blockIdx.z of gridDim.z, k_lo the window's first key (0 without one). With one split it writes out; with several it writes its
// output normalised by its own denominator to part_o and its (m, l) to
// part_ml, for attn_combine. vec = 1 says that hd is a multiple of 8 and
// the caches are 16-byte aligned: keys are read 16 bytes at a time.
template <typename T>
static __device__ void attn_decode(float* out, float* part_o, float* part_ml, const float* q, const T* kc, const T* vc,
                                   const int* qstart, const int* ctxlen, const int* table, int seqs, int max_blocks,
                                   int heads, int kvheads, int hd, int bs, int nblocks, float scale, int window,
                                   float softcap, int split_len, int round_q, int vec, int* err) {
  __shared__ __align__(16) float qs[MAX_HEAD_DIM];
  __shared__ float wm[DEC_WARPS], wl[DEC_WARPS];
  __shared__ float wo[DEC_WARPS][MAX_HEAD_DIM];
  int r = blockIdx.x, h = blockIdx.y, sp = blockIdx.z, splits = gridDim.z;
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int s = seq_of_row(qstart, seqs, r);
  int pos = ctxlen[s] - (qstart[s + 1] - r);  // the query's position: it sees keys k_lo..pos
  int k_lo = window > 0 ? max_i(0, pos - window + 1) : 0;
  int k_begin = k_lo + sp * split_len, k_end = min_i(pos + 1, k_begin + split_len);
  int g = h / (heads / kvheads);
  const int* tab = table + (size_t)s * max_blocks;
  if (pos < 0 || (pos + bs) / bs > max_blocks) {  // inconsistent metadata: nothing is read
    if (threadIdx.x == 0) atomic_or(err, ERR_ATTENTION_META);
    k_end = k_begin;
  }

  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = q[((size_t)r * heads + h) * hd + d];
    qs[d] = round_q ? round_bf16(v) : v;
  }
  __syncthreads();

  float m = NEG_INF, l = 0.0f;
  float o[MAX_HEAD_DIM / 32];
#pragma unroll
  for (int j = 0; j < MAX_HEAD_DIM / 32; j++) o[j] = 0.0f;

  for (int t0 = k_begin + warp * 32; t0 < k_end; t0 += DEC_WARPS * 32) {
    // Scores: lane i takes key t0 + i.
    int key = t0 + lane;
    int slot = 0;
    float sc = NEG_INF;
    if (key < k_end) {
      int blk = tab[key / bs];
      if (blk < 0 || blk >= nblocks) {
        atomic_or(err, ERR_ATTENTION_META);
        blk = 0;
      }
      slot = blk * bs + key % bs;
      const T* kp = kc + kv_index(slot, g, kvheads, hd, bs);
      float dot = 0.0f;
      if (vec) {
        for (int d = 0; d < hd; d += 8) dot = dot8(qs + d, kp + d, dot);
      } else {
        for (int d = 0; d < hd; d++) dot = fma_f(qs[d], ld(kp, d), dot);
      }
      sc = dot * scale;
      if (softcap > 0.0f) sc = softcap * tanh_f(sc / softcap);
    }
    float m_new = max_f(m, warp_max(sc));  // finite: lane 0's key is in range
    float alpha = exp_f(m - m_new);        // 0 while m is −∞
    float p = key < k_end ? exp_f(sc - m_new) : 0.0f;
    l = l * alpha + warp_sum(p);
    m = m_new;
    // Values: every lane its dimensions d = lane + 32·j, over the tile's keys.
#pragma unroll
    for (int j = 0; j < MAX_HEAD_DIM / 32; j++) o[j] *= alpha;
    int nk = min_i(32, k_end - t0);
    for (int i = 0; i < nk; i++) {
      float pi = __shfl_sync(FULL_MASK, p, i);
      int si = __shfl_sync(FULL_MASK, slot, i);
      const T* vp = vc + kv_index(si, g, kvheads, hd, bs);
#pragma unroll
      for (int j = 0; j < MAX_HEAD_DIM / 32; j++) {
        int d = lane + 32 * j;
        if (d < hd) o[j] = fma_f(pi, ld(vp, d), o[j]);
      }
    }
  }

  // Merge the warps: weights e^(m_w − M), a warp that saw no key weighs 0.
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < MAX_HEAD_DIM / 32; j++) {
    int d = lane + 32 * j;
    if (d < hd) wo[warp][d] = o[j];
  }
  __syncthreads();
  float M = NEG_INF;
  for (int w = 0; w < DEC_WARPS; w++) M = max_f(M, wm[w]);
  float ew[DEC_WARPS], L = 0.0f;
  for (int w = 0; w < DEC_WARPS; w++) {
    ew[w] = wm[w] == NEG_INF ? 0.0f : exp_f(wm[w] - M);
    L += wl[w] * ew[w];
  }
  size_t part = ((size_t)r * heads + h) * splits + sp;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int w = 0; w < DEC_WARPS; w++) acc += wo[w][d] * ew[w];
    if (splits == 1)
      out[((size_t)r * heads + h) * hd + d] = acc / L;
    else
      part_o[part * hd + d] = L > 0.0f ? acc / L : 0.0f;
  }
  if (splits > 1 && threadIdx.x == 0) {
    part_ml[2 * part] = M;
    part_ml[2 * part + 1] = L;
  }
}

extern "C" __global__ void __launch_bounds__(128)
    attn_decode_f32(float* out, float* part_o, float* part_ml, const float* q, const float* kc, const float* vc,
                    const int* qstart, const int* ctxlen, const int* table, int seqs, int max_blocks, int heads,
                    int kvheads, int hd, int bs, int nblocks, float scale, int window, float softcap,
                    int split_len, int round_q, int vec, int* err) {
  attn_decode(out, part_o, part_ml, q, kc, vc, qstart, ctxlen, table, seqs, max_blocks, heads, kvheads, hd, bs, nblocks,
              scale, window, softcap, split_len, round_q, vec, err);
}
extern "C" __global__ void __launch_bounds__(128)
    attn_decode_bf16(float* out, float* part_o, float* part_ml, const float* q, const uint16_t* kc, const uint16_t* vc,
                     const int* qstart, const int* ctxlen, const int* table, int seqs, int max_blocks, int heads,
                     int kvheads, int hd, int bs, int nblocks, float scale, int window, float softcap,
                     int split_len, int round_q, int vec, int* err) {
  attn_decode(out, part_o, part_ml, q, kc, vc, qstart, ctxlen, table, seqs, max_blocks, heads, kvheads, hd, bs, nblocks,
              scale, window, softcap, split_len, round_q, vec, err);
}

// attn_combine merges the splits of query row blockIdx.x, head blockIdx.y:
// split p left o_p (normalised by its own l_p) and (m_p, l_p); the row's
// softmax over all its keys weighs them by w_p = l_p·e^(m_p − max m):
//   out = Σ w_p·o_p / Σ w_p
// A split that saw no key (l_p = 0) weighs nothing.
extern "C" __global__ void attn_combine(float* out, const float* part_o, const float* part_ml, int heads, int hd,
                                        int splits) {
  int r = blockIdx.x, h = blockIdx.y;
  size_t base = ((size_t)r * heads + h) * splits;
  float M = NEG_INF;
  for (int p = 0; p < splits; p++)
    if (part_ml[2 * (base + p) + 1] > 0.0f) M = max_f(M, part_ml[2 * (base + p)]);
  float W = 0.0f;
  for (int p = 0; p < splits; p++) {
    float l = part_ml[2 * (base + p) + 1];
    if (l > 0.0f) W += l * exp_f(part_ml[2 * (base + p)] - M);
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int p = 0; p < splits; p++) {
      float l = part_ml[2 * (base + p) + 1];
      if (l > 0.0f) acc += l * exp_f(part_ml[2 * (base + p)] - M) * part_o[(base + p) * hd + d];
    }
    out[((size_t)r * heads + h) * hd + d] = acc / W;
  }
}

// ----------------------------------------------------------------- prefill

#define PF_BQ 32  // query rows per block
#define PF_BK 32  // keys per step
#define PF_THREADS 128

// attn_prefill: blockIdx.y is the key/value head g; blockIdx.x counts the
// tiles of all sequences in order (sequence s has ceil(n_s·group / PF_BQ)
// tiles; blocks past the last tile return). Four threads share a query
// row r = threadIdx.x / 4: thread c = threadIdx.x % 4 scores keys c, c+4,
// ... of a tile and accumulates dimensions c, c+4, ... of the output.
//
// Dynamic shared memory, floats: Qs [PF_BQ][hd+1], KVs [PF_BK][hd+1] (the
// keys of a tile, then its values), Ps [PF_BQ][PF_BK+1] (probabilities);
// rows padded by one against bank conflicts.
template <typename T>
static __device__ void attn_prefill(float* out, const float* q, const T* kc, const T* vc, const int* qstart,
                                    const int* ctxlen, const int* table, int seqs, int max_blocks, int heads, int kvheads,
                                    int hd, int bs, int nblocks, float scale, int window, float softcap, int round_q,
                                    int* err) {
  DYNAMIC_SHARED(float, smem);
  const int ldq = hd + 1, ldp = PF_BK + 1;
  float* Qs = smem;
  float* KVs = Qs + PF_BQ * ldq;
  float* Ps = KVs + PF_BK * ldq;
  int group = heads / kvheads, g = blockIdx.y;

  // Find this block's sequence and tile (the same in every thread).
  int b = blockIdx.x, s = 0, n = 0;
  for (; s < seqs; s++) {
    n = qstart[s + 1] - qstart[s];
    int tiles = (n * group + PF_BQ - 1) / PF_BQ;
    if (b < tiles) break;
    b -= tiles;
  }
  if (s == seqs) return;
  int first = ctxlen[s] - n;  // position of the sequence's first new token
  int row0 = b * PF_BQ, nrows = min_i(PF_BQ, n * group - row0);
  int last = first + (row0 + nrows - 1) / group;  // the tile sees keys k_first..last
  // Under a window the tile's first row sees keys from its position −
  // window + 1: the tiles of keys before that are skipped.
  int k_first = window > 0 ? max_i(0, first + row0 / group - window + 1) / PF_BK * PF_BK : 0;
  if (first < 0 || (last + bs) / bs > max_blocks) {
    if (threadIdx.x == 0) atomic_or(err, ERR_ATTENTION_META);
    return;
  }
  const int* tab = table + (size_t)s * max_blocks;

  for (int i = threadIdx.x; i < PF_BQ * hd; i += blockDim.x) {
    int rr = i / hd, d = i % hd;
    float v = 0.0f;
    if (rr < nrows) {
      int sr = row0 + rr, tok = sr / group, hh = g * group + sr % group;
      v = q[((size_t)(qstart[s] + tok) * heads + hh) * hd + d];
      if (round_q) v = round_bf16(v);
    }
    Qs[rr * ldq + d] = v;
  }

  int r = threadIdx.x >> 2, c = threadIdx.x & 3;
  int my_pos = r < nrows ? first + (row0 + r) / group : -1;
  int my_lo = window > 0 ? my_pos - window + 1 : 0;  // the row's first key
  float m = NEG_INF, l = 0.0f;
  float o[MAX_HEAD_DIM / 4];
#pragma unroll
  for (int j = 0; j < MAX_HEAD_DIM / 4; j++) o[j] = 0.0f;

  for (int k0 = k_first; k0 <= last; k0 += PF_BK) {
    // Keys of the tile (zeros past the last key).
    __syncthreads();  // the previous tile's values have been read
    for (int i = threadIdx.x; i < PF_BK * hd; i += blockDim.x) {
      int kk = i / hd, d = i % hd, key = k0 + kk;
      float v = 0.0f;
      if (key <= last) {
        int blk = tab[key / bs];
        if (blk < 0 || blk >= nblocks) {
          atomic_or(err, ERR_ATTENTION_META);
          blk = 0;
        }
        v = ld(kc, kv_index(blk * bs + key % bs, g, kvheads, hd, bs) + d);
      }
      KVs[kk * ldq + d] = v;
    }
    __syncthreads();

    float sc[PF_BK / 4], tmax = NEG_INF;
#pragma unroll
    for (int i = 0; i < PF_BK / 4; i++) {
      int kk = c + 4 * i;
      sc[i] = NEG_INF;
      if (k0 + kk <= my_pos && k0 + kk >= my_lo) {
        float dot = 0.0f;
        for (int d = 0; d < hd; d++) dot = fma_f(Qs[r * ldq + d], KVs[kk * ldq + d], dot);
        sc[i] = dot * scale;
        if (softcap > 0.0f) sc[i] = softcap * tanh_f(sc[i] / softcap);
      }
      tmax = max_f(tmax, sc[i]);
    }
    tmax = max_f(tmax, __shfl_xor_sync(FULL_MASK, tmax, 1));
    tmax = max_f(tmax, __shfl_xor_sync(FULL_MASK, tmax, 2));
    float m_new = max_f(m, tmax);
    float alpha = m_new == NEG_INF ? 1.0f : exp_f(m - m_new);
    float psum = 0.0f;
#pragma unroll
    for (int i = 0; i < PF_BK / 4; i++) {
      float p = sc[i] == NEG_INF ? 0.0f : exp_f(sc[i] - m_new);
      Ps[r * ldp + c + 4 * i] = p;
      psum += p;
    }
    psum += __shfl_xor_sync(FULL_MASK, psum, 1);
    psum += __shfl_xor_sync(FULL_MASK, psum, 2);
    l = l * alpha + psum;
    m = m_new;

    // Values of the tile, into the same buffer.
    __syncthreads();  // every score of the tile is done
    for (int i = threadIdx.x; i < PF_BK * hd; i += blockDim.x) {
      int kk = i / hd, d = i % hd, key = k0 + kk;
      float v = 0.0f;
      if (key <= last) {
        int blk = tab[key / bs];
        if (blk < 0 || blk >= nblocks) blk = 0;
        v = ld(vc, kv_index(blk * bs + key % bs, g, kvheads, hd, bs) + d);
      }
      KVs[kk * ldq + d] = v;
    }
    __syncthreads();

#pragma unroll
    for (int j = 0; j < MAX_HEAD_DIM / 4; j++) o[j] *= alpha;
    for (int kk = 0; kk < PF_BK; kk++) {
      float p = Ps[r * ldp + kk];
#pragma unroll
      for (int j = 0; j < MAX_HEAD_DIM / 4; j++) {
        int d = c + 4 * j;
        if (d < hd) o[j] = fma_f(p, KVs[kk * ldq + d], o[j]);
      }
    }
  }

  if (r < nrows) {
    int sr = row0 + r, tok = sr / group, hh = g * group + sr % group;
    float* dst = out + ((size_t)(qstart[s] + tok) * heads + hh) * hd;
    float inv = 1.0f / l;
#pragma unroll
    for (int j = 0; j < MAX_HEAD_DIM / 4; j++) {
      int d = c + 4 * j;
      if (d < hd) dst[d] = o[j] * inv;
    }
  }
}

extern "C" __global__ void __launch_bounds__(PF_THREADS)
    attn_prefill_f32(float* out, const float* q, const float* kc, const float* vc, const int* qstart, const int* ctxlen,
                     const int* table, int seqs, int max_blocks, int heads, int kvheads, int hd, int bs, int nblocks,
                     float scale, int window, float softcap, int round_q, int* err) {
  attn_prefill(out, q, kc, vc, qstart, ctxlen, table, seqs, max_blocks, heads, kvheads, hd, bs, nblocks, scale, window,
               softcap, round_q, err);
}
extern "C" __global__ void __launch_bounds__(PF_THREADS)
    attn_prefill_bf16(float* out, const float* q, const uint16_t* kc, const uint16_t* vc, const int* qstart,
                      const int* ctxlen, const int* table, int seqs, int max_blocks, int heads, int kvheads, int hd,
                      int bs, int nblocks, float scale, int window, float softcap, int round_q, int* err) {
  attn_prefill(out, q, kc, vc, qstart, ctxlen, table, seqs, max_blocks, heads, kvheads, hd, bs, nblocks, scale, window,
               softcap, round_q, err);
}
