/* all_reduce.cu — mdr's all-reduce kernels over a symmetric window
 * (kernels/all_reduce.h has the window and region layout; include/mdr/
 * comm.h the contract; docs/TP.md the design and its measurements).
 *
 * One kernel per dtype serves both algorithms and both count sources: the
 * row count is `rows`, or read from device memory when the kernel runs
 * (a DYNAMIC graph's count word), so one captured kernel reduces exactly
 * the rows of every step. Peers are reached by plain loads and stores
 * through LSA pointers (never multicast).
 *
 * Epoch. The epoch E counts a rank's calls. Each block keeps a copy
 * (MDR_AR_MAX_BLOCKS words, all equal between calls): a block reads its
 * own at its start and stores E+1 at its end, and block 0 also advances
 * the copies of the blocks the call did not launch, so no atomics and no
 * block waits for another of its rank. Every rank makes the same calls
 * (lockstep), so the epochs agree without any exchange. The one-shot scratch alternates
 * with E's parity; barrier flags carry 2E+1 and 2E+2. Both stay right when
 * E wraps at 2^32 (parity is preserved; flags compare by signed distance).
 *
 * One-shot (flags in the data). Each thread stores its 16-byte vectors of
 * the rows, canonicalised so that no element has all-ones bits, into slot
 * [E&1][rank] of every peer's scratch; then, for the same vectors, polls
 * slot [E&1][r] of its own scratch for every peer r until no element is
 * all-ones (a vector may land in pieces: every element is checked), sums
 * in rank order (its own vector, as sent, in its place), stores the sum
 * (and the residual), and writes the sentinel back. A peer reuses a parity only two calls later, after it has
 * seen this rank's next call's data, which this rank sends only after this
 * call's clears completed, so a slot is always clear when written.
 *
 * Two-shot (in place). Block b of every rank meets at barrier 2E+1 (every
 * rank's rows are ready: its kernel started after the work that wrote
 * them); rank r sums its 1/n of the vectors, block b taking every
 * grid-th, from every rank's rows and stores the sum into every rank's
 * rows; barrier 2E+2 (block b's stores have landed everywhere, and no rank
 * reads a peer's rows any more); then each block adds the residual for
 * exactly the vectors its peers' block b wrote.
 *
 * Blocks never wait for blocks of their own rank, only for the same block
 * of a peer; the grid is at most one block per SM of the smallest GPU of
 * the communicator, so all blocks are resident, and every rank launches
 * the same grid. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#if defined(MDR_HAVE_NCCL_DEVICE)
#include <nccl_device.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <new>

#include "all_reduce.h"

namespace {

struct ar_params {
  char *peer[MDR_AR_MAX_RANKS]; /* peers' windows (LSA pointers) */
  char *self;                   /* this rank's window at its own address */
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

template <int DT>
__global__ void residual_add_kernel(uint4 *res, const uint4 *rows, size_t row_vecs, size_t nrows,
                                    const uint32_t *count_ptr) {
  size_t n = nrows;
  if (count_ptr) n = *count_ptr < n ? *count_ptr : n;
  const size_t nvec = n * row_vecs;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nvec; i += (size_t)gridDim.x * blockDim.x)
    res[i] = add_residual<DT>(res[i], rows[i]);
}

#if defined(MDR_HAVE_NCCL_DEVICE)
__global__ void resolve_peers_kernel(ncclWindow_t win, int n, char **out) {
  for (int r = 0; r < n; r++) out[r] = (char *)ncclGetLsaPointer(win, 0, r);
}
#endif

/* Programmatic dependent launch: on sm_90 and later unless MDR_AR_PDL=0
 * (read once). */
bool pdl_enabled(void) {
  static int on = -1;
  if (on < 0) {
    int dev = 0, major = 0;
    const char *v = getenv("MDR_AR_PDL");
    const bool env_off = v && v[0] == '0';
    on = !env_off && cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9;
  }
  return on == 1;
}

}  // namespace

