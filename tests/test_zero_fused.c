/* test_zero_fused.c — the fused zeroing kernel (kernels/zero_fused.cu) on a
 * CUDA device, through its entry point mdr_cuda_zero_and_stage.
 *
 * Every plan is laid out in one poisoned (0xA5) device allocation with
 * guards between the buffers; after the launch the whole allocation is
 * copied back and compared byte for byte with (1) the expected image (zero
 * in each cleared head, poison everywhere else) and (2) the image the same
 * plan produces through mdr_zero_fused_host on host memory. Staged launches
 * use a ring and ack in cudaHostAllocMapped memory. Without a device (or
 * without CUDA) every test skips; CUDA is only touched inside test bodies. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "support.h"
#include "zero_fused.h"

#ifdef MDR_HAVE_CUDA
#include <cuda_runtime.h>

#define POISON 0xA5u
#define ADDR(p) ((uint64_t)(uintptr_t)(p))
#define CU(call)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    cr_assert_eq(e_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));               \
  } while (0)

static int device_present(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n > 0;
}

static int sm_count(void) {
  int dev = 0, sms = 0;
  CU(cudaGetDevice(&dev));
  CU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

/* ------------------------------------------------------------------------- */
/* plans as offsets, instantiated over a device or a host base address */

#define PLAN_MAX_SEGS 200
#define PLAN_BUDGET ((uint64_t)128 << 20) /* buffer bytes per plan */
/* allocation per test: a plan, its guards, and room for one extra 64 MiB buffer */
#define IMAGE_CAP (PLAN_BUDGET + ((uint64_t)64 << 20) + PLAN_MAX_SEGS * 4500u + 8192u)

typedef struct plan {
  size_t n;
  uint64_t off[PLAN_MAX_SEGS];  /* buffer start, bytes from the allocation's start */
  uint64_t size[PLAN_MAX_SEGS]; /* buffer bytes */
  mdr_zero_seg rule[PLAN_MAX_SEGS]; /* ptr relative to the allocation */
  uint64_t mem_bytes;
} plan;

static uint64_t random_size(uint64_t *rng, uint64_t budget_left) {
  uint64_t size;
  switch (tb_rng_next(rng) % 10) {
    case 0: case 1: size = 0; break;
    case 2: case 3: size = tb_rng_range(rng, 1, 64); break;
    case 4: case 5: case 6: size = tb_rng_range(rng, 65, 2 * MDR_ZERO_CHUNK + 100); break;
    case 7: case 8: size = tb_rng_range(rng, 1, (uint64_t)4 << 20); break;
    default: size = tb_rng_range(rng, 1, (uint64_t)64 << 20); break;
  }
  if (size > budget_left) size = tb_rng_range(rng, 0, budget_left < 300 ? budget_left : 300);
  return size;
}

/* n buffers, each after a guard of 1..4096 bytes plus 0..255 of
 * misalignment; rules FIXED, HEAD or ROWS at random. */
static void make_plan(plan *p, uint64_t *rng, size_t n) {
  memset(p, 0, sizeof *p);
  cr_assert(n <= PLAN_MAX_SEGS);
  p->n = n;
  uint64_t cursor = 0, budget = PLAN_BUDGET;
  for (size_t i = 0; i < n; i++) {
    cursor += tb_rng_range(rng, 1, 4096) + tb_rng_range(rng, 0, 255);
    uint64_t size = random_size(rng, budget);
    budget -= size;
    p->off[i] = cursor;
    p->size[i] = size;
    mdr_zero_seg s = {.ptr = cursor, .bytes = size, .rule = MDR_RULE_FIXED};
    uint64_t r = tb_rng_next(rng) % 4;
    if (r == 1) {
      s.rule = MDR_RULE_HEAD;
      s.a = tb_rng_range(rng, 1, 300);
    } else if (r == 2 && size > 0) {
      s.rule = MDR_RULE_ROWS;
      s.a = tb_rng_range(rng, 1, size < 5000 ? size : 5000);
      s.b = size / s.a;
    }
    p->rule[i] = s;
    cursor += size;
  }
  p->mem_bytes = cursor + 4096;
}

static void plan_segs(const plan *p, uint64_t base, mdr_zero_seg *out) {
  for (size_t i = 0; i < p->n; i++) {
    out[i] = p->rule[i];
    out[i].ptr = base + p->off[i];
  }
}

