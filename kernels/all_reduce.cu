/* all_reduce.cu — mdr's all-reduce kernels over a symmetric window.
 * kernels/ar_protocol.h has the comm region's layout, the counters, what
 * every wait compares and why it is exact (the invariant), the sentinel,
 * the lockstep signature and the give-up report; include/mdr/comm.h the
 * contract; docs/TP.md the design.
 *
 * One kernel per dtype serves both algorithms and both count sources: the
 * row count is `rows`, or read from device memory when the kernel runs
 * (a DYNAMIC graph's count word), so one captured kernel reduces exactly
 * the rows of every step. Peers are reached by plain loads and stores
 * through LSA pointers (never multicast). A call whose count is 0 touches
 * nothing and advances no counter.
 *
 * One-shot (flags in the data). Thread 0 of each block sends the block's
 * header vector (the call's signature) to slot [k][rank] of every peer's
 * scratch, k the parity of the one-shot counter; each thread stores its
 * 16-byte vectors of the rows, canonicalised so that no element has
 * all-ones bits, into the same slot; then each thread polls, for its
 * vectors, slot [k][r] of its own scratch for every peer r until no
 * element is all-ones (a vector may land in pieces: every element is
 * checked) and sums in rank order (its own vector, as sent, in its place);
 * thread 0 waits, in the same turns as its first vector, for every peer's
 * header of this block and compares it. Once the block has passed the
 * headers, each thread stores its sums (and the residual) and writes the
 * sentinel back.
 *
 * Two-shot (in place). Block b of every rank meets at its barrier 1
 * (every rank's rows are ready: its kernel started after the work that
 * wrote them; the signatures are compared); rank r sums its 1/n of the
 * vectors, block b taking every grid-th, from every rank's rows and
 * stores the sum into every rank's rows; barrier 2 (block b's stores have
 * landed everywhere, and no rank reads a peer's rows any more); then each
 * block adds the residual for exactly the vectors its peers' block b
 * wrote.
 *
 * The fused RMSNorm (a call with norm_weight; kernels/ar_protocol.h has the
 * arithmetic) runs the same protocol by rows: one-shot, block b sends,
 * sums and norms rows b, b + grid, ...; two-shot, rank r sums whole rows
 * (1/n of them) and, after barrier 2, block b adds the residual and norms
 * the rows block b of every rank wrote. A row's sum of squares is one
 * block's fixed tree (norm_row). Where the fused kernel does not win
 * (mdr_arp_norm_fused, kernels/ar_protocol.h: two-shot, or one-shot over
 * MDR_ARP_NORM_FUSE_MAX_BYTES, without a count word) mdr_cuda_ar_launch
 * runs the chain instead: the plain kernel, then residual_norm_kernel.
 *
 * Blocks never wait for blocks of their own rank, only for the same block
 * of a peer; the grid is at most one block per SM of the smallest GPU of
 * the communicator, so all blocks are resident, and every rank launches
 * the same grid.
 *
 * One measurement entry beside them (mdr_cuda_ar_barrier_bench,
 * all_reduce.h): the two-shot's block barrier alone, with its real flags
 * and counters, which mdr-bench-tp --barrier times against NCCL's LSA
 * barrier. */
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
/* the building blocks: memory operations, elements, give-up, barriers,
 * the one-shot's header and vector exchange */
#include "ar_device.cuh"

