/* param_load_probe.cu — what an inline step's stage block pays to read its
 * slot image from the kernel's own parameters, beside the same vectors read
 * from device memory, and what a larger parameter block costs a launch.
 *
 * The inline launches (kernels/zero_fused.cu, staging/staging.cuh) take
 * their image __grid_constant__ and read it through a generic address of
 * the parameters, each thread of the one stage block loading its own
 * 16-byte vectors (different addresses across a warp). Block stamps put
 * that block on the critical path of every inline step at 1-8 tokens
 * (bench/results/h200-2026-12-03-session22/, call 10). This probe times the
 * load pattern alone, one block of 256 threads, two vectors in flight per
 * thread as mdr_stage_copy_image issues them:
 *   param-generic  the image through a generic address of the parameters
 *                  (what the stage block does);
 *   param-direct   the image indexed as the parameter itself (a.v[j]:
 *                  ld.param with a register offset);
 *   global         the same vectors from a device buffer (L2-resident
 *                  after the first launch: the image in device memory);
 *   empty          no load: the launch of that parameter block alone.
 * Image classes: 112, 1152, 4352, 8448 and 16896 bytes (the inline classes
 * of staging/staging_layout.h); vectors loaded: 1, 8, 37, 72, 272, 528, 1056
 * (up to the class's). Per case: the block's SM cycles from its start to
 * every load stored (clock64, thread 0, median and p90 over the launches)
 * and the GPU time per launch of a graph of 64 such kernel nodes replayed
 * behind nothing (events; median over the replays). Every case is
 * validated: the stored vectors are the image's, and the vector past them
 * is untouched.
 *
 * Usage: param_load_probe [--reps N] [--csv FILE]. Without a GPU it says so
 * and exits 0. Standalone: no libmdr. */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "lab.h"

enum { MODE_GENERIC = 0, MODE_DIRECT = 1, MODE_GLOBAL = 2, MODE_EMPTY = 3, MODES = 4 };
static const char *const k_mode[MODES] = {"param-generic", "param-direct", "global", "empty"};

#define BLOCK 256u
#define NODES 64
#define CYC_CAP 65536u

template <unsigned NV>
struct img_t {
  uint4 v[NV];
};

struct probe_out {
  uint4 *out;              /* where the loaded vectors go (NV + 1 vectors: the last a guard) */
  const uint4 *global;     /* the image in device memory (MODE_GLOBAL) */
  unsigned long long *cyc; /* one entry a launch */
  unsigned *launches;      /* launch counter */
  unsigned n;              /* vectors to load */
};

template <unsigned NV, int MODE>
__global__ void __launch_bounds__(BLOCK) probe_kernel(const __grid_constant__ img_t<NV> a, probe_out o) {
  constexpr unsigned R = 2;
  __syncthreads();
  const long long t0 = clock64();
  const unsigned tid = threadIdx.x;
  if (MODE != MODE_EMPTY) {
    /* the address as the stage block gets it: an integer (inline_slot), so
     * the loads are generic ones, not ld.param */
    uint64_t addr = (uint64_t)(uintptr_t)&a.v[0];
    asm volatile("" : "+l"(addr));
    const uint4 *generic = (const uint4 *)addr;
    for (unsigned base = 0; base < o.n; base += R * BLOCK) {
      uint4 r[R];
#pragma unroll
      for (unsigned u = 0; u < R; u++) {
        const unsigned j = base + u * BLOCK + tid;
        if (j < o.n) r[u] = MODE == MODE_GENERIC ? generic[j] : MODE == MODE_DIRECT ? a.v[j] : o.global[j];
      }
#pragma unroll
      for (unsigned u = 0; u < R; u++) {
        const unsigned j = base + u * BLOCK + tid;
        if (j < o.n) o.out[j] = r[u];
      }
    }
  }
  __syncthreads();
  if (tid == 0) {
    const long long t1 = clock64();
    const unsigned i = atomicAdd(o.launches, 1u);
    o.cyc[i % CYC_CAP] = (unsigned long long)(t1 - t0);
  }
}

static uint4 pattern(unsigned j) { return make_uint4(4u * j + 1u, 4u * j + 2u, 4u * j + 3u, 4u * j + 4u); }
static const uint4 k_guard = {0xdeadbeefu, 0xdeadbeefu, 0xdeadbeefu, 0xdeadbeefu};

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
static double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[(size_t)(p * (double)(v.size() - 1))];
}

struct device_bufs {
  uint4 *out, *global;
  unsigned long long *cyc;
  unsigned *launches;
};

