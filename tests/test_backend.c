/* Suite `backend`: status strings, version, the public backend calls and the
 * host backend's capture emulation; the same body runs on CUDA when present. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <string.h>

#include "backend_impl.h"
#include "fault_backend.h"
#include "support.h"

Test(backend, every_status_has_a_name) {
  for (int i = 0; i < MDR_STATUS_COUNT; i++) {
    const char *s = mdr_status_string((mdr_status)i);
    cr_assert(s && *s && strcmp(s, "unknown status") != 0, "status %d", i);
  }
  cr_assert_str_eq(mdr_status_string(MDR_OK), "ok");
  cr_assert_str_eq(mdr_status_string(MDR_STATUS_COUNT), "unknown status");
  cr_assert_str_eq(mdr_status_string((mdr_status)-3), "unknown status");
  cr_assert_eq(mdr_version_number(), MDR_VERSION_NUMBER);
}

Test(backend, cuda_create_without_a_device_leaves_out_null) {
  mdr_backend *b = NULL;
  mdr_status st = mdr_backend_cuda_create(0, &b);
  if (st == MDR_OK) {
    cr_assert_str_eq(mdr_backend_name(b), "cuda");
    mdr_backend_destroy(b);
    b = NULL;
    cr_assert_eq(mdr_backend_cuda_create(1 << 20, &b), MDR_ERR_NO_DEVICE);
  } else {
    cr_assert(st == MDR_ERR_NO_DEVICE || st == MDR_ERR_UNSUPPORTED, "%s", mdr_status_string(st));
  }
  cr_assert_null(b);
  cr_assert_eq(mdr_backend_cuda_create(-1, &b), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_cuda_create(0, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_create_default(&b), MDR_OK);
  cr_assert_not_null(b);
  mdr_backend_destroy(b);
  cr_assert_eq(mdr_backend_create_default(NULL), MDR_ERR_INVALID_ARGUMENT);
}

ParameterizedTestParameters(backend, copies_fill_and_memset_round_trip) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

ParameterizedTest(tb_kind *k, backend, copies_fill_and_memset_round_trip) {
  mdr_backend *b = tb_backend(*k);
  mdr_stream s = tb_stream(b);
  mdr_dptr d = 0;
  unsigned char src[1000], dst[1000];
  for (int i = 0; i < 1000; i++) src[i] = (unsigned char)(i * 7);
  cr_assert_eq(mdr_backend_alloc(b, 1000, &d), MDR_OK);
  cr_assert_eq(d % 256, 0);
  cr_assert_eq(mdr_backend_copy_h2d(b, d, src, 1000), MDR_OK);
  cr_assert_eq(mdr_backend_memset_async(b, d + 10, 0, 90, s), MDR_OK);
  cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
  cr_assert_eq(mdr_backend_copy_d2h(b, dst, d, 1000), MDR_OK);
  for (int i = 0; i < 1000; i++)
    cr_assert_eq(dst[i], i >= 10 && i < 100 ? 0 : src[i], "byte %d", i);
  cr_assert_eq(mdr_backend_fill(b, d, 0x5A, 1000), MDR_OK);
  cr_assert_eq(mdr_backend_copy_d2h(b, dst, d, 1000), MDR_OK);
  for (int i = 0; i < 1000; i++) cr_assert_eq(dst[i], 0x5A);
  mdr_backend_free(b, d);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

ParameterizedTestParameters(backend, capture_records_and_replay_runs_in_order) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

ParameterizedTest(tb_kind *k, backend, capture_records_and_replay_runs_in_order) {
  mdr_backend *b = tb_backend(*k);
  mdr_stream s = tb_stream(b);
  mdr_dptr d = 0;
  unsigned char out[64];
  cr_assert_eq(mdr_backend_alloc(b, 64, &d), MDR_OK);
  cr_assert_eq(mdr_backend_fill(b, d, 0xEE, 64), MDR_OK);
  cr_assert_eq(mdr_be_capture_begin(b, s), MDR_OK);
  int capturing = 0;
  cr_assert_eq(mdr_be_is_capturing(b, s, &capturing), MDR_OK);
  cr_assert_eq(capturing, 1);
  cr_assert_eq(mdr_backend_memset_async(b, d, 0, 64, s), MDR_OK);
  cr_assert_eq(mdr_backend_memset_async(b, d, 0x11, 32, s), MDR_OK); /* after the first: order matters */
  void *g = NULL, *x = NULL;
  cr_assert_eq(mdr_be_capture_end(b, s, &g), MDR_OK);
  /* nothing ran during capture */
  cr_assert_eq(mdr_backend_copy_d2h(b, out, d, 64), MDR_OK);
  for (int i = 0; i < 64; i++) cr_assert_eq(out[i], 0xEE);
  cr_assert_eq(mdr_be_graph_instantiate(b, g, NULL, &x), MDR_OK);
  mdr_be_graph_destroy(b, g);
  for (int rep = 0; rep < 2; rep++) {
    cr_assert_eq(mdr_backend_fill(b, d, 0xEE, 64), MDR_OK);
    cr_assert_eq(mdr_be_graph_launch(b, x, s), MDR_OK);
    cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
    cr_assert_eq(mdr_backend_copy_d2h(b, out, d, 64), MDR_OK);
    for (int i = 0; i < 64; i++) cr_assert_eq(out[i], i < 32 ? 0x11 : 0, "rep %d byte %d", rep, i);
  }
  mdr_be_exec_destroy(b, x);
  mdr_backend_free(b, d);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