namespace {

/* The plain one-shot is written out rather than built from send_header,
 * send_vector, check_headers and sum_vector (ar_device.cuh), which the
 * fused one-shot uses: through them ptxas spills and takes more registers
 * for the kernel that every decode step runs. own0: this thread's first
 * vector of the rows, rows[first] (run_call loads it early; meaningful
 * when first < nvec). */
template <int DT>
__device__ bool one_shot(const mdr_ar_call &p, const mdr_arp_block &st, size_t nvec, uint32_t sig, uint4 own0,
                         int *s_bad) {
  const size_t slot_bytes = MDR_ARP_SLOT_BYTES(p.slot_cap);
  const size_t base = p.region_off + MDR_ARP_SCRATCH_OFF(p.nranks) +
                      (size_t)mdr_arp_parity(&st) * (size_t)p.nranks * slot_bytes;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint4 *rows = (uint4 *)(p.self + p.buf_off);
  /* send: the block's header, then its rows, into this rank's slot of
   * every peer's scratch (its own rows it keeps) */
  if (threadIdx.x == 0) {
    uint32_t h[4];
    mdr_arp_header(h, sig, nvec, &st, gridDim.x);
    const uint4 hv = make_uint4(h[0], h[1], h[2], h[3]);
    for (int r = 0; r < p.nranks; r++)
      if (r != p.rank) st_volatile((uint4 *)(p.peer[r] + base + (size_t)p.rank * slot_bytes) + blockIdx.x, hv);
  }
  for (size_t i = first; i < nvec; i += stride) {
    const uint4 v = canonical<DT>(i == first ? own0 : rows[i]);
    for (int r = 0; r < p.nranks; r++)
      if (r != p.rank)
        st_volatile((uint4 *)(p.peer[r] + base + (size_t)p.rank * slot_bytes + MDR_ARP_HEADER_BYTES) + i, v);
  }
  char *local = p.self + base;
  const uint4 clear = make_uint4(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  uint4 *res = p.res_off == MDR_ARP_NO_RESIDUAL ? nullptr : (uint4 *)(p.self + p.res_off);
  /* Each thread's first vector is polled and summed while thread 0, in the
   * same turns, waits for the peers' headers of this block: the header's
   * round trip and the rows' overlap. Nothing is cleared or stored before
   * the block has passed the headers (a value in a slot of this parity is
   * the peer's current call once its header matches: the slot was clear,
   * and the peer reuses it only two data-moving calls later). */
  const bool head = threadIdx.x == 0, have = first < nvec;
  /* the residual's vector loaded now, its round trip under the wait's
   * rather than after the sum (this rank's own rows: nothing but this
   * thread writes them in the call, after the sum) */
  const uint4 res0 = res && have ? res[first] : clear;
  uint32_t want[4];
  mdr_arp_header(want, sig, nvec, &st, gridDim.x);
  float acc0[elems<DT>::N];
  for (int r = 0; r < p.nranks && !*(volatile int *)s_bad; r++) {
    uint4 v = canonical<DT>(own0);
    if (r != p.rank) {
      uint4 *hslot = (uint4 *)(local + (size_t)r * slot_bytes) + blockIdx.x;
      const uint4 *dslot = (const uint4 *)(local + (size_t)r * slot_bytes + MDR_ARP_HEADER_BYTES) + first;
      bool hdone = !head, ddone = !have;
      spin s = {};
      uint32_t cause = 0;
      for (;;) {
        /* the turn's two loads are issued before either is looked at: the
         * data load does not wait for the header's round trip (thread 0's
         * warp took two round trips a turn, and the block waits for it) */
        uint4 h = clear;
        if (!hdone) h = ld_volatile(hslot);
        if (!ddone) v = ld_volatile(dslot);
        if (!hdone && h.x != 0xffffffffu && h.y != 0xffffffffu && h.z != 0xffffffffu && h.w != 0xffffffffu) {
          if (h.x != want[0] || h.y != want[1] || h.z != want[2] || h.w != want[3]) {
            cause = MDR_ARP_MISMATCH;
            break;
          }
          hdone = true;
          st_volatile(hslot, clear);
        }
        if (!ddone) ddone = !pending<DT>(v);
        if (hdone && ddone) break;
        if ((cause = must_leave(p, s)) != 0) break;
        if (!hdone && s.turns % MDR_ARP_POLL_EVERY == 0) {
          /* a peer in a two-shot raised its barrier flag (after any header
           * it had sent: read the flag first, then the header again) */
          const uint32_t f = ld_acquire_sys(flag_slot(p.self, p, blockIdx.x, r));
          const uint4 h = ld_volatile(hslot);
          const bool arrived = h.x != 0xffffffffu && h.y != 0xffffffffu && h.z != 0xffffffffu && h.w != 0xffffffffu;
          if (!arrived && f != st.barriers) {
            cause = MDR_ARP_MISMATCH;
            break;
          }
        }
      }
      if (cause) {
        give_up(p, cause, !hdone ? MDR_ARP_WAIT_HEADER : MDR_ARP_WAIT_ROWS, r, st.calls);
        *(volatile int *)s_bad = 1;
        break;
      }
    }
    if (r == 0) {
      first_term<DT>(acc0, v);
    } else {
      accumulate<DT>(acc0, v);
    }
  }
  __syncthreads();
  if (*(volatile int *)s_bad) return false;
  if (have) {
    for (int r = 0; r < p.nranks; r++)
      if (r != p.rank) st_volatile((uint4 *)(local + (size_t)r * slot_bytes + MDR_ARP_HEADER_BYTES) + first, clear);
    const uint4 sum = pack<DT>(acc0);
    rows[first] = sum;
    if (res) res[first] = add_residual<DT>(res0, sum);
  }
  for (size_t i = first + stride; i < nvec; i += stride) {
    const uint4 own = rows[i]; /* summed as sent: the same bits on every rank */
    const uint4 resi = res ? res[i] : clear; /* loaded before the wait, as res0 */
    float acc[elems<DT>::N];
    for (int r = 0; r < p.nranks; r++) {
      uint4 v;
      if (r == p.rank) {
        v = canonical<DT>(own);
      } else {
        uint4 *slot = (uint4 *)(local + (size_t)r * slot_bytes + MDR_ARP_HEADER_BYTES) + i;
        v = ld_volatile(slot);
        spin s = {};
        while (pending<DT>(v)) {
          const uint32_t cause = must_leave(p, s);
          if (cause) {
            give_up(p, cause, MDR_ARP_WAIT_ROWS, r, st.calls);
            *(volatile int *)s_bad = 1;
            return false; /* this vector's row is left as it was */
          }
          v = ld_volatile(slot);
        }
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
    if (res) res[i] = add_residual<DT>(resi, sum);
  }
  return true;
}

/* ---- the fused RMSNorm (kernels/ar_protocol.h has the arithmetic) ---- */

/* The tree of one row, in shared memory. */
struct norm_smem {
  float tree[MDR_ARP_NORM_MAX_VECS];
  float inv;
};

/* Leaf j of a row: the squares of the vector's elements added left to right. */
template <int DT> __device__ __forceinline__ float norm_leaf(const uint4 &v) {
  float x[elems<DT>::N];
  first_term<DT>(x, v);
  float q = __fmul_rn(x[0], x[0]);
#pragma unroll
  for (int k = 1; k < elems<DT>::N; k++) q = __fadd_rn(q, __fmul_rn(x[k], x[k]));
  return q;
}

/* One row's norm, by the whole block (every thread calls it): res_row
 * holds the row's updated residual, whose vectors j = threadIdx.x +
 * m * blockDim.x this very thread wrote; out_row gets the normed row. The
 * tree: leaves into shared memory, its levels of 32 pairs and more by the
 * block, the last five by warp 0's shuffles of the same pairs. */
template <int DT>
__device__ void norm_row(const uint4 *res_row, uint4 *out_row, const uint4 *w, size_t nvec, float h, float eps,
                         norm_smem &sm) {
  const size_t leaves = mdr_arp_norm_leaves(nvec);
  for (size_t j = threadIdx.x; j < leaves; j += blockDim.x) sm.tree[j] = j < nvec ? norm_leaf<DT>(res_row[j]) : 0.0f;
  __syncthreads();
  size_t half = leaves / 2;
  for (; half >= 32; half >>= 1) {
    for (size_t j = threadIdx.x; j < half; j += blockDim.x) sm.tree[j] = __fadd_rn(sm.tree[j], sm.tree[j + half]);
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    const unsigned live = half ? 2u * (unsigned)half : 1u; /* the values left: tree[0 .. live) */
    float v = threadIdx.x < live ? sm.tree[threadIdx.x] : 0.0f;
    for (; half >= 1; half >>= 1) {
      const float o = __shfl_down_sync(0xffffffffu, v, (unsigned)half);
      if (threadIdx.x < half) v = __fadd_rn(v, o);
    }
    if (threadIdx.x == 0) sm.inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(v, h), eps)));
  }
  __syncthreads();
  const float inv = sm.inv;
  for (size_t j = threadIdx.x; j < nvec; j += blockDim.x) {
    float x[elems<DT>::N], wf[elems<DT>::N];
    first_term<DT>(x, res_row[j]);
    first_term<DT>(wf, w[j]);
#pragma unroll
    for (int k = 0; k < elems<DT>::N; k++) x[k] = __fmul_rn(__fmul_rn(x[k], inv), wf[k]);
    out_row[j] = pack<DT>(x);
  }
}

/* The fused one-shot: the protocol of one_shot (whose code is kept apart,
 * as measured, so that its registers stay as they were), in the helpers
 * above, by rows: block b sends, sums and
 * norms rows b, b + grid, ..., thread t the row's vectors t, t + threads,
 * ... (the thread that sends a vector is the one that overwrites it with
 * the sum, and the one that reads it back for the norm). */
template <int DT>
__device__ bool one_shot_norm(const mdr_ar_call &p, const mdr_arp_block &st, size_t nrows, size_t nvec, uint32_t sig,
                              int *s_bad, norm_smem &sm) {
  const size_t base = scratch_base(p, st);
  const size_t rv = p.row_bytes / MDR_ARP_VEC;
  const float h = (float)(rv * (MDR_ARP_VEC / sizeof(uint16_t)));
  uint4 *rows = (uint4 *)(p.self + p.buf_off);
  if (threadIdx.x == 0) send_header(p, st, nvec, sig, base);
  for (size_t row = blockIdx.x; row < nrows; row += gridDim.x)
    for (size_t j = threadIdx.x; j < rv; j += blockDim.x) send_vector<DT>(p, base, row * rv + j, rows[row * rv + j]);
  if (threadIdx.x == 0) check_headers(p, st, nvec, sig, base, s_bad);
  __syncthreads();
  if (*(volatile int *)s_bad) return false;
  uint4 *res = (uint4 *)(p.self + p.res_off), *out = (uint4 *)(p.self + p.norm_off);
  const uint4 *w = (const uint4 *)p.norm_weight;
  for (size_t row = blockIdx.x; row < nrows; row += gridDim.x) {
    for (size_t j = threadIdx.x; j < rv; j += blockDim.x) {
      const size_t i = row * rv + j;
      uint4 sum;
      if (!sum_vector<DT>(p, st, base, i, rows[i], &sum, s_bad)) break; /* gave up: the block leaves below */
      rows[i] = sum;
      res[i] = add_residual<DT>(res[i], sum);
    }
    __syncthreads();
    if (*(volatile int *)s_bad) return false; /* this row's norm is not written */
    norm_row<DT>(res + row * rv, out + row * rv, w, rv, h, p.norm_eps, sm);
  }
  return true;
}

template <int DT>
__device__ bool two_shot(const mdr_ar_call &p, const mdr_arp_block &st, size_t nvec, uint32_t sig, int *s_bad) {
  const size_t lo = nvec * (size_t)p.rank / (size_t)p.nranks;
  const size_t hi = nvec * (size_t)(p.rank + 1) / (size_t)p.nranks;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (!block_barrier(p, st, 1, sig, s_bad)) return false;
  for (size_t i = lo + first; i < hi; i += stride) {
    float acc[elems<DT>::N];
    first_term<DT>(acc, ((const uint4 *)(p.peer[0] + p.buf_off))[i]);
    for (int r = 1; r < p.nranks; r++) accumulate<DT>(acc, ((const uint4 *)(p.peer[r] + p.buf_off))[i]);
    const uint4 sum = pack<DT>(acc);
    for (int r = 0; r < p.nranks; r++) st_volatile((uint4 *)(p.peer[r] + p.buf_off) + i, sum);
  }
  if (!block_barrier(p, st, 2, sig, s_bad)) return false;
  if (p.res_off == MDR_ARP_NO_RESIDUAL) return true;
  uint4 *res = (uint4 *)(p.self + p.res_off);
  const uint4 *out = (const uint4 *)(p.self + p.buf_off);
  for (int r = 0; r < p.nranks; r++) { /* the vectors rank r's block b wrote */
    const size_t rlo = nvec * (size_t)r / (size_t)p.nranks, rhi = nvec * (size_t)(r + 1) / (size_t)p.nranks;
    for (size_t i = rlo + first; i < rhi; i += stride) res[i] = add_residual<DT>(res[i], ld_volatile(out + i));
  }
  return true;
}

/* The fused two-shot: rank r sums whole rows (mdr_arp_norm_rows_of), block
 * b taking its rows b, b + grid, ...; after barrier 2 block b adds the
 * residual and norms exactly the rows block b of every rank wrote. */
template <int DT>
__device__ bool two_shot_norm(const mdr_ar_call &p, const mdr_arp_block &st, size_t nrows, uint32_t sig, int *s_bad,
                              norm_smem &sm) {
  const size_t rv = p.row_bytes / MDR_ARP_VEC;
  const float h = (float)(rv * (MDR_ARP_VEC / sizeof(uint16_t)));
  size_t lo, hi;
  mdr_arp_norm_rows_of(nrows, p.rank, p.nranks, &lo, &hi);
  if (!block_barrier(p, st, 1, sig, s_bad)) return false;
  for (size_t row = lo + blockIdx.x; row < hi; row += gridDim.x)
    for (size_t j = threadIdx.x; j < rv; j += blockDim.x) {
      const size_t i = row * rv + j;
      float acc[elems<DT>::N];
      first_term<DT>(acc, ((const uint4 *)(p.peer[0] + p.buf_off))[i]);
      for (int r = 1; r < p.nranks; r++) accumulate<DT>(acc, ((const uint4 *)(p.peer[r] + p.buf_off))[i]);
      const uint4 sum = pack<DT>(acc);
      for (int r = 0; r < p.nranks; r++) st_volatile((uint4 *)(p.peer[r] + p.buf_off) + i, sum);
    }
  if (!block_barrier(p, st, 2, sig, s_bad)) return false;
  uint4 *res = (uint4 *)(p.self + p.res_off), *out = (uint4 *)(p.self + p.norm_off);
  const uint4 *sums = (const uint4 *)(p.self + p.buf_off), *w = (const uint4 *)p.norm_weight;
  for (int r = 0; r < p.nranks; r++) { /* the rows rank r's block b wrote */
    size_t rlo, rhi;
    mdr_arp_norm_rows_of(nrows, r, p.nranks, &rlo, &rhi);
    for (size_t row = rlo + blockIdx.x; row < rhi; row += gridDim.x) {
      for (size_t j = threadIdx.x; j < rv; j += blockDim.x) {
        const size_t i = row * rv + j;
        res[i] = add_residual<DT>(res[i], ld_volatile(sums + i));
      }
      norm_row<DT>(res + row * rv, out + row * rv, w, rv, h, p.norm_eps, sm);
    }
  }
  return true;
}

/* One call, by one block: the kernels below. NORM: the fused RMSNorm
 * (sm its tree). */
template <int DT, bool NORM> __device__ __forceinline__ void run_call(const mdr_ar_call &p, norm_smem *sm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  /* launched early (programmatic dependent launch): wait until the work
   * before it completed and its memory is visible; then let the next
   * kernel start launching (it waits likewise before touching memory) */
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
  /* This thread's first vector of the rows, for a one-shot call, loaded
   * before anything waits for the counters below: the stores to the peers
   * need both the counters (the slot's parity) and the rows, and a plain
   * load written after the barrier and the header's stores is not moved
   * above them, so its round trip came after the counters' (v1 had the same
   * order). The rows are this rank's own, written by the work before this
   * kernel and by this very thread only after its sum; a peer writes them
   * only in a two-shot, after its barrier 1, which waits for this rank's
   * flag (raised later in this kernel if it runs two-shot, never if it runs
   * one-shot). So the value is the one a later load would read. Loaded
   * within the bound the grid covers (the buffer's rows, whatever the count
   * word says); unused when the call runs two-shot or the vector is past
   * the count. */
  uint4 own0 = make_uint4(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  if constexpr (!NORM) {
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p.algo != MDR_ARP_TWO_SHOT && first < p.rows * p.row_bytes / MDR_ARP_VEC)
      own0 = ((const uint4 *)(p.self + p.buf_off))[first];
  }
  __shared__ int s_bad;
  if (threadIdx.x == 0) s_bad = 0;
  mdr_arp_block *states = block_states(p);
  volatile mdr_arp_block *mine = &states[blockIdx.x];
  const mdr_arp_block st = load_block(mine); /* this block's counters */
  /* the signature's launch-time part, computed while the loads are in
   * flight: the empty asm keeps the compiler from sinking it below the
   * count's test, where it would follow the count's round trip */
  uint64_t sig_fixed =
      mdr_arp_signature_fixed(p.row_bytes, DT, p.res_off != MDR_ARP_NO_RESIDUAL, p.count_ptr != nullptr, NORM);
  asm volatile("" : "+l"(sig_fixed));
  const size_t rows = mdr_arp_rows_now(&p);
  const size_t bytes = rows * p.row_bytes, nvec = bytes / MDR_ARP_VEC;
  if (nvec == 0) return; /* an empty call: nothing moves, no counter advances */
  const int one = mdr_arp_runs_one_shot(p.algo, bytes, p.one_shot_max);
  const uint32_t sig = mdr_arp_signature_of(sig_fixed, nvec, one);
  __syncthreads(); /* s_bad is set */
  bool ok;
  if constexpr (NORM) {
    ok = one ? one_shot_norm<DT>(p, st, rows, nvec, sig, &s_bad, *sm) : two_shot_norm<DT>(p, st, rows, sig, &s_bad, *sm);
  } else {
    ok = one ? one_shot<DT>(p, st, nvec, sig, own0, &s_bad) : two_shot<DT>(p, st, nvec, sig, &s_bad);
  }
  __syncthreads(); /* every thread is here, those that gave up too */
  if (!ok || *(volatile int *)&s_bad) return; /* gave up: the counters stay (later calls are refused) */
  /* advance the counters: each block its own; block 0 also the call-wide
   * ones (calls, one_shot) of the blocks this call did not launch, whose
   * barrier counters stay (they passed no barrier) */
  mdr_arp_block next = st;
  mdr_arp_advance(&next, nvec, one);
  if (threadIdx.x == 0) {
    mine->calls = next.calls;
    mine->one_shot = next.one_shot;
    mine->barriers = next.barriers;
  }
  if (blockIdx.x == 0)
    for (unsigned b = gridDim.x + threadIdx.x; b < MDR_ARP_MAX_BLOCKS; b += blockDim.x) {
      volatile mdr_arp_block *o = &states[b];
      o->calls = next.calls;
      o->one_shot = next.one_shot;
    }
}

/* Two blocks a multiprocessor (at most 64 registers a thread): a call's
 * block and, launched early under PDL, the next call's fit on one SM, as
 * v1's 64 did. Without the second bound ptxas picks its own target for
 * 512 threads: 58 here, but 40 with spills (stack loads in the poll loop)
 * for small changes of the code, e.g. ar_ablate's `bare` or an earlier
 * load of the rows (dev/ar_skeleton.md). */
template <int DT> __global__ void __launch_bounds__(MDR_AR_THREADS, 2) all_reduce_kernel(mdr_ar_call p) {
  run_call<DT, false>(p, nullptr);
}

/* The fused RMSNorm's all-reduce (bf16, fp16). */
template <int DT> __global__ void __launch_bounds__(MDR_AR_THREADS) all_reduce_norm_kernel(mdr_ar_call p) {
  __shared__ norm_smem sm;
  run_call<DT, true>(p, &sm);
}

/* residual += sum (sum NULL: nothing added) then the RMSNorm of the
 * residual into out, for min(*count_ptr, nrows) rows (count_ptr NULL:
 * nrows): the arithmetic of the fused all-reduce, as its own kernel (after
 * ncclAllReduce, and the unfused chain's second kernel). gave_up (NULL:
 * none) is this rank's region word MDR_ARP_CTL_CLAIM in the chain: set
 * when the all-reduce kernel before it (or an earlier one) gave up, and
 * then nothing is touched: the residual and the output stay as they were,
 * as the fused kernel leaves the rows it did not finish. */
template <int DT>
__global__ void __launch_bounds__(MDR_AR_THREADS)
    residual_norm_kernel(uint4 *res, const uint4 *sum, uint4 *out, const uint4 *w, size_t rv, size_t nrows,
                         const uint32_t *count_ptr, float eps, const uint32_t *gave_up) {
  __shared__ norm_smem sm;
  if (gave_up) { /* one read for the block: every thread leaves, or none */
    __shared__ uint32_t s_gave_up;
    if (threadIdx.x == 0) s_gave_up = *(volatile const uint32_t *)gave_up;
    __syncthreads();
    if (s_gave_up) return;
  }
  size_t n = nrows;
  if (count_ptr) n = *count_ptr < n ? *count_ptr : n;
  const float h = (float)(rv * (MDR_ARP_VEC / sizeof(uint16_t)));
  for (size_t row = blockIdx.x; row < n; row += gridDim.x) {
    if (sum)
      for (size_t j = threadIdx.x; j < rv; j += blockDim.x) {
        const size_t i = row * rv + j;
        res[i] = add_residual<DT>(res[i], sum[i]);
      }
    norm_row<DT>(res + row * rv, out + row * rv, w, rv, h, eps, sm);
  }
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

/* ---- measurement only: the two-shot's block barrier alone (all_reduce.h,
 * mdr_ar_barrier_run; mdr-bench-tp --barrier times it against NCCL's LSA
 * barrier). The counters are read and written as run_call does, but only
 * `barriers` moves: one per barrier passed. ---- */
template <bool CHECK>
__global__ void __launch_bounds__(MDR_AR_THREADS) barrier_bench_kernel(mdr_ar_call p, mdr_ar_barrier_run run) {
  __shared__ int s_bad;
  if (threadIdx.x == 0) s_bad = 0;
  volatile mdr_arp_block *mine = &block_states(p)[blockIdx.x];
  mdr_arp_block st = load_block(mine);
  const uint32_t sig = mdr_arp_signature(0, 0, MDR_ARP_BF16, 0, 0, 0, 0); /* an empty two-shot's */
  __syncthreads(); /* s_bad is set */
  for (unsigned i = 0; i < run.barriers; i++) {
    const uint32_t k = 1u + (i & 1u); /* barrier 1, then 2, of a two-shot */
    const size_t slots = run.check_off + ((size_t)(i & 1u) * gridDim.x + blockIdx.x) * (size_t)p.nranks * 4u;
    if (CHECK && threadIdx.x == blockDim.x - 1)
      for (int r = 0; r < p.nranks; r++)
        *(volatile uint32_t *)(p.peer[r] + slots + (size_t)p.rank * 4u) =
            mdr_ar_barrier_check_value(run.salt, p.rank, blockIdx.x, i);
    if (!block_barrier(p, st, k, sig, &s_bad)) return; /* gave up: the counters stay (later calls are refused) */
    if (CHECK && threadIdx.x == blockDim.x - 1)
      for (int r = 0; r < p.nranks; r++)
        if (*(volatile const uint32_t *)(p.self + slots + (size_t)r * 4u) !=
            mdr_ar_barrier_check_value(run.salt, r, blockIdx.x, i))
          atomicAdd(run.wrong, 1u);
    /* a pair published barriers + 1 and + 2; a lone last barrier 1, + 1 */
    if (k == 2 || i + 1 == run.barriers) st.barriers += k;
  }
  if (threadIdx.x == 0) mine->barriers = st.barriers;
}

#if defined(MDR_HAVE_NCCL_DEVICE)
__global__ void resolve_peers_kernel(ncclWindow_t win, int n, char **out) {
  for (int r = 0; r < n; r++) out[r] = (char *)ncclGetLsaPointer(win, 0, r);
}
#endif

/* The residual + RMSNorm kernel on `s` (no programmatic dependent launch:
 * it starts once the work before it has completed). */
int launch_residual_norm(uint4 *res, const uint4 *sum, uint4 *out, const uint4 *w, float eps, size_t row_bytes,
                         size_t nrows, const uint32_t *count_ptr, int dtype, const uint32_t *gave_up,
                         cudaStream_t s) {
  const size_t rv = row_bytes / MDR_ARP_VEC;
  size_t blocks = nrows < 1024 ? nrows : 1024;
  if (blocks < 1) blocks = 1;
  const unsigned threads = rv < MDR_AR_THREADS ? (unsigned)((rv + 31) / 32 * 32) : MDR_AR_THREADS;
  switch (dtype) {
    case MDR_ARP_BF16:
      residual_norm_kernel<MDR_ARP_BF16>
          <<<(unsigned)blocks, threads, 0, s>>>(res, sum, out, w, rv, nrows, count_ptr, eps, gave_up);
      break;
    case MDR_ARP_FP16:
      residual_norm_kernel<MDR_ARP_FP16>
          <<<(unsigned)blocks, threads, 0, s>>>(res, sum, out, w, rv, nrows, count_ptr, eps, gave_up);
      break;
    default: return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}

}  // namespace

/* A call with norm_weight runs the fused kernel or the chain
 * (mdr_arp_norm_fused, kernels/ar_protocol.h): the chain is the plain
 * all-reduce of the rows (no residual, no norm: its signature says so, and
 * a rank that runs the fused kernel against it is a mismatch), then the
 * residual add and the norm of exactly those rows on the same stream,
 * skipped entirely when this rank's kernels gave up (MDR_ARP_CTL_CLAIM). */
extern "C" int mdr_cuda_ar_launch(const mdr_ar_call *k, void *stream) {
  if (k->norm_weight && !mdr_arp_norm_fused(k)) {
    const mdr_ar_call plain = mdr_arp_plain_of(k);
    const int e = mdr_cuda_ar_launch(&plain, stream);
    if (e) return e;
    const uint32_t *claim = (const uint32_t *)(k->self + k->region_off + MDR_ARP_CTL_OFF) + MDR_ARP_CTL_CLAIM;
    return launch_residual_norm((uint4 *)(k->self + k->res_off), (const uint4 *)(k->self + k->buf_off),
                                (uint4 *)(k->self + k->norm_off), (const uint4 *)k->norm_weight, k->norm_eps,
                                k->row_bytes, k->rows, k->count_ptr, k->dtype, claim, (cudaStream_t)stream);
  }
  /* the grid covers the largest message this launch can see, one vector a
   * thread, up to one block per SM */
  const size_t nvec = k->rows * k->row_bytes / MDR_ARP_VEC;
  const int one = mdr_arp_runs_one_shot(k->algo, nvec * MDR_ARP_VEC, k->one_shot_max);
  const size_t per_rank = one ? nvec : (nvec + (size_t)k->nranks - 1) / (size_t)k->nranks;
  size_t blocks = (per_rank + MDR_AR_THREADS - 1) / MDR_AR_THREADS;
  unsigned threads = per_rank < MDR_AR_THREADS ? (unsigned)((per_rank + 31) / 32 * 32) : MDR_AR_THREADS;
  const bool norm = k->norm_weight != nullptr;
  if (norm) { /* a block a row (one-shot), a block a row of this rank's share (two-shot) */
    const size_t rv = k->row_bytes / MDR_ARP_VEC;
    blocks = one ? k->rows : (k->rows + (size_t)k->nranks - 1) / (size_t)k->nranks;
    threads = rv < MDR_AR_THREADS ? (unsigned)((rv + 31) / 32 * 32) : MDR_AR_THREADS;
  }
  size_t cap = (size_t)k->max_blocks; /* the same on every rank: block b meets block b */
  if (cap > MDR_ARP_MAX_BLOCKS) cap = MDR_ARP_MAX_BLOCKS;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  /* programmatic dependent launch (sm_90+, decided by the transport): the
   * kernel's launch overlaps the end of the work before it */
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)blocks);
  cfg.blockDim = dim3(threads < 32 ? 32 : threads);
  cfg.stream = (cudaStream_t)stream;
  cfg.attrs = attr;
  cfg.numAttrs = k->pdl ? 1 : 0;
  cudaError_t e;
  if (norm) {
    switch (k->dtype) {
      case MDR_ARP_BF16: e = cudaLaunchKernelEx(&cfg, all_reduce_norm_kernel<MDR_ARP_BF16>, *k); break;
      case MDR_ARP_FP16: e = cudaLaunchKernelEx(&cfg, all_reduce_norm_kernel<MDR_ARP_FP16>, *k); break;
      default: e = cudaErrorInvalidValue; break; /* refused by src/all_reduce.c */
    }
    return (int)e;
  }
  switch (k->dtype) {
    case MDR_ARP_BF16: e = cudaLaunchKernelEx(&cfg, all_reduce_kernel<MDR_ARP_BF16>, *k); break;
    case MDR_ARP_FP16: e = cudaLaunchKernelEx(&cfg, all_reduce_kernel<MDR_ARP_FP16>, *k); break;
    default: e = cudaLaunchKernelEx(&cfg, all_reduce_kernel<MDR_ARP_FP32>, *k); break;
  }
  return (int)e;
}