/* Zero in each cleared head, poison everywhere else. */
static void check_image(const plan *p, const unsigned char *img, uint64_t t, const char *what) {
  uint64_t at = 0;
  for (size_t i = 0; i < p->n; i++) {
    uint64_t cleared = mdr_zero_seg_bytes(&p->rule[i], t);
    cr_assert(cleared <= p->size[i]);
    size_t bad = tb_first_not(img + at, (size_t)(p->off[i] - at), POISON);
    cr_assert_eq(bad, p->off[i] - at, "%s: guard before segment %zu written", what, i);
    bad = tb_first_not(img + p->off[i], (size_t)cleared, 0);
    cr_assert_eq(bad, cleared, "%s: segment %zu (size %llu, rule %u) byte %zu of %llu not cleared",
                 what, i, (unsigned long long)p->size[i], p->rule[i].rule, bad,
                 (unsigned long long)cleared);
    bad = tb_first_not(img + p->off[i] + cleared, (size_t)(p->size[i] - cleared), POISON);
    cr_assert_eq(bad, p->size[i] - cleared, "%s: segment %zu written past its cleared head", what, i);
    at = p->off[i] + p->size[i];
  }
  size_t bad = tb_first_not(img + at, (size_t)(p->mem_bytes - at), POISON);
  cr_assert_eq(bad, p->mem_bytes - at, "%s: trailing guard written", what);
}

/* Device and host copies of one plan's allocation. */
typedef struct images {
  unsigned char *dev;  /* device allocation */
  unsigned char *back; /* device image copied back */
  unsigned char *host; /* host execution */
  uint64_t cap;
} images;

static void images_init(images *im, uint64_t cap) {
  im->cap = cap;
  CU(cudaMalloc((void **)&im->dev, (size_t)cap));
  im->back = malloc((size_t)cap);
  im->host = malloc((size_t)cap);
  cr_assert(im->back && im->host);
}

static void images_free(images *im) {
  CU(cudaFree(im->dev));
  free(im->back);
  free(im->host);
}

static void poison(images *im, const plan *p, cudaStream_t s) {
  cr_assert(p->mem_bytes <= im->cap);
  CU(cudaMemsetAsync(im->dev, POISON, (size_t)p->mem_bytes, s));
  memset(im->host, POISON, (size_t)p->mem_bytes);
}

static void copy_back(images *im, const plan *p, cudaStream_t s) {
  CU(cudaStreamSynchronize(s));
  CU(cudaMemcpy(im->back, im->dev, (size_t)p->mem_bytes, cudaMemcpyDeviceToHost));
}

/* Device image == expected image == host-execution image. */
static void check_both(images *im, const plan *p, uint64_t t) {
  check_image(p, im->back, t, "device");
  check_image(p, im->host, t, "host");
  cr_assert_eq(memcmp(im->back, im->host, (size_t)p->mem_bytes), 0, "device and host images differ");
}

static void run_plain(images *im, const plan *p, uint64_t t, int sms, cudaStream_t s) {
  mdr_zero_seg segs[PLAN_MAX_SEGS];
  poison(im, p, s);
  plan_segs(p, ADDR(im->dev), segs);
  int e = mdr_cuda_zero_and_stage(segs, p->n, t, NULL, s, sms);
  cr_assert_eq(e, 0, "launch: %s", cudaGetErrorString((cudaError_t)e));
  plan_segs(p, ADDR(im->host), segs);
  mdr_zero_fused_host(segs, p->n, t, NULL);
  copy_back(im, p, s);
  check_both(im, p, t);
}

/* ------------------------------------------------------------------------- */
/* staging: ring and ack mapped, counter/done/ids/count on the device, and a
 * host twin for mdr_zero_fused_host */

#define RING_SLOTS 3u
#define RING_MAX_TOKENS 1000u
#define IDS_CAP (RING_MAX_TOKENS + 64u)

typedef struct dev_stage {
  unsigned char *ring_h; uint64_t ring_d; /* mapped */
  uint64_t *ack_h; uint64_t ack_d;         /* mapped */
  uint64_t *counter; mdr_stage_sync *sync; /* device */
  uint32_t *ids; uint32_t *count;          /* device */
  uint64_t slot_bytes;
  mdr_stage_desc desc;
} dev_stage;

