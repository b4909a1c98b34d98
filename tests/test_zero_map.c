/* test_zero_map.c — the zero-plan arithmetic (plan/zero_map.h) and its CPU
 * execution (mdr_zero_fused_host), on the CPU only.
 *
 * Two models: for large plans (segments up to 64 MiB) the chunk mapping is
 * checked as intervals over fake addresses (no memory touched); for small
 * plans real memory is poisoned (0xA5), the plan run, and every byte
 * checked: zero inside the cleared range, poison everywhere else. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "support.h"

#define POISON 0xA5u

/* ------------------------------------------------------------------------- */
/* helpers */

#define ADDR(p) ((uint64_t)(uintptr_t)(p))

/* Walk one launch's chunk mapping (at most MDR_ZERO_MAX_SEGS segments) and
 * check, as intervals, that the chunks of every segment tile
 * [ptr, ptr + bytes) in order, each at most MDR_ZERO_CHUNK long, with a
 * minimal head, a 16-byte aligned body and a tail shorter than 16 bytes. */
static void check_launch_mapping(const mdr_zero_seg *segs, uint32_t n, uint64_t t) {
  uint64_t bytes[MDR_ZERO_MAX_SEGS], prefix[MDR_ZERO_MAX_SEGS + 1], next[MDR_ZERO_MAX_SEGS];
  prefix[0] = 0;
  for (uint32_t i = 0; i < n; i++) {
    bytes[i] = mdr_zero_seg_bytes(&segs[i], t);
    prefix[i + 1] = prefix[i] + mdr_zero_chunks(bytes[i]);
    next[i] = segs[i].ptr;
  }
  for (uint64_t k = 0; k < prefix[n]; k++) {
    uint32_t s = mdr_zero_locate(prefix, n, k);
    cr_assert(s < n && prefix[s] <= k && k < prefix[s + 1], "chunk %llu located in segment %u",
              (unsigned long long)k, s);
    mdr_zero_span sp = mdr_zero_chunk_span(segs[s].ptr, bytes[s], k - prefix[s]);
    cr_assert_eq(sp.begin, next[s], "segment %u: chunk %llu does not continue the previous one", s,
                 (unsigned long long)k);
    cr_assert(sp.end > sp.begin && sp.end - sp.begin <= MDR_ZERO_CHUNK, "chunk length");
    cr_assert(sp.begin <= sp.body && sp.body <= sp.tail && sp.tail <= sp.end, "span order");
    cr_assert(sp.body - sp.begin < 16 && sp.end - sp.tail < 16, "head/tail under 16 bytes");
    if (sp.body < sp.end) {
      cr_assert_eq(sp.body % 16, 0, "body aligned");
      cr_assert_eq(sp.body, mdr_ceil16(sp.begin), "head is minimal");
    }
    if (sp.tail > sp.body) {
      cr_assert_eq(sp.tail % 16, 0, "tail aligned");
      cr_assert_eq(sp.tail, sp.end & ~(uint64_t)15, "tail is minimal");
    }
    next[s] = sp.end;
  }
  for (uint32_t i = 0; i < n; i++)
    cr_assert_eq(next[i], segs[i].ptr + bytes[i], "segment %u covered up to its end", i);
}

/* A segment of `size` buffer bytes with a random rule; *cleared gets the
 * bytes it clears at t. */
static mdr_zero_seg random_rule(uint64_t *rng, uint64_t ptr, uint64_t size, uint64_t t) {
  mdr_zero_seg s = {.ptr = ptr, .bytes = size, .rule = MDR_RULE_FIXED};
  uint64_t r = tb_rng_next(rng) % 4;
  if (r == 1) {
    s.rule = MDR_RULE_HEAD;
    s.a = tb_rng_range(rng, 1, 300);
  } else if (r == 2 && size > 0) {
    s.rule = MDR_RULE_ROWS;
    s.a = tb_rng_range(rng, 1, size < 600 ? size : 600); /* row bytes */
    s.b = size / s.a;                                  /* row cap */
  }
  (void)t;
  return s;
}

/* Sizes for real-memory plans: empties, a few bytes, a few KiB, and a few
 * that cross chunk boundaries. */
static uint64_t random_small_size(uint64_t *rng) {
  switch (tb_rng_next(rng) % 6) {
    case 0: return 0;
    case 1: return tb_rng_range(rng, 1, 40);
    case 2: case 3: return tb_rng_range(rng, 41, 6000);
    case 4: return tb_rng_range(rng, 6001, 40000);
    default: return tb_rng_range(rng, MDR_ZERO_CHUNK - 20, 2 * MDR_ZERO_CHUNK + 300);
  }
}

/* A plan laid out in one poisoned host allocation: each buffer preceded by a
 * guard of 1..64 bytes (plus a random misalignment), a guard after the
 * last. */
typedef struct host_plan {
  unsigned char *mem;
  size_t mem_bytes;
  mdr_zero_seg *segs;
  uint64_t *size; /* each buffer's size (what may be written: only the cleared head) */
  size_t n;
} host_plan;

static host_plan make_host_plan(uint64_t *rng, size_t n, uint64_t t) {
  host_plan hp = {0};
  hp.n = n;
  hp.segs = calloc(n ? n : 1, sizeof *hp.segs);
  hp.size = calloc(n ? n : 1, sizeof *hp.size);
  uint64_t *off = calloc(n ? n : 1, sizeof *off);
  cr_assert(hp.segs && hp.size && off);
  size_t cursor = 0;
  for (size_t i = 0; i < n; i++) {
    cursor += tb_rng_range(rng, 1, 64) + tb_rng_range(rng, 0, 15);
    off[i] = cursor;
    hp.size[i] = random_small_size(rng);
    cursor += hp.size[i];
  }
  hp.mem_bytes = cursor + 64;
  hp.mem = malloc(hp.mem_bytes);
  cr_assert(hp.mem);
  memset(hp.mem, POISON, hp.mem_bytes);
  for (size_t i = 0; i < n; i++) hp.segs[i] = random_rule(rng, ADDR(hp.mem + off[i]), hp.size[i], t);
  free(off);
  return hp;
}