extern "C" int mdr_cuda_ar_launch(const mdr_ar_launch *l, void *stream) {
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
  /* the grid covers the largest message this launch can see, one vector a
   * thread, up to one block per SM */
  const size_t nvec = l->rows * l->row_bytes / MDR_AR_VEC;
  size_t per_rank = l->algo == MDR_ARK_ONE_SHOT ? nvec : (nvec + (size_t)l->nranks - 1) / (size_t)l->nranks;
  if (l->algo == MDR_ARK_AUTO && nvec * MDR_AR_VEC <= l->one_shot_max) per_rank = nvec;
  size_t blocks = (per_rank + MDR_AR_THREADS - 1) / MDR_AR_THREADS;
  size_t cap = (size_t)l->max_blocks; /* the same on every rank: block b meets block b */
  if (cap > MDR_AR_MAX_BLOCKS) cap = MDR_AR_MAX_BLOCKS;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  const unsigned threads = per_rank < MDR_AR_THREADS ? (unsigned)((per_rank + 31) / 32 * 32) : MDR_AR_THREADS;
  const dim3 grid((unsigned)blocks), block(threads < 32 ? 32 : threads);
  /* programmatic dependent launch (sm_90+): the kernel's launch overlaps
   * the end of the work before it; MDR_AR_PDL=0 turns it off */
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = (cudaStream_t)stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  cudaError_t e;
  switch (l->dtype) {
    case MDR_ARK_BF16: e = cudaLaunchKernelEx(&cfg, all_reduce_kernel<MDR_ARK_BF16>, p); break;
    case MDR_ARK_FP16: e = cudaLaunchKernelEx(&cfg, all_reduce_kernel<MDR_ARK_FP16>, p); break;
    default: e = cudaLaunchKernelEx(&cfg, all_reduce_kernel<MDR_ARK_FP32>, p); break;
  }
  return (int)e;
}

extern "C" int mdr_cuda_ar_residual_add(void *residual, const void *rows, size_t row_bytes, size_t nrows,
                                        const uint32_t *count_ptr, int dtype, void *stream) {
  const size_t row_vecs = row_bytes / MDR_AR_VEC, nvec = nrows * row_vecs;
  size_t blocks = (nvec + 255) / 256;
  if (blocks > 1024) blocks = 1024;
  if (blocks < 1) blocks = 1;
  cudaStream_t s = (cudaStream_t)stream;
  uint4 *res = (uint4 *)residual;
  const uint4 *in = (const uint4 *)rows;
  switch (dtype) {
    case MDR_ARK_BF16: residual_add_kernel<MDR_ARK_BF16><<<(unsigned)blocks, 256, 0, s>>>(res, in, row_vecs, nrows, count_ptr); break;
    case MDR_ARK_FP16: residual_add_kernel<MDR_ARK_FP16><<<(unsigned)blocks, 256, 0, s>>>(res, in, row_vecs, nrows, count_ptr); break;
    default: residual_add_kernel<MDR_ARK_FP32><<<(unsigned)blocks, 256, 0, s>>>(res, in, row_vecs, nrows, count_ptr); break;
  }
  return (int)cudaGetLastError();
}

#if defined(MDR_HAVE_NCCL_DEVICE)

extern "C" int mdr_cuda_ar_resolve_peers(void *win, int n, char **out, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  char **dev = nullptr;
  cudaError_t e = cudaMalloc((void **)&dev, (size_t)n * sizeof *dev);
  if (e != cudaSuccess) return (int)e;
  resolve_peers_kernel<<<1, 1, 0, s>>>((ncclWindow_t)win, n, dev);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpyAsync(out, dev, (size_t)n * sizeof *dev, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  (void)cudaFree(dev);
  return (int)e;
}

extern "C" int mdr_cuda_ar_devcomm_create(void *nccl_comm, void **out) {
  ncclDevComm *dc = new (std::nothrow) ncclDevComm();
  if (!dc) return (int)ncclSystemError;
  ncclDevCommRequirements reqs;
  memset(&reqs, 0, sizeof reqs); /* no barriers or buffers of NCCL's: mdr's live in its window */
  const ncclResult_t r = ncclDevCommCreate((ncclComm_t)nccl_comm, &reqs, dc);
  if (r != ncclSuccess) {
    delete dc;
    return (int)r;
  }
  *out = dc;
  return 0;
}

extern "C" void mdr_cuda_ar_devcomm_info(const void *h, int *rank, int *nranks, int *lsa_rank, int *lsa_size) {
  const ncclDevComm *dc = (const ncclDevComm *)h;
  *rank = dc->rank;
  *nranks = dc->nRanks;
  *lsa_rank = dc->lsaRank;
  *lsa_size = dc->lsaSize;
}

extern "C" void mdr_cuda_ar_devcomm_destroy(void *nccl_comm, void *h) {
  ncclDevComm *dc = (ncclDevComm *)h;
  if (!dc) return;
  (void)ncclDevCommDestroy((ncclComm_t)nccl_comm, dc);
  delete dc;
}

#else /* NCCL without the device API: mdr's kernels never run (src/comm_nccl.c says why) */

extern "C" int mdr_cuda_ar_resolve_peers(void *, int, char **, void *) { return (int)cudaErrorNotSupported; }

extern "C" int mdr_cuda_ar_devcomm_create(void *, void **out) {
  *out = nullptr;
  return (int)ncclInvalidUsage;
}

extern "C" void mdr_cuda_ar_devcomm_info(const void *, int *rank, int *nranks, int *lsa_rank, int *lsa_size) {
  *rank = *nranks = *lsa_rank = *lsa_size = -1;
}

extern "C" void mdr_cuda_ar_devcomm_destroy(void *, void *) {}

#endif
