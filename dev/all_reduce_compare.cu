/* all_reduce_compare.cu — the all-reduce kernels old and new, side by side
 * on the one-GPU two-rank harness (tests/test_ar_gpu.c has the same
 * harness): both ranks' slabs in one device's memory, each rank its own
 * stream, peer[r] a plain device address.
 *
 * Versions:
 *   v1   the kernel of commit d006a59 (epoch-based flags, before the
 *        protocol's rebuild), copied below into namespace v1
 *        with its launcher; unchanged but for the names and for PDL,
 *        which it took from its own pdl_enabled() and here takes from the
 *        caller, so that both versions run with the same setting;
 *   lib  the product's kernel (kernels/all_reduce.cu, compiled into this
 *        program) through its launcher mdr_cuda_ar_launch.
 *
 * Cases: 2 KiB to 2 MiB of bf16 rows (2 KiB rows), one-shot and two-shot,
 * with the row count given (rows) or read from a count word (count).
 * Each case is validated before it is timed: one call on small integers
 * (the sum exact), then one replay of the timed graph (K calls in a row,
 * each doubling the exact sum). Timing as mdr-bench-tp's K-batch
 * (bench/mdr_bench_tp_rank.c): per rep both ranks enqueue a blocker
 * kernel, an event, a CUDA graph of K calls, an event; the host releases
 * both blockers with one store; the rep's figure is the slower rank's
 * time / K. Median and p99 over the reps.
 *
 * Every rank's blocks must be resident at once (a block spins for the
 * same block of the peer): the grid cap is SMs / (2 ranks x 2 kernels
 * a rank, PDL keeping the next one resident).
 *
 * Usage: all_reduce_compare OUT_DIR [--reps N] [--no-pdl]
 * Writes OUT_DIR/all_reduce_compare.csv and prints a table. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <string>
#include <vector>

#include "all_reduce.h"
#include "lab.h"

/* ==== v1: the kernel of commit d006a59 ==== */
namespace v1 {

enum { MDR_ARK_BF16 = 0, MDR_ARK_FP16 = 1, MDR_ARK_FP32 = 2 };
enum { MDR_ARK_AUTO = 0, MDR_ARK_ONE_SHOT = 2, MDR_ARK_TWO_SHOT = 3 };
enum {
  MDR_AR_MAX_RANKS = 8,
  MDR_AR_MAX_BLOCKS = 128,
  MDR_AR_THREADS = 512,
  MDR_AR_FLAGS_OFF = MDR_AR_MAX_BLOCKS * 4,
  MDR_AR_VEC = 16
};
#define MDR_ARK_ONE_SHOT_MAX_BYTES ((size_t)2 << 20)
#define MDR_AR_FLAGS_BYTES(n) ((size_t)v1::MDR_AR_MAX_BLOCKS * (size_t)(n) * 4u)
#define MDR_AR_LAMPORT_OFF(n) ((((size_t)v1::MDR_AR_FLAGS_OFF + MDR_AR_FLAGS_BYTES(n)) + 255u) & ~(size_t)255u)
#define MDR_AR_REGION_BYTES(n) (MDR_AR_LAMPORT_OFF(n) + 2u * (size_t)(n) * MDR_ARK_ONE_SHOT_MAX_BYTES)

/* The old launcher's description of a call (old all_reduce.h). */
struct mdr_ar_launch {
  char *peer[MDR_AR_MAX_RANKS];
  char *self;
  int rank, nranks;
  size_t buf_off, res_off, region_off;
  size_t row_bytes, rows;
  const uint32_t *count_ptr;
  size_t one_shot_max;
  int dtype, algo, max_blocks;
};

struct ar_params {
  char *peer[MDR_AR_MAX_RANKS];
  char *self;
  int rank, nranks;
  size_t buf_off, res_off, region_off;
  size_t row_bytes, rows;
  const uint32_t *count_ptr;
  size_t one_shot_max;
  int algo;
};

constexpr size_t kNoResidual = ~(size_t)0;

/* ---- memory operations ---- */

__device__ __forceinline__ uint4 ld_volatile(const uint4 *p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ void st_volatile(uint4 *p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

__device__ __forceinline__ void st_release_sys(uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* ---- elements: DT is an MDR_ARK_ dtype; a 16-byte vector holds 8 or 4 ---- */

template <int DT> struct elems {
  static constexpr int N = DT == MDR_ARK_FP32 ? 4 : 8;
};

__device__ __forceinline__ uint32_t word(const uint4 &v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ void set_word(uint4 &v, int i, uint32_t w) {
  if (i == 0) v.x = w;
  else if (i == 1) v.y = w;
  else if (i == 2) v.z = w;
  else v.w = w;
}

/* 1 while any element still holds the all-ones sentinel. */
template <int DT> __device__ __forceinline__ bool pending(const uint4 &v) {
  bool p = false;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const uint32_t w = word(v, i);
    if (DT == MDR_ARK_FP32) {
      p |= w == 0xffffffffu;
    } else {
      p |= (w & 0xffffu) == 0xffffu || (w >> 16) == 0xffffu;
    }
  }
  return p;
}

/* The vector as sent: an all-ones element (a NaN) becomes another NaN. */
template <int DT> __device__ __forceinline__ uint4 canonical(uint4 v) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    uint32_t w = word(v, i);
    if (DT == MDR_ARK_FP32) {
      if (w == 0xffffffffu) w = 0x7fffffffu;
    } else {
      if ((w & 0xffffu) == 0xffffu) w = (w & 0xffff0000u) | 0x7fffu;
      if ((w >> 16) == 0xffffu) w = (w & 0xffffu) | 0x7fff0000u;
    }
    set_word(v, i, w);
  }
  return v;
}

template <int DT> __device__ __forceinline__ float to_float(uint32_t bits) {
  if (DT == MDR_ARK_BF16) return __uint_as_float(bits << 16);
  if (DT == MDR_ARK_FP16) return __half2float(__ushort_as_half((unsigned short)bits));
  return __uint_as_float(bits);
}

template <int DT> __device__ __forceinline__ uint32_t from_float(float f) {
  if (DT == MDR_ARK_BF16) return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  if (DT == MDR_ARK_FP16) return __half_as_ushort(__float2half_rn(f));
  return __float_as_uint(f);
}

/* acc[k] = element k of v (the first term: the sum starts from x_0, not
 * from +0, so -0 + -0 stays -0 as in IEEE and NCCL) */
template <int DT> __device__ __forceinline__ void first_term(float *acc, const uint4 &v) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const uint32_t w = word(v, i);
    if (DT == MDR_ARK_FP32) {
      acc[i] = to_float<DT>(w);
    } else {
      acc[2 * i] = to_float<DT>(w & 0xffffu);
      acc[2 * i + 1] = to_float<DT>(w >> 16);
    }
  }
}

