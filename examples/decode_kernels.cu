/* mdr example — the decode loop's kernels: embedding gather, RMSNorm, the
 * MoE-style accumulate, greedy sampling (argmax per row) and an empty kernel
 * (see decode_kernels.h for the contracts).
 *
 * Memory layout: row-major BF16, one block per row, 16-byte accesses (8 BF16
 * per uint4), grid-stride over the row. Reductions are a fixed-order warp
 * shuffle tree followed by one warp over the per-warp sums, so a given launch
 * configuration gives bit-identical results run after run (what the example's
 * eager-versus-graph comparison relies on).
 * Launch limits: rows <= 2^31-1, width % 8 == 0. */
#include "decode_kernels.h"

#include <cuda_bf16.h>

namespace {

constexpr int kGatherThreads = 128;
constexpr int kNormThreads = 128; /* 4 warps; must be a multiple of 32, <= 1024 */
constexpr int kMoeThreads = 128;
constexpr int kSampleThreads = 256; /* 8 warps; must be a multiple of 32, <= 1024 */
constexpr int kVec = 8;           /* BF16 per 16-byte access */
constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xffffffffu;  /* shuffle mask: every lane */
constexpr size_t kMaxGridX = 0x7fffffffu;    /* gridDim.x limit: one block per row */
constexpr float kInv2Pow24 = 1.0f / 16777216.0f; /* a 24-bit integer to [0, 1) */

union Bf16x8 {
  uint4 raw;
  __nv_bfloat16 h[kVec];
};

__device__ __forceinline__ uint32_t mix32(uint32_t h) {
  h ^= h >> 16; h *= 0x7feb352du;
  h ^= h >> 15; h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

/* Routing weight of (token id, slot): in [0.5, 1.5) / slots. */
__device__ __forceinline__ float route_weight(uint32_t id, uint32_t slot, uint32_t slots) {
  uint32_t h = mix32(id * 0x9e3779b9u + slot * 0x85ebca6bu + 1u);
  float u = (float)(h >> 8) * kInv2Pow24;
  return (0.5f + u) / (float)slots;
}

__global__ void gather_kernel(uint4 *hidden, const uint4 *emb, const uint32_t *ids,
                              size_t tokens, size_t vecs_per_row, size_t vocab) {
  size_t r = blockIdx.x;
  uint4 *dst = hidden + r * vecs_per_row;
  if (r < tokens) {
    const uint4 *src = emb + (size_t)(ids[r] % vocab) * vecs_per_row;
    for (size_t i = threadIdx.x; i < vecs_per_row; i += blockDim.x) dst[i] = src[i];
  } else {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (size_t i = threadIdx.x; i < vecs_per_row; i += blockDim.x) dst[i] = zero;
  }
}

__device__ __forceinline__ float block_sum(float v, float *warp_sums) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullWarp, v, o);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, nwarps = blockDim.x / kWarpSize;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? warp_sums[lane] : 0.0f;
  for (int o = kWarpSize / 2; o > 0; o >>= 1) t += __shfl_xor_sync(kFullWarp, t, o);
  return t; /* every thread holds the block's sum */
}

__device__ __forceinline__ void load_row8(const uint4 *x, const uint4 *add, size_t i, float v[kVec]) {
  Bf16x8 a;
  a.raw = x[i];
  for (int k = 0; k < kVec; ++k) v[k] = __bfloat162float(a.h[k]);
  if (add) {
    Bf16x8 b;
    b.raw = add[i];
    for (int k = 0; k < kVec; ++k) v[k] += __bfloat162float(b.h[k]);
  }
}