/* n FIXED segments of the given sizes, each after a 37-byte guard (so
 * misaligned), in one poisoned allocation. */
static host_plan make_host_plan_sized(const uint64_t *sizes, size_t n) {
  host_plan hp = {0};
  hp.n = n;
  hp.segs = calloc(n, sizeof *hp.segs);
  hp.size = calloc(n, sizeof *hp.size);
  cr_assert(hp.segs && hp.size);
  size_t cursor = 0;
  for (size_t i = 0; i < n; i++) cursor += 37 + sizes[i];
  hp.mem_bytes = cursor + 64;
  hp.mem = malloc(hp.mem_bytes);
  cr_assert(hp.mem);
  memset(hp.mem, POISON, hp.mem_bytes);
  cursor = 0;
  for (size_t i = 0; i < n; i++) {
    cursor += 37;
    hp.size[i] = sizes[i];
    hp.segs[i] = (mdr_zero_seg){.ptr = ADDR(hp.mem + cursor), .bytes = sizes[i], .rule = MDR_RULE_FIXED};
    cursor += sizes[i];
  }
  return hp;
}

static void free_host_plan(host_plan *hp) {
  free(hp->mem);
  free(hp->segs);
  free(hp->size);
}

/* Every cleared byte is zero, every other byte (guards, the uncleared rest
 * of each buffer) still poison. */
static void check_host_image(const host_plan *hp, uint64_t t) {
  const unsigned char *p = hp->mem;
  uint64_t cursor = ADDR(hp->mem);
  for (size_t i = 0; i < hp->n; i++) {
    uint64_t cleared = mdr_zero_seg_bytes(&hp->segs[i], t);
    cr_assert(cleared <= hp->size[i], "segment %zu clears %llu of %llu bytes", i,
              (unsigned long long)cleared, (unsigned long long)hp->size[i]);
    size_t guard = (size_t)(hp->segs[i].ptr - cursor);
    size_t bad = tb_first_not(p + (cursor - ADDR(hp->mem)), guard, POISON);
    cr_assert_eq(bad, guard, "guard before segment %zu written at byte %zu", i, bad);
    const unsigned char *seg = (const unsigned char *)(uintptr_t)hp->segs[i].ptr;
    bad = tb_first_not(seg, (size_t)cleared, 0);
    cr_assert_eq(bad, cleared, "segment %zu byte %zu of %llu not cleared", i, bad,
                 (unsigned long long)cleared);
    bad = tb_first_not(seg + cleared, (size_t)(hp->size[i] - cleared), POISON);
    cr_assert_eq(bad, hp->size[i] - cleared, "segment %zu written past its cleared head", i);
    cursor = hp->segs[i].ptr + hp->size[i];
  }
  size_t rest = hp->mem_bytes - (size_t)(cursor - ADDR(hp->mem));
  size_t bad = tb_first_not(p + (cursor - ADDR(hp->mem)), rest, POISON);
  cr_assert_eq(bad, rest, "trailing guard written");
}

/* ------------------------------------------------------------------------- */
/* rules */

Test(zero_map, head_bytes_follow_the_spec_examples) {
  const uint64_t m = 100, w = 48; /* Mp = 112; 112*48 is not a multiple of 100 */
  cr_assert_eq(mdr_ceil16(m), 112);
  /* an M-row buffer clears t rows */
  cr_assert_eq(mdr_zero_head_bytes(100 * w, m, 1), 1 * w);
  cr_assert_eq(mdr_zero_head_bytes(100 * w, m, 37), 37 * w);
  /* an Mp-row buffer clears ceil16(t) rows */
  cr_assert_eq(mdr_zero_head_bytes(112 * w, m, 1), 16 * w);
  cr_assert_eq(mdr_zero_head_bytes(112 * w, m, 20), 32 * w);
  cr_assert_eq(mdr_zero_head_bytes(112 * w, m, 99), 112 * w);
  /* a 256-byte floor that is a multiple of neither is cleared whole */
  cr_assert_eq(mdr_zero_head_bytes(256, m, 1), 256);
  /* t >= m clears the whole buffer */
  cr_assert_eq(mdr_zero_head_bytes(100 * w, m, 100), 100 * w);
  cr_assert_eq(mdr_zero_head_bytes(112 * w, m, 500), 112 * w);
  cr_assert_eq(mdr_zero_head_bytes(12345, m, 100), 12345);
  /* M a multiple of 16: exactly t rows */
  cr_assert_eq(mdr_zero_head_bytes(64 * w, 64, 5), 5 * w);
  /* the seed's quirk: a 256-byte floor divisible by M = 128 is trimmed */
  cr_assert_eq(mdr_zero_head_bytes(256, 128, 3), 6);
  /* m = 0 is taken as 1 */
  cr_assert_eq(mdr_zero_head_bytes(77, 0, 1), 77);
}

/* The seed's rule at every t, 0 included: a row-shaped buffer clears
 * nothing at 0 tokens, any other (a multiple of neither M nor ceil16(M))
 * clears whole, as zero_head_bytes says. */
Test(zero_map, head_rule_follows_zero_head_bytes_at_zero_tokens) {
  mdr_zero_seg s = {.ptr = 4096, .bytes = 100 * 48, .a = 100, .rule = MDR_RULE_HEAD};
  cr_assert_eq(mdr_zero_seg_bytes(&s, 0), 0, "a multiple of M");
  cr_assert_eq(mdr_zero_seg_bytes(&s, 1), 48);
  s.a = 100;
  s.bytes = 112 * 7; /* a multiple of ceil16(100) = 112, not of 100 */
  cr_assert_eq(mdr_zero_seg_bytes(&s, 0), 0, "a multiple of ceil16(M)");
  s.a = 37;
  s.bytes = 256; /* a 256-byte floor with M = 37: neither */
  cr_assert_eq(mdr_zero_seg_bytes(&s, 0), 256);
  cr_assert_eq(mdr_zero_seg_bytes(&s, 1), 256);
  for (uint64_t n = 0; n < 2000; n += 7)
    for (uint64_t m = 1; m < 70; m += 3) {
      s.bytes = n;
      s.a = m;
      cr_assert_eq(mdr_zero_seg_bytes(&s, 0), mdr_zero_head_bytes(n, m, 0), "n %llu m %llu",
                   (unsigned long long)n, (unsigned long long)m);
    }
}