extern "C" int mdr_cuda_ar_barrier_bench(const mdr_ar_call *k, const mdr_ar_barrier_run *run, void *stream) {
  const unsigned cap = k->max_blocks < MDR_ARP_MAX_BLOCKS ? (unsigned)(k->max_blocks > 0 ? k->max_blocks : 0)
                                                         : (unsigned)MDR_ARP_MAX_BLOCKS;
  const bool check = run->check_off != MDR_AR_NO_CHECK;
  if (run->blocks < 1 || run->blocks > cap || (check && !run->wrong)) return (int)cudaErrorInvalidValue;
  cudaStream_t s = (cudaStream_t)stream;
  if (check) {
    barrier_bench_kernel<true><<<run->blocks, MDR_AR_THREADS, 0, s>>>(*k, *run);
  } else {
    barrier_bench_kernel<false><<<run->blocks, MDR_AR_THREADS, 0, s>>>(*k, *run);
  }
  return (int)cudaGetLastError();
}

extern "C" int mdr_cuda_ar_region_init(void *region, int n, size_t cap, void *stream) {
  /* Load every kernel now. Under lazy module loading (CUDA's default) a
   * kernel's first launch may wait for the device's running kernels, and a
   * rank's kernel spins until its peers' kernels run: a rank whose kernel
   * loads while a peer on the same device spins would never start. */
  cudaFuncAttributes fa;
  cudaError_t e0 = cudaFuncGetAttributes(&fa, all_reduce_kernel<MDR_ARP_BF16>);
  if (e0 == cudaSuccess) e0 = cudaFuncGetAttributes(&fa, all_reduce_kernel<MDR_ARP_FP16>);
  if (e0 == cudaSuccess) e0 = cudaFuncGetAttributes(&fa, all_reduce_kernel<MDR_ARP_FP32>);
  if (e0 == cudaSuccess) e0 = cudaFuncGetAttributes(&fa, residual_add_kernel<MDR_ARP_BF16>);
  if (e0 == cudaSuccess) e0 = cudaFuncGetAttributes(&fa, residual_add_kernel<MDR_ARP_FP16>);
  if (e0 == cudaSuccess) e0 = cudaFuncGetAttributes(&fa, residual_add_kernel<MDR_ARP_FP32>);
  if (e0 == cudaSuccess) e0 = cudaFuncGetAttributes(&fa, all_reduce_norm_kernel<MDR_ARP_BF16>);
  if (e0 == cudaSuccess) e0 = cudaFuncGetAttributes(&fa, all_reduce_norm_kernel<MDR_ARP_FP16>);
  if (e0 == cudaSuccess) e0 = cudaFuncGetAttributes(&fa, residual_norm_kernel<MDR_ARP_BF16>);
  if (e0 == cudaSuccess) e0 = cudaFuncGetAttributes(&fa, residual_norm_kernel<MDR_ARP_FP16>);
  if (e0 != cudaSuccess) return (int)e0;
  cudaStream_t s = (cudaStream_t)stream;
  char *r = (char *)region;
  const size_t scratch = MDR_ARP_SCRATCH_OFF(n);
  cudaError_t e = cudaMemsetAsync(r, 0, scratch, s);
  if (e == cudaSuccess) e = cudaMemsetAsync(r + scratch, 0xff, MDR_ARP_REGION_BYTES(n, cap) - scratch, s);
  return (int)e;
}