/* acc[k] += element k of v */
template <int DT> __device__ __forceinline__ void accumulate(float *acc, const uint4 &v) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const uint32_t w = word(v, i);
    if (DT == MDR_ARK_FP32) {
      acc[i] += to_float<DT>(w);
    } else {
      acc[2 * i] += to_float<DT>(w & 0xffffu);
      acc[2 * i + 1] += to_float<DT>(w >> 16);
    }
  }
}

template <int DT> __device__ __forceinline__ uint4 pack(const float *acc) {
  uint4 v;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if (DT == MDR_ARK_FP32) {
      set_word(v, i, from_float<DT>(acc[i]));
    } else {
      set_word(v, i, from_float<DT>(acc[2 * i]) | (from_float<DT>(acc[2 * i + 1]) << 16));
    }
  }
  return v;
}

/* residual = round(residual + sum), element by element */
template <int DT> __device__ __forceinline__ uint4 add_residual(const uint4 &res, const uint4 &sum) {
  float a[elems<DT>::N];
  first_term<DT>(a, res);
  accumulate<DT>(a, sum);
  return pack<DT>(a);
}

/* ---- the kernel ---- */

__device__ __forceinline__ uint32_t *flag_slot(char *region, int block, int nranks, int r) {
  return (uint32_t *)(region + MDR_AR_FLAGS_OFF) + (size_t)block * nranks + r;
}

/* Block b of every rank meets at `value`. The block's earlier stores (to
 * any rank) are visible to the peers' block b once they pass. */