/* A plan at t: the rules' bytes, FIXED, empties dropped, order kept; the
 * largest extent of each rule bounds every t. */
Test(zero_map, plan_at_evaluates_every_rule_and_drops_the_empty_ones) {
  const mdr_zero_seg rules[4] = {
      {.ptr = 4096, .bytes = 64 * 10, .a = 64, .rule = MDR_RULE_HEAD},
      {.ptr = 8192, .bytes = 0, .rule = MDR_RULE_FIXED},
      {.ptr = 12288, .bytes = 600 * 10, .a = 600, .b = 10, .rule = MDR_RULE_ROWS},
      {.ptr = 20480, .bytes = 99, .rule = MDR_RULE_FIXED},
  };
  mdr_zero_seg out[4];
  memset(out, 0xCD, sizeof out);
  cr_assert_eq(mdr_zero_plan_at(rules, 4, 3, out), 3);
  cr_assert_eq(out[0].ptr, 4096);
  cr_assert_eq(out[0].bytes, 30);
  cr_assert_eq(out[1].ptr, 12288);
  cr_assert_eq(out[1].bytes, 1800);
  cr_assert_eq(out[2].ptr, 20480);
  cr_assert_eq(out[2].bytes, 99);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(out[i].rule, MDR_RULE_FIXED);
    cr_assert_eq(out[i].a, 0);
    cr_assert_eq(out[i].b, 0);
  }
  cr_assert_eq(mdr_zero_plan_at(rules, 4, 0, out), 1, "at 0 only the fixed 99 bytes");
  cr_assert_eq(mdr_zero_seg_max_bytes(&rules[0]), 640);
  cr_assert_eq(mdr_zero_seg_max_bytes(&rules[2]), 6000);
  const mdr_zero_seg huge = {.ptr = 4096, .bytes = 1, .a = UINT64_MAX / 2, .b = UINT64_MAX, .rule = MDR_RULE_ROWS};
  cr_assert_eq(mdr_zero_seg_max_bytes(&huge), UINT64_MAX, "saturates");
}

Test(zero_map, rows_rule_clamps_at_the_row_cap) {
  mdr_zero_seg s = {.ptr = 4096, .bytes = 10 * 600, .a = 600, .b = 10, .rule = MDR_RULE_ROWS};
  cr_assert_eq(mdr_zero_seg_bytes(&s, 0), 0);
  cr_assert_eq(mdr_zero_seg_bytes(&s, 3), 3 * 600);
  cr_assert_eq(mdr_zero_seg_bytes(&s, 10), 10 * 600);
  cr_assert_eq(mdr_zero_seg_bytes(&s, 11), 10 * 600);
  cr_assert_eq(mdr_zero_seg_bytes(&s, 4096), 10 * 600);
}

Test(zero_map, fixed_rule_ignores_tokens) {
  mdr_zero_seg s = {.ptr = 4096, .bytes = 777, .rule = MDR_RULE_FIXED};
  cr_assert_eq(mdr_zero_seg_bytes(&s, 0), 777);
  cr_assert_eq(mdr_zero_seg_bytes(&s, 12345), 777);
}

/* ------------------------------------------------------------------------- */
/* chunk mapping */

/* DYNAMIC launches clear the floor (bytes at t = 1) before they know t: safe
 * only if every rule is non-decreasing in t from 1 on. */
Test(zero_map, rules_never_shrink_as_tokens_grow_so_the_floor_is_safe) {
  uint64_t rng = 0x5eed0011;
  for (int k = 0; k < 20000; k++) {
    const uint64_t m = tb_rng_range(&rng, 1, 5000);
    uint64_t size = tb_rng_range(&rng, 0, 1u << 22);
    if (k % 4 == 1) size = m * tb_rng_range(&rng, 0, 800);               /* HEAD: n % m == 0 */
    if (k % 4 == 2) size = mdr_ceil16(m) * tb_rng_range(&rng, 0, 800);   /* HEAD: n % ceil16(m) == 0 */
    mdr_zero_seg s = random_rule(&rng, 4096, size, 0);
    if (k % 4 != 3) s = (mdr_zero_seg){.ptr = 4096, .bytes = size, .a = m, .rule = MDR_RULE_HEAD};
    const uint64_t floor = mdr_zero_seg_floor(&s);
    cr_assert_eq(floor, mdr_zero_seg_bytes(&s, 1));
    for (int j = 0; j < 8; j++) {
      const uint64_t t = j < 4 ? tb_rng_range(&rng, 1, 40) : tb_rng_range(&rng, 1, 2 * m + 40);
      const uint64_t t2 = t + tb_rng_range(&rng, 0, 64);
      const uint64_t b = mdr_zero_seg_bytes(&s, t), b2 = mdr_zero_seg_bytes(&s, t2);
      cr_assert_geq(b, floor, "rule %u size %llu m %llu: bytes(%llu) %llu < floor %llu", s.rule,
                    (unsigned long long)size, (unsigned long long)m, (unsigned long long)t,
                    (unsigned long long)b, (unsigned long long)floor);
      cr_assert_geq(b2, b, "rule %u: bytes(%llu) %llu < bytes(%llu) %llu", s.rule, (unsigned long long)t2,
                    (unsigned long long)b2, (unsigned long long)t, (unsigned long long)b);
    }
  }
}

Test(zero_map, chunks_round_up_to_whole_chunks) {
  cr_assert_eq(mdr_zero_chunks(0), 0);
  cr_assert_eq(mdr_zero_chunks(1), 1);
  cr_assert_eq(mdr_zero_chunks(MDR_ZERO_CHUNK), 1);
  cr_assert_eq(mdr_zero_chunks(MDR_ZERO_CHUNK + 1), 2);
}

