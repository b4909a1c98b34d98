/* mdr — communicators for tensor-parallel decode: one rank per GPU, NCCL as
 * the distributed engine, the arena registered once as a symmetric window,
 * and an all-reduce of an arena buffer's first rows that sits inside every
 * cached graph.
 *
 * Shape (docs/TP.md says more):
 *
 *   engine's ncclComm_t (adopt) or mdr's own (create_local)
 *        -> mdr_comm per rank, on that rank's backend
 *        -> mdr_arena_create_on_comm: slab from ncclMemAlloc, registered
 *           once as a symmetric window (NCCL_WIN_COLL_SYMMETRIC); the same
 *           layout on every rank, checked at create
 *        -> body callback: ... mdr_comm_all_reduce_rows(...) ...
 *        -> graph cache per rank, in lockstep (below)
 *
 * NCCL is optional at build time (CMake option MDR_ENABLE_NCCL). Without it
 * every NCCL entry point returns MDR_ERR_UNSUPPORTED; the host communicator
 * (ranks as threads of one process, on host backends) is always built, so
 * everything above the NCCL seam is tested without a GPU.
 *
 * Collective calls. A call marked "collective" must be made by every rank
 * of the communicator, concurrently: one thread or process per rank. A
 * process that drives several ranks from one thread uses the array forms
 * (mdr_comm_create_local, mdr_arena_create_on_comms).
 *
 * Lockstep (the contract of a tensor-parallel graph cache). A graph that
 * holds a collective is itself a collective launch. Every rank must make
 * the same calls on its cache, in the same order: the same prepare counts,
 * then the same step token counts. Caches on ranks must be created with the
 * same options; captures and LRU evictions are then deterministic, so every
 * rank replays (or captures, or runs eagerly) the same graph count at the
 * same step. A capture that fails on one rank runs that step eagerly there,
 * which issues the same collectives, so the ranks stay matched.
 *
 * Faults. A failed all-reduce enqueue aborts the communicator: pending and
 * later collectives of every rank return MDR_ERR_STATE instead of waiting
 * for a peer that will never come. A rank that fails anywhere else in a
 * step (before its all-reduce) must call mdr_comm_abort, as with NCCL.
 *
 * NVLink multicast (NVLS) is never used by mdr; keep NCCL_NVLS_ENABLE=0 in
 * the environment of programs run on shared GPU machines. */
#ifndef MDR_COMM_H
#define MDR_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "mdr/arena.h"
#include "mdr/backend.h"
#include "mdr/sizes.h"
#include "mdr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mdr_comm mdr_comm;

/* Element types of an all-reduce. */
typedef enum mdr_dtype {
  MDR_DTYPE_BF16,
  MDR_DTYPE_FP16,
  MDR_DTYPE_FP32,
  MDR_DTYPE_COUNT
} mdr_dtype;

/* 1 when this build has NCCL (the NCCL entry points can work), else 0. */
MDR_API int mdr_comm_nccl_available(void);

/* Adopt an engine's NCCL communicator (an ncclComm_t, passed as void * so
 * this header needs no NCCL header) for the rank on CUDA backend `b`. The
 * ncclComm_t is borrowed: it must outlive the mdr_comm, and
 * mdr_comm_destroy leaves it alone. Any topology NCCL supports works (one
 * process per GPU or one for several; one host or many). Returns
 * MDR_ERR_INVALID_ARGUMENT for NULL arguments, a backend that is not CUDA,
 * or a communicator on another device than b's; MDR_ERR_UNSUPPORTED
 * without NCCL. On failure *out is NULL. Caller owns *out; release with
 * mdr_comm_destroy. Not collective. */
MDR_API mdr_status mdr_comm_adopt_nccl(mdr_backend *b, void *nccl_comm, mdr_comm **out);

/* Create, in one call, the NCCL communicators of n local GPUs (one process
 * drives them all): rank i on backends[i] (CUDA backends on distinct
 * devices). out[0..n-1] are set on success, all NULL on failure (nothing
 * leaks). mdr owns these NCCL communicators; mdr_comm_destroy destroys
 * them. MDR_ERR_UNSUPPORTED without NCCL. */
