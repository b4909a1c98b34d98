/* mdr — the arena: every activation buffer of a decode step in one device
 * allocation, at stable addresses, and the seed's zeroing helpers.
 *
 * Lifetime: the arena borrows its backend (which must outlive it) and owns
 * one slab allocated at create; nothing is allocated afterwards and no
 * pointer ever moves. Thread safety (docs/THREADS.md, installed as
 * <prefix>/share/doc/mdr/docs/THREADS.md): the accessors and
 * mdr_arena_zero_plan only read the arena and may be called from several
 * threads at once, as long as no setter (mdr_arena_set_zero_strategy,
 * mdr_arena_set_rows_policy) runs at the same time; the setters and the
 * zeroing helpers must not run concurrently with each other on the same
 * arena (each helper enqueues on the caller's stream). */
#ifndef MDR_ARENA_H
#define MDR_ARENA_H

#include <stddef.h>

#include "mdr/backend.h"
#include "mdr/sizes.h"
#include "mdr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mdr_arena mdr_arena;

/* Buffers are 256-byte aligned inside the slab. */
#define MDR_ARENA_ALIGN 256

/* Allocate the slab for `s` on backend `b` and carve it into the buffers;
 * entries of size 0 stay NULL (address 0). norm_unit_w is cleared to zero
 * here (blocking). Returns MDR_ERR_INVALID_ARGUMENT for NULL arguments or
 * s->max_batch_tokens == 0, MDR_ERR_OUT_OF_RANGE when s->logits_rows is 0 or
 * does not divide the logits size, MDR_ERR_OVERFLOW when the aligned total
 * overflows, MDR_ERR_OUT_OF_MEMORY / MDR_ERR_BACKEND from the backend. On
 * failure *out is NULL and nothing is left allocated. Caller owns *out;
 * release with mdr_arena_destroy. Not capture-safe. */
MDR_API mdr_status mdr_arena_create(mdr_backend *b, const mdr_sizes *s, mdr_arena **out);

/* Free the slab. Accepts NULL. Work still enqueued on the arena's buffers
 * must have finished (synchronize first). */
MDR_API void mdr_arena_destroy(mdr_arena *a);

/* Device address of a buffer; 0 for NULL entries, a NULL arena or an
 * out-of-range buffer. */
MDR_API mdr_dptr mdr_arena_ptr(const mdr_arena *a, mdr_buffer buf);
/* Allocated size of a buffer in bytes; 0 for NULL entries / bad arguments. */
MDR_API size_t mdr_arena_bytes(const mdr_arena *a, mdr_buffer buf);
/* M, the rows of the token-major buffers; 0 for a NULL arena. */
MDR_API size_t mdr_arena_max_batch_tokens(const mdr_arena *a);
/* The backend the arena was made on (borrowed); NULL for a NULL arena. */
MDR_API mdr_backend *mdr_arena_backend(const mdr_arena *a);
/* The sizes the arena was made from (borrowed); NULL for a NULL arena. */
MDR_API const mdr_sizes *mdr_arena_sizes(const mdr_arena *a);
/* Bytes of the single slab allocation (sum of the aligned buffers). */
MDR_API size_t mdr_arena_slab_bytes(const mdr_arena *a);

/* Named accessors for every buffer: mdr_arena_<name>(a) and
 * mdr_arena_<name>_bytes(a), e.g. mdr_arena_hidden_states(a). */
#define MDR_ARENA_ACCESSOR_(e, name)                                                 \
  static inline mdr_dptr mdr_arena_##name(const mdr_arena *a) { return mdr_arena_ptr(a, e); } \
  static inline size_t mdr_arena_##name##_bytes(const mdr_arena *a) { return mdr_arena_bytes(a, e); }
MDR_BUFFER_LIST(MDR_ARENA_ACCESSOR_)
#undef MDR_ARENA_ACCESSOR_

/* The two zeroing policies, and who owns them.
 *
 *   zero strategy  how the bytes are cleared (memsets or one fused launch);
 *   row policy     which bytes zero_all_rows(tokens) clears.
 *
 * The arena's pair (set with the two setters below) governs the arena's own
 * eager helpers and takes effect at the next helper call. A graph cache owns
 * a pair of its own, mdr_graph_cache_options.zero and .rows, fixed at
 * mdr_graph_cache_create for the cache's life; their default,
 * MDR_ZERO_FROM_ARENA / MDR_ROWS_FROM_ARENA, copies the arena's pair at that
 * moment. Later calls to the arena's setters do not reach an existing cache.
 * The *_FROM_ARENA values are valid in cache options only. */
typedef enum mdr_zero_strategy {
  MDR_ZERO_FROM_ARENA = -1, /* cache options: the arena's strategy at create */
  MDR_ZERO_MEMSET = 0,      /* one memset per segment */
  MDR_ZERO_FUSED,           /* every segment in one kernel launch */
  MDR_ZERO_STRATEGY_COUNT
} mdr_zero_strategy;

typedef enum mdr_rows_policy {
  MDR_ROWS_FROM_ARENA = -1, /* cache options: the arena's policy at create */
  MDR_ROWS_SEED = 0,        /* the seed's zero_all_rows: splitk_workspace, logits, scratch whole */
  MDR_ROWS_ALL,             /* also logits limited to its first min(tokens, logits_rows) rows */
  MDR_ROWS_POLICY_COUNT
} mdr_rows_policy;