Test(zero_map, locate_skips_empty_segments) {
  /* chunks per segment: 0, 2, 0, 0, 1, 3, 0 */
  const uint64_t prefix[] = {0, 0, 2, 2, 2, 3, 6, 6};
  const uint32_t want[] = {1, 1, 4, 5, 5, 5};
  for (uint64_t k = 0; k < 6; k++) cr_assert_eq(mdr_zero_locate(prefix, 7, k), want[k], "k=%llu", (unsigned long long)k);
}

Test(zero_map, chunk_span_splits_head_body_tail) {
  mdr_zero_span sp = mdr_zero_chunk_span(1003, 10, 0); /* no aligned byte */
  cr_assert(sp.begin == 1003 && sp.end == 1013 && sp.body == 1008 && sp.tail == 1008);
  sp = mdr_zero_chunk_span(1001, 5, 0); /* inside one 16-byte line */
  cr_assert(sp.begin == 1001 && sp.end == 1006 && sp.body == 1006 && sp.tail == 1006);
  sp = mdr_zero_chunk_span(4096 + 5, 3 * MDR_ZERO_CHUNK, 1);
  cr_assert(sp.begin == 4101 + MDR_ZERO_CHUNK && sp.end == sp.begin + MDR_ZERO_CHUNK);
  cr_assert(sp.body == sp.begin + 11 && sp.tail == sp.end - 5);
  sp = mdr_zero_chunk_span(4096, MDR_ZERO_CHUNK + 7, 1); /* the short last chunk */
  cr_assert(sp.begin == 4096 + MDR_ZERO_CHUNK && sp.end == sp.begin + 7 && sp.body == sp.begin &&
            sp.tail == sp.begin);
}

/* Fake addresses, sizes 0 .. 64 MiB, random misalignment, 1 .. 64 segments,
 * random rules and token counts: the intervals tile every segment. */
Test(zero_map, random_large_plans_tile_every_segment_exactly_once) {
  uint64_t rng = 0x5eed0001;
  mdr_zero_seg segs[MDR_ZERO_MAX_SEGS];
  for (int plan = 0; plan < 200; plan++) {
    uint32_t n = (uint32_t)tb_rng_range(&rng, 1, MDR_ZERO_MAX_SEGS);
    uint64_t t = tb_rng_range(&rng, 0, 5000);
    uint64_t addr = tb_rng_range(&rng, 1, (uint64_t)1 << 40);
    for (uint32_t i = 0; i < n; i++) {
      uint64_t size;
      switch (tb_rng_next(&rng) % 5) {
        case 0: size = 0; break;
        case 1: size = tb_rng_range(&rng, 1, 100); break;
        case 2: size = tb_rng_range(&rng, 101, 3 * MDR_ZERO_CHUNK); break;
        default: size = tb_rng_range(&rng, 1, (uint64_t)64 << 20); break;
      }
      addr += tb_rng_range(&rng, 0, 4096);
      segs[i] = random_rule(&rng, addr, size, t);
      addr += size;
    }
    check_launch_mapping(segs, n, t);
  }
}

/* Small plans over a per-byte coverage counter: each byte of a cleared range
 * is visited exactly once, no other byte at all. */
Test(zero_map, random_small_plans_visit_each_byte_once) {
  uint64_t rng = 0x5eed0002;
  mdr_zero_seg segs[MDR_ZERO_MAX_SEGS];
  const size_t model = 3u << 20;
  unsigned char *visits = malloc(model);
  cr_assert(visits);
  for (int plan = 0; plan < 40; plan++) {
    memset(visits, 0, model);
    uint32_t n = (uint32_t)tb_rng_range(&rng, 1, MDR_ZERO_MAX_SEGS);
    uint64_t t = tb_rng_range(&rng, 0, 400);
    uint64_t base = 0x100000000ull + tb_rng_range(&rng, 0, 255), cursor = 16;
    uint64_t bytes[MDR_ZERO_MAX_SEGS], prefix[MDR_ZERO_MAX_SEGS + 1] = {0};
    for (uint32_t i = 0; i < n; i++) {
      uint64_t size = random_small_size(&rng);
      if (cursor + size + 100 > model) size = 0;
      cursor += tb_rng_range(&rng, 0, 40);
      segs[i] = random_rule(&rng, base + cursor, size, t);
      cursor += size;
      bytes[i] = mdr_zero_seg_bytes(&segs[i], t);
      prefix[i + 1] = prefix[i] + mdr_zero_chunks(bytes[i]);
    }
    for (uint64_t k = 0; k < prefix[n]; k++) {
      uint32_t s = mdr_zero_locate(prefix, n, k);
      mdr_zero_span sp = mdr_zero_chunk_span(segs[s].ptr, bytes[s], k - prefix[s]);
      for (uint64_t a = sp.begin; a < sp.end; a++) visits[a - base]++;
    }
    for (uint32_t i = 0, at = 0; i < n; i++) {
      uint64_t off = segs[i].ptr - base;
      cr_assert_eq(tb_first_not(visits + at, (size_t)(off - at), 0), off - at,
                   "plan %d: byte before segment %u visited", plan, i);
      cr_assert_eq(tb_first_not(visits + off, (size_t)bytes[i], 1), bytes[i],
                   "plan %d: segment %u not visited exactly once", plan, i);
      at = (uint32_t)(off + bytes[i]);
      if (i == n - 1)
        cr_assert_eq(tb_first_not(visits + at, model - at, 0), model - at, "byte after the plan visited");
    }
  }
  free(visits);
}

/* ------------------------------------------------------------------------- */
/* chunk lists (section 5 of zero_map.h) */