extern "C" int mdr_cuda_ar_raise_abort(char *const *peers, int nranks, size_t region_off, void *stream) {
  static const uint32_t raised = 1u; /* static: it outlives the copies */
  cudaStream_t s = (cudaStream_t)stream;
  cudaError_t e = cudaSuccess;
  for (int r = 0; r < nranks && e == cudaSuccess; r++)
    if (peers[r])
      e = cudaMemcpyAsync(peers[r] + region_off + MDR_ARP_CTL_OFF + (size_t)MDR_ARP_CTL_ABORT * sizeof raised,
                          &raised, sizeof raised, cudaMemcpyHostToDevice, s);
  const cudaError_t synced = cudaStreamSynchronize(s);
  return (int)(e != cudaSuccess ? e : synced);
}

extern "C" int mdr_cuda_ar_residual_add(void *residual, const void *rows, size_t row_bytes, size_t nrows,
                                        const uint32_t *count_ptr, int dtype, void *stream) {
  const size_t row_vecs = row_bytes / MDR_ARP_VEC, nvec = nrows * row_vecs;
  size_t blocks = (nvec + 255) / 256;
  if (blocks > 1024) blocks = 1024;
  if (blocks < 1) blocks = 1;
  cudaStream_t s = (cudaStream_t)stream;
  uint4 *res = (uint4 *)residual;
  const uint4 *in = (const uint4 *)rows;
  switch (dtype) {
    case MDR_ARP_BF16: residual_add_kernel<MDR_ARP_BF16><<<(unsigned)blocks, 256, 0, s>>>(res, in, row_vecs, nrows, count_ptr); break;
    case MDR_ARP_FP16: residual_add_kernel<MDR_ARP_FP16><<<(unsigned)blocks, 256, 0, s>>>(res, in, row_vecs, nrows, count_ptr); break;
    default: residual_add_kernel<MDR_ARP_FP32><<<(unsigned)blocks, 256, 0, s>>>(res, in, row_vecs, nrows, count_ptr); break;
  }
  return (int)cudaGetLastError();
}