__global__ void rmsnorm_kernel(uint4 *out, const uint4 *x, const uint4 *add, const uint4 *gamma,
                               size_t tokens, size_t vecs_per_row, float inv_width, float eps) {
  __shared__ float warp_sums[kWarpSize]; /* one per warp: at most 1024 / 32 */
  const size_t r = blockIdx.x;
  uint4 *dst = out + r * vecs_per_row;
  if (r >= tokens) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (size_t i = threadIdx.x; i < vecs_per_row; i += blockDim.x) dst[i] = zero;
    return;
  }
  const uint4 *xr = x + r * vecs_per_row;
  const uint4 *ar = add ? add + r * vecs_per_row : nullptr;
  float ss = 0.0f;
  for (size_t i = threadIdx.x; i < vecs_per_row; i += blockDim.x) {
    float v[kVec];
    load_row8(xr, ar, i, v);
    for (int k = 0; k < kVec; ++k) ss += v[k] * v[k];
  }
  const float inv_rms = rsqrtf(block_sum(ss, warp_sums) * inv_width + eps);
  for (size_t i = threadIdx.x; i < vecs_per_row; i += blockDim.x) {
    float v[kVec];
    load_row8(xr, ar, i, v);
    Bf16x8 g, o;
    g.raw = gamma[i];
    for (int k = 0; k < kVec; ++k) o.h[k] = __float2bfloat16_rn(v[k] * inv_rms * __bfloat162float(g.h[k]));
    dst[i] = o.raw;
  }
}

__global__ void moe_accumulate_kernel(uint4 *moe_out, const uint4 *expert_out, const uint32_t *ids,
                                      uint32_t slot, uint32_t slots, size_t vecs_per_row) {
  const size_t r = blockIdx.x;
  const float w = route_weight(ids[r], slot, slots);
  uint4 *acc = moe_out + r * vecs_per_row;
  const uint4 *src = expert_out + (r * slots + slot) * vecs_per_row;
  for (size_t i = threadIdx.x; i < vecs_per_row; i += blockDim.x) {
    Bf16x8 a, e;
    a.raw = acc[i];
    e.raw = src[i];
    for (int k = 0; k < kVec; ++k)
      a.h[k] = __float2bfloat16_rn(__bfloat162float(a.h[k]) + w * __bfloat162float(e.h[k]));
    acc[i] = a.raw;
  }
}

/* (value, index) of the argmax: a larger value wins, then a lower index.
 * NaN is read as -inf by the caller, so the order is total and the block's
 * result is the same whatever order the candidates meet in. */
__device__ __forceinline__ bool better(float v, uint32_t i, float bv, uint32_t bi) {
  return v > bv || (v == bv && i < bi);
}

__global__ void sample_argmax_kernel(uint32_t *next_ids, const uint4 *logits, size_t vecs_per_row) {
  __shared__ float warp_v[kWarpSize];
  __shared__ uint32_t warp_i[kWarpSize];
  const size_t r = blockIdx.x;
  const uint4 *row = logits + r * vecs_per_row;
  float bv = -INFINITY;
  uint32_t bi = UINT32_MAX;
  for (size_t i = threadIdx.x; i < vecs_per_row; i += blockDim.x) {
    Bf16x8 a;
    a.raw = row[i];
    for (int k = 0; k < kVec; ++k) {
      float v = __bfloat162float(a.h[k]);
      if (v != v) v = -INFINITY; /* NaN: the smallest */
      const uint32_t idx = (uint32_t)(i * kVec + (size_t)k);
      if (better(v, idx, bv, bi)) bv = v, bi = idx;
    }
  }
  for (int o = kWarpSize / 2; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullWarp, bv, o);
    const uint32_t oi = __shfl_xor_sync(kFullWarp, bi, o);
    if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, nwarps = blockDim.x / kWarpSize;
  if (lane == 0) warp_v[warp] = bv, warp_i[warp] = bi;
  __syncthreads();
  if (warp != 0) return;
  bv = lane < nwarps ? warp_v[lane] : -INFINITY;
  bi = lane < nwarps ? warp_i[lane] : UINT32_MAX;
  for (int o = kWarpSize / 2; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullWarp, bv, o);
    const uint32_t oi = __shfl_xor_sync(kFullWarp, bi, o);
    if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  /* every value was -inf (all NaN or -inf): the lowest index, 0 */
  if (lane == 0) next_ids[r] = bi == UINT32_MAX ? 0u : bi;
}

