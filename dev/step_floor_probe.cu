/* step_floor_probe.cu — where the GPU time of a small graph-fused step goes
 * (device-id steps at 1-8 tokens against their floor).
 *
 * On the GLM-5.3 arena (M = 4096, rows policy ALL) at t = 1, 2, 4, 8 tokens,
 * each case below is one CUDA graph, timed the way mdr-bench times a step:
 *   single  a blocker kernel holds the stream, two events around one graph
 *           launch, then the blocker is released; median and p90 of reps;
 *   loop    reps launches back to back between two events, per launch.
 * Cases (every one that writes memory is validated first, exit 1 on a
 * mismatch):
 *   bare          an empty kernel, one block of one thread (mdr-bench's
 *                 floor term);
 *   empty-G       an empty kernel with the grid and parameter size of the
 *                 list variant at 16 KiB pieces, 256 threads: launch and
 *                 block dispatch without a store;
 *   memset1       one cudaMemsetAsync node of the plan's bytes, contiguous;
 *   lib-zero      the product's fused zeroing of the plan
 *                 (mdr_arena_zero_all_rows, MDR_ZERO_FUSED, captured);
 *   lib-dev       the product's device-id step: the graph cache's EXACT
 *                 graph replayed by mdr_graph_cache_step_device;
 *   contig-P-B    the plan's bytes as one contiguous range, block b clears
 *                 piece b of P bytes with B threads: no lookup at all;
 *   list-P-B      the real plan cut into pieces of at most P bytes, the
 *                 host lists every piece's [begin, end) in the kernel
 *                 parameters, block b loads entry b (one parameter load)
 *                 and clears it with B threads.
 * The floor is mdr-bench's: bytes / write ceiling (1 GiB memset, this run)
 * + the single bare replay.
 *
 * Build:  the CMake target `step_floor_probe` (dev/CMakeLists.txt).
 * Run:    ./step_floor_probe [--reps N] [--csv FILE]
 * Exit 0 done, 1 validation failed, 2 CUDA or mdr error, 77 no GPU. */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <mdr/mdr.h>

#include "lab.h"

#define POISON 0xA5
#define GUARD 4096             /* bytes checked past each segment */
#define LIST_CAP 1100          /* pieces in the list variant's parameters (17.6 KB) */
#define WARMUP 20
#define BLOCKER_TIMEOUT_NS 2000000000ull
static const size_t k_tokens[] = {1, 2, 4, 8};

// ----------------------------------------------------------------------------
// kernels

__global__ void k_empty1() {}

struct list_params {
  ulonglong2 piece[LIST_CAP]; /* begin, end */
  uint32_t n;
};

__global__ void k_empty_list(const __grid_constant__ list_params p) {
  if (p.n == 0xFFFFFFFFu) asm volatile("trap;");
}

__device__ __forceinline__ void store16_zero(uint64_t addr) {
  asm volatile("st.global.v4.u32 [%0], {%1, %1, %1, %1};" ::"l"(addr), "r"(0u) : "memory");
}

/* Clear [begin, end) with B threads: edge bytes one by one, the aligned
 * body in 16-byte stores, four in flight per thread. */
template <int B>
__device__ __forceinline__ void clear_range(uint64_t begin, uint64_t end) {
  uint64_t body, tail;
  lab_edges(begin, end, &body, &tail);
  const unsigned n16 = (unsigned)((tail - body) >> 4);
  unsigned i = threadIdx.x;
  for (; i + 3 * B < n16; i += 4 * B) {
#pragma unroll
    for (int u = 0; u < 4; u++) store16_zero(body + (uint64_t)(i + u * B) * 16u);
  }
  for (; i < n16; i += B) store16_zero(body + (uint64_t)i * 16u);
}

template <int B>
__global__ void __launch_bounds__(B) k_contig(uint64_t base, uint64_t bytes, uint64_t piece) {
  const uint64_t begin = base + (uint64_t)blockIdx.x * piece;
  const uint64_t end = begin + piece < base + bytes ? begin + piece : base + bytes;
  clear_range<B>(begin, end);
}

template <int B>
__global__ void __launch_bounds__(B) k_list(const __grid_constant__ list_params p) {
  const ulonglong2 c = p.piece[blockIdx.x];
  clear_range<B>(c.x, c.y);
}

__global__ void k_blocker(const volatile uint32_t *release, uint32_t generation, uint32_t *timed_out) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (*release < generation) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > BLOCKER_TIMEOUT_NS) {
      *timed_out = 1;
      return;
    }
  }
}

// ----------------------------------------------------------------------------
// timing