extern "C" int mdr_cuda_ar_residual_norm(void *residual, const void *sum, void *out, const void *weight, float eps,
                                         size_t row_bytes, size_t nrows, const uint32_t *count_ptr, int dtype,
                                         void *stream) {
  return launch_residual_norm((uint4 *)residual, (const uint4 *)sum, (uint4 *)out, (const uint4 *)weight, eps,
                              row_bytes, nrows, count_ptr, dtype, nullptr, (cudaStream_t)stream);
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
  /* no barriers or buffers of NCCL's: mdr's live in its window. NCCL's
   * initialiser where the headers have one (2.29 on: zero-filling is no
   * longer a valid start), zeros before */
#if defined(NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER)
  ncclDevCommRequirements reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#else
  ncclDevCommRequirements reqs;
  memset(&reqs, 0, sizeof reqs);
#endif
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

extern "C" int mdr_cuda_ar_devcomm_destroy(void *nccl_comm, void *h) {
  ncclDevComm *dc = (ncclDevComm *)h;
  if (!dc) return 0;
  const ncclResult_t r = ncclDevCommDestroy((ncclComm_t)nccl_comm, dc);
  delete dc;
  return (int)r;
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

extern "C" int mdr_cuda_ar_devcomm_destroy(void *, void *) { return 0; }

#endif
