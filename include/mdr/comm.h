/* mdr — communicators for tensor-parallel decode: one rank per GPU, NCCL as
 * the distributed engine, the arena registered once as a symmetric window,
 * and an all-reduce of an arena buffer's first rows that sits inside every
 * cached graph.
 *
 * Shape (docs/TP.md says more):
 *
 *   engine's ncclComm_t (adopt) or mdr's own (create_local)
 *        -> mdr_comm per rank, on that rank's backend
 *        -> mdr_arena_create_on_comm (arena.h): slab from ncclMemAlloc, registered
 *           once as a symmetric window (NCCL_WIN_COLL_SYMMETRIC); the same
 *           layout on every rank, checked at create
 *        -> body callback: ... mdr_all_reduce(arena, &desc, stream) ...
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
 * backends[i] (host backends; n at most MDR_ALL_REDUCE_MAX_RANKS, else
 * MDR_ERR_UNSUPPORTED). An all-reduce runs the protocol of mdr's kernels
 * through the ranks' shared host memory (docs/TP.md); it is recorded by
 * host captures and replayed like any op. out[0..n-1] set on success, all
 * NULL on failure. MDR_ERR_INVALID_ARGUMENT for a NULL array or out, a
 * NULL backend (the text goes to a backend of the array), a backend that
 * is not a host backend, or n < 1 (no backend is read then, so no text is
 * recorded). Not collective: one call makes every rank. */
MDR_API mdr_status mdr_comm_create_host(mdr_backend *const *backends, int n, mdr_comm **out);

/* Rank, size and CUDA device (-1 on the host) of a communicator; -1 for a
 * NULL one. Thread-safe. */
MDR_API int mdr_comm_rank(const mdr_comm *c);
MDR_API int mdr_comm_size(const mdr_comm *c);
MDR_API int mdr_comm_device(const mdr_comm *c);
/* The backend a communicator was made on (borrowed); NULL for NULL. */
MDR_API mdr_backend *mdr_comm_backend(const mdr_comm *c);

/* Mark the communicator failed on every rank of this process: collectives
 * waiting on this or any rank and all later ones return MDR_ERR_STATE.
 * mdr's all-reduce kernels that are spinning (waiting for a peer) leave at
 * once, leaving unfinished rows as they were; the streams stay usable. The
 * ranks made together in this process see a host word; every other rank
 * (another process, or a communicator adopted on its own) sees the abort
 * word of its comm region, which this call raises through the arenas'
 * windows: its kernels give up ("a peer rank gave up") and its
 * communicator then refuses later calls with MDR_ERR_STATE. Blocking for
 * those few copies. For a communicator mdr created over NCCL this also
 * aborts the NCCL communicator (ncclCommAbort); an adopted one is the
 * engine's to abort. Thread-safe (any thread, while other threads wait in
 * collectives of this communicator). Accepts NULL. */
MDR_API void mdr_comm_abort(mdr_comm *c);

/* Release a communicator (and, for create_local, its NCCL communicator).
 * A rank that goes away aborts its group first: peers of this process
 * waiting for it (host ranks, mdr's kernels) return at once with
 * MDR_ERR_STATE. Peers beyond its group (other processes, communicators
 * adopted on their own) waiting in mdr's kernels are aborted as by
 * mdr_comm_abort when a window of the kernels is torn down (its arena's
 * destroy, or this call for an arena left alive). So destroy ranks and
 * their arenas only after every rank's last collective has completed.
 * Arenas made on it must be destroyed first. Accepts NULL. */
MDR_API void mdr_comm_destroy(mdr_comm *c);

