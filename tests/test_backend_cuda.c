/* Suite `backend_cuda`: what the CUDA backend promises about devices and
 * blocking (src/backend_cuda.c). Every case skips without a GPU; the
 * several-GPU cases skip with fewer than two.
 *   - its blocking calls (fill, copies), and so arena and cache creation,
 *     never wait for an unrelated busy stream of the application;
 *   - a backend made for device d allocates, launches and synchronises on d
 *     whatever the calling thread's current device is, and leaves that
 *     current device as it found it; from one thread and from two;
 *   - an engine's own non-blocking cudaStream_t, cast to mdr_stream, works
 *     wherever an mdr_stream is taken (include/mdr/backend.h);
 *   - graph node updates go through the driver's entry point, or with
 *     MDR_NODE_UPDATE_DRIVER off through the runtime's call, and stage the
 *     same ids either way. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h" /* mdr_be_cuda_driver_node_update */
#include "support.h"

#if defined(MDR_HAVE_CUDA)
#include <cuda_runtime.h>

#include "gpu_helpers.h"

static int device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

static int current_device(void) {
  int d = -1;
  cr_assert_eq(cudaGetDevice(&d), cudaSuccess);
  return d;
}

static int device_of(mdr_dptr p) {
  struct cudaPointerAttributes at;
  cr_assert_eq(cudaPointerGetAttributes(&at, (const void *)(uintptr_t)p), cudaSuccess);
  return at.device;
}

/* Busy time of the unrelated stream: long enough that a device-wide wait
 * would still be waiting when the calls under test return. */
#define BUSY_NS 3000000000ull

/* After each call under test: the application's stream must still be
 * busy; the first call after which it is not is the one that waited for
 * the whole device, and is named. */
#define STILL_BUSY(app, what)                                                                         \
  do {                                                                                                \
    const cudaError_t q_ = cudaStreamQuery(app);                                                      \
    (void)cudaGetLastError();                                                                         \
    cr_assert_eq(q_, cudaErrorNotReady, "the application's stream finished during %s: it waited for " \
                 "the whole device", what);                                                           \
  } while (0)

/* An application stream busy with a long kernel: arena and cache creation
 * (fills and an upload), the blocking calls, and a step (its capture too)
 * return while it still runs. The backend is made first: it loads mdr's
 * kernels at creation, as any program's would be before its decode loop. */
Test(backend_cuda, creation_and_blocking_calls_do_not_wait_for_a_busy_unrelated_stream) {
  if (device_count() < 1) cr_skip_test("no CUDA device");
  cr_assert_eq(cudaSetDevice(0), cudaSuccess);
  cudaStream_t app = NULL;
  cr_assert_eq(cudaStreamCreateWithFlags(&app, cudaStreamNonBlocking), cudaSuccess);
  cr_assert_eq(tb_cuda_sleep(app, 1000), 0); /* the application's own kernel, loaded */
  cr_assert_eq(cudaStreamSynchronize(app), cudaSuccess);
  mdr_backend *b = tb_backend(TB_CUDA);
  mdr_stream s = tb_stream(b);
  cr_assert_eq(tb_cuda_sleep(app, BUSY_NS), 0);

  mdr_sizes sizes = tb_small_sizes();
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK, "%s", mdr_backend_last_error(b));
  STILL_BUSY(app, "mdr_arena_create");
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = MDR_GRAPH_DYNAMIC; /* uploads its plan table at create */
  o.zero = MDR_ZERO_FUSED;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(a, s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(b));
  STILL_BUSY(app, "mdr_graph_cache_create");
  unsigned char buf[64] = {1};
  cr_assert_eq(mdr_backend_fill(b, mdr_arena_hidden_states(a), 0, 64), MDR_OK);
  STILL_BUSY(app, "mdr_backend_fill");
  cr_assert_eq(mdr_backend_copy_h2d(b, mdr_arena_hidden_states(a), buf, 64), MDR_OK);
  STILL_BUSY(app, "mdr_backend_copy_h2d");
  cr_assert_eq(mdr_backend_copy_d2h(b, buf, mdr_arena_hidden_states(a), 64), MDR_OK);
  STILL_BUSY(app, "mdr_backend_copy_d2h");
  const uint32_t ids[3] = {5, 6, 7};
  cr_assert_eq(mdr_graph_cache_step(c, ids, 3), MDR_OK, "%s", mdr_backend_last_error(b));
  STILL_BUSY(app, "mdr_graph_cache_step (with its capture)");
  cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
  STILL_BUSY(app, "mdr_backend_synchronize of the cache's stream");
  uint32_t got[3];
  cr_assert_eq(mdr_backend_copy_d2h(b, got, mdr_arena_token_ids(a), sizeof got), MDR_OK);
  cr_assert_eq(memcmp(got, ids, sizeof got), 0, "the step ran while the other stream was busy");
  cr_assert_eq(cudaStreamSynchronize(app), cudaSuccess);
  mdr_graph_cache_destroy(c);
  mdr_arena_destroy(a);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
  cr_assert_eq(cudaStreamDestroy(app), cudaSuccess);
}

