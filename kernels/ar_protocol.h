/* ar_protocol.h — the all-reduce protocol, in one place: the comm region's
 * layout, the counters and what every wait compares, the one-shot sentinel,
 * the lockstep signature and the give-up report. Read by both compilers:
 * kernels/all_reduce.cu runs it on the GPU, src/comm_host.c (the host twin)
 * runs the same functions on ranks that are threads, so CI exercises the
 * very comparisons the kernels make.
 *
 * Region of one rank (a tail of its arena's slab, inside the window, the
 * same offset on every rank):
 *
 *   +MDR_ARP_CTL_OFF         control words: [MDR_ARP_CTL_ABORT] set (to 1)
 *                            by any rank's kernel that gives up, in its own
 *                            region and in every peer's, so every spinning
 *                            block leaves; [MDR_ARP_CTL_CLAIM] elects the
 *                            one thread of this rank that writes the report
 *                            (so it is set once this rank's kernels gave
 *                            up, whatever the cause: the unfused norm's
 *                            second kernel reads it and then touches
 *                            nothing)
 *   +MDR_ARP_STATE_OFF       per block b (MDR_ARP_MAX_BLOCKS): its counters
 *                            (mdr_arp_block), read at the block's start and
 *                            written at its end by block b only (block 0
 *                            also advances the call-wide counters of blocks
 *                            the call did not launch)
 *   +MDR_ARP_FLAGS_OFF       barrier flags [block][rank] of {value,
 *                            signature}: slot [b][r] is written only by
 *                            rank r's block b, at its barriers (on the
 *                            GPU one 8-byte release store, the value in
 *                            the low word, read by one acquire load)
 *   +MDR_ARP_SCRATCH_OFF(n)  one-shot scratch: 2 parities x n slots; slot
 *                            [k][r] is written only by rank r: a header
 *                            vector per block, then the rows
 *
 * The invariant (why every wait is exact for any number of calls, in any
 * mix of one-shot, two-shot and empty calls):
 *   - every counter is advanced only by the path that reads it: `barriers`
 *     by block b's barriers, `one_shot` by one-shot calls that move data;
 *     an empty call (no rows) advances nothing and touches nothing; so on
 *     every rank in lockstep each counter holds the same value at the same
 *     call, whatever calls came between;
 *   - barrier: block b of every rank publishes barriers + k and waits until
 *     every peer's flag has reached it; a peer's flag is then the previous
 *     barrier's value, this one's, or the next one's (a peer cannot pass a
 *     barrier this rank has not reached), so the signed distance of 32-bit
 *     values is exact across the wrap at 2^32;
 *   - one-shot: slot parity k = one_shot & 1 is reused by a peer only two
 *     data-moving one-shot calls later; in between, that peer received at
 *     least one vector (a block header) of this rank's next one-shot call,
 *     which this rank's kernel sent only after its previous kernel (its
 *     reads and clears of parity k) had completed; so a slot is always
 *     clear when written, however the calls in between were shaped. The
 *     ordering rests on kernel boundaries: a kernel starts its exchange
 *     only after the one before it on the stream has completed with its
 *     memory visible (stream order, or griddepcontrol.wait under
 *     programmatic dependent launch), so no fence is needed in the call.
 *
 * Algorithms that differ. A rank in a one-shot call whose peer runs a
 * two-shot waits for a header that never comes, and the peer for a flag
 * that never comes. So each wait also looks, when it polls (below), for
 * the other algorithm's trace: the one-shot header wait checks that the
 * peer's barrier flag still holds this rank's barrier count (a peer in a
 * two-shot has raised it, and its release store orders any earlier header
 * before it: read the flag with acquire first, then the header); the
 * two-shot's first barrier checks that the peer's slots of this block's
 * header, in both parities, are clear (a one-shot peer has filled one;
 * every header of an earlier call was cleared by this rank). Either is a
 * mismatch, never a false one. A peer that runs NCCL's all-reduce where
 * this rank runs mdr's leaves no trace: only the abort or the time limit
 * ends that wait.
 *
 * Give-up. Every spin loop also polls, every MDR_ARP_POLL_EVERY turns, the
 * region's abort word, the host's abort request (pinned host memory the
 * host sets through mdr_comm_abort) and, when a time limit is set, the
 * elapsed time. A kernel that gives up writes its report (the host words
 * below), raises its own abort word, and leaves without storing a row it
 * had not finished or advancing a counter. A cause it found itself (the
 * time limit, a mismatch) it also raises in every peer's region; an abort
 * the host asked for reaches the ranks that share the host word (ranks
 * this process made together), and a rank that went away may have no
 * region left to write to. The host raises the other peers' region words
 * itself (mdr_cuda_ar_raise_abort) when it aborts a rank or tears down a
 * window of mdr's kernels (src/comm_nccl_window.c): their kernels leave
 * with MDR_ARP_PEER. A wait that sees the region's word polls its value
 * once more before it leaves (read after the word with acquire): a rank
 * that raises it from the host may have completed this very call first,
 * and then the wait completes instead of giving up. */
