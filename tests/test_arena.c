/* Suite `arena`: the slab, the accessors and the three zeroing helpers with
 * the seed's exact coverage, on the host backend and (when a device is
 * present) the CUDA backend, with both strategies. Expected coverage is
 * written out here from spec §9 by buffer name, independently of src/. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "fault_backend.h"
#include "support.h"

static const char *const k_presets[] = {"qwen3-next-80b", "glm-5.3-flash-tp2", "nemotron-h",
                                        "deepseek-v4-flash"};

typedef struct arena_case {
  tb_kind kind;
  int preset;
  size_t m;
  mdr_zero_strategy zero;
} arena_case;

ParameterizedTestParameters(arena, helpers_clear_exactly_the_seed_coverage) {
  static arena_case cases[TB_KIND_COUNT * 4 * 2 * 2];
  size_t n = 0;
  const size_t ms[] = {48, 100};
  for (int k = 0; k < TB_KIND_COUNT; k++)
    for (int p = 0; p < 4; p++)
      for (int mi = 0; mi < 2; mi++)
        for (int z = 0; z < 2; z++)
          cases[n++] = (arena_case){(tb_kind)k, p, ms[mi], (mdr_zero_strategy)z};
  return cr_make_param_array(arena_case, cases, n);
}

static void run_and_check(mdr_arena *a, mdr_stream s, tb_helper h, size_t t, mdr_rows_policy pol,
                          const char *label) {
  size_t want[MDR_BUF_COUNT];
  char what[160];
  mdr_backend *b = mdr_arena_backend(a);
  tb_poison_arena(a);
  mdr_status st = h == TB_ZERO_ALL ? mdr_arena_zero_all(a, s)
                  : h == TB_ZERO_ROWS ? mdr_arena_zero_all_rows(a, s, t)
                                : mdr_arena_zero_prefill_essentials(a, s);
  cr_assert_eq(st, MDR_OK, "%s: %s", label, mdr_backend_last_error(b));
  cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
  tb_expected(a, h, t, pol, want);
  snprintf(what, sizeof what, "%s helper %d tokens %zu policy %d", label, (int)h, t, (int)pol);
  tb_expect_arena(a, want, what);
}

ParameterizedTest(arena_case *c, arena, helpers_clear_exactly_the_seed_coverage) {
  mdr_backend *b = tb_backend(c->kind);
  mdr_stream s = tb_stream(b);
  mdr_sizes sizes = tb_preset_sizes(k_presets[c->preset], c->m);
  mdr_arena *a = NULL;
  char label[96];
  snprintf(label, sizeof label, "%s %s M=%zu %s", tb_kind_name(c->kind), k_presets[c->preset], c->m,
           c->zero == MDR_ZERO_FUSED ? "fused" : "memset");
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_arena_set_zero_strategy(a, c->zero), MDR_OK);
  const size_t m = c->m;
  const size_t tokens[] = {0, 1, 3, 16, 17, m - 1, m, m + 5};
  for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++)
    run_and_check(a, s, TB_ZERO_ROWS, tokens[i], MDR_ROWS_SEED, label);
  cr_assert_eq(mdr_arena_set_rows_policy(a, MDR_ROWS_ALL), MDR_OK);
  for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++)
    run_and_check(a, s, TB_ZERO_ROWS, tokens[i], MDR_ROWS_ALL, label);
  run_and_check(a, s, TB_ZERO_ALL, 0, MDR_ROWS_ALL, label);
  run_and_check(a, s, TB_ZERO_PREFILL, 0, MDR_ROWS_ALL, label);
  mdr_arena_destroy(a);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

Test(arena, buffers_are_aligned_disjoint_and_null_when_empty) {
  mdr_backend *b = tb_backend(TB_HOST);
  for (int p = 0; p < 4; p++) {
    mdr_sizes sizes = tb_preset_sizes(k_presets[p], 100);
    mdr_arena *a = NULL;
    cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK);
    mdr_dptr slab_lo = ~(mdr_dptr)0, slab_hi = 0;
    for (int i = 0; i < MDR_BUF_COUNT; i++) {
      mdr_dptr pi = mdr_arena_ptr(a, (mdr_buffer)i);
      size_t ni = mdr_arena_bytes(a, (mdr_buffer)i);
      cr_assert_eq(ni, sizes.bytes[i]);
      if (ni == 0) {
        cr_assert_eq(pi, 0, "%s is empty but not NULL", mdr_buffer_name((mdr_buffer)i));
        continue;
      }
      cr_assert_eq(pi % MDR_ARENA_ALIGN, 0, "%s misaligned", mdr_buffer_name((mdr_buffer)i));
      if (pi < slab_lo) slab_lo = pi;
      if (pi + ni > slab_hi) slab_hi = pi + ni;
      for (int j = 0; j < i; j++) {
        mdr_dptr pj = mdr_arena_ptr(a, (mdr_buffer)j);
        size_t nj = mdr_arena_bytes(a, (mdr_buffer)j);
        if (!nj) continue;
        cr_assert(pi + ni <= pj || pj + nj <= pi, "%s overlaps %s", mdr_buffer_name((mdr_buffer)i),
                  mdr_buffer_name((mdr_buffer)j));
      }
    }
    cr_assert_leq(slab_hi - slab_lo, mdr_arena_slab_bytes(a));
    mdr_arena_destroy(a);
  }
  mdr_backend_destroy(b);
}

Test(arena, named_accessors_match_the_generic_ones) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_sizes sizes = tb_preset_sizes("nemotron-h", 64);
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK);
#define CHECK_ACCESSOR(e, name)                                     \
  cr_assert_eq(mdr_arena_##name(a), mdr_arena_ptr(a, e), #name);    \
  cr_assert_eq(mdr_arena_##name##_bytes(a), mdr_arena_bytes(a, e), #name);
  MDR_BUFFER_LIST(CHECK_ACCESSOR)
#undef CHECK_ACCESSOR
  cr_assert_eq(mdr_arena_max_batch_tokens(a), 64);
  cr_assert_eq(mdr_arena_backend(a), b);
  mdr_arena_destroy(a);
  mdr_backend_destroy(b);
}

Test(arena, one_allocation_norm_unit_w_zeroed_and_no_allocation_afterwards) {
  mdr_backend *host = tb_backend(TB_HOST), *f = NULL;
  cr_assert_eq(fault_backend_create(host, &f), MDR_OK);
  mdr_sizes sizes = tb_preset_sizes("glm-5.3-flash-tp2", 100);
  mdr_arena *a = NULL;
  /* Poison what the allocator will hand out is not possible on the host, so
   * check norm_unit_w by value after create and after a full zeroing cycle. */
  cr_assert_eq(mdr_arena_create(f, &sizes, &a), MDR_OK);
  cr_assert_eq(fault_backend_calls_of(f, MDR_OP_ALLOC_DEVICE), 1);
  cr_assert_eq(tb_check_head(f, mdr_arena_norm_unit_w(a), mdr_arena_norm_unit_w_bytes(a),
                             mdr_arena_norm_unit_w_bytes(a), 0), -1);
  mdr_stream s = tb_stream(f);
  for (int z = 0; z < 2; z++) {
    cr_assert_eq(mdr_arena_set_zero_strategy(a, (mdr_zero_strategy)z), MDR_OK);
    cr_assert_eq(mdr_arena_zero_all(a, s), MDR_OK);
    cr_assert_eq(mdr_arena_zero_all_rows(a, s, 7), MDR_OK);
    cr_assert_eq(mdr_arena_zero_prefill_essentials(a, s), MDR_OK);
  }
  cr_assert_eq(fault_backend_calls_of(f, MDR_OP_ALLOC_DEVICE), 1);
  cr_assert_eq(fault_backend_calls_of(f, MDR_OP_ALLOC_PINNED), 0);
  mdr_backend_stream_destroy(f, s);
  mdr_arena_destroy(a);
  cr_assert_eq(fault_backend_live(f), 0);
  mdr_backend_destroy(f);
  mdr_backend_destroy(host);
}