static void dev_stage_init(dev_stage *st, uint64_t counter, uint32_t flags) {
  memset(st, 0, sizeof *st);
  st->slot_bytes = mdr_stage_slot_bytes(RING_MAX_TOKENS);
  void *dp = NULL;
  CU(cudaHostAlloc((void **)&st->ring_h, (size_t)(st->slot_bytes * RING_SLOTS), cudaHostAllocMapped));
  CU(cudaHostGetDevicePointer(&dp, st->ring_h, 0));
  st->ring_d = ADDR(dp);
  CU(cudaHostAlloc((void **)&st->ack_h, sizeof(uint64_t), cudaHostAllocMapped));
  CU(cudaHostGetDevicePointer(&dp, st->ack_h, 0));
  st->ack_d = ADDR(dp);
  memset(st->ring_h, POISON, (size_t)(st->slot_bytes * RING_SLOTS));
  *st->ack_h = 0xA5A5A5A5A5A5A5A5ull;
  CU(cudaMalloc((void **)&st->counter, sizeof(uint64_t)));
  CU(cudaMalloc((void **)&st->sync, sizeof(mdr_stage_sync)));
  CU(cudaMalloc((void **)&st->ids, IDS_CAP * sizeof(uint32_t)));
  CU(cudaMalloc((void **)&st->count, 2 * sizeof(uint32_t)));
  CU(cudaMemcpy(st->counter, &counter, sizeof counter, cudaMemcpyHostToDevice));
  CU(cudaMemset(st->sync, 0, sizeof(mdr_stage_sync)));
  CU(cudaMemset(st->ids, POISON, IDS_CAP * sizeof(uint32_t)));
  CU(cudaMemset(st->count, POISON, 2 * sizeof(uint32_t)));
  st->desc = (mdr_stage_desc){.ring = st->ring_d, .slot_bytes = st->slot_bytes,
                              .counter = ADDR(st->counter), .done = ADDR(st->sync),
                              .ack = st->ack_d, .token_ids = ADDR(st->ids),
                              .count_out = ADDR(st->count), .slots = RING_SLOTS, .flags = flags};
}

static void dev_stage_free(dev_stage *st) {
  CU(cudaFreeHost(st->ring_h));
  CU(cudaFreeHost(st->ack_h));
  CU(cudaFree(st->counter));
  CU(cudaFree(st->sync));
  CU(cudaFree(st->ids));
  CU(cudaFree(st->count));
}

static void fill_slot(dev_stage *st, uint32_t slot, uint32_t tokens, uint32_t copy, uint32_t base) {
  unsigned char *p = st->ring_h + slot * st->slot_bytes;
  mdr_stage_header h = {.tokens = tokens, .copy_tokens = copy};
  memcpy(p, &h, sizeof h);
  for (uint32_t i = 0; i < copy; i++) {
    uint32_t id = base + i;
    memcpy(p + MDR_STAGE_HEADER_BYTES + 4 * i, &id, 4);
  }
}

typedef struct stage_state {
  uint64_t counter, ack;
  uint32_t done, ticket, count; /* done and ticket: the launch's mdr_stage_sync */
  uint64_t published;
  uint32_t ids[IDS_CAP];
} stage_state;

static void read_stage(const dev_stage *st, stage_state *out) {
  CU(cudaDeviceSynchronize());
  CU(cudaMemcpy(&out->counter, st->counter, sizeof out->counter, cudaMemcpyDeviceToHost));
  mdr_stage_sync sync;
  CU(cudaMemcpy(&sync, st->sync, sizeof sync, cudaMemcpyDeviceToHost));
  out->done = sync.done;
  out->ticket = sync.ticket;
  out->published = sync.published;
  CU(cudaMemcpy(&out->count, st->count, sizeof out->count, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(out->ids, st->ids, sizeof out->ids, cudaMemcpyDeviceToHost));
  out->ack = *(volatile uint64_t *)st->ack_h;
}

static void check_ids(const stage_state *ss, uint32_t copy, uint32_t base) {
  for (uint32_t i = 0; i < copy; i++) cr_assert_eq(ss->ids[i], base + i, "id %u", i);
  for (uint32_t i = copy; i < IDS_CAP; i++)
    cr_assert_eq(ss->ids[i], 0xA5A5A5A5u, "id %u past copy_tokens written", i);
}

static void run_staged(images *im, const plan *p, uint64_t t_arg, uint64_t t_expect, dev_stage *st,
                       int sms) {
  mdr_zero_seg segs[PLAN_MAX_SEGS];
  poison(im, p, 0);
  plan_segs(p, ADDR(im->dev), segs);
  int e = mdr_cuda_zero_and_stage(segs, p->n, t_arg, &st->desc, 0, sms);
  cr_assert_eq(e, 0, "launch: %s", cudaGetErrorString((cudaError_t)e));
  plan_segs(p, ADDR(im->host), segs);
  mdr_zero_fused_host(segs, p->n, t_expect, NULL);
  copy_back(im, p, 0);
  check_both(im, p, t_expect);
}
#endif /* MDR_HAVE_CUDA */

#ifdef MDR_HAVE_CUDA
#define REQUIRE_DEVICE()                                        \
  do {                                                          \
    if (!device_present()) cr_skip_test("no CUDA device");      \
  } while (0)
#else
#define REQUIRE_DEVICE() cr_skip_test("no CUDA device")
#endif

/* ------------------------------------------------------------------------- */

Test(zero_fused, random_plans_clear_exactly_what_the_host_execution_clears) {
  REQUIRE_DEVICE();
#ifdef MDR_HAVE_CUDA
  uint64_t rng = 0xF00D0001;
  const int sms = sm_count();
  static plan p;
  images im;
  images_init(&im, IMAGE_CAP);
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int k = 0; k < 14; k++) {
    make_plan(&p, &rng, (size_t)tb_rng_range(&rng, 1, MDR_ZERO_MAX_SEGS));
    uint64_t t = tb_rng_range(&rng, 0, 400);
    /* small grids too, so blocks walk many chunks grid-stride */
    int grid_sms = k % 3 == 0 ? 1 : k % 3 == 1 ? 3 : sms;
    run_plain(&im, &p, t, grid_sms, s);
  }
  CU(cudaStreamDestroy(s));
  images_free(&im);
#endif
}