#ifndef MDR_KERNELS_AR_PROTOCOL_H
#define MDR_KERNELS_AR_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define MDR_ARP_FN static __host__ __device__ __forceinline__
#else
#define MDR_ARP_FN static inline
#endif

enum {
  MDR_ARP_MAX_RANKS = 8,
  MDR_ARP_MAX_BLOCKS = 128, /* co-resident on every GPU mdr targets (one per SM) */
  MDR_ARP_VEC = 16,         /* bytes per vector access: rows must be whole vectors */
  MDR_ARP_POLL_EVERY = 64,  /* spin turns between polls of the abort words and the clock */
  MDR_ARP_CTL_ABORT = 0,    /* control word: a rank gave up */
  MDR_ARP_CTL_CLAIM = 1,    /* control word: this rank's report is written (a kernel of this rank gave up) */
  MDR_ARP_CTL_OFF = 0,
  MDR_ARP_STATE_OFF = 256,
  MDR_ARP_FLAGS_OFF = MDR_ARP_STATE_OFF + MDR_ARP_MAX_BLOCKS * 16,
  MDR_ARP_HEADER_BYTES = MDR_ARP_MAX_BLOCKS * MDR_ARP_VEC /* the header vectors at a slot's start */
};

/* Element types (the values of mdr_dtype) and the algorithms a call runs
 * (the values of mdr_all_reduce_algo); src/all_reduce.c checks they agree. */
enum { MDR_ARP_BF16 = 0, MDR_ARP_FP16 = 1, MDR_ARP_FP32 = 2 };
enum { MDR_ARP_AUTO = 0, MDR_ARP_ONE_SHOT = 2, MDR_ARP_TWO_SHOT = 3 };

/* The one-shot scratch of a rank's slot on the GPU (the public
 * MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES); the host twin may size its slots
 * for the arena's largest message instead. */
#define MDR_ARP_ONE_SHOT_MAX_BYTES ((size_t)2 << 20)

/* Bytes of the flags, offset of the scratch, bytes of one slot and of the
 * region, for n ranks and a one-shot capacity of `cap` bytes per slot. */
#define MDR_ARP_FLAGS_BYTES(n) ((size_t)MDR_ARP_MAX_BLOCKS * (size_t)(n) * 8u)
#define MDR_ARP_SCRATCH_OFF(n) ((((size_t)MDR_ARP_FLAGS_OFF + MDR_ARP_FLAGS_BYTES(n)) + 255u) & ~(size_t)255u)
#define MDR_ARP_SLOT_BYTES(cap) ((size_t)MDR_ARP_HEADER_BYTES + (size_t)(cap))
#define MDR_ARP_REGION_BYTES(n, cap) (MDR_ARP_SCRATCH_OFF(n) + 2u * (size_t)(n) * MDR_ARP_SLOT_BYTES(cap))

/* A block's counters, in the region at MDR_ARP_STATE_OFF + 16 * b. */
typedef struct mdr_arp_block {
  uint32_t calls;    /* calls that moved data (statistics; no wait reads it) */
  uint32_t one_shot; /* one-shot calls that moved data: the scratch parity */
  uint32_t barriers; /* barriers this block passed */
  uint32_t spare;
} mdr_arp_block;

/* The value barrier k (1 or 2) of this call publishes and waits for. */
MDR_ARP_FN uint32_t mdr_arp_barrier_value(const mdr_arp_block *st, uint32_t k) { return st->barriers + k; }

/* 1 while a peer's flag has not reached `value`. Exact because a peer's
 * flag is within one barrier of this rank's (the invariant above). */
