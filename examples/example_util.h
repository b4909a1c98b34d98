/* mdr examples — what the decode loops share: the status checks that print
 * where and why and `goto fail`, the one random generator, BF16 rounding,
 * and the sorted-sample statistics of their reports. Header-only. Define
 * EXAMPLE_NAME (the program's name in messages) before including it. */
#ifndef MDR_EXAMPLE_UTIL_H
#define MDR_EXAMPLE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <mdr/mdr.h>

#ifndef EXAMPLE_NAME
#error "define EXAMPLE_NAME before including example_util.h"
#endif

/* ---- checks: print where and why, then `goto fail` ------------------------ */

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, EXAMPLE_NAME ": %s:%d: %s: %s\n", __FILE__, __LINE__, #call,    \
              cudaGetErrorString(e_));                                                 \
      goto fail;                                                                       \
    }                                                                                  \
  } while (0)

#define LT_OK(call)                                                                    \
  do {                                                                                 \
    cublasStatus_t s_ = (call);                                                        \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      fprintf(stderr, EXAMPLE_NAME ": %s:%d: %s: %s\n", __FILE__, __LINE__, #call,    \
              cublasLtGetStatusString(s_));                                            \
      goto fail;                                                                       \
    }                                                                                  \
  } while (0)

/* `b`: the backend whose last error (this thread's) explains a failure. */
#define MDR_CHECK_(b, call)                                                            \
  do {                                                                                 \
    mdr_status m_ = (call);                                                            \
    if (m_ != MDR_OK) {                                                                \
      fprintf(stderr, EXAMPLE_NAME ": %s:%d: %s: %s (%s)\n", __FILE__, __LINE__,      \
              #call, mdr_status_string(m_), mdr_backend_last_error(b));                \
      goto fail;                                                                       \
    }                                                                                  \
  } while (0)

/* ---- randomness and BF16 --------------------------------------------------- */

/* splitmix64: the examples' one random generator (weights, counts, ids). */
static inline uint64_t ex_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1): the top 24 bits of a draw, over 2^24, times 2, minus 1. */
static inline float ex_uniform_pm1(uint64_t *state) {
  return (float)(ex_splitmix64(state) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* BF16 bits of f, rounded to nearest even (f finite). */
static inline uint16_t ex_float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* ---- statistics of sorted samples ------------------------------------------ */

static inline int ex_cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Percentile q in [0, 1] of k sorted values, linear between ranks (as
 * mdr-bench computes it); with fewer than 100 samples the p99 lies between
 * the two largest. */
static inline double ex_percentile(const double *v, size_t k, double q) {
  const double pos = q * (double)(k - 1);
  const size_t lo = (size_t)pos;
  if (lo + 1 >= k) return v[k - 1];
  return v[lo] + (pos - (double)lo) * (v[lo + 1] - v[lo]);
}

/* a / b, 0 when b is not positive. */
static inline double ex_ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

#endif