/* ---- the all-reduce: device-read counts, the fused residual add, the
 * algorithm (docs/TP.md, "mdr's all-reduce kernels") ----
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
 *             clears them. Scratch: MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES per
 *             rank and buffer, two buffers alternating.
 *   two-shot  reduce-scatter then all-gather in place through the window:
 *             rank r sums its 1/n of the rows from every peer and writes
 *             the sum into every peer; two barriers.
 * Every wait is exact for the life of a server: barrier counters are
 * advanced only by barriers, the one-shot alternation only by one-shot
 * calls that move data, and a call with no rows (tokens == 0, or a count
 * word holding 0) touches nothing; 32-bit counters wrap without harm.
 * Ranks compare each call (rows, row bytes, dtype, algorithm, residual,
 * count source, fused norm) on the device; a difference fails the
 * communicator.
 *
 * Giving up. Every wait of mdr's kernels also watches abort words:
 * mdr_comm_abort, or destroying a rank (and its arenas), ends them at once,
 * on every rank (mdr_comm_abort and mdr_comm_destroy say how).
 * With MDR_AR_TIMEOUT_MS=<ms> in the environment when the communicator is
 * made (a positive integer; off by default), a wait that lasts longer
 * gives up by itself, and its peers with it. A kernel that gives up leaves
 * the rows it had not finished as they were and advances nothing (a norm
 * that runs after it in a kernel of its own then touches nothing); the
 * communicator then refuses every later call with MDR_ERR_STATE, and the
 * backend's last error says which wait gave up, on which rank and why. On
 * the host communicator the limit is MDR_AR_TIMEOUT_MS too, 30 s when
 * unset (MDR_HOST_COMM_TIMEOUT_MS, the older name, is still read).
 *
 * Summation order, every algorithm and the host communicator alike (so
 * results are deterministic, bit-identical between graph and eager, equal
 * on every rank): acc = (float)x_0; for r = 1 .. n-1: acc += (float)x_r;
 * the result is acc rounded once to the element type (round to nearest
 * even; fp32 sums in fp32). NCCL's own kernels (MDR_ALL_REDUCE_NCCL) give the same
 * bits for two ranks (one rounded addition, -0 + -0 = -0 included); for
 * more ranks NCCL's order is NCCL's. The fused residual add is residual = round((float)residual +
 * (float)sum), after the sum is rounded. */
typedef enum mdr_all_reduce_algo {
  MDR_ALL_REDUCE_AUTO,     /* the measured table (mdr_all_reduce_choice) */
  MDR_ALL_REDUCE_NCCL,     /* ncclAllReduce; its count is fixed at enqueue */
  MDR_ALL_REDUCE_ONE_SHOT, /* mdr's one-shot kernel (flags carried in the data) */
  MDR_ALL_REDUCE_TWO_SHOT, /* mdr's two-shot kernel (reduce-scatter, all-gather) */
  MDR_ALL_REDUCE_ALGO_COUNT
} mdr_all_reduce_algo;

/* The one-shot kernel's scratch per rank and buffer: larger messages are
 * refused by MDR_ALL_REDUCE_ONE_SHOT and never chosen by MDR_ALL_REDUCE_AUTO. */
#define MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES ((size_t)2 << 20)

/* "auto", "nccl", "one-shot", "two-shot"; "unknown" out of range. */
MDR_API const char *mdr_all_reduce_algo_name(mdr_all_reduce_algo a);

/* One all-reduce of an arena buffer's first rows. */
typedef struct mdr_all_reduce_desc {
  /* The rows to sum in place: the first `tokens` rows of an arena buffer
   * whose bytes are max_batch_tokens whole rows of dtype (a row is the
   * buffer's bytes / max_batch_tokens: hidden_states, residual,
   * moe_output, ...). */
  mdr_buffer buf;
  mdr_dtype dtype;
  size_t tokens;     /* rows; with count_ptr, the most rows a call may have */
  /* 0: `tokens` rows. Else the device address of a uint32 row count, read
   * by the kernel each time it runs: min(*count_ptr, tokens) rows (a
   * DYNAMIC graph body passes the count_ptr it is given, and
   * max_batch_tokens). mdr's kernels then reduce exactly those rows;
   * MDR_ALL_REDUCE_NCCL, whose count is fixed at enqueue, reduces all `tokens`
   * rows (the fused residual add still covers the counted rows only). */
  mdr_dptr count_ptr;
  /* MDR_BUF_COUNT: no residual. Else a buffer of the same dtype and row
   * bytes: after the sum, residual row i += summed row i for the reduced
   * rows (the usual next op of a decode layer, fused: no extra launch for
   * mdr's kernels; one small kernel after MDR_ALL_REDUCE_NCCL; with
   * norm_output, see The fused RMSNorm). */
  mdr_buffer residual;
  mdr_all_reduce_algo algo;
  /* The fused RMSNorm (below). MDR_BUF_COUNT: none (then norm_weight and
   * norm_eps must be 0). Else a buffer of the same dtype (bf16 or fp16)
   * and row bytes as buf, neither buf nor residual; a residual is
   * required: after the residual add, norm_output row i =
   * RMSNorm(residual row i) * norm_weight for exactly the reduced rows
   * (later rows are left as they were). In a decode arena this is
   * MDR_BUF_NORM_OUTPUT, the next block's pre-norm. */
  mdr_buffer norm_output;
  /* With norm_output: the device address (a host address on the host
   * communicator) of the norm's weight, one row of dtype (H elements,
   * H = row bytes / element bytes), 16-byte aligned, this rank's own copy;
   * read when the call runs. 0 without norm_output. */
  mdr_dptr norm_weight;
  /* With norm_output: epsilon of the norm, finite and >= 0 (added to the
   * mean of squares; 1e-5 or 1e-6 in most models). 0 without norm_output. */
  float norm_eps;
} mdr_all_reduce_desc;

