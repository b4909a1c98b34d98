/* bench_cuda.cu — the empty kernel and the blocker kernel of mdr-bench
 * (see bench_cuda.h). Launch limits: both run one block of one thread. */
#include <cuda_runtime.h>

#include "bench_cuda.h"

__global__ void bench_empty_kernel() {}

/* %globaltimer is in nanoseconds on every GPU since Pascal. */
__device__ static uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void bench_blocker_kernel(const volatile uint32_t *release, uint32_t generation,
                                     uint64_t timeout_ns, uint32_t *timed_out) {
  const uint64_t start = global_timer_ns();
  while (*release < generation) {
    if (global_timer_ns() - start > timeout_ns) {
      *timed_out = 1;
      return;
    }
  }
}

extern "C" int bench_cuda_launch_empty(void *stream) {
  bench_empty_kernel<<<1, 1, 0, (cudaStream_t)stream>>>();
  return (int)cudaGetLastError();
}

extern "C" int bench_cuda_launch_blocker(void *stream, const volatile uint32_t *release,
                                         uint32_t generation, uint64_t timeout_ns,
                                         uint32_t *timed_out) {
  bench_blocker_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(release, generation, timeout_ns,
                                                          timed_out);
  return (int)cudaGetLastError();
}