__device__ __forceinline__ void block_barrier(const ar_params &p, uint32_t value) {
  __threadfence_system();
  __syncthreads();
  if ((int)threadIdx.x < p.nranks) {
    const int r = threadIdx.x;
    st_release_sys(flag_slot(p.peer[r] + p.region_off, blockIdx.x, p.nranks, p.rank), value);
    const uint32_t *mine = flag_slot(p.self + p.region_off, blockIdx.x, p.nranks, r);
    while ((int32_t)(ld_acquire_sys(mine) - value) < 0) {
    }
  }
  __syncthreads();
}

template <int DT> __device__ void one_shot(const ar_params &p, size_t nvec, uint32_t epoch) {
  const size_t slot_bytes = MDR_ARK_ONE_SHOT_MAX_BYTES;
  const size_t lam = p.region_off + MDR_AR_LAMPORT_OFF(p.nranks) + (size_t)(epoch & 1u) * p.nranks * slot_bytes;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint4 *rows = (uint4 *)(p.self + p.buf_off);
  /* send: this rank's slot of every peer's scratch (its own rows it keeps) */
  for (size_t i = first; i < nvec; i += stride) {
    const uint4 v = canonical<DT>(rows[i]);
    for (int r = 0; r < p.nranks; r++)
      if (r != p.rank) st_volatile((uint4 *)(p.peer[r] + lam + (size_t)p.rank * slot_bytes) + i, v);
  }
  char *local = p.self + lam;
  uint4 *res = p.res_off == kNoResidual ? nullptr : (uint4 *)(p.self + p.res_off);
  const uint4 clear = make_uint4(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  for (size_t i = first; i < nvec; i += stride) {
    const uint4 own = rows[i]; /* summed as sent: the same bits on every rank */
    float acc[elems<DT>::N];
    for (int r = 0; r < p.nranks; r++) {
      uint4 v;
      if (r == p.rank) {
        v = canonical<DT>(own);
      } else {
        uint4 *slot = (uint4 *)(local + (size_t)r * slot_bytes) + i;
        v = ld_volatile(slot);
        while (pending<DT>(v)) v = ld_volatile(slot);
        st_volatile(slot, clear);
      }
      if (r == 0) {
        first_term<DT>(acc, v);
      } else {
        accumulate<DT>(acc, v);
      }
    }
    const uint4 sum = pack<DT>(acc);
    rows[i] = sum;
    if (res) res[i] = add_residual<DT>(res[i], sum);
  }
}

template <int DT> __device__ void two_shot(const ar_params &p, size_t nvec, uint32_t epoch) {
  const size_t lo = nvec * (size_t)p.rank / (size_t)p.nranks;
  const size_t hi = nvec * (size_t)(p.rank + 1) / (size_t)p.nranks;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  block_barrier(p, 2u * epoch + 1u);
  for (size_t i = lo + first; i < hi; i += stride) {
    float acc[elems<DT>::N];
    first_term<DT>(acc, ((const uint4 *)(p.peer[0] + p.buf_off))[i]);
    for (int r = 1; r < p.nranks; r++) accumulate<DT>(acc, ((const uint4 *)(p.peer[r] + p.buf_off))[i]);
    const uint4 sum = pack<DT>(acc);
    for (int r = 0; r < p.nranks; r++) st_volatile((uint4 *)(p.peer[r] + p.buf_off) + i, sum);
  }
  block_barrier(p, 2u * epoch + 2u);
  if (p.res_off == kNoResidual) return;
  uint4 *res = (uint4 *)(p.self + p.res_off);
  const uint4 *out = (const uint4 *)(p.self + p.buf_off);
  for (int r = 0; r < p.nranks; r++) { /* the vectors rank r's block b wrote */
    const size_t rlo = nvec * (size_t)r / (size_t)p.nranks, rhi = nvec * (size_t)(r + 1) / (size_t)p.nranks;
    for (size_t i = rlo + first; i < rhi; i += stride) res[i] = add_residual<DT>(res[i], ld_volatile(out + i));
  }
}

template <int DT> __global__ void __launch_bounds__(MDR_AR_THREADS) all_reduce_kernel(ar_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  /* launched early (programmatic dependent launch): wait until the work
   * before it completed and its memory is visible; then let the next
   * kernel start launching (it waits likewise before touching memory) */
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
  char *region = p.self + p.region_off;
  /* this block's copy of the epoch: a volatile read, not an asm with a
   * memory clobber, so the loads of the rows may be in flight with it */
  uint32_t *epochs = (uint32_t *)region;
  const uint32_t epoch = *(volatile const uint32_t *)&epochs[blockIdx.x];
  size_t rows = p.rows;
  if (p.count_ptr) {
    const size_t counted = *p.count_ptr;
    rows = counted < rows ? counted : rows;
  }
  const size_t bytes = rows * p.row_bytes, nvec = bytes / MDR_AR_VEC;
  if (nvec) {
    const bool one = p.algo == MDR_ARK_ONE_SHOT || (p.algo == MDR_ARK_AUTO && bytes <= p.one_shot_max);
    if (one) {
      one_shot<DT>(p, nvec, epoch);
    } else {
      two_shot<DT>(p, nvec, epoch);
    }
  }
  /* advance the epoch: each block its own copy, block 0 also the copies of
   * the blocks this call did not launch; no block of this call reads
   * another's copy, and the kernel's end publishes the stores */
  if (threadIdx.x == 0) *(volatile uint32_t *)&epochs[blockIdx.x] = epoch + 1u;
  if (blockIdx.x == 0)
    for (unsigned b = gridDim.x + threadIdx.x; b < MDR_AR_MAX_BLOCKS; b += blockDim.x)
      *(volatile uint32_t *)&epochs[b] = epoch + 1u;
}


/* The old mdr_cuda_ar_launch; pdl from the caller (was pdl_enabled()). */
int launch(const mdr_ar_launch *l, int pdl, cudaStream_t stream) {
  ar_params p = {};
  for (int r = 0; r < l->nranks && r < MDR_AR_MAX_RANKS; r++) p.peer[r] = l->peer[r];
  p.self = l->self;
  p.rank = l->rank;
  p.nranks = l->nranks;
  p.buf_off = l->buf_off;
  p.res_off = l->res_off;
  p.region_off = l->region_off;
  p.row_bytes = l->row_bytes;
  p.rows = l->rows;
  p.count_ptr = l->count_ptr;
  p.one_shot_max = l->one_shot_max;
  p.algo = l->algo;
  const size_t nvec = l->rows * l->row_bytes / MDR_AR_VEC;
  size_t per_rank = l->algo == MDR_ARK_ONE_SHOT ? nvec : (nvec + (size_t)l->nranks - 1) / (size_t)l->nranks;
  if (l->algo == MDR_ARK_AUTO && nvec * MDR_AR_VEC <= l->one_shot_max) per_rank = nvec;
  size_t blocks = (per_rank + MDR_AR_THREADS - 1) / MDR_AR_THREADS;
  size_t cap = (size_t)l->max_blocks;
  if (cap > MDR_AR_MAX_BLOCKS) cap = MDR_AR_MAX_BLOCKS;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  const unsigned threads = per_rank < MDR_AR_THREADS ? (unsigned)((per_rank + 31) / 32 * 32) : MDR_AR_THREADS;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)blocks);
  cfg.blockDim = dim3(threads < 32 ? 32 : threads);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  cudaError_t e;
  switch (l->dtype) {
    case MDR_ARK_BF16: e = cudaLaunchKernelEx(&cfg, all_reduce_kernel<MDR_ARK_BF16>, p); break;
    case MDR_ARK_FP16: e = cudaLaunchKernelEx(&cfg, all_reduce_kernel<MDR_ARK_FP16>, p); break;
    default: e = cudaLaunchKernelEx(&cfg, all_reduce_kernel<MDR_ARK_FP32>, p); break;
  }
  return (int)e;
}

}  // namespace v1

