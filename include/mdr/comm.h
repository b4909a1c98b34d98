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
 * aborts the communicator (see Faults). */
MDR_API mdr_status mdr_comm_all_reduce_rows(mdr_arena *a, mdr_buffer buf, mdr_dtype dt, size_t tokens,
                                            mdr_stream stream);

#ifdef __cplusplus
}
#endif
#endif