/* The fused RMSNorm: residual add, then RMSNorm into norm_output, in the
 * same kernel as the all-reduce where that is faster (mdr's one-shot of at
 * most 512 KiB of rows, and every call with a count_ptr), else in one
 * kernel after the all-reduce on the same stream (mdr's two-shot and
 * larger one-shots: the plain all-reduce kernel, then the residual add
 * and the norm; MDR_ALL_REDUCE_NCCL: after ncclAllReduce);
 * mdr_all_reduce_norm_fused says which, and MDR_AR_NORM_FUSE=always or
 * never in the environment when the communicator is made overrides the
 * choice for calls without a count_ptr (docs/TP.md; every rank the same).
 * Either way a call leaves the same bits: buf holds the sum, residual
 * residual + sum, norm_output the norm, for exactly the reduced rows; and
 * a call whose all-reduce gives up (Giving up, above) leaves the residual
 * and norm_output rows it had not finished as they were (where the norm
 * runs in its own kernel: all of them). Rows must be
 * whole 16-byte vectors, at most MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES. The
 * arithmetic, every path alike (so graph, eager, host communicator and
 * every algorithm give the same bits): per reduced row of H elements,
 * with r_i = round((float)residual_i + (float)sum_i) stored into the
 * residual, x_i = (float)r_i, w_i = (float)norm_weight_i, each step one
 * IEEE binary32 operation rounded to nearest even (no fused multiply-add,
 * no flush to zero):
 *   p_j = x_8j*x_8j + x_{8j+1}*x_{8j+1} + ... + x_{8j+7}*x_{8j+7}, added
 *         left to right, for each 8-element vector j < V = H / 8;
 *   ss  = a pairwise tree over p_0 .. p_{V-1} padded with +0 to P, the
 *         least power of two >= V: s_j += s_{j+w} for j < w, w = P/2,
 *         P/4, .. 1; ss = s_0;
 *   inv = 1 / sqrt(ss / H + eps)   (a division, an addition, a correctly
 *         rounded square root, a division; not an approximate rsqrt);
 *   norm_output_i = round((x_i * inv) * w_i), once, to the row's type.
 * In a fused two-shot call (a count_ptr, or MDR_AR_NORM_FUSE=always) each
 * rank sums whole rows (1/n of them) instead of 1/n of the vectors, so
 * that a row's norm reads only rows written by one block of each rank. */
#define MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES ((size_t)65536)

/* A descriptor of `tokens` rows of buf: no count_ptr, no residual, no
 * fused norm (norm_output MDR_BUF_COUNT, norm_weight 0, norm_eps 0), AUTO. */
MDR_API mdr_all_reduce_desc mdr_all_reduce_desc_make(mdr_buffer buf, mdr_dtype dt, size_t tokens);

