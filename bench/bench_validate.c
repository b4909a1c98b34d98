/* bench_validate.c — zero-plan helpers and the check every (preset, policy,
 * strategy) passes before it is timed: buffers poisoned, one step, every
 * plan byte read back as zero, the bytes past each segment and the heads of
 * buffers outside the plan still poisoned, the token ids arrived and
 * nothing past them. A mismatch ends the run (exit 1). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "bench.h"

mdr_buffer buffer_at(const mdr_arena *a, mdr_dptr ptr) {
  for (int i = 0; i < MDR_BUF_COUNT; i++)
    if (mdr_arena_ptr(a, (mdr_buffer)i) == ptr) return (mdr_buffer)i;
  return MDR_BUF_COUNT;
}

size_t plan_bytes(mdr_backend *b, const mdr_arena *a, size_t tokens, size_t *segments) {
  mdr_segment plan[MDR_ZERO_PLAN_MAX];
  size_t n = 0, bytes = 0;
  CHECK(b, mdr_arena_zero_plan(a, tokens, plan, MDR_ZERO_PLAN_MAX, &n));
  for (size_t i = 0; i < n; i++) bytes += plan[i].bytes;
  if (segments) *segments = n;
  return bytes;
}

static bool all_bytes(const unsigned char *p, size_t n, unsigned char v, size_t *bad) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) return *bad = i, false;
  return true;
}

/* Check that device bytes [ptr, ptr + n) all equal v; die naming `what`. */
static void expect_bytes(mdr_backend *b, mdr_dptr ptr, size_t n, unsigned char v, const char *what,
                         const char *label) {
  static unsigned char *host;
  if (!host) host = xmalloc(VERIFY_CHUNK);
  for (size_t off = 0; off < n; off += VERIFY_CHUNK) {
    size_t len = n - off < VERIFY_CHUNK ? n - off : VERIFY_CHUNK;
    size_t bad = 0;
    CHECK(b, mdr_backend_copy_d2h(b, host, ptr + off, len));
    if (!all_bytes(host, len, v, &bad))
      die("validation failed (%s): %s: byte %zu is 0x%02x, expected 0x%02x", label, what, off + bad,
          host[bad], v);
  }
}

static void poison_arena(mdr_backend *b, mdr_arena *a) {
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    if (i == MDR_BUF_NORM_UNIT_W) continue; /* a weight that must stay zero, in no plan */
    size_t n = mdr_arena_bytes(a, (mdr_buffer)i);
    if (n) CHECK(b, mdr_backend_fill(b, mdr_arena_ptr(a, (mdr_buffer)i), POISON, n));
  }
}

/* Poison, one step at `tokens`, then: every plan byte zero, GUARD_BYTES past
 * each segment (inside its buffer) untouched, the head of every buffer
 * outside the plan untouched, token ids arrived and nothing past them. */
void validate(runner *r, size_t tokens, const char *label) {
  mdr_backend *b = r->b;
  mdr_segment plan[MDR_ZERO_PLAN_MAX];
  size_t n = 0;
  bool in_plan[MDR_BUF_COUNT] = {false};
  CHECK(b, mdr_arena_zero_plan(r->arena, tokens, plan, MDR_ZERO_PLAN_MAX, &n));
  poison_arena(b, r->arena);
  runner_step(r, tokens);
  runner_sync(r);
  for (size_t i = 0; i < n; i++) {
    mdr_buffer buf = buffer_at(r->arena, plan[i].ptr);
    if (buf == MDR_BUF_COUNT) die("library: plan segment %zu does not start at a buffer", i);
    size_t cap = mdr_arena_bytes(r->arena, buf);
    if (plan[i].bytes > cap) die("library: plan segment %s is %zu bytes > buffer %zu", mdr_buffer_name(buf), plan[i].bytes, cap);
    in_plan[buf] = true;
    size_t guard = cap - plan[i].bytes < GUARD_BYTES ? cap - plan[i].bytes : GUARD_BYTES;
    char what[128];
    snprintf(what, sizeof what, "%s (first %zu bytes must be zero)", mdr_buffer_name(buf), plan[i].bytes);
    expect_bytes(b, plan[i].ptr, plan[i].bytes, 0, what, label);
    snprintf(what, sizeof what, "%s past byte %zu (must be untouched)", mdr_buffer_name(buf), plan[i].bytes);
    expect_bytes(b, plan[i].ptr + plan[i].bytes, guard, POISON, what, label);
  }
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    size_t cap = mdr_arena_bytes(r->arena, (mdr_buffer)i);
    if (in_plan[i] || i == MDR_BUF_TOKEN_IDS || i == MDR_BUF_NORM_UNIT_W || !cap) continue;
    char what[128];
    snprintf(what, sizeof what, "%s (not in the plan: must be untouched)", mdr_buffer_name((mdr_buffer)i));
    expect_bytes(b, mdr_arena_ptr(r->arena, (mdr_buffer)i), cap < UNTOUCHED_PROBE ? cap : UNTOUCHED_PROBE,
                 POISON, what, label);
  }
  size_t id_bytes = tokens * sizeof(uint32_t);
  size_t tok_cap = mdr_arena_token_ids_bytes(r->arena);
  if (id_bytes > tok_cap) die("library: token_ids holds %zu bytes < %zu tokens", tok_cap, tokens);
  uint32_t *got = xmalloc(id_bytes);
  CHECK(b, mdr_backend_copy_d2h(b, got, mdr_arena_token_ids(r->arena), id_bytes));
  for (size_t i = 0; i < tokens; i++)
    if (got[i] != r->ids[i]) die("validation failed (%s): token_ids[%zu] = %u, expected %u", label, i, got[i], r->ids[i]);
  free(got);
  size_t guard = tok_cap - id_bytes < GUARD_BYTES ? tok_cap - id_bytes : GUARD_BYTES;
  expect_bytes(b, mdr_arena_token_ids(r->arena) + id_bytes, guard, POISON, "token_ids past the step's ids", label);
}