__global__ void empty_kernel() {}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

}  // namespace

extern "C" cudaError_t dk_gather_embeddings(void *hidden, const void *emb, const uint32_t *ids,
                                            size_t tokens, size_t rows, size_t width,
                                            size_t vocab, cudaStream_t stream) {
  if (!hidden || !emb || (tokens && !ids) || tokens > rows || rows > kMaxGridX ||
      width == 0 || width % kVec || vocab == 0 || !aligned16(hidden) || !aligned16(emb))
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  gather_kernel<<<(unsigned)rows, kGatherThreads, 0, stream>>>(
      (uint4 *)hidden, (const uint4 *)emb, ids, tokens, width / kVec, vocab);
  return cudaGetLastError();
}

extern "C" cudaError_t dk_rmsnorm(void *out, const void *x, const void *add, const void *gamma,
                                  size_t tokens, size_t rows, size_t width, float eps,
                                  cudaStream_t stream) {
  if (!out || !x || !gamma || tokens > rows || rows > kMaxGridX || width == 0 ||
      width % kVec || !aligned16(out) || !aligned16(x) || !aligned16(gamma) ||
      (add && !aligned16(add)))
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  rmsnorm_kernel<<<(unsigned)rows, kNormThreads, 0, stream>>>(
      (uint4 *)out, (const uint4 *)x, (const uint4 *)add, (const uint4 *)gamma, tokens,
      width / kVec, 1.0f / (float)width, eps);
  return cudaGetLastError();
}

extern "C" cudaError_t dk_moe_accumulate(void *moe_out, const void *expert_out, size_t slot,
                                         size_t slots, const uint32_t *ids, size_t tokens,
                                         size_t width, cudaStream_t stream) {
  if (!moe_out || !expert_out || !ids || slots == 0 || slot >= slots || slots > UINT32_MAX ||
      tokens > kMaxGridX || width == 0 || width % kVec || !aligned16(moe_out) ||
      !aligned16(expert_out))
    return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  moe_accumulate_kernel<<<(unsigned)tokens, kMoeThreads, 0, stream>>>(
      (uint4 *)moe_out, (const uint4 *)expert_out, ids, (uint32_t)slot, (uint32_t)slots,
      width / kVec);
  return cudaGetLastError();
}

extern "C" cudaError_t dk_sample_argmax(uint32_t *next_ids, const void *logits, size_t tokens,
                                        size_t vocab, cudaStream_t stream) {
  if (!next_ids || !logits || tokens > kMaxGridX || vocab == 0 || vocab % kVec ||
      vocab > UINT32_MAX || !aligned16(logits))
    return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  sample_argmax_kernel<<<(unsigned)tokens, kSampleThreads, 0, stream>>>(
      next_ids, (const uint4 *)logits, vocab / kVec);
  return cudaGetLastError();
}