MDR_ARP_FN int mdr_arp_waiting(uint32_t flag, uint32_t value) { return (int32_t)(flag - value) < 0; }

/* The scratch parity of a one-shot call. */
MDR_ARP_FN uint32_t mdr_arp_parity(const mdr_arp_block *st) { return st->one_shot & 1u; }

/* The counters after a call of `nvec` vectors (0: an empty call, which
 * advances nothing) that ran one-shot (one != 0) or two-shot. */
MDR_ARP_FN void mdr_arp_advance(mdr_arp_block *st, size_t nvec, int one) {
  if (nvec == 0) return;
  st->calls += 1u;
  if (one) {
    st->one_shot += 1u;
  } else {
    st->barriers += 2u;
  }
}

/* 1 when a call of `bytes` runs one-shot: an explicit algorithm, or AUTO
 * with a count read on the device, decided by the real bytes. */
MDR_ARP_FN int mdr_arp_runs_one_shot(int algo, size_t bytes, size_t one_shot_max) {
  return algo == MDR_ARP_ONE_SHOT || (algo == MDR_ARP_AUTO && bytes <= one_shot_max);
}

/* ---- the one-shot sentinel: all-ones elements mean "not arrived" ---- */

/* 1 while any element of the 32-bit word still holds the sentinel. */
MDR_ARP_FN int mdr_arp_pending(uint32_t w, int dt) {
  if (dt == MDR_ARP_FP32) return w == 0xffffffffu;
  return (w & 0xffffu) == 0xffffu || (w >> 16) == 0xffffu;
}

/* The word as sent: an all-ones element (a NaN) becomes another NaN. */
MDR_ARP_FN uint32_t mdr_arp_canonical(uint32_t w, int dt) {
  if (dt == MDR_ARP_FP32) return w == 0xffffffffu ? 0x7fffffffu : w;
  if ((w & 0xffffu) == 0xffffu) w = (w & 0xffff0000u) | 0x7fffu;
  if ((w >> 16) == 0xffffu) w = (w & 0xffffu) | 0x7fff0000u;
  return w;
}

/* ---- lockstep: what every rank's call must agree on ---- */

/* A 31-bit signature of a call as it runs (never all-ones: it travels in a
 * one-shot header word): the vectors it moves, the row bytes, the dtype,
 * the algorithm it runs, the residual, the count source and the fused
 * RMSNorm (which changes the two-shot's partition and the grid). Ranks compare
 * it at the first barrier (two-shot) or through the block headers
 * (one-shot); a difference is a give-up with MDR_ARP_MISMATCH.
 *
 * In two steps: the fields known at launch are mixed in first
 * (mdr_arp_signature_fixed), the two a count word decides (the algorithm,
 * the vectors) last (mdr_arp_signature_of). The kernels compute the first
 * step while the count is loaded, so two rounds, not seven dependent 64-bit
 * multiplies, stand between the count and a call's first stores
 * (dev/ar_skeleton.md). */
MDR_ARP_FN uint64_t mdr_arp_signature_mix(uint64_t h, uint64_t v) {
  h ^= v;
  h *= 0x100000001b3ull;
  h ^= h >> 29;
  return h;
}

MDR_ARP_FN uint64_t mdr_arp_signature_fixed(size_t row_bytes, int dt, int residual, int counted, int norm) {
  uint64_t h = 0xcbf29ce484222325ull;
  h = mdr_arp_signature_mix(h, (uint64_t)row_bytes);
  h = mdr_arp_signature_mix(h, (uint64_t)dt);
  h = mdr_arp_signature_mix(h, (uint64_t)residual);
  h = mdr_arp_signature_mix(h, (uint64_t)counted);
  return mdr_arp_signature_mix(h, (uint64_t)norm);
}

MDR_ARP_FN uint32_t mdr_arp_signature_of(uint64_t fixed, size_t nvec, int one) {
  const uint64_t h = mdr_arp_signature_mix(mdr_arp_signature_mix(fixed, (uint64_t)one), (uint64_t)nvec);
  return (uint32_t)(h ^ (h >> 32)) & 0x7fffffffu;
}

MDR_ARP_FN uint32_t mdr_arp_signature(size_t nvec, size_t row_bytes, int dt, int one, int residual, int counted,
                                      int norm) {
  return mdr_arp_signature_of(mdr_arp_signature_fixed(row_bytes, dt, residual, counted, norm), nvec, one);
}