Test(arena, zero_plan_lists_the_segments_in_order) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_sizes sizes = tb_preset_sizes("qwen3-next-80b", 100);
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK);
  for (int pol = 0; pol < 2; pol++) {
    cr_assert_eq(mdr_arena_set_rows_policy(a, (mdr_rows_policy)pol), MDR_OK);
    const size_t tokens[] = {0, 1, 17, 99, 100, 1000};
    for (size_t ti = 0; ti < 6; ti++) {
      size_t t = tokens[ti], want[MDR_BUF_COUNT], n = 0, count = 0;
      mdr_segment seg[MDR_ZERO_PLAN_MAX + 1];
      tb_expected(a, TB_ZERO_ROWS, t, (mdr_rows_policy)pol, want);
      cr_assert_eq(mdr_arena_zero_plan(a, t, seg, MDR_ZERO_PLAN_MAX + 1, &n), MDR_OK);
      /* in the seed's order, skipping NULL and empty entries */
      for (size_t i = 0; i < 18; i++) {
        mdr_buffer buf;
        cr_assert_eq(mdr_buffer_from_name(tb_zero_all_names[i], &buf), MDR_OK);
        if (!want[buf]) continue;
        cr_assert_lt(count, n);
        cr_assert_eq(seg[count].ptr, mdr_arena_ptr(a, buf), "segment %zu is not %s", count, tb_zero_all_names[i]);
        cr_assert_eq(seg[count].bytes, want[buf], "%s at t=%zu", tb_zero_all_names[i], t);
        count++;
      }
      cr_assert_eq(count, n);
      /* a short buffer gets the first cap segments and the full count */
      mdr_segment two[2] = {{0, 0}, {0, 0}};
      size_t n2 = 0;
      cr_assert_eq(mdr_arena_zero_plan(a, t, two, 2, &n2), MDR_OK);
      cr_assert_eq(n2, n);
      if (n >= 2) cr_assert(two[0].ptr == seg[0].ptr && two[1].bytes == seg[1].bytes);
      cr_assert_eq(mdr_arena_zero_plan(a, t, NULL, 0, &n2), MDR_OK);
      cr_assert_eq(n2, n);
    }
  }
  mdr_arena_destroy(a);
  mdr_backend_destroy(b);
}

