/* all_reduce_norm_compare.cu — the fused all-reduce + residual + RMSNorm
 * against the unfused chain (mdr's all-reduce, then the residual + RMSNorm
 * kernel of the same arithmetic, mdr_cuda_ar_residual_norm), on the
 * one-GPU harness of tests/test_ar_gpu.c: every rank's slab in one device's
 * memory, each rank its own stream, peer[r] a plain device address. A
 * first look only: ranks that share one GPU share its SMs and its memory
 * bandwidth, so the two-GPU figures (mdr-bench-tp --norm) decide.
 *
 * Variants, each one-shot and two-shot (kernels/all_reduce.cu compiled
 * into this program, called through mdr_cuda_ar_launch as src/comm_nccl.c
 * does):
 *   fused    the call with the residual and the norm, as mdr_all_reduce
 *            hands it over, with MDR_AR_NORM_FUSE's choice in the call
 *            (mdr_arp_norm_fused): unset or "always", one launch, the fused
 *            kernel (what session 9 measured); "never", the library's
 *            chain (the plain kernel, then the residual + norm kernel that
 *            first reads the give-up word); "auto", what the library runs
 *            (fused only in one-shots of at most 512 KiB). The CSV's variant
 *            says which: fused, chain or auto; its column norm_fuse too.
 *   unfused  the plain all-reduce, then mdr_cuda_ar_residual_norm (the
 *            chain by hand, as session 9 measured it)
 * Cases: 1 to 128 tokens at hidden 4096, 6144 and 8192, bf16.
 *
 * Each case is validated before it is timed: one call on small integers
 * (the sum exact), the sums, the residual and the norm compared bit for
 * bit with tests/ar_norm_ref.h (the contract's arithmetic) on every rank,
 * rows past the count untouched; after the timing (on zero rows: the
 * residual stays, the norm is recomputed each call) the norm is checked
 * again. Timing as dev/all_reduce_compare: per rep every rank enqueues a
 * blocker, an event, a CUDA graph of K calls, an event; one store releases
 * the blockers; the rep's figure is the slowest rank's time / K.
 *
 * Usage: [MDR_AR_NORM_FUSE=always|never|auto] all_reduce_norm_compare OUT_DIR [--reps N] [--ranks 2|4|8]
 *        [--no-pdl]
 * Writes OUT_DIR/all_reduce_norm_compare.csv and prints a table. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include "all_reduce.h"
#include "ar_norm_ref.h"
#include "lab.h"

namespace {

enum { MAXR = 8, K = 16, MAX_TOKENS = 128, MAX_ROW = 16384 };
constexpr float kEps = 1e-6f;
constexpr size_t kArea = (size_t)MAX_TOKENS * MAX_ROW;
constexpr size_t kBufOff = 0, kResOff = kArea, kOutOff = 2 * kArea, kWgtOff = 3 * kArea;
constexpr size_t kRegionOff = 3 * kArea + MAX_ROW;

struct harness {
  int n;
  char *slab[MAXR];
  size_t slab_bytes;
  cudaStream_t stream[MAXR];
  uint32_t *words, *words_dev;
  volatile uint32_t *release;
  uint32_t *release_dev;
  uint32_t generation;
  int max_blocks, pdl;
  int norm_fuse; /* MDR_AR_NORM_FUSE (unset: always) for the first variant */
};

/* The first variant's name under each MDR_AR_NORM_FUSE value. */
const char *fused_name(int mode) {
  return mode == MDR_ARP_NORM_FUSE_NEVER ? "chain" : mode == MDR_ARP_NORM_FUSE_AUTO ? "auto" : "fused";
}

struct shape {
  int algo; /* MDR_ARP_ONE_SHOT or MDR_ARP_TWO_SHOT */
  int fused;
  size_t hidden, tokens;
};