Test(zero_fused, plans_longer_than_64_segments_are_split_and_complete) {
  REQUIRE_DEVICE();
#ifdef MDR_HAVE_CUDA
  uint64_t rng = 0xF00D0002;
  const int sms = sm_count();
  static plan p;
  images im;
  images_init(&im, IMAGE_CAP);
  const size_t counts[] = {65, 128, 129, PLAN_MAX_SEGS};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    make_plan(&p, &rng, counts[c]);
    run_plain(&im, &p, tb_rng_range(&rng, 1, 400), sms, 0);
  }
  images_free(&im);
#endif
}

#ifdef MDR_HAVE_CUDA
/* Capture one launch of the plan at t into a graph, replay it once over
 * poison and check both images; `kernel` gets the name of the graph's
 * (first) kernel node, mangled, as cudaFuncGetName gives it. */
static void run_captured(images *im, const plan *p, uint64_t t, const char **kernel) {
  mdr_zero_seg segs[PLAN_MAX_SEGS];
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  plan_segs(p, ADDR(im->dev), segs);
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const int e = mdr_cuda_zero_and_stage(segs, p->n, t, NULL, s, sm_count());
  cudaGraph_t graph = NULL;
  CU(cudaStreamEndCapture(s, &graph));
  cr_assert_eq(e, 0, "launch under capture: %s", cudaGetErrorString((cudaError_t)e));
  cudaGraphNode_t nodes[8];
  size_t n_nodes = 8;
  CU(cudaGraphGetNodes(graph, nodes, &n_nodes));
  cr_assert(n_nodes >= 1);
  struct cudaKernelNodeParams kp;
  CU(cudaGraphKernelNodeGetParams(nodes[0], &kp));
  CU(cudaFuncGetName(kernel, kp.func));
  cudaGraphExec_t exec = NULL;
  CU(cudaGraphInstantiate(&exec, graph, 0));
  poison(im, p, s);
  CU(cudaGraphLaunch(exec, s));
  plan_segs(p, ADDR(im->host), segs);
  mdr_zero_fused_host(segs, p->n, t, NULL);
  copy_back(im, p, s);
  check_both(im, p, t);
  CU(cudaGraphExecDestroy(exec));
  CU(cudaGraphDestroy(graph));
  CU(cudaStreamDestroy(s));
}
#endif /* MDR_HAVE_CUDA */

/* Captured static plans of one launch with at most MDR_ZERO_LIST_MAX chunks
 * run as their chunk list (zero_list_kernel), larger ones with prefix sums
 * (zero_static_kernel): plans of 480 and 481 chunks (the list kernel's two
 * parameter sizes, ZF_LIST_SMALL = 480 in kernels/zero_fused.cu), of
 * exactly the cap and of one chunk more, misaligned, as HEAD and FIXED
 * rules, all clear exactly their bytes, captured and eagerly (the host
 * execution takes the same paths). */
Test(zero_fused, plans_at_the_chunk_list_cap_clear_exactly_on_both_sides) {
  REQUIRE_DEVICE();
#ifdef MDR_HAVE_CUDA
  static plan p;
  images im;
  images_init(&im, IMAGE_CAP);
  const uint64_t totals[4] = {480, 481, MDR_ZERO_LIST_MAX, MDR_ZERO_LIST_MAX + 1}; /* chunks */
  for (int c = 0; c < 4; c++) {
    memset(&p, 0, sizeof p);
    /* 100 chunks, totals - 101 chunks (the last one 77 bytes), 1 byte */
    const uint64_t sizes[3] = {100 * MDR_ZERO_CHUNK, (totals[c] - 102) * MDR_ZERO_CHUNK + 77, 1};
    uint64_t cursor = 0;
    p.n = 3;
    for (size_t i = 0; i < p.n; i++) {
      cursor += 37;
      p.off[i] = cursor;
      p.size[i] = sizes[i];
      p.rule[i] = (mdr_zero_seg){.ptr = cursor, .bytes = sizes[i], .rule = MDR_RULE_FIXED};
      cursor += sizes[i];
    }
    p.rule[1].rule = MDR_RULE_HEAD; /* m = 5000 rows of the buffer at t = 5000: all of it */
    p.rule[1].a = 5000;
    p.mem_bytes = cursor + 4096;
    const char *kernel = NULL;
    run_captured(&im, &p, 5000, &kernel);
    const char *want = totals[c] <= MDR_ZERO_LIST_MAX ? "zero_list_kernel" : "zero_static_kernel";
    cr_assert(kernel && strstr(kernel, want), "%llu chunks captured: kernel %s, want %s",
              (unsigned long long)totals[c], kernel ? kernel : "(none)", want);
    run_plain(&im, &p, 5000, sm_count(), 0); /* eager: the prefix sums */
  }
  images_free(&im);
#endif
}