Test(zero_map, list_word_round_trips_address_and_length) {
  const uint64_t top = MDR_ZERO_LIST_ADDR_MASK; /* the last encodable address */
  const struct { uint64_t begin, len; } ok[] = {
      {0, 1}, {1003, 10}, {4096, MDR_ZERO_CHUNK}, {0x7f12345678ull, 1},
      {top - MDR_ZERO_CHUNK + 1, MDR_ZERO_CHUNK}, {top, 1}, {5, (uint64_t)1 << (64 - MDR_ZERO_LIST_ADDR_BITS)}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    uint64_t w = 0;
    cr_assert_eq(mdr_zero_list_word(ok[i].begin, ok[i].len, &w), 1, "case %zu", i);
    const mdr_zero_span sp = mdr_zero_list_span(w);
    const mdr_zero_span want = mdr_zero_range_span(ok[i].begin, ok[i].begin + ok[i].len);
    cr_assert(sp.begin == want.begin && sp.body == want.body && sp.tail == want.tail && sp.end == want.end,
              "case %zu: span differs", i);
  }
}

Test(zero_map, list_word_refuses_what_does_not_fit) {
  const uint64_t top = MDR_ZERO_LIST_ADDR_MASK;
  const struct { uint64_t begin, len; } bad[] = {
      {4096, 0},                                                  /* empty chunk */
      {4096, ((uint64_t)1 << (64 - MDR_ZERO_LIST_ADDR_BITS)) + 1}, /* length past the field */
      {top + 1, 1},                                               /* first address too high */
      {top, 2},                                                   /* last address too high */
      {UINT64_MAX, 1}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint64_t w = 0xdead;
    cr_assert_eq(mdr_zero_list_word(bad[i].begin, bad[i].len, &w), 0, "case %zu", i);
    cr_assert_eq(w, 0xdead, "case %zu: the word was written", i);
  }
}

Test(zero_map, list_is_allowed_only_to_launches_that_read_no_host_memory) {
  cr_assert_eq(mdr_zero_list_allowed(0), 1, "eager and unstaged launches");
  cr_assert_eq(mdr_zero_list_allowed(MDR_STAGE_DEVICE_IDS), 1, "device ids, count in the launch");
  cr_assert_eq(mdr_zero_list_allowed(MDR_STAGE_DEVICE_IDS | MDR_STAGE_ADVANCE), 1);
  cr_assert_eq(mdr_zero_list_allowed(MDR_STAGE_FETCH), 0, "host ids from the slot");
  cr_assert_eq(mdr_zero_list_allowed(MDR_STAGE_FETCH | MDR_STAGE_ADVANCE), 0);
  cr_assert_eq(mdr_zero_list_allowed(MDR_STAGE_DEVICE_IDS | MDR_STAGE_FETCH), 0, "count from the slot header");
}

/* The list names the same chunks, in the same order, as the prefix sums. */
Test(zero_map, list_build_lists_the_prefix_sum_chunks_in_order) {
  uint64_t rng = 0x5eed0010;
  mdr_zero_seg rules[MDR_ZERO_MAX_SEGS], fixed[MDR_ZERO_MAX_SEGS];
  static uint64_t words[MDR_ZERO_LIST_MAX];
  int listed = 0, refused = 0;
  for (int plan = 0; plan < 300; plan++) {
    const uint32_t n = (uint32_t)tb_rng_range(&rng, 1, plan % 4 ? 24 : MDR_ZERO_MAX_SEGS);
    const uint64_t t = tb_rng_range(&rng, 0, 400);
    uint64_t addr = tb_rng_range(&rng, 1, (uint64_t)1 << 40);
    for (uint32_t i = 0; i < n; i++) {
      const uint64_t size = tb_rng_next(&rng) % 16 ? tb_rng_range(&rng, 0, 3 * MDR_ZERO_CHUNK)
                                                   : tb_rng_range(&rng, 0, (uint64_t)8 << 20);
      addr += tb_rng_range(&rng, 0, 4096);
      rules[i] = random_rule(&rng, addr, size, t);
      addr += size;
    }
    const uint32_t m = (uint32_t)mdr_zero_plan_at(rules, n, t, fixed);
    uint64_t prefix[MDR_ZERO_MAX_SEGS + 1] = {0};
    for (uint32_t i = 0; i < m; i++) prefix[i + 1] = prefix[i] + mdr_zero_chunks(fixed[i].bytes);
    const uint32_t k = mdr_zero_list_build(fixed, m, words, MDR_ZERO_LIST_MAX);
    if (prefix[m] > MDR_ZERO_LIST_MAX) {
      cr_assert_eq(k, MDR_ZERO_LIST_NONE, "plan %d: %llu chunks listed", plan, (unsigned long long)prefix[m]);
      refused++;
      continue;
    }
    cr_assert_eq(k, prefix[m], "plan %d", plan);
    listed++;
    for (uint64_t c = 0; c < k; c++) {
      const uint32_t sg = mdr_zero_locate(prefix, m, c);
      const mdr_zero_span want = mdr_zero_chunk_span(fixed[sg].ptr, fixed[sg].bytes, c - prefix[sg]);
      const mdr_zero_span got = mdr_zero_list_span(words[c]);
      cr_assert(got.begin == want.begin && got.body == want.body && got.tail == want.tail && got.end == want.end,
                "plan %d chunk %llu differs", plan, (unsigned long long)c);
    }
  }
  cr_assert(listed > 50 && refused > 10, "both outcomes drawn (%d listed, %d refused)", listed, refused);
}

Test(zero_map, list_build_takes_exactly_the_cap_and_refuses_one_more) {
  static uint64_t words[MDR_ZERO_LIST_MAX + 1];
  mdr_zero_seg seg = {.ptr = 0x10000000ull + 3, .bytes = (uint64_t)MDR_ZERO_LIST_MAX * MDR_ZERO_CHUNK,
                      .rule = MDR_RULE_FIXED};
  cr_assert_eq(mdr_zero_list_build(&seg, 1, words, MDR_ZERO_LIST_MAX), MDR_ZERO_LIST_MAX);
  seg.bytes += 1; /* one byte more: one chunk more */
  words[MDR_ZERO_LIST_MAX] = 0xfeed;
  cr_assert_eq(mdr_zero_list_build(&seg, 1, words, MDR_ZERO_LIST_MAX), MDR_ZERO_LIST_NONE);
  cr_assert_eq(words[MDR_ZERO_LIST_MAX], 0xfeed, "a word past the cap was written");
  /* a segment whose end is past the address field: not listed */
  mdr_zero_seg high = {.ptr = MDR_ZERO_LIST_ADDR_MASK - 100, .bytes = 200, .rule = MDR_RULE_FIXED};
  cr_assert_eq(mdr_zero_list_build(&high, 1, words, MDR_ZERO_LIST_MAX), MDR_ZERO_LIST_NONE);
  cr_assert_eq(mdr_zero_list_build(&high, 0, words, MDR_ZERO_LIST_MAX), 0u, "an empty plan lists nothing");
}