/* ==== the harness ==== */
namespace {

enum { RANKS = 2, K = 16, ROW_BYTES = 2048 };

/* A slab: the rows (up to the one-shot cap), the count word, v1's region,
 * the product's region. The same offsets on both ranks. */
constexpr size_t kBufOff = 0;
constexpr size_t kCountOff = MDR_ARP_ONE_SHOT_MAX_BYTES;
constexpr size_t kV1Off = kCountOff + 4096;
constexpr size_t kLibOff = (kV1Off + MDR_AR_REGION_BYTES(RANKS) + 255u) & ~(size_t)255u;
constexpr size_t kSlabBytes = (kLibOff + MDR_ARP_REGION_BYTES(RANKS, MDR_ARP_ONE_SHOT_MAX_BYTES) + 255u) & ~(size_t)255u;

enum version { V1, LIB, N_VERSIONS };
const char *const k_version_names[N_VERSIONS] = {"v1", "lib"};

struct harness {
  char *slab[RANKS];
  cudaStream_t stream[RANKS];
  uint32_t *words, *words_dev;     /* lib's host words (abort, reports) */
  volatile uint32_t *release;      /* the blockers' word (pinned, mapped) */
  uint32_t *release_dev;
  uint32_t generation;
  int max_blocks, pdl;
};

/* One call of a case on rank r, by version v. */
struct call_shape {
  int algo;      /* MDR_ARP_ONE_SHOT or MDR_ARP_TWO_SHOT (v1's codes are the same) */
  int counted;   /* the rows read from the count word */
  size_t rows;
};

int launch_call(const harness &h, version v, int r, const call_shape &c) {
  if (v == V1) {
    v1::mdr_ar_launch l = {};
    for (int q = 0; q < RANKS; q++) l.peer[q] = h.slab[q];
    l.self = h.slab[r];
    l.rank = r;
    l.nranks = RANKS;
    l.buf_off = kBufOff;
    l.res_off = v1::kNoResidual;
    l.region_off = kV1Off;
    l.row_bytes = ROW_BYTES;
    l.rows = c.rows;
    l.count_ptr = c.counted ? (const uint32_t *)(h.slab[r] + kCountOff) : nullptr;
    l.one_shot_max = MDR_ARK_ONE_SHOT_MAX_BYTES;
    l.dtype = v1::MDR_ARK_BF16;
    l.algo = c.algo;
    l.max_blocks = h.max_blocks;
    return v1::launch(&l, h.pdl, h.stream[r]);
  }
  /* as src/all_reduce.c and src/comm_nccl.c fill it */
  mdr_ar_call k;
  memset(&k, 0, sizeof k);
  k.buf_off = kBufOff;
  k.res_off = MDR_ARP_NO_RESIDUAL;
  k.row_bytes = ROW_BYTES;
  k.rows = c.rows;
  k.count_ptr = c.counted ? (const uint32_t *)(h.slab[r] + kCountOff) : nullptr;
  k.one_shot_max = MDR_ARP_ONE_SHOT_MAX_BYTES;
  k.dtype = MDR_ARP_BF16;
  k.algo = c.algo;
  for (int q = 0; q < RANKS; q++) k.peer[q] = h.slab[q];
  k.self = h.slab[r];
  k.region_off = kLibOff;
  k.slot_cap = MDR_ARP_ONE_SHOT_MAX_BYTES;
  k.rank = r;
  k.nranks = RANKS;
  k.max_blocks = h.max_blocks;
  k.pdl = h.pdl;
  k.timeout_ns = 0;
  k.host_abort = &h.words_dev[MDR_ARP_HOST_ABORT];
  k.host_report = &h.words_dev[MDR_ARP_HOST_RANKS0 + (size_t)r * MDR_ARP_HOST_REPORT];
  return mdr_cuda_ar_launch(&k, h.stream[r]);
}

/* The blocker: spins until the host's word reaches `generation` (or 2 s
 * pass). Reaches, not equals: the host moves on to the next rep as soon as
 * it has queued this one, so a stream that runs late finds a later value. */
__global__ void blocker_kernel(const volatile uint32_t *release, uint32_t generation) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while ((int32_t)(*release - generation) < 0 && t - t0 < 2000000000ull);
}