ParameterizedTestParameters(backend, an_illegal_call_under_capture_fails_it_cleanly) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

ParameterizedTest(tb_kind *k, backend, an_illegal_call_under_capture_fails_it_cleanly) {
  mdr_backend *b = tb_backend(*k);
  mdr_stream s = tb_stream(b);
  mdr_dptr d = 0;
  cr_assert_eq(mdr_backend_alloc(b, 256, &d), MDR_OK);
  void *none = NULL;
  cr_assert_neq(mdr_be_capture_end(b, s, &none), MDR_OK, "end without begin");
  cr_assert_null(none);
  cr_assert_eq(mdr_be_capture_begin(b, NULL), MDR_ERR_CAPTURE, "capture on the legacy stream");
  cr_assert_eq(mdr_be_capture_begin(b, s), MDR_OK);
  cr_assert_eq(mdr_backend_memset_async(b, d, 0, 256, s), MDR_OK);
  cr_assert_neq(mdr_backend_synchronize(b, s), MDR_OK, "synchronize under capture must fail");
  void *g = (void *)0x1;
  cr_assert_eq(mdr_be_capture_end(b, s, &g), MDR_ERR_CAPTURE);
  cr_assert_eq(g, (void *)0x1);
  cr_assert_neq(strlen(mdr_backend_last_error(b)), 0);
  int capturing = 1;
  cr_assert_eq(mdr_be_is_capturing(b, s, &capturing), MDR_OK);
  cr_assert_eq(capturing, 0);
  /* the stream works again */
  cr_assert_eq(mdr_backend_memset_async(b, d, 0, 256, s), MDR_OK);
  cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
  mdr_backend_free(b, d);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

Test(backend, bad_input_gets_a_clear_status) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_stream s = NULL;
  mdr_dptr d = 0;
  unsigned char x[4];
  cr_assert_eq(mdr_backend_host_create(NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_stream_create(NULL, &s), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_stream_create(b, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_synchronize(NULL, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_copy_h2d(b, 0, x, 4), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_neq(strlen(mdr_backend_last_error(b)), 0);
  cr_assert_eq(mdr_backend_copy_d2h(b, NULL, 64, 4), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_fill(b, 0, 0, 4), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_memset_async(b, 0, 0, 4, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_copy_h2d(b, 0, NULL, 0), MDR_OK, "n == 0 is a no-op");
  cr_assert_eq(mdr_backend_copy_h2d(NULL, 64, x, 4), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_alloc(b, 0, &d), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_alloc(b, 16, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_alloc(NULL, 16, &d), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(mdr_backend_name(NULL), "none");
  cr_assert_str_eq(mdr_backend_last_error(NULL), "");
  cr_assert_str_eq(mdr_backend_name(b), "host");
  mdr_backend_stream_destroy(b, NULL);
  mdr_backend_stream_destroy(NULL, NULL);
  mdr_backend_free(b, 0);
  mdr_backend_destroy(NULL);
  mdr_backend_destroy(b);
}

/* A plan-table launch (DYNAMIC by node update) outside its table is refused
 * at enqueue, eagerly and as a node update, with nothing written; inside it,
 * it clears what the table says. (The CUDA launcher's refusal is checked in
 * test_zero_fused.c.) */
Test(backend, host_table_launch_outside_the_table_is_refused_and_writes_nothing) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_stream s = tb_stream(b);
  enum { M = 8, BYTES = 256 };
  mdr_dptr buf = 0, table = 0;
  cr_assert_eq(mdr_backend_alloc(b, BYTES, &buf), MDR_OK);
  const mdr_zero_seg rule = {.ptr = buf, .bytes = BYTES, .a = BYTES / M, .b = M, .rule = MDR_RULE_ROWS};
  uint64_t w[1 + M * 3];
  cr_assert_eq(mdr_plan_table_words(1, M), sizeof w / sizeof w[0]);
  mdr_plan_table_fill(&rule, 1, M, w);
  cr_assert_eq(mdr_backend_alloc(b, sizeof w, &table), MDR_OK);
  cr_assert_eq(mdr_backend_copy_h2d(b, table, w, sizeof w), MDR_OK);
  const mdr_stage_desc st = {.flags = MDR_STAGE_TABLE, .table = table, .table_max = M};
  unsigned char got[BYTES];

  cr_assert_eq(mdr_backend_fill(b, buf, 0xA5, BYTES), MDR_OK);
  cr_assert_eq(mdr_be_zero_fused(b, &rule, 1, M + 1, &st, s, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_neq(strlen(mdr_backend_last_error(b)), 0);
  cr_assert_eq(mdr_be_zero_fused(b, &rule, 1, 0, &st, s, NULL), MDR_ERR_INVALID_ARGUMENT);
  mdr_stage_desc dyn = st;
  dyn.flags |= MDR_STAGE_DYNAMIC;
  cr_assert_eq(mdr_be_zero_fused(b, &rule, 1, 3, &dyn, s, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
  cr_assert_eq(mdr_backend_copy_d2h(b, got, buf, BYTES), MDR_OK);
  for (int i = 0; i < BYTES; i++) cr_assert_eq(got[i], 0xA5, "refused launch wrote byte %d", i);

  /* a node is only reported from inside a capture */
  void *g = NULL, *x = NULL, *node = NULL;
  cr_assert_eq(mdr_be_zero_fused(b, &rule, 1, 3, &st, s, &node), MDR_ERR_CAPTURE);
  cr_assert_null(node);
  /* captured at t = 3 (the capture reports the node), then re-targeted: a
   * bad update keeps the node at 3 */
  cr_assert_eq(mdr_be_capture_begin(b, s), MDR_OK);
  cr_assert_eq(mdr_be_memset_async(b, buf, 0xA5, 1, s), MDR_OK); /* a node before it */
  cr_assert_eq(mdr_be_zero_fused(b, &rule, 1, 3, &st, s, &node), MDR_OK);
  cr_assert_not_null(node);
  cr_assert_eq(mdr_be_capture_end(b, s, &g), MDR_OK);
  cr_assert_eq(mdr_be_graph_instantiate(b, g, NULL, &x), MDR_OK);
  cr_assert_eq(mdr_be_fused_node_update(b, x, (void *)1, &rule, 1, 2, &st), MDR_ERR_INVALID_ARGUMENT,
               "the memset node is not a fused node");
  cr_assert_eq(mdr_be_fused_node_update(b, x, node, &rule, 1, M + 1, &st), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_be_graph_launch(b, x, s), MDR_OK);
  cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
  cr_assert_eq(mdr_backend_copy_d2h(b, got, buf, BYTES), MDR_OK);
  for (int i = 0; i < BYTES; i++)
    cr_assert_eq(got[i], i < 3 * BYTES / M ? 0 : 0xA5, "byte %d after the replay at t = 3", i);
  mdr_be_exec_destroy(b, x);
  mdr_be_graph_destroy(b, g);
  mdr_backend_free(b, table);
  mdr_backend_free(b, buf);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

Test(backend, fault_backend_fails_the_kth_call_and_counts_live_resources) {
  mdr_backend *host = tb_backend(TB_HOST), *f = NULL;
  cr_assert_eq(fault_backend_create(host, &f), MDR_OK);
  mdr_dptr d = 0;
  cr_assert_eq(mdr_backend_alloc(f, 64, &d), MDR_OK);
  cr_assert_eq(fault_backend_live(f), 1);
  fault_backend_fail_at(f, 2);
  cr_assert_eq(mdr_backend_fill(f, d, 1, 64), MDR_OK);
  cr_assert_eq(mdr_backend_fill(f, d, 1, 64), MDR_ERR_BACKEND);
  cr_assert_eq(mdr_backend_fill(f, d, 1, 64), MDR_OK);
  cr_assert_eq(fault_backend_injected(f), 1);
  fault_backend_fail_kind(f, MDR_OP_ALLOC_DEVICE);
  mdr_dptr e = 0;
  cr_assert_eq(mdr_backend_alloc(f, 64, &e), MDR_ERR_OUT_OF_MEMORY);
  cr_assert_eq(e, 0);
  fault_backend_fail_kind(f, -1);
  mdr_backend_free(f, d);
  cr_assert_eq(fault_backend_live(f), 0);
  mdr_backend_destroy(f);
  mdr_backend_destroy(host);
}

/* Error texts belong to one backend: a new backend (even at the address of
 * a destroyed one) starts with "", in this thread and in others. */
Test(backend, a_new_backend_never_shows_the_texts_of_an_old_one) {
  for (int round = 0; round < 64; round++) {
    mdr_backend *b = tb_backend(TB_HOST);
    cr_assert_str_eq(mdr_backend_last_error(b), "", "round %d: a fresh backend has a text", round);
    mdr_dptr d = 0;
    cr_assert_eq(mdr_backend_alloc(b, 0, &d), MDR_ERR_INVALID_ARGUMENT);
    cr_assert_eq(mdr_backend_copy_h2d(b, 0, "x", 1), MDR_ERR_INVALID_ARGUMENT);
    cr_assert_neq(strlen(mdr_backend_last_error(b)), 0);
    mdr_backend_destroy(b); /* the next round's backend likely reuses the address */
  }
}