Test(arena, glm_trim_entries_are_null_and_skipped) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_model_config c;
  mdr_limits l = {100, 4096, 16, 4};
  mdr_sizes_options o;
  mdr_sizes sizes;
  mdr_sizes_options_default(&o);
  o.glm_trim = true;
  cr_assert_eq(mdr_model_preset("glm-5.3-flash-tp2", &c), MDR_OK);
  cr_assert_eq(mdr_sizes_from_config_ex(&c, &l, &o, &sizes), MDR_OK);
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK);
  cr_assert_eq(mdr_arena_qkv_output(a), 0);
  mdr_stream s = tb_stream(b);
  run_and_check(a, s, TB_ZERO_ROWS, 5, MDR_ROWS_SEED, "glm trimmed");
  run_and_check(a, s, TB_ZERO_ALL, 0, MDR_ROWS_SEED, "glm trimmed");
  run_and_check(a, s, TB_ZERO_PREFILL, 0, MDR_ROWS_SEED, "glm trimmed");
  mdr_backend_stream_destroy(b, s);
  mdr_arena_destroy(a);
  mdr_backend_destroy(b);
}

/* Fault injection: for each k, the k-th backend call of the helper fails;
 * the status is returned, nothing after it is enqueued, the buffers after
 * the failed one keep their poison. */
Test(arena, a_failed_enqueue_stops_the_helper_and_is_returned) {
  mdr_backend *host = tb_backend(TB_HOST), *f = NULL;
  cr_assert_eq(fault_backend_create(host, &f), MDR_OK);
  mdr_sizes sizes = tb_preset_sizes("qwen3-next-80b", 48);
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(f, &sizes, &a), MDR_OK);
  mdr_stream s = tb_stream(f);
  mdr_segment plan[MDR_ZERO_PLAN_MAX];
  size_t n = 0;
  cr_assert_eq(mdr_arena_zero_plan(a, 5, plan, MDR_ZERO_PLAN_MAX, &n), MDR_OK);
  cr_assert_gt(n, 3);
  for (size_t k = 1; k <= n; k++) {
    tb_poison_arena(a);
    long before = fault_backend_calls_of(f, MDR_OP_MEMSET_ASYNC);
    fault_backend_fail_at(f, (long)k);
    mdr_status st = mdr_arena_zero_all_rows(a, s, 5);
    fault_backend_fail_at(f, 0);
    cr_assert_eq(st, MDR_ERR_BACKEND, "k=%zu", k);
    cr_assert_neq(strstr(mdr_backend_last_error(f), "injected"), NULL);
    cr_assert_eq(fault_backend_calls_of(f, MDR_OP_MEMSET_ASYNC) - before, (long)k,
                 "calls after the failure at k=%zu", k);
    for (size_t i = 0; i < n; i++) {
      mdr_buffer buf = MDR_BUF_COUNT;
      for (int j = 0; j < MDR_BUF_COUNT; j++)
        if (mdr_arena_ptr(a, (mdr_buffer)j) == plan[i].ptr) buf = (mdr_buffer)j;
      size_t zero = i + 1 < k ? plan[i].bytes : 0;
      cr_assert_eq(tb_check_head(f, plan[i].ptr, mdr_arena_bytes(a, buf), zero, tb_poison_of(buf)), -1,
                   "k=%zu segment %zu (%s)", k, i, mdr_buffer_name(buf));
    }
  }
  /* fused: one launch, its failure returned */
  cr_assert_eq(mdr_arena_set_zero_strategy(a, MDR_ZERO_FUSED), MDR_OK);
  fault_backend_fail_kind(f, MDR_OP_ZERO_FUSED);
  cr_assert_eq(mdr_arena_zero_all(a, s), MDR_ERR_BACKEND);
  fault_backend_fail_kind(f, -1);
  cr_assert_eq(mdr_arena_zero_all(a, s), MDR_OK);
  mdr_backend_stream_destroy(f, s);
  mdr_arena_destroy(a);
  cr_assert_eq(fault_backend_live(f), 0);
  mdr_backend_destroy(f);
  mdr_backend_destroy(host);
}