MDR_API mdr_status mdr_comm_create_local(mdr_backend *const *backends, int n, mdr_comm **out);

/* Create n host communicators (ranks as threads of this process), rank i on
 * backends[i] (host backends). An all-reduce sums through shared memory
 * behind a barrier; it is recorded by host captures and replayed like any
 * op. out[0..n-1] set on success, all NULL on failure. */
MDR_API mdr_status mdr_comm_create_host(mdr_backend *const *backends, int n, mdr_comm **out);

/* Rank, size and CUDA device (-1 on the host) of a communicator; -1 for a
 * NULL one. Thread-safe. */
MDR_API int mdr_comm_rank(const mdr_comm *c);
MDR_API int mdr_comm_size(const mdr_comm *c);
MDR_API int mdr_comm_device(const mdr_comm *c);
/* The backend a communicator was made on (borrowed); NULL for NULL. */
MDR_API mdr_backend *mdr_comm_backend(const mdr_comm *c);

/* Mark the communicator failed on every rank: collectives waiting on this
 * or any rank and all later ones return MDR_ERR_STATE. For a communicator
 * mdr created over NCCL this also aborts the NCCL communicator
 * (ncclCommAbort); an adopted one is the engine's to abort. Accepts NULL. */
MDR_API void mdr_comm_abort(mdr_comm *c);

/* Release a communicator (and, for create_local, its NCCL communicator).
 * Arenas made on it must be destroyed first. Accepts NULL. */
MDR_API void mdr_comm_destroy(mdr_comm *c);

/* How an arena's slab is shared with its peers. */
typedef enum mdr_window {
  MDR_WINDOW_NONE,      /* not on a communicator */
  MDR_WINDOW_SYMMETRIC, /* ncclMemAlloc slab registered once as a symmetric window */
  MDR_WINDOW_PLAIN,     /* on a communicator, plain device memory: symmetric
                           registration was unavailable (the reason is in
                           the backend's last error of create) */
  MDR_WINDOW_HOST,      /* on a host communicator */
  MDR_WINDOW_COUNT
} mdr_window;

/* Create the arena of rank `c` (collective): as mdr_arena_create, on the
 * communicator's backend, with the slab registered once, as a whole, as a
 * symmetric window. Every rank must pass identical sizes: the layouts are
 * compared at create, and if any rank's differs every rank gets
 * MDR_ERR_INVALID_ARGUMENT and nothing. If symmetric registration is
 * unavailable the slab is plain device memory on every rank
 * (MDR_WINDOW_PLAIN). No registration happens per graph or per step. On
 * failure *out is NULL and nothing leaks. Not capture-safe. */
MDR_API mdr_status mdr_arena_create_on_comm(mdr_comm *c, const mdr_sizes *s, mdr_arena **out);
/* The same for n ranks driven from one thread: comms[i] gets out[i]. */
MDR_API mdr_status mdr_arena_create_on_comms(mdr_comm *const *comms, int n, const mdr_sizes *s,
                                             mdr_arena **out);
/* The arena's window kind, and its communicator (borrowed; NULL when none). */
MDR_API mdr_window mdr_arena_window(const mdr_arena *a);
MDR_API mdr_comm *mdr_arena_comm(const mdr_arena *a);
/* "none", "symmetric", "plain" or "host"; "unknown" out of range. */
MDR_API const char *mdr_window_name(mdr_window w);