/* The header vector block b sends to every peer before its rows. */
MDR_ARP_FN void mdr_arp_header(uint32_t out[4], uint32_t sig, size_t nvec, const mdr_arp_block *st, unsigned grid) {
  out[0] = sig;
  out[1] = (uint32_t)nvec & 0x7fffffffu;
  out[2] = st->one_shot & 0x7fffffffu;
  out[3] = grid & 0x7fffffffu;
}

/* ---- one call, as every layer sees it ---- */

#define MDR_ARP_NO_RESIDUAL (~(size_t)0)
enum { MDR_ARP_NCCL = 1 }; /* the algorithm code of NCCL's own all-reduce */

/* One all-reduce. src/all_reduce.c fills the call's part from the checked
 * arguments; the transport (src/comm_nccl.c, src/comm_host.c) fills its
 * part and runs it; kernels/all_reduce.cu takes it as its parameter. All
 * offsets are window offsets, the same on every rank. */
typedef struct mdr_ar_call {
  /* the call */
  size_t buf_off;            /* the rows */
  size_t res_off;            /* the residual rows; MDR_ARP_NO_RESIDUAL: none */
  size_t row_bytes;          /* a multiple of MDR_ARP_VEC for mdr's kernels */
  size_t rows;               /* rows, or the bound when count_ptr is set */
  const uint32_t *count_ptr; /* NULL: rows; else min(*count_ptr, rows) rows, read when the call runs */
  size_t one_shot_max;       /* AUTO with a count: one-shot up to these bytes, two-shot above */
  int dtype;                 /* MDR_ARP_BF16, FP16, FP32 */
  int algo;                  /* MDR_ARP_ONE_SHOT, TWO_SHOT, AUTO (counted: by the bytes) or NCCL */
  const void *norm_weight;   /* NULL: no fused RMSNorm. Else its weight (row_bytes of dtype, this rank's
                                address, 16-byte aligned); res_off is then set */
  size_t norm_off;           /* the fused RMSNorm's output rows (with norm_weight) */
  float norm_eps;            /* its epsilon (with norm_weight) */
  int norm_fuse;             /* with norm_weight: MDR_ARP_NORM_FUSE_AUTO (0), ALWAYS or NEVER (MDR_AR_NORM_FUSE;
                                mdr_arp_norm_fused decides) */
  /* the transport's */
  char *peer[MDR_ARP_MAX_RANKS]; /* each rank's slab (window base) as this rank reaches it */
  char *self;                    /* this rank's slab at its own address */
  size_t region_off;             /* the comm region */
  size_t slot_cap;               /* one-shot bytes per slot (the region's layout) */
  int rank, nranks;
  int max_blocks;                /* grid cap, the same on every rank (SMs of the smallest GPU) */
  int pdl;                       /* programmatic dependent launch */
  uint64_t timeout_ns;           /* 0: no time limit */
  volatile uint32_t *host_abort;  /* the host's abort request word; NULL: none */
  volatile uint32_t *host_report; /* this rank's report words; NULL: none */
} mdr_ar_call;

/* The rows a call reduces when it runs. */
MDR_ARP_FN size_t mdr_arp_rows_now(const mdr_ar_call *k) {
  if (!k->count_ptr) return k->rows;
  const size_t counted = *(volatile const uint32_t *)k->count_ptr;
  return counted < k->rows ? counted : k->rows;
}

/* ---- the fused RMSNorm (include/mdr/comm.h, "The fused RMSNorm") ----
 *
 * After the residual add, per reduced row of H = row_bytes / esize elements
 * (bf16 or fp16; H a multiple of 8: V = H / 8 vectors of 16 bytes), with
 * x_i = (float)r_i the updated residual, w_i = (float)weight_i, and every
 * operation one IEEE-754 binary32 operation rounded to nearest even (no
 * fused multiply-add, no flush to zero):
 *   leaf j (0 <= j < V):  p_j = x_8j*x_8j; p_j = p_j + x_{8j+k}*x_{8j+k} for k = 1 .. 7
 *   tree:  P = the least power of two >= V; s_j = p_j (j < V), +0 (V <= j < P);
 *          for w = P/2, P/4, .. 1: s_j = s_j + s_{j+w} for every j < w; ss = s_0
 *   inv = 1 / sqrt(ss / (float)H + eps)      (division, sqrt, division, each rounded)
 *   out_i = round((x_i * inv) * w_i)         (to the row's type, nearest even)
 * The kernels (one block a row: thread leaves, a shared-memory tree whose
 * last levels are warp shuffles of the same pairs) and the host twin
 * compute exactly these operations in this order, so every path gives the
 * same bits. */

