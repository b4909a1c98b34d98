/* zero_map.h — the arithmetic of a zero plan, shared by the host (gcc) and
 * the device (nvcc). Nothing here touches memory; kernels/zero_fused.cu, the
 * host backend and src/arena.c all read the same functions, so the host
 * backend zeroes exactly the bytes the kernel would.
 *
 * 1. Rules. A plan entry (mdr_zero_seg) names a buffer and how many of its
 *    leading bytes to clear for a token count t:
 *      FIXED  clear `bytes` whatever t is;
 *      HEAD   clear zero_head_bytes(bytes, m, t) (docs/SIZES.md §9), at
 *             every t, 0 included;
 *      ROWS   clear min(t, rows) * row_bytes      (MDR_ROWS_ALL logits).
 *    Count-to-bytes has one home: mdr_zero_seg_bytes (one entry at t),
 *    mdr_zero_plan_at (a plan at t, as FIXED entries), and
 *    mdr_zero_seg_max_bytes (the most any t clears). The arena's eager
 *    helpers, the graph cache's plan table and the kernels all call them.
 *    A static plan (eager, EXACT/LADDER graphs) is evaluated on the host;
 *    in DYNAMIC graphs t is read on the device.
 *
 * 2. Chunks. Each segment is cut into MDR_ZERO_CHUNK-byte chunks (the last
 *    one shorter); chunk k of the plan is found from the prefix sums of the
 *    chunk counts (or, in a grid laid out in rows, from the segment's row).
 *    Within a chunk the bytes
 *    before the first 16-byte boundary (head) and after the last (tail) are
 *    written one by one, the rest with 16-byte stores.
 *
 * 3. (The staging ring's layout, once here, is a module of its own:
 *    staging/staging_layout.h.)
 *
 * 4. Plan tables (DYNAMIC by node update). The plan of every count 1..m,
 *    resolved once on the host and kept in device memory, so that a launch
 *    carries only t in its parameters: a small block the host re-targets
 *    with a parameter write instead of a whole plan.
 *
 * 5. Chunk lists. A small static plan as the list of its chunks, one word
 *    each, so that a block finds its chunk with one load. */
#ifndef MDR_ZERO_MAP_H
#define MDR_ZERO_MAP_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define MDR_HD __host__ __device__ __forceinline__
#else
#define MDR_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum { MDR_RULE_FIXED = 0, MDR_RULE_HEAD = 1, MDR_RULE_ROWS = 2 };

/* Bytes per chunk: a few passes of a 256-thread block storing 16 B per
 * thread (4 KB per pass), small enough that a 1 MB plan spreads over many
 * blocks. The library is built with this value (the host mirror and the
 * kernel must agree on it); the lab in dev/ may build its own variants with
 * another. */
#ifndef MDR_ZERO_CHUNK
#define MDR_ZERO_CHUNK ((uint64_t)16 * 1024)
#endif
/* Segments one launch carries in its parameters; longer plans are split
 * into several launches. */
#define MDR_ZERO_MAX_SEGS 64

typedef struct mdr_zero_seg {
  uint64_t ptr;   /* device address of the buffer's first byte */
  uint64_t bytes; /* FIXED: bytes to clear; HEAD/ROWS: the buffer's size */
  uint64_t a;     /* HEAD: m (max_batch_tokens); ROWS: row bytes */
  uint64_t b;     /* ROWS: row cap */
  uint32_t rule;  /* MDR_RULE_* */
  uint32_t reserved;
} mdr_zero_seg;

MDR_HD uint64_t mdr_ceil16(uint64_t x) { return (x + 15u) / 16u * 16u; }

/* docs/SIZES.md §9: the seed's row rule, verbatim. */
MDR_HD uint64_t mdr_zero_head_bytes(uint64_t n, uint64_t m, uint64_t t) {
  if (m < 1) m = 1;
  if (t >= m) return n;
  if (n % m == 0) return n / m * t;
  uint64_t m16 = mdr_ceil16(m);
  if (n % m16 == 0) {
    uint64_t t16 = mdr_ceil16(t);
    return n / m16 * (t16 < m16 ? t16 : m16);
  }
  return n;
}

/* Bytes a plan entry clears at token count t. */
MDR_HD uint64_t mdr_zero_seg_bytes(const mdr_zero_seg *s, uint64_t t) {
  switch (s->rule) {
    case MDR_RULE_HEAD: return mdr_zero_head_bytes(s->bytes, s->a, t);
    case MDR_RULE_ROWS: return (t < s->b ? t : s->b) * s->a;
    default: return s->bytes;
  }
}