Test(zero_fused, empty_plans_launch_nothing_and_write_nothing) {
  REQUIRE_DEVICE();
#ifdef MDR_HAVE_CUDA
  static plan p;
  images im;
  images_init(&im, 1 << 20);
  memset(&p, 0, sizeof p);
  p.n = 3; /* three empty buffers */
  p.off[0] = 100; p.off[1] = 1000; p.off[2] = 5001;
  p.rule[1].rule = MDR_RULE_HEAD; p.rule[1].bytes = 0; p.rule[1].a = 10;
  p.mem_bytes = 8192;
  for (size_t i = 0; i < p.n; i++) p.rule[i].ptr = p.off[i];
  cr_assert_eq(mdr_cuda_zero_and_stage(NULL, 0, 5, NULL, 0, sm_count()), 0);
  run_plain(&im, &p, 7, sm_count(), 0);
  /* HEAD rules at t = 0 clear nothing either */
  p.size[1] = 4096; p.rule[1].bytes = 4096; p.mem_bytes = 9000; p.off[2] = 5200; p.rule[2].ptr = 5200;
  run_plain(&im, &p, 0, sm_count(), 0);
  images_free(&im);
#endif
}

Test(zero_fused, staged_launch_fetches_the_counter_slot_and_advances_with_many_blocks) {
  REQUIRE_DEVICE();
#ifdef MDR_HAVE_CUDA
  uint64_t rng = 0xF00D0003;
  const int sms = sm_count();
  static plan p;
  images im;
  images_init(&im, IMAGE_CAP);
  dev_stage st;
  dev_stage_init(&st, 7, MDR_STAGE_FETCH | MDR_STAGE_ADVANCE);
  fill_slot(&st, 0, 5, 5, 100);
  fill_slot(&st, 1, 333, 336, 2000); /* ids not a multiple of 4: scalar remainder */
  fill_slot(&st, 2, RING_MAX_TOKENS, RING_MAX_TOKENS, 7000);
  make_plan(&p, &rng, 40);
  /* a 64 MiB buffer so the grid is full and ADVANCE spans many blocks */
  p.size[39] = (uint64_t)64 << 20; p.rule[39].rule = MDR_RULE_FIXED; p.rule[39].bytes = p.size[39];
  p.mem_bytes = p.off[39] + p.size[39] + 4096;
  stage_state ss;
  /* a static launch copies its own token count (the graph's) */
  run_staged(&im, &p, 336, 336, &st, sms); /* counter 7 -> slot 1 */
  read_stage(&st, &ss);
  check_ids(&ss, 336, 2000);
  cr_assert_eq(ss.count, 333);
  cr_assert_eq(ss.counter, 8);
  cr_assert_eq(ss.ack, 8);
  cr_assert_eq(ss.done, 0);
  cr_assert_eq(ss.ticket, 0, "tickets reset by the last block");
  run_staged(&im, &p, RING_MAX_TOKENS, RING_MAX_TOKENS, &st, sms); /* counter 8 -> slot 2 */
  read_stage(&st, &ss);
  check_ids(&ss, RING_MAX_TOKENS, 7000);
  cr_assert_eq(ss.count, RING_MAX_TOKENS);
  cr_assert_eq(ss.counter, 9);
  cr_assert_eq(ss.ack, 9);
  cr_assert_eq(ss.done, 0);
  cr_assert_eq(ss.ticket, 0, "tickets reset by the last block");
  /* a ring at an odd offset: ids copied without 16-byte accesses */
  st.desc.ring = st.ring_d + 4;
  {
    mdr_stage_header h = {.tokens = 21, .copy_tokens = 23};
    memcpy(st.ring_h + 4, &h, sizeof h);
    for (uint32_t i = 0; i < 23; i++) {
      uint32_t id = 40000 + i;
      memcpy(st.ring_h + 4 + MDR_STAGE_HEADER_BYTES + 4 * i, &id, 4);
    }
  }
  CU(cudaMemset(st.ids, POISON, IDS_CAP * sizeof(uint32_t)));
  run_staged(&im, &p, 23, 23, &st, sms); /* counter 9 -> slot 0 */
  read_stage(&st, &ss);
  check_ids(&ss, 23, 40000);
  cr_assert_eq(ss.count, 21);
  cr_assert_eq(ss.counter, 10);
  cr_assert_eq(ss.ack, 10);
  dev_stage_free(&st);
  images_free(&im);
#endif
}