/* One case: validate one launch, then time graphs of NODES launches. */
template <unsigned NV, int MODE>
static int run_case(const device_bufs &d, unsigned n, int reps, cudaStream_t s, FILE *csv) {
  img_t<NV> img;
  for (unsigned j = 0; j < NV; j++) img.v[j] = pattern(j);
  probe_out o = {d.out, d.global, d.cyc, d.launches, MODE == MODE_EMPTY ? 0u : n};
  /* validation: poison out (n + 1 vectors), one launch, compare */
  std::vector<uint4> host(NV + 1, k_guard);
  CUDA_CHECK(cudaMemcpy(d.out, host.data(), (NV + 1) * sizeof(uint4), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d.global, img.v, NV * sizeof(uint4), cudaMemcpyHostToDevice));
  probe_kernel<NV, MODE><<<1, BLOCK, 0, s>>>(img, o);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(s));
  CUDA_CHECK(cudaMemcpy(host.data(), d.out, (NV + 1) * sizeof(uint4), cudaMemcpyDeviceToHost));
  for (unsigned j = 0; j <= n; j++) { /* n <= NV: out holds NV + 1 vectors */
    const bool loaded = MODE != MODE_EMPTY && j < n;
    const uint4 want = loaded ? pattern(j) : k_guard;
    if (memcmp(&host[j], &want, sizeof want) != 0) {
      fprintf(stderr, "param_load_probe: %s img %u n %u: vector %u wrong\n", k_mode[MODE], NV * 16u, n, j);
      return 1;
    }
  }
  /* timing: a graph of NODES launches, replayed reps times */
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < NODES; k++) probe_kernel<NV, MODE><<<1, BLOCK, 0, s>>>(img, o);
  CUDA_CHECK(cudaStreamEndCapture(s, &g));
  CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  CUDA_CHECK(cudaMemset(d.launches, 0, sizeof(unsigned)));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  CUDA_CHECK(cudaGraphLaunch(ge, s)); /* warm */
  CUDA_CHECK(cudaStreamSynchronize(s));
  CUDA_CHECK(cudaMemset(d.launches, 0, sizeof(unsigned)));
  std::vector<double> us;
  for (int r = 0; r < reps; r++) {
    CUDA_CHECK(cudaEventRecord(e0, s));
    CUDA_CHECK(cudaGraphLaunch(ge, s));
    CUDA_CHECK(cudaEventRecord(e1, s));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    us.push_back(1000.0 * ms / NODES);
  }
  unsigned launches = 0;
  CUDA_CHECK(cudaMemcpy(&launches, d.launches, sizeof launches, cudaMemcpyDeviceToHost));
  const unsigned kept = launches < CYC_CAP ? launches : CYC_CAP;
  std::vector<unsigned long long> cyc(kept);
  CUDA_CHECK(cudaMemcpy(cyc.data(), d.cyc, kept * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  std::vector<double> c(cyc.begin(), cyc.end());
  const double cm = median(c), c90 = pct(c, 0.9), um = median(us);
  printf("%-14s %6u %5u  %8.0f %8.0f  %8.3f\n", k_mode[MODE], NV * 16u, MODE == MODE_EMPTY ? 0u : n, cm, c90, um);
  if (csv)
    fprintf(csv, "%s,%u,%u,%.0f,%.0f,%.4f\n", k_mode[MODE], NV * 16u, MODE == MODE_EMPTY ? 0u : n, cm, c90, um);
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  CUDA_CHECK(cudaGraphExecDestroy(ge));
  CUDA_CHECK(cudaGraphDestroy(g));
  return 0;
}

template <unsigned NV>
static int run_class(const device_bufs &d, int reps, cudaStream_t s, FILE *csv) {
  static const unsigned ns[] = {1, 8, 37, 72, 272, 528, 1056};
  int bad = run_case<NV, MODE_EMPTY>(d, 0, reps, s, csv);
  for (unsigned n : ns) {
    if (n > NV) break;
    bad |= run_case<NV, MODE_GENERIC>(d, n, reps, s, csv);
    bad |= run_case<NV, MODE_DIRECT>(d, n, reps, s, csv);
    bad |= run_case<NV, MODE_GLOBAL>(d, n, reps, s, csv);
  }
  return bad;
}

int main(int argc, char **argv) {
  int reps = 200;
  const char *csv_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
      csv_path = argv[++i];
    } else {
      fprintf(stderr, "usage: param_load_probe [--reps N] [--csv FILE]\n");
      return 2;
    }
  }
  if (reps < 1) {
    fprintf(stderr, "param_load_probe: --reps must be at least 1\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("param_load_probe: no CUDA device; nothing measured\n");
    return 0;
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  printf("param_load_probe: %s, SM clock %.2f GHz (cycles / clock = ns), %d graph replays of %d launches a case\n",
         prop.name, clock_khz / 1e6, reps, NODES);
  FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
  if (csv_path && !csv) {
    fprintf(stderr, "param_load_probe: cannot write %s\n", csv_path);
    return 2;
  }
  if (csv) fprintf(csv, "mode,param_image_bytes,vectors,cycles_median,cycles_p90,gpu_us_per_launch_median\n");
  device_bufs d;
  CUDA_CHECK(cudaMalloc(&d.out, 1057 * sizeof(uint4)));
  CUDA_CHECK(cudaMalloc(&d.global, 1056 * sizeof(uint4)));
  CUDA_CHECK(cudaMalloc(&d.cyc, CYC_CAP * sizeof(unsigned long long)));
  CUDA_CHECK(cudaMalloc(&d.launches, sizeof(unsigned)));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  printf("%-14s %6s %5s  %8s %8s  %8s\n", "mode", "image", "vecs", "cyc med", "cyc p90", "us/launch");
  int bad = run_class<7>(d, reps, s, csv);
  bad |= run_class<72>(d, reps, s, csv);
  bad |= run_class<272>(d, reps, s, csv);
  bad |= run_class<528>(d, reps, s, csv);
  bad |= run_class<1056>(d, reps, s, csv);
  CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaFree(d.out));
  CUDA_CHECK(cudaFree(d.global));
  CUDA_CHECK(cudaFree(d.cyc));
  CUDA_CHECK(cudaFree(d.launches));
  if (csv) fclose(csv);
  if (bad) fprintf(stderr, "param_load_probe: validation failed\n");
  return bad ? 1 : 0;
}