Test(arena, a_failed_create_leaves_nothing) {
  mdr_backend *host = tb_backend(TB_HOST), *f = NULL;
  cr_assert_eq(fault_backend_create(host, &f), MDR_OK);
  mdr_sizes sizes = tb_preset_sizes("nemotron-h", 32);
  for (long k = 1; k <= 2; k++) {
    mdr_arena *a = (mdr_arena *)0x1;
    fault_backend_fail_at(f, k);
    mdr_status st = mdr_arena_create(f, &sizes, &a);
    fault_backend_fail_at(f, 0);
    cr_assert_neq(st, MDR_OK, "k=%ld", k);
    cr_assert_null(a, "a failed create sets *out to NULL");
    cr_assert_eq(fault_backend_live(f), 0, "leak after failure at k=%ld", k);
  }
  fault_backend_fail_kind(f, MDR_OP_ALLOC_DEVICE);
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(f, &sizes, &a), MDR_ERR_OUT_OF_MEMORY);
  cr_assert_null(a);
  mdr_backend_destroy(f);
  mdr_backend_destroy(host);
}

Test(arena, bad_input_gets_a_clear_status) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_sizes sizes = tb_preset_sizes("qwen3-next-80b", 16), bad;
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(NULL, &sizes, &a), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_create(b, NULL, &a), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_create(b, &sizes, NULL), MDR_ERR_INVALID_ARGUMENT);
  bad = sizes;
  bad.max_batch_tokens = 0;
  cr_assert_eq(mdr_arena_create(b, &bad, &a), MDR_ERR_INVALID_ARGUMENT);
  bad = sizes;
  bad.logits_rows = 0;
  cr_assert_eq(mdr_arena_create(b, &bad, &a), MDR_ERR_OUT_OF_RANGE);
  bad.logits_rows = 7;
  cr_assert_eq(mdr_arena_create(b, &bad, &a), MDR_ERR_OUT_OF_RANGE);
  memset(&bad, 0, sizeof bad);
  bad.max_batch_tokens = 4;
  cr_assert_eq(mdr_arena_create(b, &bad, &a), MDR_ERR_INVALID_ARGUMENT);
  bad = sizes;
  bad.bytes[MDR_BUF_SCRATCH] = SIZE_MAX - 8;
  cr_assert_eq(mdr_arena_create(b, &bad, &a), MDR_ERR_OVERFLOW);
  cr_assert_null(a);

  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK);
  cr_assert_eq(mdr_arena_set_zero_strategy(NULL, MDR_ZERO_FUSED), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_set_zero_strategy(a, (mdr_zero_strategy)7), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(mdr_backend_last_error(b), "zero strategy 7"), "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_arena_set_zero_strategy(a, (mdr_zero_strategy)-1), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_zero_strategy(a), MDR_ZERO_MEMSET);
  cr_assert_eq(mdr_arena_set_rows_policy(NULL, MDR_ROWS_ALL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_set_rows_policy(a, (mdr_rows_policy)2), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(mdr_backend_last_error(b), "row policy 2"), "%s", mdr_backend_last_error(b));
  mdr_arena *none = (mdr_arena *)0x1;
  cr_assert_eq(mdr_arena_create(b, NULL, &none), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_null(none);
  cr_assert_not_null(strstr(mdr_backend_last_error(b), "NULL sizes"), "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_arena_rows_policy(a), MDR_ROWS_SEED);
  cr_assert_eq(mdr_arena_set_rows_policy(a, MDR_ROWS_ALL), MDR_OK);
  cr_assert_eq(mdr_arena_rows_policy(a), MDR_ROWS_ALL, "the getter reads what was set");
  cr_assert_eq(mdr_arena_set_rows_policy(a, MDR_ROWS_FROM_ARENA), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_rows_policy(a), MDR_ROWS_ALL, "a refused policy leaves it");
  cr_assert_eq(mdr_arena_set_rows_policy(a, MDR_ROWS_SEED), MDR_OK);
  cr_assert_eq(mdr_arena_zero_strategy(NULL), MDR_ZERO_MEMSET, "NULL arena: the default");
  cr_assert_eq(mdr_arena_rows_policy(NULL), MDR_ROWS_SEED, "NULL arena: the default");
  cr_assert_eq(mdr_arena_zero_all(NULL, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_zero_all_rows(NULL, NULL, 1), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_zero_prefill_essentials(NULL, NULL), MDR_ERR_INVALID_ARGUMENT);
  size_t n = 0;
  mdr_segment seg[2];
  cr_assert_eq(mdr_arena_zero_plan(NULL, 1, seg, 2, &n), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_zero_plan(a, 1, seg, 2, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_zero_plan(a, 1, NULL, 2, &n), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_ptr(NULL, MDR_BUF_LOGITS), 0);
  cr_assert_eq(mdr_arena_ptr(a, MDR_BUF_COUNT), 0);
  cr_assert_eq(mdr_arena_ptr(a, (mdr_buffer)-1), 0);
  cr_assert_eq(mdr_arena_bytes(a, MDR_BUF_COUNT), 0);
  cr_assert_eq(mdr_arena_bytes(NULL, MDR_BUF_LOGITS), 0);
  cr_assert_eq(mdr_arena_max_batch_tokens(NULL), 0);
  cr_assert_null(mdr_arena_backend(NULL));
  cr_assert_null(mdr_arena_sizes(NULL));
  cr_assert_eq(mdr_arena_slab_bytes(NULL), 0);
  mdr_arena_destroy(a);
  mdr_arena_destroy(NULL);
  mdr_backend_destroy(b);
}

/* The arena's helpers in poison mode: zero_all_rows fills what it leaves of
 * each row-trimmed buffer with 0xFF; off again, it leaves them alone. */
ParameterizedTestParameters(arena, poison_mode_fills_the_rows_zero_all_rows_leaves) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

ParameterizedTest(tb_kind *k, arena, poison_mode_fills_the_rows_zero_all_rows_leaves) {
  mdr_backend *b = tb_backend(*k);
  mdr_stream s = tb_stream(b);
  mdr_sizes sizes = tb_small_sizes();
  mdr_arena *a = NULL;
  setenv("MDR_POISON", "yes", 1);
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK);
  unsetenv("MDR_POISON");
  cr_assert_eq(mdr_arena_poison(a), 1, "MDR_POISON at create");
  for (int on = 1; on >= 0; on--) {
    cr_assert_eq(mdr_arena_set_poison(a, on), MDR_OK);
    tb_poison_arena(a);
    cr_assert_eq(mdr_arena_zero_all_rows(a, s, 3), MDR_OK);
    cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
    size_t zero[MDR_BUF_COUNT], whole[MDR_BUF_COUNT];
    tb_expected(a, TB_ZERO_ROWS, 3, MDR_ROWS_SEED, zero);
    tb_expected(a, TB_ZERO_ALL, 0, MDR_ROWS_SEED, whole);
    for (int i = 0; i < MDR_BUF_COUNT; i++) {
      const mdr_buffer buf = (mdr_buffer)i;
      if (!mdr_arena_ptr(a, buf)) continue;
      const unsigned char fill = on && whole[i] ? 0xFF : tb_poison_of(buf);
      cr_assert_eq(tb_check_head(b, mdr_arena_ptr(a, buf), mdr_arena_bytes(a, buf), zero[i], fill), -1,
                   "poison %d: %s", on, mdr_buffer_name(buf));
    }
  }
  cr_assert_eq(mdr_arena_set_poison(NULL, 1), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_poison(NULL), 0);
  mdr_arena_destroy(a);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}