/* Sum, in place across the ranks of the arena's communicator, the first
 * `tokens` rows of buffer `buf` (elements of type dt). A row is the
 * buffer's bytes / max_batch_tokens (hidden_states, residual, moe_output,
 * ...). Enqueued on `stream`, capture-safe: call it from a graph cache's
 * body; EXACT and LADDER graphs reduce the graph's count of rows, a
 * DYNAMIC graph (whose count is known only on the device) reduces all
 * max_batch_tokens rows. Collective: every rank, same buffer, same tokens.
 * Returns, with nothing enqueued: MDR_ERR_INVALID_ARGUMENT for NULL
 * arguments, an arena not on a communicator, an unknown dtype, or a buffer
 * with no rows (NULL, or a size that is not max_batch_tokens whole rows of
 * dt); MDR_ERR_OUT_OF_RANGE for tokens > max_batch_tokens; MDR_ERR_STATE on
 * an aborted communicator. tokens == 0 enqueues nothing. A failed enqueue
 * aborts the communicator (see Faults). The same as mdr_comm_all_reduce
 * with mdr_all_reduce_desc_make(buf, dt, tokens): the algorithm is AUTO
 * (mdr's kernels where they run and win, NCCL elsewhere). */
MDR_API mdr_status mdr_comm_all_reduce_rows(mdr_arena *a, mdr_buffer buf, mdr_dtype dt, size_t tokens,
                                            mdr_stream stream);

/* ---- the all-reduce with options: device-read counts, the fused residual
 * add, the algorithm (docs/TP.md, "mdr's all-reduce kernels") ----
 *
 * Algorithms. On an arena whose slab is a symmetric window (MDR_WINDOW_
 * SYMMETRIC, all ranks in one NVLink domain), mdr has its own kernels on
 * NCCL's device API: peers' memory through load/store-accessible (LSA)
 * pointers of the window, no host involvement, no NVLink multicast.
 *   one-shot  every rank stores its rows into a slot of every peer's
 *             scratch (in the window); each element carries its own
 *             arrival flag (a value no input has: all-ones bits, inputs
 *             with those bits are sent as another NaN), so one NVLink trip
 *             and no barrier; each rank then sums the slots locally and
 *             clears them. Scratch: MDR_AR_ONE_SHOT_MAX_BYTES per rank and
 *             buffer, two buffers alternating call by call.
 *   two-shot  reduce-scatter then all-gather in place through the window:
 *             rank r sums its 1/n of the rows from every peer and writes
 *             the sum into every peer; two barriers.
 * Barriers and the alternation use a call counter (epoch) in each rank's
 * window, advanced by every call on the device; it wraps at 2^32 safely.
 *
 * Summation order, every algorithm and the host communicator alike (so
 * results are deterministic, bit-identical between graph and eager, equal
 * on every rank): acc = (float)x_0; for r = 1 .. n-1: acc += (float)x_r;
 * the result is acc rounded once to the element type (round to nearest
 * even; fp32 sums in fp32). NCCL's own kernels (MDR_AR_NCCL) give the same
 * bits for two ranks (one rounded addition, -0 + -0 = -0 included); for
 * more ranks NCCL's order is NCCL's. The fused residual add is residual = round((float)residual +
 * (float)sum), after the sum is rounded. */
typedef enum mdr_ar_algo {
  MDR_AR_AUTO,     /* the measured table (mdr_comm_all_reduce_choice) */
  MDR_AR_NCCL,     /* ncclAllReduce; its count is fixed at enqueue */
  MDR_AR_ONE_SHOT, /* mdr's one-shot kernel (flags carried in the data) */
  MDR_AR_TWO_SHOT, /* mdr's two-shot kernel (reduce-scatter, all-gather) */
  MDR_AR_ALGO_COUNT
} mdr_ar_algo;

/* The one-shot kernel's scratch per rank and buffer: larger messages are
 * refused by MDR_AR_ONE_SHOT and never chosen by MDR_AR_AUTO. */
#define MDR_AR_ONE_SHOT_MAX_BYTES ((size_t)2 << 20)

/* "auto", "nccl", "one-shot", "two-shot"; "unknown" out of range. */
MDR_API const char *mdr_ar_algo_name(mdr_ar_algo a);