/* Everything a decode step needs, on backend b, checked: the arena's slab
 * lives on `want_device`, a cache step delivers ids and zeroes, and the
 * calling thread's current device is `caller_device` throughout. */
static void drive_on(int backend_device, int caller_device) {
  cr_assert_eq(cudaSetDevice(caller_device), cudaSuccess);
  mdr_backend *b = NULL;
  cr_assert_eq(mdr_backend_cuda_create(backend_device, &b), MDR_OK);
  cr_assert_eq(current_device(), caller_device, "create changed the caller's device");
  mdr_stream s = tb_stream(b);
  cr_assert_eq(current_device(), caller_device, "stream_create changed the caller's device");
  mdr_sizes sizes = tb_small_sizes();
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(device_of(mdr_arena_hidden_states(a)), backend_device, "the slab is on the wrong device");
  cr_assert_eq(mdr_arena_set_zero_strategy(a, MDR_ZERO_FUSED), MDR_OK);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(a, s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(b));
  uint32_t ids[TB_SMALL_M];
  for (int step = 0; step < 20; step++) {
    const size_t t = 1 + (size_t)(step * 7) % TB_SMALL_M;
    for (size_t i = 0; i < t; i++) ids[i] = (uint32_t)(1000 * backend_device + 10 * step + i);
    tb_poison_arena(a);
    cr_assert_eq(mdr_graph_cache_step(c, ids, t), MDR_OK, "%s", mdr_backend_last_error(b));
    cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK, "%s", mdr_backend_last_error(b));
    uint32_t got[TB_SMALL_M];
    cr_assert_eq(mdr_backend_copy_d2h(b, got, mdr_arena_token_ids(a), t * 4), MDR_OK);
    cr_assert_eq(memcmp(got, ids, t * 4), 0, "device %d step %d: ids", backend_device, step);
    size_t want[MDR_BUF_COUNT];
    tb_expected(a, TB_ZERO_ROWS, t, MDR_ROWS_SEED, want);
    for (int i = 0; i < MDR_BUF_COUNT; i++) {
      mdr_dptr p = mdr_arena_ptr(a, (mdr_buffer)i);
      if (!p || i == MDR_BUF_TOKEN_IDS) continue;
      cr_assert_eq(tb_check_head(b, p, mdr_arena_bytes(a, (mdr_buffer)i), want[i], tb_poison_of((mdr_buffer)i)),
                   -1, "device %d step %d: %s", backend_device, step, mdr_buffer_name((mdr_buffer)i));
    }
    cr_assert_eq(current_device(), caller_device, "a step changed the caller's device");
  }
  mdr_graph_cache_destroy(c);
  mdr_arena_destroy(a);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
  cr_assert_eq(current_device(), caller_device, "destroy changed the caller's device");
}