/* The most bytes an entry clears at any count a launch can carry (t is at
 * most UINT32_MAX: the staging header's width). Saturates. */
MDR_HD uint64_t mdr_zero_seg_max_bytes(const mdr_zero_seg *s) {
  if (s->rule != MDR_RULE_ROWS) return s->bytes;
  const uint64_t rows = s->b < UINT32_MAX ? s->b : UINT32_MAX;
  if (s->a != 0 && rows > UINT64_MAX / s->a) return UINT64_MAX;
  return rows * s->a;
}

/* A plan of n rules evaluated at t: FIXED entries, the empty ones left out,
 * order kept. Returns the count written to out (at most n). */
MDR_HD size_t mdr_zero_plan_at(const mdr_zero_seg *rules, size_t n, uint64_t t, mdr_zero_seg *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const uint64_t bytes = mdr_zero_seg_bytes(&rules[i], t);
    if (bytes == 0) continue;
    out[k] = rules[i];
    out[k].bytes = bytes;
    out[k].a = 0;
    out[k].b = 0;
    out[k].rule = MDR_RULE_FIXED;
    k++;
  }
  return k;
}

/* Every rule is non-decreasing in t, so any count t >= 1 clears at least
 * the first mdr_zero_seg_bytes(s, 1) bytes: the "floor" a DYNAMIC launch
 * clears before it knows t (its count is never 0: caches reject 0 tokens).
 * The rest, [floor, mdr_zero_seg_bytes(s, t)), waits for t. */
MDR_HD uint64_t mdr_zero_seg_floor(const mdr_zero_seg *s) { return mdr_zero_seg_bytes(s, 1); }

MDR_HD uint64_t mdr_zero_chunks(uint64_t bytes) {
  return (bytes + MDR_ZERO_CHUNK - 1) / MDR_ZERO_CHUNK;
}

/* Given prefix[i] = chunks of segments [0, i) (prefix[0] = 0, n+1 entries),
 * the segment holding plan chunk k (k < prefix[n]). Binary search. */
MDR_HD uint32_t mdr_zero_locate(const uint64_t *prefix, uint32_t n, uint64_t k) {
  uint32_t lo = 0, hi = n; /* invariant: prefix[lo] <= k < prefix[hi] */
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (prefix[mid] <= k) lo = mid; else hi = mid;
  }
  return lo;
}

/* The byte range [*begin, *end) of a chunk, as addresses, and its split into
 * an unaligned head [begin, body), 16-byte aligned body [body, tail) and
 * unaligned tail [tail, end). */
typedef struct mdr_zero_span {
  uint64_t begin, body, tail, end;
} mdr_zero_span;

/* The split of [begin, end) into head, body and tail. */
MDR_HD mdr_zero_span mdr_zero_range_span(uint64_t begin, uint64_t end) {
  mdr_zero_span sp;
  sp.begin = begin;
  sp.end = end;
  sp.body = (begin + 15u) & ~(uint64_t)15u;
  if (sp.body > end) sp.body = end;
  sp.tail = end & ~(uint64_t)15u;
  if (sp.tail < sp.body) sp.tail = sp.body;
  return sp;
}

MDR_HD mdr_zero_span mdr_zero_chunk_span(uint64_t ptr, uint64_t seg_bytes, uint64_t chunk_in_seg) {
  uint64_t off = chunk_in_seg * MDR_ZERO_CHUNK;
  uint64_t len = seg_bytes - off < MDR_ZERO_CHUNK ? seg_bytes - off : MDR_ZERO_CHUNK;
  return mdr_zero_range_span(ptr + off, ptr + off + len);
}

/* Chunk lists (section 5). A static plan of one launch (at most
 * MDR_ZERO_MAX_SEGS segments) with at most MDR_ZERO_LIST_MAX chunks (about
 * 16 MB) can travel as the list of its chunks, one 64-bit word each: the
 * chunk's first address in the low MDR_ZERO_LIST_ADDR_BITS bits, its length
 * minus one above them. A block then learns its work from one load of word
 * blockIdx.x, with no search over prefix sums: what a small step spends
 * before its first store (docs/KERNELS.md). Larger plans, where the stores
 * outweigh a search, take the prefix sums. The words list the same chunks,
 * in the same order, as the prefix sums and mdr_zero_chunk_span give; the
 * kernel's list parameters stay within 8 KiB. */