int launch(const harness &h, int r, const shape &c) {
  const size_t row = 2 * c.hidden;
  mdr_ar_call k;
  memset(&k, 0, sizeof k);
  k.buf_off = kBufOff;
  k.res_off = c.fused ? kResOff : MDR_ARP_NO_RESIDUAL;
  k.row_bytes = row;
  k.rows = c.tokens;
  k.one_shot_max = MDR_ARP_ONE_SHOT_MAX_BYTES;
  k.dtype = MDR_ARP_BF16;
  k.algo = c.algo;
  for (int q = 0; q < h.n; q++) k.peer[q] = h.slab[q];
  k.self = h.slab[r];
  k.region_off = kRegionOff;
  k.slot_cap = MDR_ARP_ONE_SHOT_MAX_BYTES;
  k.rank = r;
  k.nranks = h.n;
  k.max_blocks = h.max_blocks;
  k.pdl = h.pdl;
  k.host_abort = &h.words_dev[MDR_ARP_HOST_ABORT];
  k.host_report = &h.words_dev[MDR_ARP_HOST_RANKS0 + (size_t)r * MDR_ARP_HOST_REPORT];
  if (c.fused) {
    k.norm_weight = h.slab[r] + kWgtOff;
    k.norm_off = kOutOff;
    k.norm_eps = kEps;
    k.norm_fuse = h.norm_fuse;
  }
  int e = mdr_cuda_ar_launch(&k, h.stream[r]);
  if (e || c.fused) return e;
  return mdr_cuda_ar_residual_norm(h.slab[r] + kResOff, h.slab[r] + kBufOff, h.slab[r] + kOutOff, h.slab[r] + kWgtOff,
                                   kEps, row, c.tokens, nullptr, MDR_ARP_BF16, h.stream[r]);
}

__global__ void blocker_kernel(const volatile uint32_t *release, uint32_t generation) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while ((int32_t)(*release - generation) < 0 && t - t0 < 2000000000ull); /* reaches: a late stream finds a later value */
}

