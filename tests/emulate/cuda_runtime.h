/* cuda_runtime.h — the CUDA names staging/staging.cuh uses, for the CPU
 * emulation of the stage block (tests/stage_emulated.cpp), which alone has
 * this folder on its include path. Each thread of an emulated block is a
 * host thread; the warp functions and __syncthreads are defined by that
 * program, where a warp's lanes meet at each warp function and the block at
 * each barrier. */
#ifndef MDR_TEST_EMULATED_CUDA_RUNTIME_H
#define MDR_TEST_EMULATED_CUDA_RUNTIME_H

#include <cstddef>
#include <cstdint>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __shared__ static /* one object for every emulated thread of the block */
#define __grid_constant__

struct uint4 {
  unsigned int x, y, z, w;
};
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return uint4{x, y, z, w}; }

struct mdr_emu_dim3 {
  unsigned int x, y, z;
};
/* this emulated thread's index in its block */
inline thread_local mdr_emu_dim3 threadIdx = {0, 0, 0};

unsigned int __shfl_sync(unsigned mask, unsigned int var, int src_lane, int width = 32);
int __shfl_sync(unsigned mask, int var, int src_lane, int width = 32);
unsigned long __shfl_sync(unsigned mask, unsigned long var, int src_lane, int width = 32);
unsigned long long __shfl_sync(unsigned mask, unsigned long long var, int src_lane, int width = 32);
unsigned int __shfl_up_sync(unsigned mask, unsigned int var, unsigned int delta, int width = 32);
unsigned int __ballot_sync(unsigned mask, int predicate);
void __syncthreads(void);
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline void __nanosleep(unsigned int) {}
/* the emulated blocks of a launch run one after another: a fence orders
 * nothing more, an atomic is a host atomic */
inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline unsigned int atomicAdd(unsigned int *p, unsigned int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }

#endif