/* Plans at the list's edge through the host execution: MDR_ZERO_LIST_MAX
 * chunks (the list) and one more (the prefix sums), misaligned, clear
 * exactly their bytes. */
Test(zero_map, host_plan_at_the_list_cap_clears_exactly_on_both_sides) {
  for (int extra = 0; extra < 2; extra++) {
    /* three FIXED segments of 100, LIST_MAX - 101 and 1 chunks (+ 1 more) */
    const uint64_t sizes[3] = {100 * MDR_ZERO_CHUNK, (uint64_t)(MDR_ZERO_LIST_MAX - 102) * MDR_ZERO_CHUNK + 77,
                               extra ? MDR_ZERO_CHUNK + 1 : 1};
    uint64_t words[MDR_ZERO_LIST_MAX];
    host_plan hp = make_host_plan_sized(sizes, 3);
    const uint32_t k = mdr_zero_list_build(hp.segs, 3, words, MDR_ZERO_LIST_MAX);
    cr_assert_eq(k, extra ? MDR_ZERO_LIST_NONE : MDR_ZERO_LIST_MAX, "the plan is %s the cap", extra ? "past" : "at");
    mdr_zero_fused_host(hp.segs, hp.n, 1, NULL);
    check_host_image(&hp, 1);
    free_host_plan(&hp);
  }
}

/* ------------------------------------------------------------------------- */
/* mdr_zero_fused_host on real memory */

Test(zero_map, host_plan_clears_exactly_the_cleared_heads) {
  uint64_t rng = 0x5eed0003;
  for (int plan = 0; plan < 60; plan++) {
    size_t n = (size_t)tb_rng_range(&rng, 1, MDR_ZERO_MAX_SEGS);
    uint64_t t = tb_rng_range(&rng, 0, 400);
    host_plan hp = make_host_plan(&rng, n, t);
    mdr_zero_fused_host(hp.segs, hp.n, t, NULL);
    check_host_image(&hp, t);
    free_host_plan(&hp);
  }
}

Test(zero_map, host_plan_longer_than_64_segments_is_split_and_complete) {
  uint64_t rng = 0x5eed0004;
  const size_t counts[] = {65, 128, 129, 200};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    uint64_t t = tb_rng_range(&rng, 1, 400);
    host_plan hp = make_host_plan(&rng, counts[c], t);
    mdr_zero_fused_host(hp.segs, hp.n, t, NULL);
    check_host_image(&hp, t);
    free_host_plan(&hp);
  }
}

Test(zero_map, host_empty_plan_without_stage_writes_nothing) {
  unsigned char guard[64];
  memset(guard, POISON, sizeof guard);
  mdr_zero_seg seg = {.ptr = ADDR(guard), .bytes = 0, .rule = MDR_RULE_FIXED};
  mdr_zero_fused_host(NULL, 0, 5, NULL);
  mdr_zero_fused_host(&seg, 1, 5, NULL);
  cr_assert_eq(tb_first_not(guard, sizeof guard, POISON), sizeof guard);
}

/* ------------------------------------------------------------------------- */
/* staged launches on the host */

#define RING_SLOTS 3u
#define RING_MAX_TOKENS 200u

typedef struct host_stage {
  unsigned char *ring;
  uint64_t slot_bytes;
  uint64_t counter;
  mdr_stage_sync sync;
  uint64_t ack;
  uint32_t token_ids[RING_MAX_TOKENS + 8];
  uint32_t count_out, sequences_out; /* the two count words */
  mdr_stage_desc desc;
} host_stage;

static void stage_init(host_stage *hs, uint64_t counter, uint32_t flags) {
  memset(hs, 0, sizeof *hs);
  hs->slot_bytes = mdr_stage_slot_bytes(RING_MAX_TOKENS);
  hs->ring = aligned_alloc(256, (size_t)(hs->slot_bytes * RING_SLOTS));
  cr_assert(hs->ring);
  memset(hs->ring, POISON, (size_t)(hs->slot_bytes * RING_SLOTS));
  hs->counter = counter;
  hs->ack = 0xA5A5A5A5A5A5A5A5ull;
  memset(hs->token_ids, POISON, sizeof hs->token_ids);
  hs->count_out = 0xA5A5A5A5u;
  hs->desc = (mdr_stage_desc){.ring = ADDR(hs->ring),
                              .slot_bytes = hs->slot_bytes,
                              .counter = ADDR(&hs->counter),
                              .done = ADDR(&hs->sync),
                              .ack = ADDR(&hs->ack),
                              .token_ids = ADDR(hs->token_ids),
                              .count_out = ADDR(&hs->count_out),
                              .slots = RING_SLOTS,
                              .flags = flags};
}

/* Fill slot `slot` with `tokens` real tokens and `copy` ids (base + i). */
static void stage_fill(host_stage *hs, uint32_t slot, uint32_t tokens, uint32_t copy, uint32_t base) {
  unsigned char *p = hs->ring + slot * hs->slot_bytes;
  mdr_stage_header h = {.tokens = tokens, .copy_tokens = copy};
  memcpy(p, &h, sizeof h);
  for (uint32_t i = 0; i < copy; i++) {
    uint32_t id = base + i;
    memcpy(p + MDR_STAGE_HEADER_BYTES + 4 * i, &id, 4);
  }
}