struct timer {
  cudaStream_t s;
  int reps;
  std::vector<cudaEvent_t> a, b;
  volatile uint32_t *release_h;
  uint32_t *release_d, *timed_out_d;
  uint32_t generation = 0;
};

static void timer_init(timer *t, cudaStream_t s, int reps) {
  t->s = s;
  t->reps = reps;
  t->a.resize(reps);
  t->b.resize(reps);
  for (int i = 0; i < reps; i++) {
    CUDA_CHECK(cudaEventCreate(&t->a[i]));
    CUDA_CHECK(cudaEventCreate(&t->b[i]));
  }
  void *h = NULL, *d = NULL;
  CUDA_CHECK(cudaHostAlloc(&h, 8, cudaHostAllocMapped));
  memset(h, 0, 8);
  CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
  t->release_h = (volatile uint32_t *)h;
  t->release_d = (uint32_t *)d;
  t->timed_out_d = (uint32_t *)d + 1;
}

struct stats {
  double med, p90, loop;
};

static double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[(size_t)(q * (double)(v.size() - 1) + 0.5)];
}

/* fn enqueues one step on t->s. */
static stats time_step(timer *t, const std::function<void()> &fn) {
  for (int i = 0; i < WARMUP; i++) fn();
  CUDA_CHECK(cudaStreamSynchronize(t->s));
  for (int i = 0; i < t->reps; i++) {
    k_blocker<<<1, 1, 0, t->s>>>(t->release_d, t->generation + 1, t->timed_out_d);
    CUDA_CHECK(cudaEventRecord(t->a[i], t->s));
    fn();
    CUDA_CHECK(cudaEventRecord(t->b[i], t->s));
    t->generation++;
    __atomic_store_n((uint32_t *)t->release_h, t->generation, __ATOMIC_RELEASE);
  }
  CUDA_CHECK(cudaStreamSynchronize(t->s));
  if (t->release_h[1]) {
    fprintf(stderr, "a blocker timed out\n");
    exit(2);
  }
  std::vector<double> us(t->reps);
  for (int i = 0; i < t->reps; i++) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t->a[i], t->b[i]));
    us[i] = ms * 1e3;
  }
  stats st;
  st.med = pct(us, 0.5);
  st.p90 = pct(us, 0.9);
  CUDA_CHECK(cudaEventRecord(t->a[0], t->s));
  for (int i = 0; i < t->reps; i++) fn();
  CUDA_CHECK(cudaEventRecord(t->b[0], t->s));
  CUDA_CHECK(cudaStreamSynchronize(t->s));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, t->a[0], t->b[0]));
  st.loop = ms * 1e3 / t->reps;
  return st;
}

/* A graph of what fn enqueues, instantiated and uploaded. */
static cudaGraphExec_t capture(cudaStream_t s, const std::function<void()> &fn) {
  cudaGraph_t g;
  cudaGraphExec_t x;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  fn();
  CUDA_CHECK(cudaStreamEndCapture(s, &g));
  CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
  CUDA_CHECK(cudaGraphUpload(x, s));
  CUDA_CHECK(cudaGraphDestroy(g));
  return x;
}

// ----------------------------------------------------------------------------
// validation

struct seg {
  uint64_t ptr, bytes;
};

/* Poison the slab, run fn once, then every plan byte must be zero and every
 * byte within GUARD past a segment that no segment covers still poison. */
static bool validate(cudaStream_t s, void *slab, size_t slab_bytes, const std::vector<seg> &plan,
                     const std::function<void()> &fn, const char *what, size_t t) {
  CUDA_CHECK(cudaMemsetAsync(slab, POISON, slab_bytes, s));
  fn();
  CUDA_CHECK(cudaStreamSynchronize(s));
  const uint64_t lo = (uint64_t)(uintptr_t)slab, hi = lo + slab_bytes;
  for (const seg &g : plan) {
    const uint64_t end = std::min<uint64_t>(g.ptr + g.bytes + GUARD, hi);
    std::vector<unsigned char> got(end - g.ptr);
    CUDA_CHECK(cudaMemcpy(got.data(), (void *)g.ptr, got.size(), cudaMemcpyDeviceToHost));
    for (uint64_t k = 0; k < got.size(); k++) {
      const uint64_t at = g.ptr + k;
      bool covered = k < g.bytes;
      for (size_t i = 0; !covered && i < plan.size(); i++)
        covered = at >= plan[i].ptr && at < plan[i].ptr + plan[i].bytes;
      const unsigned want = covered ? 0u : POISON;
      if (got[k] != want) {
        fprintf(stderr, "VALIDATION FAILED: %s at t=%zu: byte %llu of the slab is 0x%02x, want 0x%02x\n", what,
                t, (unsigned long long)(at - lo), got[k], want);
        return false;
      }
    }
  }
  return true;
}