Test(backend_cuda, a_backend_runs_on_its_device_whatever_the_callers_current_device) {
  if (device_count() < 2) cr_skip_test("fewer than two CUDA devices");
  drive_on(1, 0);
  drive_on(0, 1);
}

typedef struct worker {
  int backend_device, caller_device;
} worker;

static void *worker_main(void *arg) {
  const worker *w = arg;
  drive_on(w->backend_device, w->caller_device);
  return NULL;
}

/* Two threads, each driving the other GPU's backend from a current device
 * that is not the backend's. */
Test(backend_cuda, two_threads_drive_two_backends_on_two_devices) {
  if (device_count() < 2) cr_skip_test("fewer than two CUDA devices");
  worker w[2] = {{1, 0}, {0, 1}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  for (int i = 0; i < 2; i++) cr_assert_eq(pthread_join(th[i], NULL), 0);
}

/* The engine's own stream (include/mdr/backend.h, mdr_stream): a
 * non-blocking cudaStream_t made by the application, cast to mdr_stream,
 * carries the arena's helpers, an async memset and a graph cache's steps;
 * work the engine queued on it before a step runs before it, and the engine
 * destroys the stream itself after the cache. */
Test(backend_cuda, an_engines_own_non_blocking_stream_is_an_mdr_stream) {
  if (device_count() < 1) cr_skip_test("no CUDA device");
  cr_assert_eq(cudaSetDevice(0), cudaSuccess);
  mdr_backend *b = tb_backend(TB_CUDA);
  cudaStream_t own = NULL;
  cr_assert_eq(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), cudaSuccess);
  const mdr_stream s = (mdr_stream)own;
  mdr_sizes sizes = tb_small_sizes();
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK, "%s", mdr_backend_last_error(b));
  const mdr_dptr hs = mdr_arena_hidden_states(a);
  const size_t n = mdr_arena_hidden_states_bytes(a);
  cr_assert_eq(mdr_backend_fill(b, hs, 0x5A, n), MDR_OK);
  cr_assert_eq(mdr_arena_zero_all(a, s), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK, "%s", mdr_backend_last_error(b));
  unsigned char *got = malloc(n);
  cr_assert_not_null(got);
  cr_assert_eq(mdr_backend_copy_d2h(b, got, hs, n), MDR_OK);
  cr_assert_eq(tb_first_not(got, n, 0), n, "zero_all on the engine's stream left bytes");

  cr_assert_eq(mdr_backend_memset_async(b, hs, 0x11, n, s), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(cudaStreamSynchronize(own), cudaSuccess);
  cr_assert_eq(mdr_backend_copy_d2h(b, got, hs, n), MDR_OK);
  cr_assert_eq(tb_first_not(got, n, 0x11), n, "memset_async on the engine's stream");

  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(a, s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(b));
  const uint32_t ids[4] = {9, 8, 7, 6};
  for (int k = 0; k < 3; k++) { /* the capture, then replays */
    cr_assert_eq(tb_cuda_sleep(own, 20000000), 0); /* the engine's kernel, queued first */
    cr_assert_eq(mdr_graph_cache_step(c, ids, 4), MDR_OK, "%s", mdr_backend_last_error(b));
  }
  cr_assert_eq(cudaStreamSynchronize(own), cudaSuccess);
  uint32_t back[4];
  cr_assert_eq(mdr_backend_copy_d2h(b, back, mdr_arena_token_ids(a), sizeof back), MDR_OK);
  cr_assert_eq(memcmp(back, ids, sizeof back), 0, "the step's ids on the engine's stream");
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.eager_steps, 0, "every step of the engine's stream ran as a graph");

  mdr_graph_cache_destroy(c);
  cr_assert_eq(cudaStreamDestroy(own), cudaSuccess, "the engine destroys its stream itself");
  free(got);
  mdr_arena_destroy(a);
  mdr_backend_destroy(b);
}

/* Steps of counts 1..max_t in a shuffled order through a fused cache of
 * mode m, each checked in the arena's token_ids; returns the inline steps. */