static void check_ids(const host_stage *hs, uint32_t copy, uint32_t base) {
  for (uint32_t i = 0; i < copy; i++)
    cr_assert_eq(hs->token_ids[i], base + i, "id %u", i);
  for (uint32_t i = copy; i < RING_MAX_TOKENS + 8; i++)
    cr_assert_eq(hs->token_ids[i], 0xA5A5A5A5u, "id %u past copy_tokens written", i);
}

Test(zero_map, host_stage_fetches_the_slot_named_by_the_counter_and_advances) {
  uint64_t rng = 0x5eed0005;
  host_stage hs;
  stage_init(&hs, 7, MDR_STAGE_FETCH | MDR_STAGE_ADVANCE);
  for (uint32_t s = 0; s < RING_SLOTS; s++) stage_fill(&hs, s, 10 + s, 12 + s, 1000 * (s + 1));
  host_plan hp = make_host_plan(&rng, 20, 33);
  mdr_zero_fused_host(hp.segs, hp.n, 33, &hs.desc); /* counter 7 -> slot 1 */
  check_host_image(&hp, 33);
  check_ids(&hs, 13, 2000);
  cr_assert_eq(hs.count_out, 11);
  cr_assert_eq(hs.counter, 8);
  cr_assert_eq(hs.ack, 8);
  cr_assert_eq(hs.sync.done, 0);
  cr_assert_eq(hs.sync.ticket, 0);
  /* the next launch reads the next slot */
  memset(hs.token_ids, POISON, sizeof hs.token_ids);
  mdr_zero_fused_host(hp.segs, hp.n, 33, &hs.desc); /* counter 8 -> slot 2 */
  check_ids(&hs, 14, 3000);
  cr_assert_eq(hs.count_out, 12);
  cr_assert_eq(hs.counter, 9);
  cr_assert_eq(hs.ack, 9);
  free_host_plan(&hp);
  free(hs.ring);
}

Test(zero_map, host_stage_dynamic_evaluates_rules_at_the_slot_tokens) {
  uint64_t rng = 0x5eed0006;
  host_stage hs;
  stage_init(&hs, 4, MDR_STAGE_DYNAMIC);
  stage_fill(&hs, 1, 57, 57, 1); /* counter 4 -> slot 1 */
  host_plan hp = make_host_plan(&rng, 40, 57);
  mdr_zero_fused_host(hp.segs, hp.n, 999 /* ignored */, &hs.desc);
  check_host_image(&hp, 57);
  cr_assert_eq(hs.counter, 4, "no ADVANCE: counter untouched");
  cr_assert_eq(hs.count_out, 0xA5A5A5A5u, "no FETCH: count untouched");
  cr_assert_eq(hs.sync.published, (uint64_t)5 << 32 | 57, "the stager publishes (step + 1) << 32 | t");
  cr_assert_eq(hs.sync.done, 0);
  cr_assert_eq(hs.sync.ticket, 0);
  check_ids(&hs, 0, 0);
  free_host_plan(&hp);
  free(hs.ring);
}

Test(zero_map, host_split_stage_fetches_once_and_advances_once) {
  uint64_t rng = 0x5eed0007;
  host_stage hs;
  stage_init(&hs, 2, MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_DYNAMIC);
  stage_fill(&hs, 2, 61, 64, 500);     /* counter 2 -> slot 2 */
  stage_fill(&hs, 0, 3, 3, 9000);      /* the slot an early advance would read */
  host_plan hp = make_host_plan(&rng, 150, 61);
  /* A FIXED segment in the last launch clears the ids: they survive only if
   * no later launch fetches again. */
  hp.segs[149] = (mdr_zero_seg){.ptr = ADDR(hs.token_ids), .bytes = 64 * 4, .rule = MDR_RULE_FIXED};
  hp.size[149] = 0; /* not checked as part of the poisoned image */
  hp.n = 149;
  mdr_zero_seg segs[150];
  memcpy(segs, hp.segs, sizeof segs);
  mdr_zero_fused_host(segs, 150, 999, &hs.desc);
  check_host_image(&hp, 61); /* every launch saw slot 2's t = 61 */
  for (uint32_t i = 0; i < 64; i++) cr_assert_eq(hs.token_ids[i], 0, "id %u re-fetched after the clear", i);
  cr_assert_eq(hs.count_out, 61);
  cr_assert_eq(hs.counter, 3, "advanced exactly once");
  cr_assert_eq(hs.ack, 3);
  cr_assert_eq(hs.sync.done, 0);
  cr_assert_eq(hs.sync.ticket, 0);
  free_host_plan(&hp);
  free(hs.ring);
}

/* A GPU runs a launch's stage block and its zeroing blocks in no set
 * order, and so does the mirror: with the ids' destination inside the plan
 * (which the graph cache refuses), some launches leave the ids and some
 * clear them, and every launch leaves one or the other whole. */
Test(zero_map, host_stage_and_zeroing_run_in_either_order) {
  host_stage hs;
  stage_init(&hs, 0, MDR_STAGE_FETCH | MDR_STAGE_ADVANCE);
  const mdr_zero_seg seg = {.ptr = ADDR(hs.token_ids), .bytes = 8 * 4, .rule = MDR_RULE_FIXED};
  int kept = 0, cleared = 0;
  for (uint32_t k = 0; k < 32; k++) {
    stage_fill(&hs, k % RING_SLOTS, 8, 8, 100 * (k + 1));
    memset(hs.token_ids, POISON, sizeof hs.token_ids);
    mdr_zero_fused_host(&seg, 1, 8, &hs.desc);
    int ids = 1, zeros = 1;
    for (uint32_t i = 0; i < 8; i++) {
      ids &= hs.token_ids[i] == 100 * (k + 1) + i;
      zeros &= hs.token_ids[i] == 0;
    }
    cr_assert(ids || zeros, "launch %u: the ids or zeros, whole", k);
    kept += ids;
    cleared += zeros;
    cr_assert_eq(hs.count_out, 8);
    cr_assert_eq(hs.counter, k + 1, "advanced after both, either way");
  }
  cr_assert_gt(kept, 0, "the stage after the zeroing");
  cr_assert_gt(cleared, 0, "the stage before the zeroing");
  free(hs.ring);
}