/* bf16 of a small integer (exact). */
uint16_t bf16_of(int v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

int value_of(int r, size_t i) { return (int)((i * 7 + (size_t)r * 5) % 9) - 4; }

/* Both ranks' rows set to the small-integer pattern (zero: all zeros),
 * the count word to `rows`. */
void fill_rows(const harness &h, size_t elems, uint32_t rows, bool zero) {
  std::vector<uint16_t> v(elems);
  for (int r = 0; r < RANKS; r++) {
    for (size_t i = 0; i < elems; i++) v[i] = zero ? 0 : bf16_of(value_of(r, i));
    CUDA_CHECK(cudaMemcpy(h.slab[r] + kBufOff, v.data(), elems * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(h.slab[r] + kCountOff, &rows, 4, cudaMemcpyHostToDevice));
  }
  /* a pageable copy may return before its DMA lands: land them before any
   * rank's stream runs a call */
  CUDA_CHECK(cudaDeviceSynchronize());
}

/* Every rank's rows are scale * (sum of the patterns). */
bool rows_are(const harness &h, size_t elems, int scale, const char *what) {
  std::vector<uint16_t> v(elems);
  for (int r = 0; r < RANKS; r++) {
    CUDA_CHECK(cudaMemcpy(v.data(), h.slab[r] + kBufOff, elems * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < elems; i++) {
      int s = 0;
      for (int q = 0; q < RANKS; q++) s += value_of(q, i);
      const uint16_t want = bf16_of(s * scale);
      if (v[i] != want) {
        fprintf(stderr, "validation failed: %s: rank %d element %zu is 0x%04x, want 0x%04x\n", what, r, i, v[i], want);
        return false;
      }
    }
  }
  return true;
}

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* What the program is doing, for the hang report. */
const char *g_phase = "setting up";

/* Wait for both ranks' streams, at most 20 s: past it a call hung (the
 * ranks never met); say where, raise lib's abort word so its kernels end,
 * and exit 3 rather than wait for ever. */
void sync_all(const harness &h) {
  const double t0 = now_s();
  for (int r = 0; r < RANKS; r++) {
    cudaError_t e;
    while ((e = cudaStreamQuery(h.stream[r])) == cudaErrorNotReady) {
      if (now_s() - t0 > 20.0) {
        fprintf(stderr, "all_reduce_compare: hang: rank %d's stream did not finish within 20 s (%s)\n", r, g_phase);
        __atomic_store_n(&h.words[MDR_ARP_HOST_ABORT], 1u, __ATOMIC_SEQ_CST);
        exit(3);
      }
    }
    CUDA_CHECK(e);
  }
}

cudaGraphExec_t capture(const harness &h, version v, int r, const call_shape &c) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t x = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(h.stream[r], cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < K; i++) CUDA_CHECK((cudaError_t)launch_call(h, v, r, c));
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
  version v;
  call_shape c;
  size_t bytes;
  double median, p99;
};

/* Validate, then time: false when the validation failed. */
bool run_case(harness &h, version v, const call_shape &c, int reps, result *out) {
  const size_t bytes = c.rows * ROW_BYTES, elems = bytes / 2;
  char what[160];
  snprintf(what, sizeof what, "%s %s%s %zu bytes", k_version_names[v], c.algo == MDR_ARP_ONE_SHOT ? "one-shot" : "two-shot",
           c.counted ? " count" : "", bytes);
  /* one call */
  fprintf(stderr, "all_reduce_compare: %s\n", what);
  g_phase = "the first call";
  fill_rows(h, elems, (uint32_t)c.rows, false);
  for (int r = 0; r < RANKS; r++) CUDA_CHECK((cudaError_t)launch_call(h, v, r, c));
  sync_all(h);
  if (!rows_are(h, elems, 1, what)) return false;
  /* one replay of the graph: K calls, each doubling the sum */
  cudaGraphExec_t x[RANKS];
  for (int r = 0; r < RANKS; r++) x[r] = capture(h, v, r, c);
  g_phase = "the graph's validation replay";
  fill_rows(h, elems, (uint32_t)c.rows, false);
  for (int r = 0; r < RANKS; r++) CUDA_CHECK(cudaGraphLaunch(x[r], h.stream[r]));
  sync_all(h);
  if (!rows_are(h, elems, 1 << (K - 1), what)) return false;
  /* time on zeros (a fixed point of the sum) */
  fill_rows(h, elems, (uint32_t)c.rows, true);
  g_phase = "the timed replays";
  std::vector<cudaEvent_t> ev(2 * RANKS * (size_t)reps);
  for (auto &e : ev) CUDA_CHECK(cudaEventCreate(&e));
  for (int w = 0; w < 3; w++)
    for (int r = 0; r < RANKS; r++) CUDA_CHECK(cudaGraphLaunch(x[r], h.stream[r]));
  sync_all(h);
  std::vector<double> per(reps);
  for (int i = 0; i < reps; i++) {
    h.generation++;
    for (int r = 0; r < RANKS; r++) {
      blocker_kernel<<<1, 1, 0, h.stream[r]>>>(h.release_dev, h.generation);
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaEventRecord(ev[2 * (RANKS * (size_t)i + r)], h.stream[r]));
      CUDA_CHECK(cudaGraphLaunch(x[r], h.stream[r]));
      CUDA_CHECK(cudaEventRecord(ev[2 * (RANKS * (size_t)i + r) + 1], h.stream[r]));
    }
    __atomic_store_n((uint32_t *)h.release, h.generation, __ATOMIC_RELEASE);
    if ((i + 1) % 16 == 0) sync_all(h);
  }
  sync_all(h);
  for (int i = 0; i < reps; i++) {
    double worst = 0;
    for (int r = 0; r < RANKS; r++) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * (RANKS * (size_t)i + r)], ev[2 * (RANKS * (size_t)i + r) + 1]));
      worst = std::max(worst, (double)ms * 1e3 / K);
    }
    per[i] = worst;
  }
  for (auto &e : ev) CUDA_CHECK(cudaEventDestroy(e));
  for (int r = 0; r < RANKS; r++) CUDA_CHECK(cudaGraphExecDestroy(x[r]));
  if (h.words[MDR_ARP_HOST_RANKS0 + MDR_ARP_REP_CAUSE] || h.words[MDR_ARP_HOST_RANKS0 + MDR_ARP_HOST_REPORT + MDR_ARP_REP_CAUSE]) {
    fprintf(stderr, "validation failed: %s: lib gave up (%s)\n", what,
            mdr_arp_cause_name(h.words[MDR_ARP_HOST_RANKS0 + MDR_ARP_REP_CAUSE]));
    return false;
  }
  *out = result{v, c, bytes, percentile(per, 0.5), percentile(per, 0.99)};
  return true;
}

}  // namespace

