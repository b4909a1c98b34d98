/* all_reduce.h — mdr's all-reduce kernels (kernels/all_reduce.cu), C side.
 *
 * The kernels see only plain addresses (mdr_ar_call, kernels/ar_protocol.h,
 * which also has the comm region's layout and the protocol): each rank's
 * window base as this rank's GPU reaches it (LSA pointers resolved once
 * through NCCL's device API, or, in the one-GPU test harness, plain
 * addresses of one device), offsets inside the window, and this rank's comm
 * region. The region starts zeroed, its scratch all-ones bytes
 * (mdr_cuda_ar_region_init). */
#ifndef MDR_KERNELS_ALL_REDUCE_H
#define MDR_KERNELS_ALL_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "ar_protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MDR_AR_THREADS = 512 };

/* Enqueue the call (algo ONE_SHOT, TWO_SHOT or AUTO; the RMSNorm with
 * norm_weight) on `stream` (a cudaStream_t). With norm_weight, one fused
 * kernel or the chain of two (the plain all-reduce, then the residual add
 * and the norm: mdr_arp_norm_fused decides, kernels/ar_protocol.h); the
 * same bits either way. 0 on success, else a cudaError_t. */
int mdr_cuda_ar_launch(const mdr_ar_call *k, void *stream);

/* residual += rows for min(*count_ptr, rows) rows (count_ptr NULL: rows):
 * the fused add's counterpart after an NCCL all-reduce. */
int mdr_cuda_ar_residual_add(void *residual, const void *rows, size_t row_bytes, size_t nrows,
                             const uint32_t *count_ptr, int dtype, void *stream);

/* residual += sum (sum NULL: nothing added), then norm_output = the
 * fused RMSNorm of the residual (kernels/ar_protocol.h's arithmetic) with
 * `weight` (one row of dtype, 16-byte aligned) and eps, for
 * min(*count_ptr, nrows) rows (count_ptr NULL: nrows); bf16 or fp16 rows
 * of whole 16-byte vectors, at most MDR_ARP_NORM_MAX_VECS of them. The
 * fused norm's counterpart after an NCCL all-reduce (the unfused chain
 * of mdr_cuda_ar_launch runs the same kernel, which then also reads this
 * rank's give-up word first). 0 or a cudaError_t. */
int mdr_cuda_ar_residual_norm(void *residual, const void *sum, void *out, const void *weight, float eps,
                              size_t row_bytes, size_t nrows, const uint32_t *count_ptr, int dtype, void *stream);

/* ---- measurement only (mdr-bench-tp --barrier, bench/README.md) ----
 *
 * The two-shot's block barrier (block_barrier, kernels/ar_device.cuh) run
 * alone, so that it can be timed against NCCL's LSA barrier: each of
 * `blocks` blocks passes `barriers` consecutive barriers with its real
 * counters and flags, alternating barrier 1 and 2 as a two-shot call does
 * (the signature: that of an empty two-shot, which no real call sends).
 * Only block b's `barriers` counter advances, by one per barrier, so the
 * protocol's invariant (kernels/ar_protocol.h) holds for every call after
 * it. With check_off set, the last thread of each block (in another warp
 * than the threads that raise and poll the flags, as a two-shot's rows
 * are every thread's) also writes, before each barrier i,
 * mdr_ar_barrier_check_value(salt, rank, block, i) into every rank's slot
 * [i & 1][block][rank] (uint32 words at window offset check_off:
 * 2 * blocks * nranks of them), and after it reads its own slots of every
 * rank: each wrong value adds one to *wrong (a barrier that does not
 * synchronise shows there). */
#define MDR_AR_NO_CHECK (~(size_t)0)
typedef struct mdr_ar_barrier_run {
  unsigned blocks;   /* the grid: 1 .. min(k->max_blocks, MDR_ARP_MAX_BLOCKS), the same on every rank */
  unsigned barriers; /* barriers per block */
  size_t check_off;  /* MDR_AR_NO_CHECK: none */
  uint32_t *wrong;   /* with a check: device memory, wrong values are added to it */
  uint32_t salt;     /* with a check: different for every checked launch */
} mdr_ar_barrier_run;

/* The value rank `rank`'s block `block` writes before barrier i. */
MDR_ARP_FN uint32_t mdr_ar_barrier_check_value(uint32_t salt, int rank, unsigned block, unsigned i) {
  return salt * 0x9E3779B1u + (i << 12) + (block << 4) + (uint32_t)rank;
}

/* Enqueue one launch of the run on `stream` (a cudaStream_t): k is the call
 * mdr_all_reduce would run on the arena (transport part filled:
 * mdr_all_reduce_call_of, src/all_reduce_impl.h), MDR_AR_THREADS threads a
 * block, no programmatic dependent launch. Capture-safe. 0, or a
 * cudaError_t (cudaErrorInvalidValue: a grid out of range). */
int mdr_cuda_ar_barrier_bench(const mdr_ar_call *k, const mdr_ar_barrier_run *run, void *stream);

/* Set a region up on `stream` (zeroed control, counters and flags; the
 * scratch all-ones), for n ranks and slots of `cap` bytes. 0 or a
 * cudaError_t; asynchronous. */
int mdr_cuda_ar_region_init(void *region, int n, size_t cap, void *stream);

/* Raise the abort word of each rank's region from the host: 1 stored into
 * word MDR_ARP_CTL_ABORT at peers[r] + region_off + MDR_ARP_CTL_OFF for
 * r < nranks (a NULL entry is skipped), by copies on `stream` (a
 * cudaStream_t; copies, not a kernel, so that no SM is needed while
 * kernels spin), then the stream is synchronised. The pointers are device
 * addresses valid in this process whose memory is still mapped: the LSA
 * pointers of an NCCL window, or CUDA-IPC mappings. A kernel of that
 * region's rank polls the word in every wait and leaves it with cause
 * MDR_ARP_PEER (kernels/ar_device.cuh, must_leave); the word stays raised
 * until the region is set up again (mdr_cuda_ar_region_init). Blocking.
 * 0, or the first failure's cudaError_t (the copies enqueued before it are
 * still waited for). */
int mdr_cuda_ar_raise_abort(char *const *peers, int nranks, size_t region_off, void *stream);

/* Resolve each rank's window base (ncclGetLsaPointer of window `win`, an
 * ncclWindow_t, at offset 0) into out[0..n-1] on the host; blocking on
 * `stream`. 0 or a cudaError_t. */
int mdr_cuda_ar_resolve_peers(void *win, int n, char **out, void *stream);

/* A device communicator (an ncclDevComm, no NCCL barriers or buffers
 * requested) of `nccl_comm` into *out; a group task when inside
 * ncclGroupStart / End (then filled at the group's end). 0 or an
 * ncclResult_t. */
int mdr_cuda_ar_devcomm_create(void *nccl_comm, void **out);
/* Its world rank and size, and the LSA team's (the ranks reached by loads
 * and stores). */
void mdr_cuda_ar_devcomm_info(const void *h, int *rank, int *nranks, int *lsa_rank, int *lsa_size);
/* Release it (NULL: nothing). 0 or an ncclResult_t. */
int mdr_cuda_ar_devcomm_destroy(void *nccl_comm, void *h);

#ifdef __cplusplus
}
#endif
#endif