#define MDR_ZERO_LIST_MAX 1000
/* The inline launch's list form (a small host step's graph node, its
 * parameters updated every step) carries at most this many chunks (about
 * 8.9 MB), so that its list and the slot image stay within 4.5 KiB. */
#define MDR_ZERO_LIST_INLINE_MAX 544
#define MDR_ZERO_LIST_ADDR_BITS 48
#define MDR_ZERO_LIST_ADDR_MASK ((((uint64_t)1) << MDR_ZERO_LIST_ADDR_BITS) - 1u)
#define MDR_ZERO_LIST_NONE UINT32_MAX

/* The word of chunk [begin, begin + len): 1 and *out set, or 0 when it
 * does not encode (len outside 1..2^(64 - ADDR_BITS), or an address, first
 * or last, at or past 2^ADDR_BITS). */
MDR_HD int mdr_zero_list_word(uint64_t begin, uint64_t len, uint64_t *out) {
  if (len == 0 || len - 1u > (UINT64_MAX >> MDR_ZERO_LIST_ADDR_BITS)) return 0;
  if (begin > MDR_ZERO_LIST_ADDR_MASK || len - 1u > MDR_ZERO_LIST_ADDR_MASK - begin) return 0;
  *out = begin | (len - 1u) << MDR_ZERO_LIST_ADDR_BITS;
  return 1;
}

/* The chunk a word names. */
MDR_HD mdr_zero_span mdr_zero_list_span(uint64_t word) {
  const uint64_t begin = word & MDR_ZERO_LIST_ADDR_MASK;
  return mdr_zero_range_span(begin, begin + (word >> MDR_ZERO_LIST_ADDR_BITS) + 1u);
}

/* The chunk list of n FIXED segments (a plan at t, mdr_zero_plan_at): the
 * number of words written to out, or MDR_ZERO_LIST_NONE when the plan has
 * more than `cap` chunks or a chunk does not encode (then the plan takes
 * the prefix sums). */
MDR_HD uint32_t mdr_zero_list_build(const mdr_zero_seg *fixed, uint32_t n, uint64_t *out, uint32_t cap) {
  uint64_t total = 0; /* count first: a plan past the cap costs n additions, not cap words */
  for (uint32_t i = 0; i < n && total <= cap; i++) total += mdr_zero_chunks(fixed[i].bytes);
  if (total > cap) return MDR_ZERO_LIST_NONE;
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint64_t chunks = mdr_zero_chunks(fixed[i].bytes);
    for (uint64_t c = 0; c < chunks; c++, k++) {
      const mdr_zero_span sp = mdr_zero_chunk_span(fixed[i].ptr, fixed[i].bytes, c);
      if (!mdr_zero_list_word(sp.begin, sp.end - sp.begin, &out[k])) return MDR_ZERO_LIST_NONE;
    }
  }
  return k;
}

/* Plan table layout, in 64-bit words, for n rules and counts 1..m:
 *   ptr[n]; then for t = 1..m: bytes[n] (each rule at t), prefix[n + 1]
 *   (exclusive chunk prefix sums of bytes; prefix[n] is the total). */
MDR_HD uint64_t mdr_plan_table_words(uint64_t n, uint64_t m) { return n + m * (2 * n + 1); }
/* Word index of count t's entry (1 <= t <= m). */
MDR_HD uint64_t mdr_plan_table_entry(uint64_t n, uint64_t t) { return n + (t - 1) * (2 * n + 1); }

/* Fill a table of mdr_plan_table_words(n, m) words from n rules. */
MDR_HD void mdr_plan_table_fill(const mdr_zero_seg *rules, uint64_t n, uint64_t m, uint64_t *w) {
  for (uint64_t i = 0; i < n; i++) w[i] = rules[i].ptr;
  for (uint64_t t = 1; t <= m; t++) {
    uint64_t *e = w + mdr_plan_table_entry(n, t), acc = 0;
    for (uint64_t i = 0; i < n; i++) {
      const uint64_t b = mdr_zero_seg_bytes(&rules[i], t);
      e[i] = b;
      e[n + i] = acc;
      acc += mdr_zero_chunks(b);
    }
    e[2 * n] = acc;
  }
}

#ifdef __cplusplus
}
#endif
#endif