/* Rows of the fused RMSNorm hold at most this many 16-byte vectors (the
 * public MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES / 16: the kernels' tree lives in
 * shared memory). */
enum { MDR_ARP_NORM_MAX_VECS = 4096 };

/* ---- fused or chained: where the fused kernel wins ----
 *
 * A call with norm_weight runs either the fused kernel (one launch: the
 * all-reduce, the residual add and the norm) or the chain: the plain
 * all-reduce kernel (no residual, no norm: the rows hold the sum), then,
 * on the same stream, the residual add and the norm in a kernel of their
 * own, of the arithmetic above (kernels/all_reduce.cu, residual_norm_kernel;
 * it touches nothing when this rank's kernels gave up: MDR_ARP_CTL_CLAIM).
 * The observable result is the same bits either way: the rows hold the sum,
 * the residual residual + sum, norm_output the norm, exactly the reduced
 * rows. The fused kernel wins only in one-shot calls of up to
 * MDR_ARP_NORM_FUSE_MAX_BYTES of rows: on one H200 with two ranks
 * (bench/results/h200-2026-12-02-session9/all_reduce_norm_compare.csv,
 * dev/all_reduce_norm_compare) the fused one-shot takes 0.73-0.89x of the
 * chain's time at 1-32 tokens of hidden 4096-8192 (8-512 KiB of bf16 rows)
 * and 0.98x at 64 tokens of hidden 4096 (512 KiB), but 1.04-1.12x at 64
 * tokens of hidden 6144-8192 (768 KiB, 1 MiB) and 1.26-1.46x at 128
 * tokens; the fused two-shot 0.90-1.10x, no clear win, so two-shot calls
 * chain. A call with a count word keeps the fused kernel: its launch is
 * shaped (a block a row) before the count is known. MDR_AR_NORM_FUSE
 * (always, never) overrides the choice for calls without a count word, to
 * measure both sides; every rank must run the same (the signature carries
 * the difference: a mismatch). */
#define MDR_ARP_NORM_FUSE_MAX_BYTES ((size_t)512 << 10)
enum { MDR_ARP_NORM_FUSE_AUTO = 0, MDR_ARP_NORM_FUSE_ALWAYS = 1, MDR_ARP_NORM_FUSE_NEVER = 2 };

/* 1: the fused kernel; 0: the chain. `mode` an MDR_ARP_NORM_FUSE_ value
 * (another value counts as AUTO), `algo` as mdr_ar_call.algo (ONE_SHOT,
 * TWO_SHOT, or AUTO with a count), `counted` whether a count word bounds
 * the call (rows is then the bound). */
MDR_ARP_FN int mdr_arp_norm_fuses(int mode, int algo, size_t rows, size_t row_bytes, int counted,
                                  size_t one_shot_max) {
  if (counted || mode == MDR_ARP_NORM_FUSE_ALWAYS) return 1;
  if (mode == MDR_ARP_NORM_FUSE_NEVER) return 0;
  const size_t bytes = rows * row_bytes;
  return mdr_arp_runs_one_shot(algo, bytes, one_shot_max) && bytes <= MDR_ARP_NORM_FUSE_MAX_BYTES;
}

/* The same for a call (with norm_weight): what mdr_cuda_ar_launch, the host
 * twin and mdr_all_reduce_norm_fused run. */
MDR_ARP_FN int mdr_arp_norm_fused(const mdr_ar_call *k) {
  return mdr_arp_norm_fuses(k->norm_fuse, k->algo, k->rows, k->row_bytes, k->count_ptr != NULL, k->one_shot_max);
}

/* The first half of the unfused chain of a call whose norm is not fused:
 * the same rows and count, no residual, no norm (the launcher and the host
 * twin run it, then the residual add and the norm). */
MDR_ARP_FN mdr_ar_call mdr_arp_plain_of(const mdr_ar_call *k) {
  mdr_ar_call plain = *k;
  plain.res_off = MDR_ARP_NO_RESIDUAL;
  plain.norm_weight = NULL;
  plain.norm_off = 0;
  plain.norm_eps = 0.0f;
  return plain;
}