/* Enqueue the all-reduce `d` on `stream` (capture-safe: call it from a
 * graph cache's body; collective: every rank the same descriptor, with its
 * own count word holding the same count). EXACT, LADDER and DYNAMIC graphs
 * hold it. tokens == 0 (no count word) enqueues nothing. Returns, with
 * nothing enqueued: MDR_ERR_INVALID_ARGUMENT for a NULL arena or d, an
 * arena not on a communicator, a dtype other than bf16, fp16 or fp32, an
 * unknown algo, a buffer with no rows (NULL, or a size that is not
 * max_batch_tokens whole rows of dtype), a residual that is the buffer
 * itself or has other row bytes, or a count_ptr with tokens == 0; and for
 * the fused norm: norm_output with a dtype other than bf16 or fp16, with no
 * residual, equal to buf or residual, or of other row bytes; norm_weight 0
 * or not 16-byte aligned; norm_eps negative, infinite or NaN; norm_weight
 * or norm_eps set without norm_output. MDR_ERR_UNSUPPORTED for
 * norm_output rows that are not whole 16-byte vectors or are over
 * MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES (every algorithm);
 * MDR_ERR_OUT_OF_RANGE for tokens > max_batch_tokens; MDR_ERR_STATE on an
 * aborted or failed communicator (Giving up, above); MDR_ERR_UNSUPPORTED
 * for MDR_ALL_REDUCE_ONE_SHOT / TWO_SHOT where
 * mdr's kernels cannot run (a plain window, ranks outside one NVLink
 * domain, rows not a multiple of 16 bytes, a one-shot message over
 * MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES; mdr_all_reduce_kernels says which).
 * AUTO never fails for those reasons: it falls back to NCCL. On the host
 * communicator every algorithm runs the host sum (MDR_ALL_REDUCE_NCCL reducing all
 * `tokens` rows, as on a GPU). A failed enqueue aborts the communicator
 * (see Faults). Not thread-safe on one rank: one thread per rank. */
MDR_API mdr_status mdr_all_reduce(mdr_arena *a, const mdr_all_reduce_desc *d, mdr_stream stream);

/* What mdr_all_reduce(a, d, ...) would run, without running it or
 * recording anything: MDR_ALL_REDUCE_NCCL, ONE_SHOT or TWO_SHOT; or
 * MDR_ALL_REDUCE_AUTO for a count read on the device where mdr's kernels
 * run (the kernel then picks one- or two-shot from the real bytes);
 * MDR_ALL_REDUCE_ALGO_COUNT when the call would be refused (NULL
 * arguments, an arena not on a communicator, or any check of
 * mdr_all_reduce). The table behind AUTO: docs/TP.md. Thread-safe. */
MDR_API mdr_all_reduce_algo mdr_all_reduce_choice(const mdr_arena *a, const mdr_all_reduce_desc *d);

/* Where mdr_all_reduce(a, d, ...) would run d's RMSNorm (The fused
 * RMSNorm, above), without running it or recording anything: 1 in the
 * all-reduce's own kernel (mdr's one-shot of at most 512 KiB of rows, a
 * call with a count_ptr, or MDR_AR_NORM_FUSE=always); 0 in a kernel of
 * its own after the all-reduce (mdr's two-shot or a larger one-shot,
 * MDR_AR_NORM_FUSE=never, or MDR_ALL_REDUCE_NCCL); -1 for a descriptor
 * without norm_output, or a call mdr_all_reduce would refuse (as
 * mdr_all_reduce_choice). The host communicator answers as a GPU's would
 * (its twin runs the same choice). Thread-safe. */
MDR_API int mdr_all_reduce_norm_fused(const mdr_arena *a, const mdr_all_reduce_desc *d);

/* 1 when mdr's own all-reduce kernels can run on this arena, else 0 (and
 * why, in the backend's last error of the arena's create: no symmetric
 * window, ranks outside one NVLink domain, an NCCL library other than the
 * headers mdr was built with). The host communicator: 1 (its twin). */
MDR_API int mdr_all_reduce_kernels(const mdr_arena *a);

/* The most ranks mdr's kernels take; larger communicators use NCCL. */
#define MDR_ALL_REDUCE_MAX_RANKS 8

#ifdef __cplusplus
}
#endif
#endif