Test(zero_map, host_stage_without_segments_does_only_the_stage_work) {
  host_stage hs;
  stage_init(&hs, 5, MDR_STAGE_FETCH | MDR_STAGE_ADVANCE);
  stage_fill(&hs, 2, 9, 9, 77);
  mdr_zero_fused_host(NULL, 0, 9, &hs.desc); /* a static launch copies its own token count */
  check_ids(&hs, 9, 77);
  cr_assert_eq(hs.count_out, 9);
  cr_assert_eq(hs.counter, 6);
  cr_assert_eq(hs.ack, 6);
  free(hs.ring);
}

/* ------------------------------------------------------------------------- */
/* plan tables (DYNAMIC by node update) */

#define TABLE_M 300u /* random_rule's HEAD m is at most 300 */

Test(zero_map, plan_table_holds_every_count_s_plan) {
  uint64_t rng = 0x5eed0012;
  for (int k = 0; k < 20; k++) {
    const size_t n = (size_t)tb_rng_range(&rng, 0, MDR_ZERO_MAX_SEGS);
    host_plan hp = make_host_plan(&rng, n, 0);
    const uint64_t words = mdr_plan_table_words(n, TABLE_M);
    uint64_t *w = malloc((size_t)words * sizeof *w + 8);
    cr_assert(w);
    w[words] = 0xA5A5A5A5A5A5A5A5ull; /* one word past the table */
    mdr_plan_table_fill(hp.segs, n, TABLE_M, w);
    cr_assert_eq(w[words], 0xA5A5A5A5A5A5A5A5ull, "fill wrote past the table");
    cr_assert_eq(mdr_plan_table_entry(n, TABLE_M) + 2 * n + 1, words, "the last entry ends the table");
    for (size_t i = 0; i < n; i++) cr_assert_eq(w[i], hp.segs[i].ptr);
    for (uint64_t t = 1; t <= TABLE_M; t++) {
      const uint64_t *e = w + mdr_plan_table_entry(n, t);
      uint64_t acc = 0;
      for (size_t i = 0; i < n; i++) {
        cr_assert_eq(e[i], mdr_zero_seg_bytes(&hp.segs[i], t), "t %llu rule %zu", (unsigned long long)t, i);
        cr_assert_eq(e[n + i], acc, "t %llu prefix %zu", (unsigned long long)t, i);
        acc += mdr_zero_chunks(e[i]);
      }
      cr_assert_eq(e[2 * n], acc);
    }
    free(w);
    free_host_plan(&hp);
  }
}

Test(zero_map, host_table_launch_clears_count_t_s_plan_and_serves_the_stage) {
  uint64_t rng = 0x5eed0013;
  for (uint32_t t = 1; t <= RING_MAX_TOKENS; t += 33) { /* ids fit the twin's token_ids */
    host_stage hs;
    stage_init(&hs, 6, MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_TABLE);
    stage_fill(&hs, 0, t, t, 100 + t); /* counter 6 -> slot 0 */
    host_plan hp = make_host_plan(&rng, 30, t);
    uint64_t *w = malloc((size_t)mdr_plan_table_words(hp.n, TABLE_M) * sizeof *w);
    cr_assert(w);
    mdr_plan_table_fill(hp.segs, hp.n, TABLE_M, w);
    hs.desc.table = ADDR(w);
    hs.desc.table_max = TABLE_M;
    /* the rules passed alongside are ignored: clear them to prove it */
    mdr_zero_seg junk[30];
    memset(junk, 0, sizeof junk);
    mdr_zero_fused_host(junk, hp.n, t, &hs.desc);
    check_host_image(&hp, t);
    check_ids(&hs, t, 100 + t);
    cr_assert_eq(hs.count_out, t);
    cr_assert_eq(hs.counter, 7);
    cr_assert_eq(hs.ack, 7);
    free(w);
    free_host_plan(&hp);
    free(hs.ring);
  }
}

Test(zero_map, table_launches_outside_the_table_are_refused) {
  uint64_t w[4] = {0};
  mdr_stage_desc d = {.table = ADDR(w), .table_max = TABLE_M, .flags = MDR_STAGE_TABLE};
  cr_assert(mdr_stage_table_ok(&d, 18, 1));
  cr_assert(mdr_stage_table_ok(&d, 18, TABLE_M));
  cr_assert(mdr_stage_table_ok(&d, MDR_ZERO_MAX_SEGS, 5));
  cr_assert_not(mdr_stage_table_ok(&d, 18, 0), "t = 0 has no entry");
  cr_assert_not(mdr_stage_table_ok(&d, 18, TABLE_M + 1), "t past the table");
  cr_assert_not(mdr_stage_table_ok(&d, MDR_ZERO_MAX_SEGS + 1, 5), "more rules than one launch");
  mdr_stage_desc dyn = d;
  dyn.flags |= MDR_STAGE_DYNAMIC;
  cr_assert_not(mdr_stage_table_ok(&dyn, 18, 5), "TABLE and DYNAMIC exclude each other");
  mdr_stage_desc none = d;
  none.table = 0;
  cr_assert_not(mdr_stage_table_ok(&none, 18, 5), "no table");
  /* the host execution of a refused launch writes nothing */
  uint64_t rng = 0x5eed0014;
  host_plan hp = make_host_plan(&rng, 10, 0);
  uint64_t *tw = malloc((size_t)mdr_plan_table_words(hp.n, TABLE_M) * sizeof *tw);
  cr_assert(tw);
  mdr_plan_table_fill(hp.segs, hp.n, TABLE_M, tw);
  d.table = ADDR(tw);
  mdr_zero_fused_host(hp.segs, hp.n, TABLE_M + 1, &d);
  cr_assert_eq(tb_first_not(hp.mem, hp.mem_bytes, POISON), hp.mem_bytes, "a refused launch wrote");
  free(tw);
  free_host_plan(&hp);
}