static uint64_t node_update_steps(mdr_backend *b, mdr_graph_mode m) {
  mdr_sizes sizes = tb_small_sizes();
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK, "%s", mdr_backend_last_error(b));
  mdr_stream s = NULL;
  cr_assert_eq(mdr_backend_stream_create(b, &s), MDR_OK);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  o.mode = m;
  o.dynamic_impl = MDR_DYNAMIC_NODE_UPDATE;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(a, s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(b));
  const size_t max_t = sizes.max_batch_tokens < 24 ? sizes.max_batch_tokens : 24;
  uint64_t rng = 77;
  uint32_t ids[24], back[24];
  for (int k = 0; k < 60; k++) {
    const size_t t = 1 + tb_rng_next(&rng) % max_t;
    for (size_t i = 0; i < t; i++) ids[i] = (uint32_t)(tb_rng_next(&rng) % 150000) + 1;
    cr_assert_eq(mdr_graph_cache_step(c, ids, t), MDR_OK, "step %d: %s", k, mdr_backend_last_error(b));
    cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK, "%s", mdr_backend_last_error(b));
    cr_assert_eq(mdr_backend_copy_d2h(b, back, mdr_arena_token_ids(a), t * 4), MDR_OK);
    cr_assert_eq(memcmp(back, ids, t * 4), 0, "step %d (%zu tokens, mode %d): the ids it staged", k, t, (int)m);
  }
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.eager_steps, 0, "every step ran as a graph");
  mdr_graph_cache_destroy(c);
  mdr_backend_stream_destroy(b, s);
  mdr_arena_destroy(a);
  return st.inline_steps;
}

/* Graph node updates (an inline step's image, DYNAMIC's re-target) go
 * through the driver's entry point by default; MDR_NODE_UPDATE_DRIVER=0 at
 * create sends them through the runtime's call; a value that is not a
 * switch is reported and taken as on. Either way the steps stage the right
 * ids. */
Test(backend_cuda, node_updates_go_through_the_driver_unless_switched_off) {
  if (device_count() < 1) cr_skip_test("no CUDA device");
  const struct {
    const char *value; /* NULL: unset */
    int driver;
    int reported;
  } cases[] = {{NULL, 1, 0}, {"0", 0, 0}, {"off", 0, 0}, {"1", 1, 0}, {"y", 1, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].value)
      setenv("MDR_NODE_UPDATE_DRIVER", cases[i].value, 1);
    else
      unsetenv("MDR_NODE_UPDATE_DRIVER");
    mdr_backend *b = NULL;
    cr_assert_eq(mdr_backend_cuda_create(0, &b), MDR_OK);
    unsetenv("MDR_NODE_UPDATE_DRIVER");
    const char *v = cases[i].value ? cases[i].value : "(unset)";
    /* a runtime before 12.5 has no entry-point query: the runtime's update always */
    cr_assert_eq(mdr_be_cuda_driver_node_update(b), cases[i].driver && CUDART_VERSION >= 12050,
                 "MDR_NODE_UPDATE_DRIVER=%s", v);
    const char *err = mdr_backend_last_error(b);
    cr_assert_eq(strstr(err, "MDR_NODE_UPDATE_DRIVER") != NULL, cases[i].reported && CUDART_VERSION >= 12050,
                 "MDR_NODE_UPDATE_DRIVER=%s: %s", v, err);
    cr_assert_eq(node_update_steps(b, MDR_GRAPH_EXACT), 60, "MDR_NODE_UPDATE_DRIVER=%s: every step inline", v);
    cr_assert_eq(node_update_steps(b, MDR_GRAPH_DYNAMIC), 0, "MDR_NODE_UPDATE_DRIVER=%s: DYNAMIC", v);
    mdr_backend_destroy(b);
  }
}

#else

Test(backend_cuda, skipped_in_a_build_without_cuda) { cr_skip_test("built without CUDA"); }

#endif