/* Choose how the arena's zeroing helpers clear memory (default
 * MDR_ZERO_MEMSET). MDR_ZERO_FUSED on a backend without the fused kernel:
 * MDR_ERR_UNSUPPORTED and the strategy is unchanged. Unknown value,
 * MDR_ZERO_FROM_ARENA or NULL arena: MDR_ERR_INVALID_ARGUMENT. */
MDR_API mdr_status mdr_arena_set_zero_strategy(mdr_arena *a, mdr_zero_strategy z);
/* Choose the row policy of the arena's zero_all_rows (default
 * MDR_ROWS_SEED). Unknown value, MDR_ROWS_FROM_ARENA or NULL arena:
 * MDR_ERR_INVALID_ARGUMENT. */
MDR_API mdr_status mdr_arena_set_rows_policy(mdr_arena *a, mdr_rows_policy p);
/* Poison mode of the arena's helpers (default off; MDR_POISON=1 at create
 * turns it on): zero_all_rows(tokens) also fills what it leaves of each
 * row-trimmed buffer, past its cleared head, with 0xFF bytes (a NaN in
 * bf16, fp16 and fp32), so a kernel reading rows it never wrote shows up.
 * A debugging aid: one more memset per such buffer. NULL arena:
 * MDR_ERR_INVALID_ARGUMENT. */
MDR_API mdr_status mdr_arena_set_poison(mdr_arena *a, int on);
/* The arena's poison mode: 1 on, 0 off. NULL arena: 0. */
MDR_API int mdr_arena_poison(const mdr_arena *a);
/* The zero strategy its helpers use (never MDR_ZERO_FROM_ARENA). NULL
 * arena: MDR_ZERO_MEMSET, the default. */
MDR_API mdr_zero_strategy mdr_arena_zero_strategy(const mdr_arena *a);
/* The row policy of its zero_all_rows (never MDR_ROWS_FROM_ARENA). NULL
 * arena: MDR_ROWS_SEED, the default. */
MDR_API mdr_rows_policy mdr_arena_rows_policy(const mdr_arena *a);

/* The zeroing helpers. Enqueue only, on `stream`; asynchronous and
 * capture-safe (no allocation, no synchronisation). With MDR_ZERO_MEMSET the
 * first failed enqueue is returned and later buffers are not zeroed; with
 * MDR_ZERO_FUSED the plan is one launch. NULL entries are skipped. Coverage
 * and the row rule are the seed's (sizes.h; <prefix>/share/doc/mdr/docs/SIZES.md §9):
 *   zero_all                 18 buffers, whole;
 *   zero_all_rows(tokens)    splitk_workspace, logits, scratch whole, the
 *                            other 15 for zero_head_bytes(n, M, tokens) bytes
 *                            at every count, 0 included: tokens >= M zeroes
 *                            them whole; at tokens == 0 a row-shaped buffer
 *                            (a multiple of M or of ceil16(M) bytes) clears
 *                            nothing and any other (say a 256-byte floor with
 *                            M odd) clears whole, as the seed's helper does;
 *                            under MDR_ROWS_ALL, logits only its first
 *                            min(tokens, logits_rows) rows;
 *   zero_prefill_essentials  7 buffers, whole.
 * NULL arena: MDR_ERR_INVALID_ARGUMENT. */
MDR_API mdr_status mdr_arena_zero_all(mdr_arena *a, mdr_stream stream);
MDR_API mdr_status mdr_arena_zero_all_rows(mdr_arena *a, mdr_stream stream, size_t tokens);
MDR_API mdr_status mdr_arena_zero_prefill_essentials(mdr_arena *a, mdr_stream stream);

typedef struct mdr_segment {
  mdr_dptr ptr;
  size_t bytes;
} mdr_segment;

/* The plan zero_all_rows(tokens) executes under the current policy, in
 * order, without empty segments: writes at most `cap` segments to out (out
 * may be NULL when cap is 0) and sets *n to the full count. NULL arena or n:
 * MDR_ERR_INVALID_ARGUMENT. Reads the arena only; thread-safe. */
MDR_API mdr_status mdr_arena_zero_plan(const mdr_arena *a, size_t tokens, mdr_segment *out, size_t cap,
                                       size_t *n);

/* The largest number of segments any zero plan of an arena can have. */
#define MDR_ZERO_PLAN_MAX 18

/* ---- the arena of one rank of a communicator (include/mdr/comm.h) ---- */

/* A communicator (comm.h); declared here so that these functions live
 * with the arena. */
typedef struct mdr_comm mdr_comm;

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
 * failure *out is NULL and nothing leaks. Caller owns *out; release with
 * mdr_arena_destroy (before the communicator). Not capture-safe. */
MDR_API mdr_status mdr_arena_create_on_comm(mdr_comm *c, const mdr_sizes *s, mdr_arena **out);
/* The same for n ranks driven from one thread: comms[i] gets out[i]. */
MDR_API mdr_status mdr_arena_create_on_comms(mdr_comm *const *comms, int n, const mdr_sizes *s,
                                             mdr_arena **out);
/* The arena's window kind, and its communicator (borrowed; NULL when none).
 * NULL arena: MDR_WINDOW_NONE and NULL. */
MDR_API mdr_window mdr_arena_window(const mdr_arena *a);
MDR_API mdr_comm *mdr_arena_comm(const mdr_arena *a);
/* "none", "symmetric", "plain" or "host"; "unknown" out of range. */
MDR_API const char *mdr_window_name(mdr_window w);

#ifdef __cplusplus
}
#endif
#endif
