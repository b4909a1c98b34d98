/* ar_device.cuh — the device building blocks of mdr's all-reduce kernels
 * (kernels/all_reduce.cu includes it, in its one translation unit): memory
 * operations (volatile, acquire/release at system scope), the elements of
 * a 16-byte vector and their arithmetic, the spin loops' polls and the
 * give-up, the barriers, and the one-shot's header and vector exchange.
 * kernels/ar_protocol.h has the protocol they follow. */
#ifndef MDR_KERNELS_AR_DEVICE_CUH
#define MDR_KERNELS_AR_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "all_reduce.h"

namespace {

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

/* A barrier flag {value, signature} as one 8-byte word (value low). */
__device__ __forceinline__ void st_release_sys64(uint32_t *p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t ld_acquire_sys64(const uint32_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t global_ns(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* ---- elements: DT is an MDR_ARP_ dtype; a 16-byte vector holds 8 or 4 ---- */

template <int DT> struct elems {
  static constexpr int N = DT == MDR_ARP_FP32 ? 4 : 8;
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
  for (int i = 0; i < 4; i++) p |= mdr_arp_pending(word(v, i), DT) != 0;
  return p;
}

/* The vector as sent: an all-ones element (a NaN) becomes another NaN. */
template <int DT> __device__ __forceinline__ uint4 canonical(uint4 v) {
#pragma unroll
  for (int i = 0; i < 4; i++) set_word(v, i, mdr_arp_canonical(word(v, i), DT));
  return v;
}

template <int DT> __device__ __forceinline__ float to_float(uint32_t bits) {
  if (DT == MDR_ARP_BF16) return __uint_as_float(bits << 16);
  if (DT == MDR_ARP_FP16) return __half2float(__ushort_as_half((unsigned short)bits));
  return __uint_as_float(bits);
}

template <int DT> __device__ __forceinline__ uint32_t from_float(float f) {
  if (DT == MDR_ARP_BF16) return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  if (DT == MDR_ARP_FP16) return __half_as_ushort(__float2half_rn(f));
  return __float_as_uint(f);
}

/* acc[k] = element k of v (the first term: the sum starts from x_0, not
 * from +0, so -0 + -0 stays -0 as in IEEE and NCCL) */
template <int DT> __device__ __forceinline__ void first_term(float *acc, const uint4 &v) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const uint32_t w = word(v, i);
    if (DT == MDR_ARP_FP32) {
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
    if (DT == MDR_ARP_FP32) {
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
    if (DT == MDR_ARP_FP32) {
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

/* ---- a block's counters ---- */

/* The blocks' counters of p's region (mdr_arp_block, one per block). */
__device__ __forceinline__ mdr_arp_block *block_states(const mdr_ar_call &p) {
  return (mdr_arp_block *)(p.self + p.region_off + MDR_ARP_STATE_OFF);
}

/* A block's counters, read with volatile loads, not an asm with a memory
 * clobber, so that the loads of the rows may be in flight with them. */
__device__ __forceinline__ mdr_arp_block load_block(const volatile mdr_arp_block *mine) {
  mdr_arp_block st;
  st.calls = mine->calls;
  st.one_shot = mine->one_shot;
  st.barriers = mine->barriers;
  st.spare = 0;
  return st;
}

/* ---- give-up ---- */

__device__ __forceinline__ uint32_t *ctl_of(char *slab, const mdr_ar_call &p) {
  return (uint32_t *)(slab + p.region_off + MDR_ARP_CTL_OFF);
}

/* A spin loop's poll state. */
struct spin {
  unsigned turns;
  bool peer; /* the region's abort word was seen: leave at the next turn */
  uint64_t t0;
};

/* Called on every turn of a spin loop: nonzero (an MDR_ARP_ cause) when
 * the wait must end. Looks only every MDR_ARP_POLL_EVERY turns. */
/* The region's abort word ends a wait one turn after it is seen: the wait
 * polls once more first. A rank that raises it from the host (torn down, or
 * aborted) may have completed this very call, its data or flag visible
 * before the word; the acquire load orders that last poll after the word,
 * so a wait whose value had arrived completes instead of giving up. */
__device__ __forceinline__ uint32_t must_leave(const mdr_ar_call &p, spin &s) {
  if (s.peer) return MDR_ARP_PEER;
  if ((++s.turns % MDR_ARP_POLL_EVERY) != 0) return 0;
  if (ld_acquire_sys(&ctl_of(p.self, p)[MDR_ARP_CTL_ABORT])) {
    s.peer = true;
    return 0;
  }
  if (p.host_abort && *p.host_abort) return MDR_ARP_ABORTED;
  if (p.timeout_ns) {
    const uint64_t now = global_ns();
    if (!s.t0) s.t0 = now;
    else if (now - s.t0 > p.timeout_ns) return MDR_ARP_TIMED_OUT;
  }
  return 0;
}

/* Leave for `cause`: the first thread of this rank to give up writes the
 * report; every rank's abort word is raised so their waits end too. */
__device__ void give_up(const mdr_ar_call &p, uint32_t cause, uint32_t wait, int peer, uint32_t calls) {
  uint32_t *ctl = ctl_of(p.self, p);
  if (atomicCAS(&ctl[MDR_ARP_CTL_CLAIM], 0u, 1u) == 0u && p.host_report) {
    p.host_report[MDR_ARP_REP_WAIT] = wait;
    p.host_report[MDR_ARP_REP_PEER] = (uint32_t)peer;
    p.host_report[MDR_ARP_REP_BLOCK] = blockIdx.x;
    p.host_report[MDR_ARP_REP_CALL] = calls;
    __threadfence_system();
    p.host_report[MDR_ARP_REP_CAUSE] = cause;
    __threadfence_system();
  }
  /* a cause found here (the time limit, a mismatch) ends the peers' waits
   * too; an abort the host asked for reaches the ranks sharing the host
   * word, and the host raises the other peers' words itself
   * (mdr_cuda_ar_raise_abort); a peer's abort its peers already see (a
   * rank that went away may have no window left to write to); the own word
   * always, so this rank's other blocks leave */
  const bool all = cause == MDR_ARP_TIMED_OUT || cause == MDR_ARP_MISMATCH;
  for (int r = 0; r < p.nranks; r++)
    if (all || r == p.rank) st_release_sys(&ctl_of(p.peer[r], p)[MDR_ARP_CTL_ABORT], 1u);
}

/* ---- barriers ---- */

__device__ __forceinline__ uint32_t *flag_slot(char *slab, const mdr_ar_call &p, int block, int r) {
  return (uint32_t *)(slab + p.region_off + MDR_ARP_FLAGS_OFF) + 2 * ((size_t)block * p.nranks + r);
}

/* 1 when peer r has put a header of block b into this rank's scratch, in
 * either parity: a one-shot call of the peer's where this rank runs a
 * two-shot (every earlier header was cleared when it was read). */
__device__ bool peer_in_one_shot(const mdr_ar_call &p, unsigned block, int r) {
  const size_t slot_bytes = MDR_ARP_SLOT_BYTES(p.slot_cap);
  for (int k = 0; k < 2; k++) {
    const uint4 *h = (const uint4 *)(p.self + p.region_off + MDR_ARP_SCRATCH_OFF(p.nranks) +
                                     ((size_t)k * p.nranks + r) * slot_bytes) + block;
    const uint4 v = ld_volatile(h);
    if ((v.x & v.y & v.z & v.w) != 0xffffffffu) return true;
  }
  return false;
}

/* Block b of every rank meets at barrier k (1 or 2) of this call; at the
 * first, the ranks' signatures are compared. The block's earlier stores
 * (to any rank) are visible to the peers' block b once they pass. false:
 * the block gave up (or another thread of it did): leave. */
__device__ bool block_barrier(const mdr_ar_call &p, const mdr_arp_block &st, uint32_t k, uint32_t sig,
                              int *s_bad) {
  const uint32_t value = mdr_arp_barrier_value(&st, k);
  __threadfence_system();
  __syncthreads();
  if ((int)threadIdx.x < p.nranks) {
    const int r = threadIdx.x;
    /* the value and the signature in one store and one load: the
     * signature's check costs no second round trip */
    st_release_sys64(flag_slot(p.peer[r], p, blockIdx.x, p.rank), ((uint64_t)sig << 32) | value);
    const uint32_t *mine = flag_slot(p.self, p, blockIdx.x, r);
    spin s = {};
    uint32_t cause = 0;
    uint64_t got;
    while (mdr_arp_waiting((uint32_t)(got = ld_acquire_sys64(mine)), value)) {
      if ((cause = must_leave(p, s)) != 0) break;
      if (k == 1 && s.turns % MDR_ARP_POLL_EVERY == 0 && peer_in_one_shot(p, blockIdx.x, r)) {
        cause = MDR_ARP_MISMATCH;
        break;
      }
    }
    if (!cause && k == 1 && (uint32_t)(got >> 32) != sig) cause = MDR_ARP_MISMATCH;
    if (cause) {
      give_up(p, cause, k == 1 ? MDR_ARP_WAIT_BARRIER1 : MDR_ARP_WAIT_BARRIER2, r, st.calls);
      *(volatile int *)s_bad = 1;
    }
  }
  __syncthreads();
  return *(volatile int *)s_bad == 0;
}

/* ---- the algorithms ---- */

/* The one-shot scratch of this call's parity: its offset in a slab. */
__device__ __forceinline__ size_t scratch_base(const mdr_ar_call &p, const mdr_arp_block &st) {
  return p.region_off + MDR_ARP_SCRATCH_OFF(p.nranks) +
         (size_t)mdr_arp_parity(&st) * (size_t)p.nranks * MDR_ARP_SLOT_BYTES(p.slot_cap);
}

/* Thread 0: the block's header into this rank's slot of every peer. */
__device__ __forceinline__ void send_header(const mdr_ar_call &p, const mdr_arp_block &st, size_t nvec, uint32_t sig, size_t base) {
  const size_t slot_bytes = MDR_ARP_SLOT_BYTES(p.slot_cap);
  uint32_t h[4];
  mdr_arp_header(h, sig, nvec, &st, gridDim.x);
  const uint4 hv = make_uint4(h[0], h[1], h[2], h[3]);
  for (int r = 0; r < p.nranks; r++)
    if (r != p.rank) st_volatile((uint4 *)(p.peer[r] + base + (size_t)p.rank * slot_bytes) + blockIdx.x, hv);
}

/* Vector i of this rank's rows, as sent, into this rank's slot of every peer. */
template <int DT> __device__ __forceinline__ void send_vector(const mdr_ar_call &p, size_t base, size_t i, uint4 v) {
  const size_t slot_bytes = MDR_ARP_SLOT_BYTES(p.slot_cap);
  v = canonical<DT>(v);
  for (int r = 0; r < p.nranks; r++)
    if (r != p.rank)
      st_volatile((uint4 *)(p.peer[r] + base + (size_t)p.rank * slot_bytes + MDR_ARP_HEADER_BYTES) + i, v);
}

/* Thread 0: the peers' headers of this block: the same call (then each is
 * cleared), or give up (*s_bad set). */
__device__ __forceinline__ void check_headers(const mdr_ar_call &p, const mdr_arp_block &st, size_t nvec, uint32_t sig, size_t base,
                              int *s_bad) {
  const size_t slot_bytes = MDR_ARP_SLOT_BYTES(p.slot_cap);
  char *local = p.self + base;
  const uint4 clear = make_uint4(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  uint32_t want[4];
  mdr_arp_header(want, sig, nvec, &st, gridDim.x);
  for (int r = 0; r < p.nranks && !*(volatile int *)s_bad; r++) {
    if (r == p.rank) continue;
    uint4 *slot = (uint4 *)(local + (size_t)r * slot_bytes) + blockIdx.x;
    const uint32_t *flag = flag_slot(p.self, p, blockIdx.x, r);
    uint4 v = ld_volatile(slot);
    spin s = {};
    uint32_t cause = 0;
    while (v.x == 0xffffffffu || v.y == 0xffffffffu || v.z == 0xffffffffu || v.w == 0xffffffffu) {
      if ((cause = must_leave(p, s)) != 0) break;
      if (s.turns % MDR_ARP_POLL_EVERY == 0) {
        /* a peer in a two-shot raised its barrier flag (after any header
         * it had sent: read the flag first, then the header again) */
        const uint32_t f = ld_acquire_sys(flag);
        v = ld_volatile(slot);
        if (v.x != 0xffffffffu && v.y != 0xffffffffu && v.z != 0xffffffffu && v.w != 0xffffffffu) break;
        if (f != st.barriers) {
          cause = MDR_ARP_MISMATCH;
          break;
        }
      }
      v = ld_volatile(slot);
    }
    if (!cause && (v.x != want[0] || v.y != want[1] || v.z != want[2] || v.w != want[3])) cause = MDR_ARP_MISMATCH;
    if (cause) {
      give_up(p, cause, MDR_ARP_WAIT_HEADER, r, st.calls);
      *(volatile int *)s_bad = 1;
    } else {
      st_volatile(slot, clear);
    }
  }
}

/* The sum of vector i over the ranks, in rank order (this rank's `own`
 * vector as sent, the peers' polled from the scratch and cleared), into
 * *sum. false: the thread gave up (*s_bad set); the row is left as it was. */
template <int DT>
__device__ __forceinline__ bool sum_vector(const mdr_ar_call &p, const mdr_arp_block &st, size_t base, size_t i,
                                           uint4 own, uint4 *sum, int *s_bad) {
  const size_t slot_bytes = MDR_ARP_SLOT_BYTES(p.slot_cap);
  char *local = p.self + base;
  const uint4 clear = make_uint4(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
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
          return false;
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
  *sum = pack<DT>(acc);
  return true;
}

}  // namespace

#endif
