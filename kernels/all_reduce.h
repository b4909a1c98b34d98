/* all_reduce.h — mdr's all-reduce kernels (kernels/all_reduce.cu), C side.
 *
 * The caller (src/comm_nccl.c) owns the NCCL objects; these kernels see
 * only plain addresses: each rank's window base as this rank's GPU reaches
 * it (LSA pointers, resolved once through NCCL's device API by
 * mdr_cuda_ar_resolve_peers), offsets inside the window, and this rank's
 * comm region (a tail of the arena slab, inside the window, the same
 * offset on every rank):
 *
 *   region + 0                       the epoch (calls made), one uint32 copy per
 *                                    block (MDR_AR_MAX_BLOCKS), all equal between calls
 *   region + MDR_AR_FLAGS_OFF        barrier flags, uint32 [blocks][ranks]:
 *                                    slot [b][r] is written by rank r's block b
 *   region + MDR_AR_LAMPORT_OFF(n)   one-shot scratch: 2 buffers x n slots x
 *                                    MDR_ARK_ONE_SHOT_MAX_BYTES; slot [k][r] is
 *                                    written by rank r during calls of parity k
 *
 * The region starts zeroed, its scratch all-ones bytes (the arrival
 * sentinel); src/comm_nccl.c sets it up at the arena's create. */
#ifndef MDR_KERNELS_ALL_REDUCE_H
#define MDR_KERNELS_ALL_REDUCE_H

#include <stddef.h>
#include <stdint.h>


#ifdef __cplusplus
extern "C" {
#endif

/* The kernels' codes: the values of mdr_dtype, mdr_ar_algo and
 * MDR_AR_ONE_SHOT_MAX_BYTES of include/mdr/comm.h (kept apart so that the
 * kernels need no public header; src/comm_nccl.c checks they agree). */
enum { MDR_ARK_BF16 = 0, MDR_ARK_FP16 = 1, MDR_ARK_FP32 = 2 };
enum { MDR_ARK_AUTO = 0, MDR_ARK_ONE_SHOT = 2, MDR_ARK_TWO_SHOT = 3 };
#define MDR_ARK_ONE_SHOT_MAX_BYTES ((size_t)2 << 20)

enum {
  MDR_AR_MAX_RANKS = 8,
  MDR_AR_MAX_BLOCKS = 128, /* co-resident on every GPU mdr targets (one per SM) */
  MDR_AR_THREADS = 512,
  MDR_AR_FLAGS_OFF = MDR_AR_MAX_BLOCKS * 4,
  MDR_AR_VEC = 16 /* bytes per vector access: rows must be whole vectors */
};

/* Bytes of the barrier flags, offset of the one-shot scratch, and the
 * region's total for n ranks (256-byte aligned). */
#define MDR_AR_FLAGS_BYTES(n) ((size_t)MDR_AR_MAX_BLOCKS * (size_t)(n) * 4u)
#define MDR_AR_LAMPORT_OFF(n) \
  ((((size_t)MDR_AR_FLAGS_OFF + MDR_AR_FLAGS_BYTES(n)) + 255u) & ~(size_t)255u)
#define MDR_AR_REGION_BYTES(n) (MDR_AR_LAMPORT_OFF(n) + 2u * (size_t)(n) * MDR_ARK_ONE_SHOT_MAX_BYTES)

/* What one call does (all offsets are window offsets, the same on every
 * rank). */
typedef struct mdr_ar_launch {
  char *peer[MDR_AR_MAX_RANKS]; /* window base of each rank, as this GPU reaches it */
  char *self;                   /* this rank's slab at its own address */
  int rank, nranks;
  size_t buf_off;               /* the rows */
  size_t res_off;               /* the residual rows; SIZE_MAX: none */
  size_t region_off;            /* the comm region */
  size_t row_bytes;             /* a multiple of MDR_AR_VEC */
  size_t rows;                  /* rows, or the bound when count_ptr is set */
  const uint32_t *count_ptr;    /* NULL: rows */
  size_t one_shot_max;          /* counted AUTO: one-shot up to these bytes, two-shot above */
  int dtype;                    /* MDR_ARK_BF16, FP16, FP32 */
  int algo;                     /* MDR_ARK_ONE_SHOT, TWO_SHOT, or AUTO (counted: by the bytes) */
  int max_blocks;               /* grid cap, the same on every rank (SMs of the smallest GPU) */
} mdr_ar_launch;

/* Enqueue the call on `stream` (a cudaStream_t). 0 on success, else a
 * cudaError_t. */
int mdr_cuda_ar_launch(const mdr_ar_launch *l, void *stream);

/* residual += rows for min(*count_ptr, rows) rows (count_ptr NULL: rows):
 * the fused add's counterpart after an NCCL all-reduce. */
int mdr_cuda_ar_residual_add(void *residual, const void *rows, size_t row_bytes, size_t nrows,
                             const uint32_t *count_ptr, int dtype, void *stream);

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
/* Release it (NULL: nothing). */
void mdr_cuda_ar_devcomm_destroy(void *nccl_comm, void *h);

#ifdef __cplusplus
}
#endif
#endif
