// gpu_helpers.cu — see gpu_helpers.h. One block each: test work, not speed.
#include "gpu_helpers.h"

#include <cuda_runtime.h>

static __global__ void sleep_kernel(uint64_t ns) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    uint64_t now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= ns) break;
    __nanosleep(1000);
  }
}

static __global__ void accumulate_kernel(const uint32_t *ids, size_t n, const uint32_t *count,
                                         unsigned long long *acc) {
  if (count) n = *count;
  unsigned long long sum = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) sum += (unsigned long long)(i + 1) * ids[i];
  atomicAdd(&acc[0], sum);
  if (threadIdx.x == 0) atomicAdd(&acc[1], (unsigned long long)n);
}

extern "C" int tb_cuda_sleep(void *stream, uint64_t ns) {
  sleep_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(ns);
  return (int)cudaGetLastError();
}

extern "C" int tb_cuda_accumulate(void *stream, const uint32_t *ids, size_t n, uint64_t *acc) {
  accumulate_kernel<<<1, 256, 0, (cudaStream_t)stream>>>(ids, n, nullptr, (unsigned long long *)acc);
  return (int)cudaGetLastError();
}

extern "C" int tb_cuda_accumulate_dev(void *stream, const uint32_t *ids, const uint32_t *count,
                                      uint64_t *acc) {
  accumulate_kernel<<<1, 256, 0, (cudaStream_t)stream>>>(ids, 0, count, (unsigned long long *)acc);
  return (int)cudaGetLastError();
}
