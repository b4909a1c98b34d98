/* mdr_bench_tp_cuda.cu — the blocker kernel of mdr-bench-tp (declared in
 * bench_tp.h): one thread that holds its stream until the host-mapped
 * word *release reaches `generation`, or until timeout_ns of GPU time have
 * passed (then it sets *timed_out = 1 and returns, so a stuck host never
 * hangs the GPU). Both GPUs poll the same word, so one store releases both.
 * Launch: one block of one thread. */
#include <cuda_runtime.h>
#include <stdint.h>

/* %globaltimer is in nanoseconds on every GPU since Pascal. */
__device__ static uint64_t tp_global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void tp_blocker_kernel(const volatile uint32_t *release, uint32_t generation, uint64_t timeout_ns,
                                  uint32_t *timed_out) {
  const uint64_t start = tp_global_timer_ns();
  while (*release < generation) {
    if (tp_global_timer_ns() - start > timeout_ns) {
      *timed_out = 1;
      return;
    }
  }
}

extern "C" int tp_launch_blocker(cudaStream_t s, const volatile uint32_t *release, uint32_t generation,
                                 uint64_t timeout_ns, uint32_t *timed_out) {
  tp_blocker_kernel<<<1, 1, 0, s>>>(release, generation, timeout_ns, timed_out);
  return (int)cudaGetLastError();
}
