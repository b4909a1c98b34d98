/* mdr example — the TP decode loop's kernels: residual add, SiLU and the
 * counted gather (see decode_tp_kernels.h for the contracts).
 *
 * One block per row, 16-byte accesses (8 BF16 per uint4), grid-stride over
 * the row; element-wise F32 math rounded once to BF16, so a launch gives
 * the same bits every time. Launch limits: rows <= 2^31-1, width % 8 == 0. */
#include "decode_tp_kernels.h"

#include <stdint.h>

#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 128;
constexpr int kVec = 8;                   /* BF16 per 16-byte access */
constexpr size_t kMaxGridX = 0x7fffffffu; /* gridDim.x limit: one block per row */

union Bf16x8 {
  uint4 raw;
  __nv_bfloat16 h[kVec];
};

__global__ void residual_add_kernel(uint4 *h, const uint4 *x, size_t vecs_per_row) {
  uint4 *hr = h + blockIdx.x * vecs_per_row;
  const uint4 *xr = x + blockIdx.x * vecs_per_row;
  for (size_t i = threadIdx.x; i < vecs_per_row; i += blockDim.x) {
    Bf16x8 a, b;
    a.raw = hr[i];
    b.raw = xr[i];
    for (int k = 0; k < kVec; ++k)
      a.h[k] = __float2bfloat16_rn(__bfloat162float(a.h[k]) + __bfloat162float(b.h[k]));
    hr[i] = a.raw;
  }
}

__global__ void silu_kernel(uint4 *x, size_t vecs_per_row) {
  uint4 *xr = x + blockIdx.x * vecs_per_row;
  for (size_t i = threadIdx.x; i < vecs_per_row; i += blockDim.x) {
    Bf16x8 a;
    a.raw = xr[i];
    for (int k = 0; k < kVec; ++k) {
      const float v = __bfloat162float(a.h[k]);
      a.h[k] = __float2bfloat16_rn(v / (1.0f + expf(-v)));
    }
    xr[i] = a.raw;
  }
}

__global__ void gather_counted_kernel(uint4 *hidden, const uint4 *emb, const uint32_t *ids,
                                      const uint32_t *count, size_t vecs_per_row, size_t vocab) {
  const size_t r = blockIdx.x;
  uint4 *dst = hidden + r * vecs_per_row;
  if (r < (size_t)*count) { /* rows >= gridDim.x never run: min(*count, rows) */
    const uint4 *src = emb + (size_t)(ids[r] % vocab) * vecs_per_row;
    for (size_t i = threadIdx.x; i < vecs_per_row; i += blockDim.x) dst[i] = src[i];
  } else {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (size_t i = threadIdx.x; i < vecs_per_row; i += blockDim.x) dst[i] = zero;
  }
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

}  // namespace

extern "C" cudaError_t dtp_residual_add(void *h, const void *x, size_t tokens, size_t width,
                                        cudaStream_t stream) {
  if (!h || !x || tokens > kMaxGridX || width == 0 || width % kVec || !aligned16(h) ||
      !aligned16(x))
    return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  residual_add_kernel<<<(unsigned)tokens, kThreads, 0, stream>>>((uint4 *)h, (const uint4 *)x,
                                                                 width / kVec);
  return cudaGetLastError();
}

extern "C" cudaError_t dtp_silu(void *x, size_t rows, size_t width, cudaStream_t stream) {
  if (!x || rows > kMaxGridX || width == 0 || width % kVec || !aligned16(x))
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  silu_kernel<<<(unsigned)rows, kThreads, 0, stream>>>((uint4 *)x, width / kVec);
  return cudaGetLastError();
}

extern "C" cudaError_t dtp_gather_counted(void *hidden, const void *emb, const uint32_t *ids,
                                          const uint32_t *count, size_t rows, size_t width,
                                          size_t vocab, cudaStream_t stream) {
  if (!hidden || !emb || !ids || !count || rows > kMaxGridX || width == 0 || width % kVec ||
      vocab == 0 || !aligned16(hidden) || !aligned16(emb))
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  gather_counted_kernel<<<(unsigned)rows, kThreads, 0, stream>>>(
      (uint4 *)hidden, (const uint4 *)emb, ids, count, width / kVec, vocab);
  return cudaGetLastError();
}