int main(int argc, char **argv) {
  /* the two ranks spin while they wait for each other on one GPU: each
   * stream needs a hardware queue of its own (set before the first CUDA
   * call; the default 8 can put a rank behind its peer's spinning kernel) */
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  /* every kernel (v1 and the new one) loaded up front: a lazy first load
   * can wait for the peer's spinning kernel */
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  setvbuf(stdout, nullptr, _IOLBF, 0); /* the table survives a kill */
  if (argc < 2) {
    fprintf(stderr, "usage: %s OUT_DIR [--reps N] [--no-pdl]\n", argv[0]);
    return 2;
  }
  const std::string out_dir = argv[1];
  int reps = 400, pdl = 1;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-pdl")) pdl = 0;
    else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    printf("all_reduce_compare: no CUDA device\n");
    return 0;
  }
  harness h = {};
  int dev = 0, sms = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  h.pdl = pdl && major >= 9;
  h.max_blocks = std::max(1, std::min(128, sms / (RANKS * (h.pdl ? 2 : 1))));
  char *mem = nullptr;
  CUDA_CHECK(cudaMalloc((void **)&mem, RANKS * kSlabBytes));
  CUDA_CHECK(cudaMemset(mem, 0, RANKS * kSlabBytes));
  for (int r = 0; r < RANKS; r++) {
    h.slab[r] = mem + (size_t)r * kSlabBytes;
    CUDA_CHECK(cudaStreamCreateWithFlags(&h.stream[r], cudaStreamNonBlocking));
    /* v1's region: epochs and flags zero, scratch all-ones; lib's likewise */
    CUDA_CHECK(cudaMemset(h.slab[r] + kV1Off + MDR_AR_LAMPORT_OFF(RANKS), 0xff,
                          MDR_AR_REGION_BYTES(RANKS) - MDR_AR_LAMPORT_OFF(RANKS)));
    CUDA_CHECK((cudaError_t)mdr_cuda_ar_region_init(h.slab[r] + kLibOff, RANKS, MDR_ARP_ONE_SHOT_MAX_BYTES, h.stream[r]));
  }
  CUDA_CHECK(cudaHostAlloc((void **)&h.words, MDR_ARP_HOST_WORDS(RANKS) * 4, cudaHostAllocMapped));
  memset(h.words, 0, MDR_ARP_HOST_WORDS(RANKS) * 4);
  CUDA_CHECK(cudaHostGetDevicePointer((void **)&h.words_dev, h.words, 0));
  uint32_t *rel = nullptr;
  CUDA_CHECK(cudaHostAlloc((void **)&rel, 4, cudaHostAllocMapped));
  *rel = 0;
  h.release = rel;
  CUDA_CHECK(cudaHostGetDevicePointer((void **)&h.release_dev, rel, 0));
  sync_all(h);

  printf("all_reduce_compare: 2 ranks on one GPU (%d SMs), bf16 rows of %d bytes, grid cap %d, PDL %s, %d reps of "
         "a graph of %d calls\n",
         sms, ROW_BYTES, h.max_blocks, h.pdl ? "on" : "off", reps, K);
  const size_t sizes[] = {2u << 10, 8u << 10, 32u << 10, 128u << 10, 512u << 10, 2u << 20};
  std::vector<result> res;
  bool ok = true;
  /* every case of the product's kernel first, then v1's: each figure is
   * printed as it is measured, so a run cut short keeps what it measured */
  for (int v = N_VERSIONS - 1; v >= 0; v--)
    for (size_t bytes : sizes)
      for (int algo : {MDR_ARP_ONE_SHOT, MDR_ARP_TWO_SHOT})
        for (int counted = 0; counted < 2; counted++) {
          result r;
          const call_shape c = {algo, counted, bytes / ROW_BYTES};
          if (!run_case(h, (version)v, c, reps, &r)) {
            ok = false;
            continue;
          }
          printf("measured: %s %s%s %zu bytes: median %.2f us, p99 %.2f us\n", k_version_names[v],
                 algo == MDR_ARP_ONE_SHOT ? "one-shot" : "two-shot", counted ? " count" : "", r.bytes, r.median, r.p99);
          res.push_back(r);
        }
  printf("\n%-9s %-9s %-6s | %10s %10s | %10s %10s | %8s\n", "bytes", "algo", "count", "v1 med us", "v1 p99 us",
         "lib med us", "lib p99 us", "lib/v1");
  const std::string csv_path = out_dir + "/all_reduce_compare.csv";
  FILE *csv = fopen(csv_path.c_str(), "w");
  if (!csv) {
    fprintf(stderr, "cannot write %s\n", csv_path.c_str());
    return 2;
  }
  fprintf(csv, "version,algo,count,bytes,median_us,p99_us,reps,calls_per_graph,grid_cap,pdl\n");
  for (const result &r : res)
    fprintf(csv, "%s,%s,%s,%zu,%.3f,%.3f,%d,%d,%d,%d\n", k_version_names[r.v],
            r.c.algo == MDR_ARP_ONE_SHOT ? "one-shot" : "two-shot", r.c.counted ? "word" : "rows", r.bytes, r.median,
            r.p99, reps, K, h.max_blocks, h.pdl);
  fclose(csv);
  for (const result &a : res) /* each v1 figure beside lib's of the same case */
    for (const result &b : res) {
      if (a.v != V1 || b.v != LIB || a.bytes != b.bytes || a.c.algo != b.c.algo || a.c.counted != b.c.counted) continue;
      printf("%-9zu %-9s %-6s | %10.2f %10.2f | %10.2f %10.2f | %8.3f\n", a.bytes,
           a.c.algo == MDR_ARP_ONE_SHOT ? "one-shot" : "two-shot", a.c.counted ? "word" : "rows", a.median, a.p99,
             b.median, b.p99, b.median / a.median);
    }
  printf("\nwrote %s\n", csv_path.c_str());
  if (!ok) printf("some cases failed validation (not timed): see above\n");
  return ok ? 0 : 1;
}