Test(zero_fused, dynamic_stage_evaluates_the_rules_at_the_slot_token_count) {
  REQUIRE_DEVICE();
#ifdef MDR_HAVE_CUDA
  uint64_t rng = 0xF00D0004;
  const int sms = sm_count();
  static plan p;
  images im;
  images_init(&im, IMAGE_CAP);
  dev_stage st;
  dev_stage_init(&st, 4, MDR_STAGE_DYNAMIC);
  fill_slot(&st, 1, 57, 57, 1); /* counter 4 -> slot 1 */
  for (int k = 0; k < 4; k++) {
    make_plan(&p, &rng, (size_t)tb_rng_range(&rng, 1, MDR_ZERO_MAX_SEGS));
    run_staged(&im, &p, 999 /* ignored */, 57, &st, k == 0 ? 1 : sms);
  }
  stage_state ss;
  read_stage(&st, &ss);
  cr_assert_eq(ss.counter, 4, "no ADVANCE: counter untouched");
  cr_assert_eq(ss.count, 0xA5A5A5A5u, "no FETCH: count untouched");
  cr_assert_eq(ss.published, (uint64_t)5 << 32 | 57, "ticket 0 publishes (step + 1) << 32 | t");
  cr_assert_eq(ss.done, 0, "every DYNAMIC launch resets its arrivals");
  cr_assert_eq(ss.ticket, 0, "every DYNAMIC launch resets its tickets");
  check_ids(&ss, 0, 0);
  dev_stage_free(&st);
  images_free(&im);
#endif
}

Test(zero_fused, split_staged_plan_fetches_once_and_advances_once) {
  REQUIRE_DEVICE();
#ifdef MDR_HAVE_CUDA
  uint64_t rng = 0xF00D0005;
  const int sms = sm_count();
  static plan p;
  images im;
  images_init(&im, IMAGE_CAP);
  dev_stage st;
  dev_stage_init(&st, 2, MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_DYNAMIC);
  fill_slot(&st, 2, 61, 64, 500); /* counter 2 -> slot 2 */
  fill_slot(&st, 0, 3, 3, 9000);  /* what an early advance would make later launches read */
  make_plan(&p, &rng, 150);
  mdr_zero_seg segs[PLAN_MAX_SEGS + 1];
  poison(&im, &p, 0);
  plan_segs(&p, ADDR(im.dev), segs);
  /* The last launch clears the fetched ids: they stay zero only if no
   * launch after the first fetches again. */
  segs[150] = (mdr_zero_seg){.ptr = ADDR(st.ids), .bytes = 64 * 4, .rule = MDR_RULE_FIXED};
  int e = mdr_cuda_zero_and_stage(segs, 151, 999, &st.desc, 0, sms);
  cr_assert_eq(e, 0, "launch: %s", cudaGetErrorString((cudaError_t)e));
  plan_segs(&p, ADDR(im.host), segs);
  mdr_zero_fused_host(segs, p.n, 61, NULL);
  copy_back(&im, &p, 0);
  check_both(&im, &p, 61);
  stage_state ss;
  read_stage(&st, &ss);
  for (uint32_t i = 0; i < 64; i++) cr_assert_eq(ss.ids[i], 0, "id %u fetched by a later launch", i);
  cr_assert_eq(ss.count, 61);
  cr_assert_eq(ss.counter, 3, "advanced exactly once");
  cr_assert_eq(ss.ack, 3);
  cr_assert_eq(ss.done, 0);
  cr_assert_eq(ss.ticket, 0, "tickets reset by the last block");
  dev_stage_free(&st);
  images_free(&im);
#endif
}

Test(zero_fused, stage_without_segments_does_only_the_stage_work) {
  REQUIRE_DEVICE();
#ifdef MDR_HAVE_CUDA
  dev_stage st;
  dev_stage_init(&st, 5, MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_DYNAMIC);
  fill_slot(&st, 2, 9, 12, 77);
  cr_assert_eq(mdr_cuda_zero_and_stage(NULL, 0, 0, &st.desc, 0, sm_count()), 0);
  stage_state ss;
  read_stage(&st, &ss);
  check_ids(&ss, 12, 77);
  cr_assert_eq(ss.count, 9);
  cr_assert_eq(ss.counter, 6);
  cr_assert_eq(ss.ack, 6);
  cr_assert_eq(ss.done, 0);
  cr_assert_eq(ss.ticket, 0, "tickets reset by the last block");
  dev_stage_free(&st);
#endif
}

/* DYNAMIC by node update: the plan at t comes from the plan table in device
 * memory; device image == host image == expected, ids and counter served. */