extern "C" cudaError_t dk_empty(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

/* ---- paged decode attention (decode_model_paged.h has the formula) ---- */

namespace {

constexpr int kAttnThreads = 256; /* = PAGED_HEAD_DIM: one thread per output element */
constexpr int kAttnMaxKeys = 256; /* = PAGED_MAX_KEYS */

/* One block per (sequence row, head). Reads the step's counts and inputs on
 * the device; rows at or past the step's sequences return at once. Scores:
 * thread j computes key j's dot product over the head dimension in order;
 * the softmax's max and sum are taken by thread 0 in key order; each thread
 * then sums its output element over the keys in order. Fixed order
 * throughout: a launch gives the same bits every time. */
__global__ void paged_attention_kernel(float *out, const __nv_bfloat16 *q_rows, size_t q_stride,
                                       const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,
                                       const uint32_t *positions, const uint32_t *seq_lens,
                                       const uint32_t *query_token, const uint32_t *block_table,
                                       uint32_t table_width, uint32_t block, const uint32_t *tokens_word,
                                       const uint32_t *sequences_word, int heads) {
  __shared__ float q[kAttnThreads];
  __shared__ float score[kAttnMaxKeys];
  __shared__ float norm;
  const uint32_t s = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  if (s >= *sequences_word) return;
  const uint32_t t = query_token[s];
  float *o = out + ((size_t)s * heads + h) * kAttnThreads;
  if (t >= *tokens_word) { /* a bad input: say so in the output rather than read out of bounds */
    o[d] = __int_as_float(0x7fc00000);
    return;
  }
  const uint32_t pos = positions[t];
  uint32_t n = seq_lens[s] < pos + 1 ? seq_lens[s] : pos + 1;
  if (n > kAttnMaxKeys) n = kAttnMaxKeys;
  if (n > table_width * block) n = table_width * block;
  q[d] = __bfloat162float(q_rows[(size_t)t * q_stride + (size_t)h * kAttnThreads + d]);
  __syncthreads();
  const float scale = rsqrtf((float)kAttnThreads), slope = exp2f(-(float)(h + 1));
  for (uint32_t j = d; j < n; j += blockDim.x) {
    const uint32_t blk = block_table[(size_t)s * table_width + j / block];
    const __nv_bfloat16 *k = k_cache + ((size_t)blk * block + j % block) * kAttnThreads;
    float dot = 0.f;
    for (int i = 0; i < kAttnThreads; ++i) dot = fmaf(q[i], __bfloat162float(k[i]), dot);
    score[j] = dot * scale - slope * (float)(pos - j);
  }
  __syncthreads();
  if (d == 0) {
    float mx = -INFINITY, sum = 0.f;
    for (uint32_t j = 0; j < n; ++j) mx = fmaxf(mx, score[j]);
    for (uint32_t j = 0; j < n; ++j) sum += (score[j] = expf(score[j] - mx));
    norm = 1.f / sum;
  }
  __syncthreads();
  float acc = 0.f;
  for (uint32_t j = 0; j < n; ++j) {
    const uint32_t blk = block_table[(size_t)s * table_width + j / block];
    acc = fmaf(score[j], __bfloat162float(v_cache[((size_t)blk * block + j % block) * kAttnThreads + d]), acc);
  }
  o[d] = acc * norm;
}

}  // namespace

extern "C" cudaError_t dk_paged_attention(float *out, const void *q_rows, size_t q_stride, const void *k_cache,
                               const void *v_cache, const uint32_t *positions, const uint32_t *seq_lens,
                               const uint32_t *query_token, const uint32_t *block_table, size_t table_width,
                               size_t block, size_t head_dim, size_t heads, size_t max_keys,
                               const uint32_t *tokens_word, const uint32_t *sequences_word, size_t seq_rows,
                               cudaStream_t stream) {
  if (head_dim != (size_t)kAttnThreads || max_keys > (size_t)kAttnMaxKeys || max_keys > table_width * block ||
      block == 0 || heads == 0 || heads > 65535 || seq_rows == 0 || seq_rows > kMaxGridX)
    return cudaErrorInvalidValue;
  dim3 grid((unsigned)seq_rows, (unsigned)heads);
  paged_attention_kernel<<<grid, kAttnThreads, 0, stream>>>(
      out, static_cast<const __nv_bfloat16 *>(q_rows), q_stride, static_cast<const __nv_bfloat16 *>(k_cache),
      static_cast<const __nv_bfloat16 *>(v_cache), positions, seq_lens, query_token, block_table,
      (uint32_t)table_width, (uint32_t)block, tokens_word, sequences_word, (int)heads);
  return cudaGetLastError();
}
