/* lab.h — what the lab's CUDA programs share (dev/ only, never the
 * product): the checks that end a program on a CUDA or mdr error (exit 2),
 * and the edge handling of a range cleared with 16-byte stores. */
#ifndef MDR_DEV_LAB_H
#define MDR_DEV_LAB_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CUDA_CHECK(call)                                                                     \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(2);                                                                               \
    }                                                                                        \
  } while (0)

/* For programs that include mdr/mdr.h: b is the call's backend. */
#define MDR_CHECK(b, call)                                                                             \
  do {                                                                                                 \
    mdr_status s_ = (call);                                                                            \
    if (s_ != MDR_OK) {                                                                                \
      fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, mdr_status_string(s_),         \
              mdr_backend_last_error(b));                                                              \
      exit(2);                                                                                         \
    }                                                                                                  \
  } while (0)

/* Split [begin, end) at the first and last 16-byte boundaries into *body
 * and *tail, and clear the bytes before the first and after the last one by
 * one (each fewer than 16; one per thread). */
__device__ __forceinline__ void lab_edges(uint64_t begin, uint64_t end, uint64_t *body_out, uint64_t *tail_out) {
  uint64_t body = (begin + 15u) & ~(uint64_t)15u;
  if (body > end) body = end;
  uint64_t tail = end & ~(uint64_t)15u;
  if (tail < body) tail = body;
  const unsigned tid = threadIdx.x;
  if (tid < body - begin) *(unsigned char *)(begin + tid) = 0;
  if (tid < end - tail) *(unsigned char *)(tail + tid) = 0;
  *body_out = body;
  *tail_out = tail;
}

#endif