/* One all-reduce of an arena buffer's first rows. */
typedef struct mdr_all_reduce_desc {
  mdr_buffer buf;    /* the rows to sum in place (as mdr_comm_all_reduce_rows) */
  mdr_dtype dtype;
  size_t tokens;     /* rows; with count_ptr, the most rows a call may have */
  /* 0: `tokens` rows. Else the device address of a uint32 row count, read
   * by the kernel each time it runs: min(*count_ptr, tokens) rows (a
   * DYNAMIC graph body passes the count_ptr it is given, and
   * max_batch_tokens). mdr's kernels then reduce exactly those rows;
   * MDR_AR_NCCL, whose count is fixed at enqueue, reduces all `tokens`
   * rows (the fused residual add still covers the counted rows only). */
  mdr_dptr count_ptr;
  /* MDR_BUF_COUNT: no residual. Else a buffer of the same dtype and row
   * bytes: after the sum, residual row i += summed row i for the reduced
   * rows (the usual next op of a decode layer, fused: no extra launch for
   * mdr's kernels; one small kernel after MDR_AR_NCCL). */
  mdr_buffer residual;
  mdr_ar_algo algo;
} mdr_all_reduce_desc;

/* A descriptor of `tokens` rows of buf: no count_ptr, no residual, AUTO. */
MDR_API mdr_all_reduce_desc mdr_all_reduce_desc_make(mdr_buffer buf, mdr_dtype dt, size_t tokens);

/* Enqueue the all-reduce `d` on `stream` (capture-safe; collective: every
 * rank the same descriptor, with its own count word holding the same
 * count). EXACT, LADDER and DYNAMIC graphs hold it. Returns, with nothing
 * enqueued, what mdr_comm_all_reduce_rows returns and also:
 * MDR_ERR_INVALID_ARGUMENT for a NULL d, an unknown algo, a residual that
 * is the buffer itself or has other row bytes, or a count_ptr with
 * tokens == 0; MDR_ERR_UNSUPPORTED for MDR_AR_ONE_SHOT / TWO_SHOT where
 * mdr's kernels cannot run (a plain window, ranks outside one NVLink
 * domain, rows not a multiple of 16 bytes, a one-shot message over
 * MDR_AR_ONE_SHOT_MAX_BYTES; mdr_comm_all_reduce_kernels says which).
 * AUTO never fails for those reasons: it falls back to NCCL. On the host
 * communicator every algorithm runs the host sum (MDR_AR_NCCL reducing all
 * `tokens` rows, as on a GPU). */
MDR_API mdr_status mdr_comm_all_reduce(mdr_arena *a, const mdr_all_reduce_desc *d, mdr_stream stream);

/* The algorithm AUTO takes for `bytes` (rows x row bytes) on this arena:
 * counted != 0 for a count read on the device (then the kernel picks
 * one-shot or two-shot at run time from the real bytes, and this returns
 * MDR_AR_AUTO when mdr's kernels can run). MDR_AR_NCCL where mdr's
 * kernels cannot run; MDR_AR_ALGO_COUNT for a NULL arena or one not on a
 * communicator. The table: docs/TP.md. */
MDR_API mdr_ar_algo mdr_comm_all_reduce_choice(const mdr_arena *a, size_t bytes, int counted);

/* 1 when mdr's own all-reduce kernels can run on this arena, else 0 (and
 * why, in the backend's last error of the arena's create: no symmetric
 * window, ranks outside one NVLink domain, an NCCL library other than the
 * headers mdr was built with). The host communicator: 1 (its twin). */
MDR_API int mdr_comm_all_reduce_kernels(const mdr_arena *a);

/* The call counter (epoch) of this rank's kernels: read it, or set it
 * (every rank the same value, with nothing in flight: e.g. near 2^32 to
 * exercise the wrap-around). Blocking, not capture-safe. MDR_ERR_
 * UNSUPPORTED where mdr's kernels do not run (on the host communicator the
 * counter is the host twin's, advanced by every all-reduce it runs). */
MDR_API mdr_status mdr_comm_all_reduce_epoch(mdr_arena *a, uint32_t *epoch);
MDR_API mdr_status mdr_comm_all_reduce_set_epoch(mdr_arena *a, uint32_t epoch);

#ifdef __cplusplus
}
#endif
#endif
