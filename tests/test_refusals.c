/* Suite `refusals`: every refusal on a valid backend records its own text
 * (mdr_backend_last_error), so the text shown is never the one of the
 * previous failure; an unrecognised value of an environment switch the
 * library reads is reported there too and taken as off. Each case first
 * leaves an unrelated failure's text behind, then checks that the call under
 * test replaced it with one naming what was refused. Host backend (the
 * checks sit above the backend). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* A failure with a known text, so that a call that records nothing shows. */
static void leave_other_text(mdr_backend *b) {
  unsigned char byte = 0;
  cr_assert_eq(mdr_backend_copy_h2d(b, 0, &byte, 1), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(mdr_backend_last_error(b), "copy_h2d"), "setup: %s", mdr_backend_last_error(b));
}

static void expect_text(mdr_backend *b, const char *needle) {
  const char *t = mdr_backend_last_error(b);
  cr_assert_null(strstr(t, "copy_h2d"), "the previous failure's text is still shown: %s", t);
  cr_assert_not_null(strstr(t, needle), "last error \"%s\" does not name \"%s\"", t, needle);
}

static mdr_backend *host(void) {
  mdr_backend *b = NULL;
  cr_assert_eq(mdr_backend_host_create(&b), MDR_OK);
  return b;
}

static mdr_arena *small_arena(mdr_backend *b) {
  mdr_sizes s = tb_preset_sizes("qwen3-next-80b", 16);
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(b, &s, &a), MDR_OK);
  return a;
}

Test(refusals, stream_create_null_out) {
  mdr_backend *b = host();
  leave_other_text(b);
  cr_assert_eq(mdr_backend_stream_create(b, NULL), MDR_ERR_INVALID_ARGUMENT);
  expect_text(b, "NULL out");
  mdr_backend_destroy(b);
}

Test(refusals, alloc_zero_bytes) {
  mdr_backend *b = host();
  mdr_dptr d = 0;
  leave_other_text(b);
  cr_assert_eq(mdr_backend_alloc(b, 0, &d), MDR_ERR_INVALID_ARGUMENT);
  expect_text(b, "0 bytes");
  mdr_backend_destroy(b);
}

Test(refusals, alloc_null_out) {
  mdr_backend *b = host();
  leave_other_text(b);
  cr_assert_eq(mdr_backend_alloc(b, 10, NULL), MDR_ERR_INVALID_ARGUMENT);
  expect_text(b, "NULL out");
  mdr_backend_destroy(b);
}

Test(refusals, graph_cache_create_null_out) {
  mdr_backend *b = host();
  mdr_arena *a = small_arena(b);
  mdr_stream s = tb_stream(b);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  leave_other_text(b);
  cr_assert_eq(mdr_graph_cache_create(a, s, &o, NULL), MDR_ERR_INVALID_ARGUMENT);
  expect_text(b, "NULL out");
  mdr_backend_stream_destroy(b, s);
  mdr_arena_destroy(a);
  mdr_backend_destroy(b);
}

Test(refusals, zero_plan_null_count_or_out) {
  mdr_backend *b = host();
  mdr_arena *a = small_arena(b);
  size_t n = 0;
  leave_other_text(b);
  cr_assert_eq(mdr_arena_zero_plan(a, 1, NULL, 0, NULL), MDR_ERR_INVALID_ARGUMENT);
  expect_text(b, "NULL n");
  leave_other_text(b);
  cr_assert_eq(mdr_arena_zero_plan(a, 1, NULL, 4, &n), MDR_ERR_INVALID_ARGUMENT);
  expect_text(b, "NULL out");
  mdr_arena_destroy(a);
  mdr_backend_destroy(b);
}

/* ---- environment switches ---- */

/* Set `name` to each value, create an arena and a graph cache (both read
 * MDR_POISON; the cache reads MDR_DISABLE_GRAPHS), and check what the last
 * error says afterwards and whether the switch took. */
static void env_case(const char *name, const char *value, int expect_reported, int expect_on) {
  cr_assert_eq(setenv(name, value, 1), 0);
  mdr_backend *b = host();
  leave_other_text(b);
  mdr_arena *a = small_arena(b);
  mdr_stream s = tb_stream(b);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(a, s, &o, &c), MDR_OK, "an unrecognised value is no failure");
  const char *t = mdr_backend_last_error(b);
  if (expect_reported) {
    cr_assert_not_null(strstr(t, name), "%s=\"%s\": last error \"%s\"", name, value, t);
    cr_assert_not_null(strstr(t, "not recognised"), "%s", t);
  } else {
    cr_assert_not_null(strstr(t, "copy_h2d"), "%s=\"%s\" is accepted, yet reported: \"%s\"", name, value, t);
  }
  if (strcmp(name, "MDR_POISON") == 0) {
    cr_assert_eq(mdr_arena_poison(a) != 0, expect_on, "%s=\"%s\"", name, value);
  } else {
    mdr_graph_stats st;
    cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
    cr_assert_eq(st.graphs_disabled != 0, expect_on, "%s=\"%s\"", name, value);
  }
  mdr_graph_cache_destroy(c);
  mdr_backend_stream_destroy(b, s);
  mdr_arena_destroy(a);
  mdr_backend_destroy(b);
  unsetenv(name);
}

Test(refusals, environment_switch_values) {
  static const char *const names[] = {"MDR_POISON", "MDR_DISABLE_GRAPHS"};
  for (int i = 0; i < 2; i++) {
    env_case(names[i], "1", 0, 1);
    env_case(names[i], "ON", 0, 1);
    env_case(names[i], "yes", 0, 1);
    env_case(names[i], "0", 0, 0);
    env_case(names[i], "off", 0, 0);
    env_case(names[i], "", 0, 0);
    env_case(names[i], " 1", 1, 0);
    env_case(names[i], "01", 1, 0);
    env_case(names[i], "y", 1, 0);
  }
}