uint16_t bf16_of(float f) { /* exact for the values here */
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
int row_value(int r, size_t i) { return (int)((i * 7 + (size_t)r * 5) % 9) - 4; }
int res_value(size_t i) { return (int)((i * 3) % 11) - 5; }
float weight_value(int r, size_t i) { return 0.5f + (float)((i * 5 + (size_t)r * 3) % 17) / 16.0f; }

void sync_all(const harness &h) {
  for (int r = 0; r < h.n; r++) CUDA_CHECK(cudaStreamSynchronize(h.stream[r]));
}

/* Every rank: rows (zero: all 0), residual, the output poisoned, weight. */
void fill(const harness &h, const shape &c, bool zero) {
  const size_t el = MAX_TOKENS * c.hidden;
  std::vector<uint16_t> v(el), res(el), out(el, 0x7DEDu), w(c.hidden);
  for (size_t i = 0; i < el; i++) res[i] = bf16_of((float)res_value(i));
  for (int r = 0; r < h.n; r++) {
    for (size_t i = 0; i < el; i++) v[i] = zero ? 0 : bf16_of((float)row_value(r, i));
    for (size_t i = 0; i < c.hidden; i++) w[i] = bf16_of(weight_value(r, i));
    CUDA_CHECK(cudaMemcpy(h.slab[r] + kBufOff, v.data(), el * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(h.slab[r] + kResOff, res.data(), el * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(h.slab[r] + kOutOff, out.data(), el * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(h.slab[r] + kWgtOff, w.data(), c.hidden * 2, cudaMemcpyHostToDevice));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
}

/* After one call on fill(zero = false) (sums = true) or after calls on
 * zero rows (sums = false: the residual as filled): every rank's rows,
 * residual and norm as the contract says. */
bool check(const harness &h, const shape &c, bool sums, const char *what) {
  const size_t el = MAX_TOKENS * c.hidden, live = c.tokens * c.hidden;
  std::vector<uint16_t> v(el), res(el), out(el);
  std::vector<uint32_t> rrow(c.hidden), wrow(c.hidden), orow(c.hidden);
  for (int r = 0; r < h.n; r++) {
    CUDA_CHECK(cudaMemcpy(v.data(), h.slab[r] + kBufOff, el * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(res.data(), h.slab[r] + kResOff, el * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(out.data(), h.slab[r] + kOutOff, el * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < c.hidden; i++) wrow[i] = bf16_of(weight_value(r, i));
    for (size_t i = 0; i < el; i++) {
      int s = 0;
      for (int q = 0; q < h.n; q++) s += row_value(q, i);
      const uint16_t want = !sums ? 0 : i < live ? bf16_of((float)s) : bf16_of((float)row_value(r, i));
      const uint16_t want_res = bf16_of((float)(res_value(i) + (sums && i < live ? s : 0)));
      if (v[i] != want || res[i] != want_res) {
        fprintf(stderr, "validation failed: %s: rank %d element %zu: sum 0x%04x (want 0x%04x), residual 0x%04x (want "
                        "0x%04x)\n", what, r, i, v[i], want, res[i], want_res);
        return false;
      }
    }
    for (size_t row = 0; row < MAX_TOKENS; row++) {
      for (size_t e = 0; e < c.hidden; e++) rrow[e] = res[row * c.hidden + e];
      if (row < c.tokens) nref_row(0, rrow.data(), wrow.data(), c.hidden, kEps, orow.data());
      else std::fill(orow.begin(), orow.end(), 0x7DEDu);
      for (size_t e = 0; e < c.hidden; e++)
        if (out[row * c.hidden + e] != orow[e]) {
          fprintf(stderr, "validation failed: %s: rank %d row %zu element %zu: norm 0x%04x, the contract gives "
                          "0x%04x\n", what, r, row, e, out[row * c.hidden + e], orow[e]);
          return false;
        }
    }
  }
  return true;
}

cudaGraphExec_t capture(const harness &h, int r, const shape &c) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t x = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(h.stream[r], cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < K; i++) CUDA_CHECK((cudaError_t)launch(h, r, c));
  CUDA_CHECK(cudaStreamEndCapture(h.stream[r], &g));
  CUDA_CHECK(cudaGraphInstantiateWithFlags(&x, g, 0));
  CUDA_CHECK(cudaGraphDestroy(g));
  CUDA_CHECK(cudaGraphUpload(x, h.stream[r]));
  return x;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  size_t i = (size_t)(q * (double)(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct result {
  shape c;
  double median, p99;
};

bool run_case(harness &h, const shape &c, int reps, result *out) {
  char what[160];
  snprintf(what, sizeof what, "%s %s hidden %zu, %zu tokens", c.fused ? fused_name(h.norm_fuse) : "unfused",
           c.algo == MDR_ARP_ONE_SHOT ? "one-shot" : "two-shot", c.hidden, c.tokens);
  fill(h, c, false);
  for (int r = 0; r < h.n; r++) CUDA_CHECK((cudaError_t)launch(h, r, c));
  sync_all(h);
  if (!check(h, c, true, what)) return false;
  std::vector<cudaGraphExec_t> x(h.n);
  for (int r = 0; r < h.n; r++) x[r] = capture(h, r, c);
  fill(h, c, true); /* zero rows: the residual stays, every call norms it again */
  std::vector<cudaEvent_t> ev(2 * (size_t)h.n * reps);
  for (auto &e : ev) CUDA_CHECK(cudaEventCreate(&e));
  for (int w = 0; w < 3; w++)
    for (int r = 0; r < h.n; r++) CUDA_CHECK(cudaGraphLaunch(x[r], h.stream[r]));
  sync_all(h);
  std::vector<double> per(reps);
  for (int i = 0; i < reps; i++) {
    h.generation++;
    for (int r = 0; r < h.n; r++) {
      blocker_kernel<<<1, 1, 0, h.stream[r]>>>(h.release_dev, h.generation);
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaEventRecord(ev[2 * ((size_t)h.n * i + r)], h.stream[r]));
      CUDA_CHECK(cudaGraphLaunch(x[r], h.stream[r]));
      CUDA_CHECK(cudaEventRecord(ev[2 * ((size_t)h.n * i + r) + 1], h.stream[r]));
    }
    __atomic_store_n((uint32_t *)h.release, h.generation, __ATOMIC_RELEASE);
    if ((i + 1) % 16 == 0) sync_all(h);
  }
  sync_all(h);
  for (int i = 0; i < reps; i++) {
    double worst = 0;
    for (int r = 0; r < h.n; r++) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * ((size_t)h.n * i + r)], ev[2 * ((size_t)h.n * i + r) + 1]));
      worst = std::max(worst, (double)ms * 1e3 / K);
    }
    per[i] = worst;
  }
  for (auto &e : ev) CUDA_CHECK(cudaEventDestroy(e));
  for (int r = 0; r < h.n; r++) CUDA_CHECK(cudaGraphExecDestroy(x[r]));
  for (int r = 0; r < h.n; r++)
    if (h.words[MDR_ARP_HOST_RANKS0 + (size_t)r * MDR_ARP_HOST_REPORT + MDR_ARP_REP_CAUSE]) {
      fprintf(stderr, "validation failed: %s: rank %d gave up\n", what, r);
      return false;
    }
  if (!check(h, c, false, what)) return false;
  *out = result{c, percentile(per, 0.5), percentile(per, 0.99)};
  return true;
}

}  // namespace

int main(int argc, char **argv) {
  /* ranks spin while they wait for each other on one GPU: each stream needs
   * a hardware queue of its own, and every kernel loaded up front (a lazy
   * first load can wait for a peer's spinning kernel); before any CUDA call */
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  setvbuf(stdout, nullptr, _IOLBF, 0); /* what was printed survives a kill */
  if (argc < 2) {
    fprintf(stderr, "usage: %s OUT_DIR [--reps N] [--ranks 2|4|8] [--no-pdl]\n", argv[0]);
    return 2;
  }
  const std::string out_dir = argv[1];
  int reps = 400, pdl = 1, n = 2;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-pdl")) pdl = 0;
    else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (reps < 1 || (n != 2 && n != 4 && n != 8)) {
    fprintf(stderr, "--reps: at least 1; --ranks: 2, 4 or 8\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    printf("all_reduce_norm_compare: no CUDA device\n");
    return 0;
  }
  harness h = {};
  h.n = n;
  const char *fuse_env = getenv("MDR_AR_NORM_FUSE");
  h.norm_fuse = fuse_env ? mdr_arp_norm_fuse_parse(fuse_env) : MDR_ARP_NORM_FUSE_ALWAYS;
  if (h.norm_fuse < 0) {
    fprintf(stderr, "MDR_AR_NORM_FUSE=\"%s\": auto, always or never\n", fuse_env);
    return 2;
  }
  int dev = 0, sms = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  h.pdl = pdl && major >= 9;
  h.max_blocks = std::max(1, std::min(128, sms / (n * (h.pdl ? 2 : 1))));
  h.slab_bytes = (kRegionOff + MDR_ARP_REGION_BYTES(n, MDR_ARP_ONE_SHOT_MAX_BYTES) + 255u) & ~(size_t)255u;
  char *mem = nullptr;
  CUDA_CHECK(cudaMalloc((void **)&mem, (size_t)n * h.slab_bytes));
  CUDA_CHECK(cudaMemset(mem, 0, (size_t)n * h.slab_bytes));
  for (int r = 0; r < n; r++) {
    h.slab[r] = mem + (size_t)r * h.slab_bytes;
    CUDA_CHECK(cudaStreamCreateWithFlags(&h.stream[r], cudaStreamNonBlocking));
    CUDA_CHECK((cudaError_t)mdr_cuda_ar_region_init(h.slab[r] + kRegionOff, n, MDR_ARP_ONE_SHOT_MAX_BYTES, h.stream[r]));
  }
  CUDA_CHECK(cudaHostAlloc((void **)&h.words, MDR_ARP_HOST_WORDS(n) * 4, cudaHostAllocMapped));
  memset(h.words, 0, MDR_ARP_HOST_WORDS(n) * 4);
  CUDA_CHECK(cudaHostGetDevicePointer((void **)&h.words_dev, h.words, 0));
  uint32_t *rel = nullptr;
  CUDA_CHECK(cudaHostAlloc((void **)&rel, 4, cudaHostAllocMapped));
  *rel = 0;
  h.release = rel;
  CUDA_CHECK(cudaHostGetDevicePointer((void **)&h.release_dev, rel, 0));
  sync_all(h);
  static const char *const k_modes[3] = {"auto", "always", "never"};
  printf("all_reduce_norm_compare: %d ranks on one GPU (%d SMs), bf16, eps %g, grid cap %d, PDL %s, %d reps of a "
         "graph of %d calls (a first look: the ranks share one GPU); MDR_AR_NORM_FUSE=%s%s: the first variant is "
         "'%s'\n",
         n, sms, (double)kEps, h.max_blocks, h.pdl ? "on" : "off", reps, K, k_modes[h.norm_fuse],
         fuse_env ? "" : " (unset: always)", fused_name(h.norm_fuse));
  const size_t hiddens[] = {4096, 6144, 8192};
  const size_t tokens[] = {1, 2, 4, 8, 16, 32, 64, 128};
  std::vector<result> res;
  bool ok = true;
  for (size_t hd : hiddens)
    for (size_t t : tokens)
      for (int algo : {MDR_ARP_ONE_SHOT, MDR_ARP_TWO_SHOT})
        for (int fused = 1; fused >= 0; fused--) {
          result r;
          const shape c = {algo, fused, hd, t};
          if (!run_case(h, c, reps, &r)) {
            ok = false;
            continue;
          }
          res.push_back(r);
        }
  const std::string csv_path = out_dir + "/all_reduce_norm_compare.csv";
  FILE *csv = fopen(csv_path.c_str(), "w");
  if (!csv) {
    fprintf(stderr, "cannot write %s\n", csv_path.c_str());
    return 2;
  }
  fprintf(csv, "variant,algo,hidden,tokens,median_us,p99_us,ranks,reps,calls_per_graph,grid_cap,pdl,norm_fuse\n");
  for (const result &r : res)
    fprintf(csv, "%s,%s,%zu,%zu,%.3f,%.3f,%d,%d,%d,%d,%d,%s\n", r.c.fused ? fused_name(h.norm_fuse) : "unfused",
            r.c.algo == MDR_ARP_ONE_SHOT ? "one-shot" : "two-shot", r.c.hidden, r.c.tokens, r.median, r.p99, n, reps, K,
            h.max_blocks, h.pdl, k_modes[h.norm_fuse]);
  fclose(csv);
  char head[32];
  snprintf(head, sizeof head, "%s med us", fused_name(h.norm_fuse));
  printf("\n%-7s %-7s %-9s | %12s %12s | %8s\n", "hidden", "tokens", "algo", head, "unfused med", "x");
  for (size_t i = 0; i + 1 < res.size(); i++) {
    const result &a = res[i], &b = res[i + 1];
    if (!a.c.fused || b.c.fused || a.c.algo != b.c.algo || a.c.hidden != b.c.hidden || a.c.tokens != b.c.tokens)
      continue;
    printf("%-7zu %-7zu %-9s | %12.2f %12.2f | %8.3f\n", a.c.hidden, a.c.tokens,
           a.c.algo == MDR_ARP_ONE_SHOT ? "one-shot" : "two-shot", a.median, b.median, a.median / b.median);
  }
  printf("\nx: %s over unfused (the goal on two GPUs: <= 0.85 at 1-64 tokens)\nwrote %s\n",
         fused_name(h.norm_fuse), csv_path.c_str());
  if (!ok) printf("some cases failed validation (not timed): see above\n");
  return ok ? 0 : 1;
}