// ----------------------------------------------------------------------------

struct row {
  size_t t;
  std::string kase;
  double bytes;
  stats st;
};

int main(int argc, char **argv) {
  int reps = 300;
  const char *csv = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--csv")) csv = argv[i + 1];
  }
  if (reps < 10 || reps > 100000) {
    fprintf(stderr, "usage: step_floor_probe [--reps 10..100000] [--csv FILE]\n");
    return 2;
  }
  mdr_backend *b = NULL;
  if (mdr_backend_cuda_create(0, &b) != MDR_OK) {
    printf("step_floor_probe: no CUDA device (skipped)\n");
    return 77;
  }
  mdr_stream ms = NULL;
  MDR_CHECK(b, mdr_backend_stream_create(b, &ms));
  cudaStream_t s = (cudaStream_t)ms;
  mdr_model_config cfg;
  mdr_limits lim = {4096, 65536, 16, 4};
  mdr_sizes sizes;
  MDR_CHECK(b, mdr_model_preset("glm-5.3-flash-tp2", &cfg));
  MDR_CHECK(b, mdr_sizes_from_config(&cfg, &lim, &sizes));
  mdr_arena *a = NULL;
  MDR_CHECK(b, mdr_arena_create(b, &sizes, &a));
  MDR_CHECK(b, mdr_arena_set_rows_policy(a, MDR_ROWS_ALL));
  MDR_CHECK(b, mdr_arena_set_zero_strategy(a, MDR_ZERO_FUSED));
  /* the span of the arena's buffers: what validation poisons */
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    const mdr_dptr p = mdr_arena_ptr(a, (mdr_buffer)i);
    if (!p) continue;
    lo = std::min<uint64_t>(lo, p);
    hi = std::max<uint64_t>(hi, p + mdr_arena_bytes(a, (mdr_buffer)i));
  }
  void *slab = (void *)(uintptr_t)lo;
  const size_t slab_bytes = (size_t)(hi - lo);

  /* the product's device-id step: an EXACT cache, graphs for every t */
  mdr_dptr ids_dev = 0;
  CUDA_CHECK(cudaMalloc((void **)&ids_dev, 4096 * sizeof(uint32_t)));
  /* ids of poison bytes: the step's copy into token_ids leaves poison there */
  CUDA_CHECK(cudaMemset((void *)ids_dev, POISON, 4096 * sizeof(uint32_t)));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  o.rows = MDR_ROWS_ALL;
  mdr_graph_cache *c = NULL;
  MDR_CHECK(b, mdr_graph_cache_create(a, ms, &o, &c));
  MDR_CHECK(b, mdr_graph_cache_prepare_device(c, ids_dev, k_tokens, sizeof k_tokens / sizeof *k_tokens));

  /* contiguous target and the write ceiling */
  const size_t contig_bytes = 16u << 20, ceiling_bytes = (size_t)1 << 30;
  void *contig = NULL, *big = NULL;
  CUDA_CHECK(cudaMalloc(&contig, contig_bytes));
  CUDA_CHECK(cudaMalloc(&big, ceiling_bytes));
  timer tm;
  timer_init(&tm, s, reps);
  const stats ceil_st = time_step(&tm, [&] { CUDA_CHECK(cudaMemsetAsync(big, 0, ceiling_bytes, s)); });
  CUDA_CHECK(cudaFree(big));
  const double ceiling_gbps = (double)ceiling_bytes / (ceil_st.med * 1e3);

  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs; GLM-5.3 arena %.1f MB (M 4096, rows ALL); reps %d\n", prop.name,
         prop.multiProcessorCount, slab_bytes / 1e6, reps);
  printf("write ceiling (1 GiB memset): %.1f GB/s\n", ceiling_gbps);

  cudaGraphExec_t bare = capture(s, [&] { k_empty1<<<1, 1, 0, s>>>(); });
  const stats bare_st = time_step(&tm, [&] { CUDA_CHECK(cudaGraphLaunch(bare, s)); });
  printf("bare 1-kernel graph replay: %.2f us single, %.2f us back to back\n\n", bare_st.med, bare_st.loop);

  std::vector<row> rows;
  std::vector<cudaGraphExec_t> execs = {bare};
  bool ok = true;
  printf("%-3s %-16s %9s %9s %9s %9s %8s\n", "t", "case", "MB", "single", "p90", "loop", "xfloor");
  for (size_t t : k_tokens) {
    mdr_segment segs[MDR_ZERO_PLAN_MAX];
    size_t n = 0;
    MDR_CHECK(b, mdr_arena_zero_plan(a, t, segs, MDR_ZERO_PLAN_MAX, &n));
    std::vector<seg> plan;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
      plan.push_back({segs[i].ptr, segs[i].bytes});
      bytes += segs[i].bytes;
    }
    const double floor_us = (double)bytes / (ceiling_gbps * 1e3) + bare_st.med;
    const std::vector<seg> contig_plan = {{(uint64_t)(uintptr_t)contig, bytes}};
    auto graph_of = [&](const std::function<void()> &fn) {
      cudaGraphExec_t x = capture(s, fn);
      execs.push_back(x);
      return [x, s] { CUDA_CHECK(cudaGraphLaunch(x, s)); };
    };
    /* check: 0 none, 1 the arena's plan, 2 the contiguous range */
    auto add = [&](const std::string &name, const std::function<void()> &enqueue, int check) {
      if (check && !validate(s, check == 1 ? slab : contig, check == 1 ? slab_bytes : contig_bytes,
                             check == 1 ? plan : contig_plan, enqueue, name.c_str(), t)) {
        ok = false;
        return;
      }
      const stats st = time_step(&tm, enqueue);
      rows.push_back({t, name, (double)bytes, st});
      printf("%-3zu %-16s %9.3f %9.2f %9.2f %9.2f %8.2f\n", t, name.c_str(), bytes / 1e6, st.med, st.p90,
             st.loop, st.med / floor_us);
      fflush(stdout);
    };

    add("bare", [&] { CUDA_CHECK(cudaGraphLaunch(bare, s)); }, 0);
    add("memset1", graph_of([&] { CUDA_CHECK(cudaMemsetAsync(contig, 0, bytes, s)); }), 2);
    add("lib-zero", graph_of([&] { MDR_CHECK(b, mdr_arena_zero_all_rows(a, ms, t)); }), 1);
    add("lib-dev", [&] { MDR_CHECK(b, mdr_graph_cache_step_device(c, ids_dev, t)); }, 1);

    /* the list variant's pieces and the empty kernel of its shape */
    static const uint64_t k_piece[] = {8192, 16384, 32768, 65536};
    for (uint64_t piece : k_piece) {
      list_params lp;
      memset(&lp, 0, sizeof lp);
      for (const seg &g : plan)
        for (uint64_t off = 0; off < g.bytes && lp.n < LIST_CAP; off += piece)
          lp.piece[lp.n++] = make_ulonglong2(g.ptr + off, g.ptr + std::min(off + piece, g.bytes));
      if (lp.n == LIST_CAP) {
        fprintf(stderr, "list variant: more than %d pieces\n", LIST_CAP);
        return 2;
      }
      const unsigned contig_grid = (unsigned)((bytes + piece - 1) / piece);
      const uint64_t cbase = (uint64_t)(uintptr_t)contig;
      if (piece == 16384) add("empty-G", graph_of([&] { k_empty_list<<<lp.n, 256, 0, s>>>(lp); }), 0);
#define SHAPE(B)                                                                                             \
  add("contig-" + std::to_string(piece / 1024) + "K-" #B,                                                    \
      graph_of([&] { k_contig<B><<<contig_grid, B, 0, s>>>(cbase, bytes, piece); }), 2);                    \
  add("list-" + std::to_string(piece / 1024) + "K-" #B, graph_of([&] { k_list<B><<<lp.n, B, 0, s>>>(lp); }), \
      1);
      SHAPE(256)
      SHAPE(512)
      SHAPE(1024)
#undef SHAPE
    }
    printf("\n");
  }
  if (csv) {
    FILE *f = fopen(csv, "w");
    if (!f) {
      perror(csv);
      return 2;
    }
    fprintf(f, "tokens,case,bytes,single_us_med,single_us_p90,loop_us,bare_us,ceiling_gbps\n");
    for (const row &r : rows)
      fprintf(f, "%zu,%s,%.0f,%.3f,%.3f,%.3f,%.3f,%.1f\n", r.t, r.kase.c_str(), r.bytes, r.st.med, r.st.p90,
              r.st.loop, bare_st.med, ceiling_gbps);
    fclose(f);
  }
  for (cudaGraphExec_t x : execs) CUDA_CHECK(cudaGraphExecDestroy(x));
  CUDA_CHECK(cudaFree(contig));
  CUDA_CHECK(cudaFree((void *)ids_dev));
  mdr_graph_cache_destroy(c);
  mdr_arena_destroy(a);
  mdr_backend_stream_destroy(b, ms);
  mdr_backend_destroy(b);
  if (!ok) {
    printf("validation FAILED (see above): no timing for the failed cases\n");
    return 1;
  }
  printf("every case validated before it was timed\n");
  return 0;
}