/* MDR_AR_NORM_FUSE's value: auto, always or never (any case); -1 for any
 * other text (NULL or "": AUTO, unset). */
static inline int mdr_arp_norm_fuse_parse(const char *v) {
  static const char *const k_names[3] = {"auto", "always", "never"};
  if (!v || !*v) return MDR_ARP_NORM_FUSE_AUTO;
  for (int i = 0; i < 3; i++) {
    const char *a = v, *b = k_names[i];
    while (*a && *b && (*a | 0x20) == *b) a++, b++;
    if (!*a && !*b) return i;
  }
  return -1;
}

/* P: the tree's leaves for a row of `nvec` vectors. */
MDR_ARP_FN size_t mdr_arp_norm_leaves(size_t nvec) {
  size_t p = 1;
  while (p < nvec) p <<= 1;
  return p;
}

/* The rows rank `rank` of `nranks` owns in a fused two-shot: [*lo, *hi)
 * of `rows` (the plain two-shot splits vectors; the fused one splits
 * whole rows, so that each row's norm reads rows one block wrote). */
MDR_ARP_FN void mdr_arp_norm_rows_of(size_t rows, int rank, int nranks, size_t *lo, size_t *hi) {
  *lo = rows * (size_t)rank / (size_t)nranks;
  *hi = rows * (size_t)(rank + 1) / (size_t)nranks;
}

/* ---- the give-up report ---- */

/* Why a kernel gave up (report word MDR_ARP_REP_CAUSE; 0: it did not). */
enum {
  MDR_ARP_ABORTED = 1,  /* the host asked (mdr_comm_abort, a destroyed rank) */
  MDR_ARP_TIMED_OUT = 2, /* a wait outlasted the time limit */
  MDR_ARP_PEER = 3,     /* a peer gave up (the region's abort word) */
  MDR_ARP_MISMATCH = 4  /* a peer's call differs from this rank's (lockstep) */
};
/* Which wait (report word MDR_ARP_REP_WAIT). */
enum { MDR_ARP_WAIT_BARRIER1 = 1, MDR_ARP_WAIT_BARRIER2 = 2, MDR_ARP_WAIT_HEADER = 3, MDR_ARP_WAIT_ROWS = 4 };

/* The host words of a communicator (pinned, mapped; or plain memory for
 * the host twin): word MDR_ARP_HOST_ABORT is the host's request, then
 * MDR_ARP_HOST_REPORT words per rank the host follows. A report's cause
 * word is written last, after the others. */
enum {
  MDR_ARP_HOST_ABORT = 0,
  MDR_ARP_HOST_RANKS0 = 8, /* the first rank's report */
  MDR_ARP_HOST_REPORT = 8, /* words per report */
  MDR_ARP_REP_CAUSE = 0,
  MDR_ARP_REP_WAIT = 1,
  MDR_ARP_REP_PEER = 2,
  MDR_ARP_REP_BLOCK = 3,
  MDR_ARP_REP_CALL = 4 /* the block's `calls` counter when it gave up */
};
#define MDR_ARP_HOST_WORDS(ranks) ((size_t)MDR_ARP_HOST_RANKS0 + (size_t)(ranks) * MDR_ARP_HOST_REPORT)

/* Names for the report's words (text of a refusal). */
static inline const char *mdr_arp_cause_name(uint32_t c) {
  switch (c) {
    case MDR_ARP_ABORTED: return "the communicator was aborted";
    case MDR_ARP_TIMED_OUT: return "timed out (MDR_AR_TIMEOUT_MS)";
    case MDR_ARP_PEER: return "a peer rank gave up";
    case MDR_ARP_MISMATCH: return "a peer's call differs (dtype, rows, algorithm, residual or count source)";
    default: return "unknown cause";
  }
}
static inline const char *mdr_arp_wait_name(uint32_t w) {
  switch (w) {
    case MDR_ARP_WAIT_BARRIER1: return "the two-shot's first barrier";
    case MDR_ARP_WAIT_BARRIER2: return "the two-shot's second barrier";
    case MDR_ARP_WAIT_HEADER: return "a one-shot block header";
    case MDR_ARP_WAIT_ROWS: return "one-shot rows";
    default: return "a wait";
  }
}

#endif
