/* mdr_bench_tp_cuda.cu — the blocker kernel of mdr-bench-tp (declared in
 * bench_tp.h): one thread that holds its stream until the host-mapped
 * word *release reaches `generation`, or until timeout_ns of GPU time have
 * passed (then it sets *timed_out = 1 and returns, so a stuck host never
 * hangs the GPU). Both GPUs poll the same word, so one store releases both.
 * Launch: one block of one thread. Below it, the soak's kernels. */
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

/* ---- the soak's kernels (bench_tp.h: tp_launch_soak_fill, tp_launch_soak_check) ----
 * Captured into the soak's graph around the all-reduce: fill this rank's
 * input for replay st->gen, (the all-reduce), check every element against
 * both ranks' sum for that replay, advance st->gen. The layout and the
 * pattern are bench_tp.h's (tp_soak_state, tp_soak_value): a host check
 * of every element at each checkpoint would catch a difference. */
struct tp_soak_state_dev {
  uint32_t gen, wrong, first_bad, first_gen;
};
static_assert(sizeof(tp_soak_state_dev) == 16, "tp_soak_state layout");

__device__ static int tp_soak_value_dev(int r, size_t i, uint32_t g) {
  return (int)((i * 7 + (size_t)r * 11 + (size_t)g * 13) % 29) - 14;
}

__device__ static uint16_t tp_soak_bf16(int v) { /* exact: |v| <= 28 */
  return (uint16_t)(__float_as_uint((float)v) >> 16);
}

__global__ void tp_soak_fill_kernel(uint16_t *buf, size_t n_el, int rank, const tp_soak_state_dev *st) {
  const uint32_t g = st->gen;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_el; i += (size_t)gridDim.x * blockDim.x)
    buf[i] = tp_soak_bf16(tp_soak_value_dev(rank, i, g));
}

__global__ void tp_soak_check_kernel(const uint16_t *buf, size_t n_el, tp_soak_state_dev *st) {
  const uint32_t g = st->gen;
  uint32_t bad = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_el; i += (size_t)gridDim.x * blockDim.x) {
    const uint16_t want = tp_soak_bf16(tp_soak_value_dev(0, i, g) + tp_soak_value_dev(1, i, g));
    if (buf[i] != want) {
      bad++;
      if (atomicCAS(&st->first_bad, 0u, (uint32_t)(i + 1)) == 0u) st->first_gen = g;
    }
  }
  if (bad) atomicAdd(&st->wrong, bad);
}

__global__ void tp_soak_advance_kernel(tp_soak_state_dev *st) { st->gen++; }

static unsigned tp_soak_blocks(size_t n_el) {
  size_t b = (n_el + 255) / 256;
  return (unsigned)(b < 1 ? 1 : b > 1024 ? 1024 : b);
}

extern "C" int tp_launch_soak_fill(cudaStream_t s, uint16_t *buf, size_t n_el, int rank, const void *st) {
  tp_soak_fill_kernel<<<tp_soak_blocks(n_el), 256, 0, s>>>(buf, n_el, rank, (const tp_soak_state_dev *)st);
  return (int)cudaGetLastError();
}

extern "C" int tp_launch_soak_check(cudaStream_t s, const uint16_t *buf, size_t n_el, void *st) {
  tp_soak_check_kernel<<<tp_soak_blocks(n_el), 256, 0, s>>>(buf, n_el, (tp_soak_state_dev *)st);
  int e = (int)cudaGetLastError();
  if (e) return e;
  tp_soak_advance_kernel<<<1, 1, 0, s>>>((tp_soak_state_dev *)st);
  return (int)cudaGetLastError();
}