Test(zero_fused, table_launch_clears_count_t_s_plan_from_the_table) {
  REQUIRE_DEVICE();
#ifdef MDR_HAVE_CUDA
  uint64_t rng = 0xF00D0010;
  const int sms = sm_count();
  static plan p;
  images im;
  images_init(&im, IMAGE_CAP);
  const uint64_t m = 300; /* make_plan's HEAD m is at most 300 */
  for (int k = 0; k < 6; k++) {
    make_plan(&p, &rng, (size_t)tb_rng_range(&rng, 1, MDR_ZERO_MAX_SEGS));
    const uint64_t t = k == 0 ? 1 : k == 1 ? m : tb_rng_range(&rng, 1, m);
    mdr_zero_seg segs[PLAN_MAX_SEGS];
    const uint64_t words = mdr_plan_table_words(p.n, m);
    uint64_t *w = malloc((size_t)words * sizeof *w), *wd = NULL;
    cr_assert(w);
    dev_stage st;
    dev_stage_init(&st, 3 + (uint64_t)k, MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_TABLE);
    fill_slot(&st, (uint32_t)((3 + k) % RING_SLOTS), (uint32_t)t, (uint32_t)t, 900);
    /* device table over the device image */
    plan_segs(&p, ADDR(im.dev), segs);
    mdr_plan_table_fill(segs, p.n, m, w);
    CU(cudaMalloc((void **)&wd, (size_t)words * sizeof *w));
    CU(cudaMemcpy(wd, w, (size_t)words * sizeof *w, cudaMemcpyHostToDevice));
    st.desc.table = ADDR(wd);
    st.desc.table_max = m;
    poison(&im, &p, 0);
    int e = mdr_cuda_zero_and_stage(segs, p.n, t, &st.desc, 0, k % 2 ? 1 : sms); /* 1 SM: blocks stride */
    cr_assert_eq(e, 0, "launch: %s", cudaGetErrorString((cudaError_t)e));
    /* host table over the host image */
    plan_segs(&p, ADDR(im.host), segs);
    mdr_plan_table_fill(segs, p.n, m, w);
    mdr_stage_desc hd = {.table = ADDR(w), .table_max = m, .flags = MDR_STAGE_TABLE};
    mdr_zero_fused_host(segs, p.n, t, &hd);
    copy_back(&im, &p, 0);
    check_both(&im, &p, t);
    stage_state ss;
    read_stage(&st, &ss);
    check_ids(&ss, (uint32_t)t, 900);
    cr_assert_eq(ss.count, t);
    cr_assert_eq(ss.counter, 4 + (uint64_t)k);
    cr_assert_eq(ss.ack, 4 + (uint64_t)k);
    /* outside the table: refused, nothing enqueued */
    cr_assert_neq(mdr_cuda_zero_and_stage(segs, p.n, m + 1, &st.desc, 0, sms), 0);
    cr_assert_neq(mdr_cuda_zero_and_stage(segs, p.n, 0, &st.desc, 0, sms), 0);
    CU(cudaFree(wd));
    free(w);
    dev_stage_free(&st);
  }
  images_free(&im);
#endif
}

Test(zero_fused, table_launch_grid_is_resident_at_the_blocks_a_sm_holds) {
  REQUIRE_DEVICE();
#ifdef MDR_HAVE_CUDA
  cr_assert_eq(mdr_cuda_zero_preload(NULL), 0);
  const int sms = sm_count(), per = mdr_cuda_zero_table_blocks_per_sm();
  /* described, never launched: the addresses are not touched */
  mdr_zero_seg big = {.ptr = 0x10000000u, .bytes = (uint64_t)1 << 30, .rule = MDR_RULE_FIXED};
  mdr_stage_desc st = {.flags = MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_TABLE, .table = 0x20000000u,
                       .table_max = 8};
  mdr_cuda_launch l;
  cr_assert_eq(mdr_cuda_zero_table_launch(&big, 1, 4, &st, sms, &l), 0);
  int fit = 0;
  CU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, l.func, (int)l.block[0], 0));
  cr_assert_geq(fit, 1);
  cr_assert_eq(per, fit < 6 ? fit : 6, "blocks a SM %d, the runtime fits %d", per, fit);
  /* a plan of 65536 chunks: the grid is every SM's resident blocks, all
   * at once, and the stage block */
  cr_assert_eq(l.grid[0], (unsigned)(sms * per) + 1u, "grid %u on %d SMs at %d a SM", l.grid[0], sms, per);
  cr_assert_leq(l.grid[0] - 1u, (unsigned)(sms * fit), "the zeroing blocks fit at once");
  cr_assert_eq(l.grid[1] * l.grid[2], 1u);
  /* a plan of fewer chunks than that: a block a chunk */
  big.bytes = 3 * MDR_ZERO_CHUNK;
  cr_assert_eq(mdr_cuda_zero_table_launch(&big, 1, 4, &st, sms, &l), 0);
  cr_assert_eq(l.grid[0], 3u + 1u);
#endif
}

Test(zero_fused, captured_launch_replays_the_same_image_twice) {
  REQUIRE_DEVICE();
#ifdef MDR_HAVE_CUDA
  uint64_t rng = 0xF00D0006;
  static plan p;
  images im;
  images_init(&im, IMAGE_CAP);
  make_plan(&p, &rng, 100); /* two launches in the graph */
  const uint64_t t = 77;
  mdr_zero_seg segs[PLAN_MAX_SEGS];
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  plan_segs(&p, ADDR(im.dev), segs);
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  int e = mdr_cuda_zero_and_stage(segs, p.n, t, NULL, s, sm_count());
  cudaGraph_t graph = NULL;
  CU(cudaStreamEndCapture(s, &graph));
  cr_assert_eq(e, 0, "launch under capture: %s", cudaGetErrorString((cudaError_t)e));
  cudaGraphExec_t exec = NULL;
  CU(cudaGraphInstantiate(&exec, graph, 0));
  plan_segs(&p, ADDR(im.host), segs);
  unsigned char *first = malloc((size_t)p.mem_bytes);
  cr_assert(first);
  for (int replay = 0; replay < 2; replay++) {
    CU(cudaMemsetAsync(im.dev, POISON, (size_t)p.mem_bytes, s));
    CU(cudaGraphLaunch(exec, s));
    copy_back(&im, &p, s);
    if (replay == 0) memcpy(first, im.back, (size_t)p.mem_bytes);
    memset(im.host, POISON, (size_t)p.mem_bytes);
    mdr_zero_fused_host(segs, p.n, t, NULL);
    check_both(&im, &p, t);
  }
  cr_assert_eq(memcmp(first, im.back, (size_t)p.mem_bytes), 0, "replays differ");
  free(first);
  CU(cudaGraphExecDestroy(exec));
  CU(cudaGraphDestroy(graph));
  CU(cudaStreamDestroy(s));
  images_free(&im);
#endif
}

Test(zero_fused, captured_staged_launch_reads_the_next_slot_on_each_replay) {
  REQUIRE_DEVICE();
#ifdef MDR_HAVE_CUDA
  uint64_t rng = 0xF00D0007;
  static plan p;
  images im;
  images_init(&im, IMAGE_CAP);
  make_plan(&p, &rng, 80);
  dev_stage st;
  dev_stage_init(&st, 10, MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_DYNAMIC);
  const uint32_t slot_tokens[RING_SLOTS] = {250, 13, 90}; /* counter 10 -> slot 1, then 2 */
  for (uint32_t k = 0; k < RING_SLOTS; k++) fill_slot(&st, k, slot_tokens[k], slot_tokens[k], 100 * k);
  mdr_zero_seg segs[PLAN_MAX_SEGS];
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  plan_segs(&p, ADDR(im.dev), segs);
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  int e = mdr_cuda_zero_and_stage(segs, p.n, 0, &st.desc, s, sm_count());
  cudaGraph_t graph = NULL;
  CU(cudaStreamEndCapture(s, &graph));
  cr_assert_eq(e, 0, "launch under capture: %s", cudaGetErrorString((cudaError_t)e));
  cudaGraphExec_t exec = NULL;
  CU(cudaGraphInstantiate(&exec, graph, 0));
  for (uint32_t replay = 0; replay < 2; replay++) {
    const uint32_t slot = (10 + replay) % RING_SLOTS;
    const uint64_t t = slot_tokens[slot];
    poison(&im, &p, s);
    CU(cudaMemsetAsync(st.ids, POISON, IDS_CAP * sizeof(uint32_t), s));
    CU(cudaGraphLaunch(exec, s));
    plan_segs(&p, ADDR(im.host), segs);
    mdr_zero_fused_host(segs, p.n, t, NULL);
    copy_back(&im, &p, s);
    check_both(&im, &p, t);
    stage_state ss;
    read_stage(&st, &ss);
    check_ids(&ss, slot_tokens[slot], 100 * slot);
    cr_assert_eq(ss.count, slot_tokens[slot]);
    cr_assert_eq(ss.counter, 11 + replay);
    cr_assert_eq(ss.ack, 11 + replay);
    cr_assert_eq(ss.done, 0);
  cr_assert_eq(ss.ticket, 0, "tickets reset by the last block");
    plan_segs(&p, ADDR(im.dev), segs);
  }
  CU(cudaGraphExecDestroy(exec));
  CU(cudaGraphDestroy(graph));
  CU(cudaStreamDestroy(s));
  dev_stage_free(&st);
  images_free(&im);
#endif
}
