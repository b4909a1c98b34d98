/* dynamic_switch_probe.cu — the three ways MDR_GRAPH_DYNAMIC can learn each
 * step's token count, side by side in one run:
 *   exact   the library's EXACT cache, one graph per count (the reference);
 *   (b)     the library's DYNAMIC, NODE_UPDATE: one graph whose fused node
 *           is re-targeted by the host when the count changes;
 *   (a)     the library's DYNAMIC, DEVICE_COUNT: one graph, every block of
 *           the fused kernel reads the count from the staging slot;
 *   (c)     built here: one graph = a select kernel (one block: reads the
 *           slot's count and ids from the staging ring, copies the ids,
 *           sets a conditional handle) -> a conditional SWITCH node whose
 *           body n zeroes the exact plan of count n (CUDA 12.8+ switch).
 * (c) is a probe, not library code: it has a body per measured count only
 * (a full cache would need one per count 1..M, or a ladder padded inside
 * each body), and its zeroing kernel is a copy of the library's store loop
 * (zero_map.h chunks, 16-byte stores, 4 in flight, 256 threads, grid
 * min(chunks, 6 per SM)).
 *
 * Build:  the CMake target `dynamic_switch_probe` (dev/CMakeLists.txt).
 * Run:    ./dynamic_switch_probe [--reps N] [--csv FILE]
 *
 * Method, per preset (GLM-5.3, Qwen3-Next; M = 4096; rows policy ALL):
 *   - (c) is validated at every count first: arena buffers poisoned, one
 *     step, every plan byte zero, up to 256 bytes past each segment still
 *     poisoned, the ids arrived (exit 1 otherwise). The library's modes are
 *     validated by its tests and by mdr-bench;
 *   - GPU µs per step: a blocker kernel holds the stream while one step is
 *     enqueued between two events, then is released; median of reps;
 *   - CPU µs per step with the count changing on every step (cycling through
 *     the counts), clock_gettime around the submitting call, the stream
 *     drained every 4 steps; median and p90.
 *   - the re-targeting call alone: a graph of one zeroing node (a 1 KiB
 *     parameter block, like the library's), host µs of cudaGraphLaunch
 *     alone, of the runtime's cudaGraphExecKernelNodeSetParams + launch and
 *     of the driver's cuGraphExecKernelNodeSetParams (CUkernel handle) +
 *     launch, the plan alternating between two counts; median and p90.
 * Exit 2 on a CUDA or mdr error. */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include <cuda.h> /* driver types; the driver call comes through the entry-point query */
#include <cuda_runtime.h>
#include <mdr/mdr.h>

#include "staging_layout.h"
#include "zero_map.h"

#include "lab.h"

#define PB_BLOCK 256
#define PB_BLOCKS_PER_SM 6
#define PB_SEGS 20
#define PB_SLOTS 8
#define PB_MAX_COUNTS 8
#define POISON 0xA5
#define GUARD 256
#define PB_M 4096             /* max_batch_tokens of the arenas (the largest count) */
#define PB_SEQ 65536          /* the other limits: mdr-bench's defaults */
#define PB_KV_BLOCK 16
#define PB_BATCH 4
#define PB_DEFAULT_REPS 200
#define PB_MIN_REPS 10
#define PB_ID_MULT 2654435761u /* Knuth's multiplicative hash: ids spread over the vocabulary */
#define PB_VOCAB 151936u        /* Qwen3's vocabulary size */

static const size_t k_counts[] = {1, 2, 8, 64, 512, PB_M};
static const int k_ncounts = sizeof k_counts / sizeof k_counts[0];

// ----------------------------------------------------------------------------
// kernels of (c)

struct pb_plan { /* a static plan: FIXED segments and chunk prefix sums */
  mdr_zero_seg segs[PB_SEGS];
  uint64_t prefix[PB_SEGS + 1];
  uint32_t n;
};

__global__ void __launch_bounds__(PB_BLOCK) pb_zero_kernel(const __grid_constant__ pb_plan p) {
  for (uint64_t k = blockIdx.x; k < p.prefix[p.n]; k += gridDim.x) {
    const uint32_t s = mdr_zero_locate(p.prefix, p.n, k);
    const mdr_zero_span sp = mdr_zero_chunk_span(p.segs[s].ptr, p.segs[s].bytes, k - p.prefix[s]);
    const unsigned tid = threadIdx.x;
    if (tid < sp.body - sp.begin) *(unsigned char *)(sp.begin + tid) = 0;
    if (tid < sp.end - sp.tail) *(unsigned char *)(sp.tail + tid) = 0;
    const unsigned n16 = (unsigned)((sp.tail - sp.body) >> 4);
    unsigned i = tid;
    for (; i + 3 * PB_BLOCK < n16; i += 4 * PB_BLOCK) {
#pragma unroll
      for (int u = 0; u < 4; u++) ((uint4 *)sp.body)[i + u * PB_BLOCK] = make_uint4(0, 0, 0, 0);
    }
    for (; i < n16; i += PB_BLOCK) ((uint4 *)sp.body)[i] = make_uint4(0, 0, 0, 0);
  }
}

struct pb_select_params {
  mdr_stage_desc st;
  cudaGraphConditionalHandle handle;
  uint32_t counts[PB_MAX_COUNTS];
  uint32_t ncounts;
};

/* One block: the slot's header and ids in one round trip, the ids stored,
 * the switch set to the body of the slot's count (none if not a body's),
 * the counter advanced. */
__global__ void __launch_bounds__(PB_BLOCK) pb_select_kernel(const __grid_constant__ pb_select_params p) {
  __shared__ uint32_t s_tokens;
  const uint64_t step = *(volatile const uint64_t *)p.st.counter;
  const uint64_t slot = p.st.ring + (step % p.st.slots) * p.st.slot_bytes;
  const uint32_t *ids = (const uint32_t *)(slot + MDR_STAGE_HEADER_BYTES);
  if (threadIdx.x == 0) s_tokens = ((const mdr_stage_header *)slot)->tokens;
  __syncthreads();
  const uint32_t t = s_tokens, nvec = t / 4;
  for (uint32_t i = threadIdx.x; i < nvec; i += PB_BLOCK) ((uint4 *)p.st.token_ids)[i] = ((const uint4 *)ids)[i];
  for (uint32_t i = nvec * 4 + threadIdx.x; i < t; i += PB_BLOCK) ((uint32_t *)p.st.token_ids)[i] = ids[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t body = p.ncounts;
    for (uint32_t i = 0; i < p.ncounts; i++)
      if (p.counts[i] == t) body = i;
    cudaGraphSetConditional(p.handle, body);
    *(uint32_t *)p.st.count_out = t;
    *(volatile uint64_t *)p.st.counter = step + 1;
    *(volatile uint64_t *)p.st.ack = step + 1;
  }
}

/* The update cost's dependence on parameter size and on the grid: a
 * 16-byte block, and a 96-byte __grid_constant__ struct. */
__global__ void pb_tiny_kernel(uint64_t *out, uint64_t t) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *out = t;
}
struct pb96 {
  uint64_t *out;
  uint64_t w[11];
};
__global__ void pb_96_kernel(const __grid_constant__ pb96 p) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *p.out = p.w[10];
}

__global__ void pb_blocker_kernel(const volatile uint32_t *release, uint32_t gen) {
  const long long t0 = clock64();
  while (*release < gen && clock64() - t0 < 4000000000ll) {
  }
}

// ----------------------------------------------------------------------------
// host

static double now_us() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

struct stats {
  double med, p90;
};
static stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[v.size() * 9 / 10]};
}

/* (c): the graph and its staging ring. */
struct switch_graph {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  unsigned char *ring_h; /* mapped pinned */
  uint64_t *ack_h;
  uint64_t *counter;
  uint32_t *count;
  uint64_t slot_bytes, steps;
};

static pb_plan resolve_plan(mdr_backend *b, const mdr_arena *a, size_t tokens, unsigned sms, unsigned *grid) {
  mdr_segment seg[MDR_ZERO_PLAN_MAX];
  size_t n = 0;
  MDR_CHECK(b, mdr_arena_zero_plan(a, tokens, seg, MDR_ZERO_PLAN_MAX, &n));
  if (n > PB_SEGS) {
    fprintf(stderr, "plan of %zu segments > %d\n", n, PB_SEGS);
    exit(2);
  }
  pb_plan p;
  memset(&p, 0, sizeof p);
  p.n = (uint32_t)n;
  for (size_t i = 0; i < n; i++) {
    p.segs[i].ptr = seg[i].ptr;
    p.segs[i].bytes = seg[i].bytes;
    p.segs[i].rule = MDR_RULE_FIXED;
    p.prefix[i + 1] = p.prefix[i] + mdr_zero_chunks(seg[i].bytes);
  }
  const uint64_t cap = (uint64_t)sms * PB_BLOCKS_PER_SM, chunks = p.prefix[n];
  *grid = (unsigned)std::max<uint64_t>(1, std::min(chunks, cap));
  return p;
}

static void switch_create(switch_graph *g, mdr_backend *b, mdr_arena *a, unsigned sms) {
  const size_t m = mdr_arena_max_batch_tokens(a);
  g->slot_bytes = mdr_stage_slot_bytes(m);
  g->steps = 0;
  CUDA_CHECK(cudaHostAlloc((void **)&g->ring_h, g->slot_bytes * PB_SLOTS, cudaHostAllocMapped));
  CUDA_CHECK(cudaHostAlloc((void **)&g->ack_h, sizeof(uint64_t), cudaHostAllocMapped));
  *g->ack_h = 0;
  CUDA_CHECK(cudaMalloc((void **)&g->counter, sizeof(uint64_t)));
  CUDA_CHECK(cudaMalloc((void **)&g->count, sizeof(uint32_t)));
  CUDA_CHECK(cudaMemset(g->counter, 0, sizeof(uint64_t)));

  pb_select_params sp;
  memset(&sp, 0, sizeof sp);
  void *d = NULL;
  CUDA_CHECK(cudaHostGetDevicePointer(&d, g->ring_h, 0));
  sp.st.ring = (uint64_t)(uintptr_t)d;
  CUDA_CHECK(cudaHostGetDevicePointer(&d, g->ack_h, 0));
  sp.st.ack = (uint64_t)(uintptr_t)d;
  sp.st.slot_bytes = g->slot_bytes;
  sp.st.slots = PB_SLOTS;
  sp.st.counter = (uint64_t)(uintptr_t)g->counter;
  sp.st.token_ids = mdr_arena_token_ids(a);
  sp.st.count_out = (uint64_t)(uintptr_t)g->count;
  sp.ncounts = k_ncounts;
  for (int i = 0; i < k_ncounts; i++) sp.counts[i] = (uint32_t)k_counts[i];

  CUDA_CHECK(cudaGraphCreate(&g->graph, 0));
  CUDA_CHECK(cudaGraphConditionalHandleCreate(&sp.handle, g->graph, k_ncounts, cudaGraphCondAssignDefault));
  cudaGraphNode_t sel, cond;
  void *sargs[1] = {&sp};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)pb_select_kernel;
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(PB_BLOCK);
  kp.kernelParams = sargs;
  CUDA_CHECK(cudaGraphAddKernelNode(&sel, g->graph, NULL, 0, &kp));
  cudaGraphNodeParams cp = {};
  cp.type = cudaGraphNodeTypeConditional;
  cp.conditional.handle = sp.handle;
  cp.conditional.type = cudaGraphCondTypeSwitch;
  cp.conditional.size = k_ncounts;
  CUDA_CHECK(cudaGraphAddNode(&cond, g->graph, &sel, NULL, 1, &cp));
  for (int i = 0; i < k_ncounts; i++) {
    unsigned grid = 0;
    pb_plan p = resolve_plan(b, a, k_counts[i], sms, &grid);
    void *zargs[1] = {&p};
    cudaKernelNodeParams zp = {};
    zp.func = (void *)pb_zero_kernel;
    zp.gridDim = dim3(grid);
    zp.blockDim = dim3(PB_BLOCK);
    zp.kernelParams = zargs;
    cudaGraphNode_t zn;
    CUDA_CHECK(cudaGraphAddKernelNode(&zn, cp.conditional.phGraph_out[i], NULL, 0, &zp));
  }
  CUDA_CHECK(cudaGraphInstantiate(&g->exec, g->graph, 0));
}

static void switch_destroy(switch_graph *g) {
  CUDA_CHECK(cudaGraphExecDestroy(g->exec));
  CUDA_CHECK(cudaGraphDestroy(g->graph));
  CUDA_CHECK(cudaFreeHost(g->ring_h));
  CUDA_CHECK(cudaFreeHost(g->ack_h));
  CUDA_CHECK(cudaFree(g->counter));
  CUDA_CHECK(cudaFree(g->count));
}

/* Write the step into the next slot and launch. The callers drain the stream
 * at least every PB_SLOTS / 2 steps, so a slot is never rewritten early. */
static void switch_step(switch_graph *g, const uint32_t *ids, size_t tokens, cudaStream_t s) {
  unsigned char *slot = g->ring_h + (g->steps % PB_SLOTS) * g->slot_bytes;
  mdr_stage_header h = {(uint32_t)tokens, (uint32_t)tokens, 0, 0};
  memcpy(slot + MDR_STAGE_HEADER_BYTES, ids, tokens * sizeof(uint32_t));
  memcpy(slot, &h, sizeof h);
  g->steps++;
  CUDA_CHECK(cudaGraphLaunch(g->exec, s));
}

enum approach { EXACT, NODE_UPDATE, DEVICE_COUNT, SWITCH, NAPPROACHES };
static const char *k_approach[NAPPROACHES] = {"exact", "(b) node update", "(a) device count", "(c) switch"};

struct runner {
  approach ap;
  mdr_backend *b;
  mdr_graph_cache *cache;
  switch_graph sw;
  cudaStream_t s;
  const uint32_t *ids;
};

static void step(runner *r, size_t tokens) {
  if (r->ap == SWITCH) switch_step(&r->sw, r->ids, tokens, r->s);
  else MDR_CHECK(r->b, mdr_graph_cache_step(r->cache, r->ids, tokens));
}

static void begin(runner *r, approach ap, mdr_arena *a, unsigned sms) {
  r->ap = ap;
  r->cache = NULL;
  if (ap == SWITCH) {
    switch_create(&r->sw, r->b, a, sms);
    return;
  }
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  o.mode = ap == EXACT ? MDR_GRAPH_EXACT : MDR_GRAPH_DYNAMIC;
  o.dynamic_impl = ap == DEVICE_COUNT ? MDR_DYNAMIC_DEVICE_COUNT : MDR_DYNAMIC_NODE_UPDATE;
  MDR_CHECK(r->b, mdr_graph_cache_create(a, (mdr_stream)r->s, &o, &r->cache));
  MDR_CHECK(r->b, mdr_graph_cache_prepare(r->cache, k_counts, k_ncounts));
}

static void end(runner *r) {
  CUDA_CHECK(cudaStreamSynchronize(r->s));
  if (r->ap == SWITCH) switch_destroy(&r->sw);
  else mdr_graph_cache_destroy(r->cache);
}

static void poison(mdr_backend *b, mdr_arena *a) {
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    size_t n = mdr_arena_bytes(a, (mdr_buffer)i);
    if (n) MDR_CHECK(b, mdr_backend_fill(b, mdr_arena_ptr(a, (mdr_buffer)i), POISON, n));
  }
}

/* (c) at `tokens`: every plan byte zero, GUARD bytes past each segment (inside
 * its buffer) still poisoned, ids arrived. */
static bool validate(runner *r, mdr_arena *a, size_t tokens) {
  poison(r->b, a);
  step(r, tokens);
  CUDA_CHECK(cudaStreamSynchronize(r->s));
  mdr_segment seg[MDR_ZERO_PLAN_MAX];
  size_t n = 0;
  MDR_CHECK(r->b, mdr_arena_zero_plan(a, tokens, seg, MDR_ZERO_PLAN_MAX, &n));
  bool ok = true;
  for (size_t i = 0; i < n && ok; i++) {
    size_t cap = 0;
    for (int k = 0; k < MDR_BUF_COUNT; k++)
      if (mdr_arena_ptr(a, (mdr_buffer)k) == seg[i].ptr) cap = mdr_arena_bytes(a, (mdr_buffer)k);
    const size_t guard = std::min<size_t>(GUARD, cap - seg[i].bytes);
    std::vector<unsigned char> got(seg[i].bytes + guard);
    MDR_CHECK(r->b, mdr_backend_copy_d2h(r->b, got.data(), seg[i].ptr, got.size()));
    for (size_t j = 0; j < got.size() && ok; j++) {
      const unsigned char want = j < seg[i].bytes ? 0 : POISON;
      if (got[j] != want) {
        fprintf(stderr, "VALIDATION FAILED: (c) at %zu tokens: segment %zu byte %zu is 0x%02x, want 0x%02x\n",
                tokens, i, j, got[j], want);
        ok = false;
      }
    }
  }
  std::vector<uint32_t> ids(tokens);
  MDR_CHECK(r->b, mdr_backend_copy_d2h(r->b, ids.data(), mdr_arena_token_ids(a), tokens * 4));
  for (size_t j = 0; j < tokens && ok; j++)
    if (ids[j] != r->ids[j]) {
      fprintf(stderr, "VALIDATION FAILED: (c) at %zu tokens: id %zu is %u, want %u\n", tokens, j, ids[j], r->ids[j]);
      ok = false;
    }
  return ok;
}

static stats gpu_time(runner *r, size_t tokens, int reps, volatile uint32_t *release_h, uint32_t *release_d,
                      uint32_t *gen) {
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 20; i++) step(r, tokens);
  CUDA_CHECK(cudaStreamSynchronize(r->s));
  std::vector<double> us(reps);
  for (int i = 0; i < reps; i++) {
    ++*gen;
    pb_blocker_kernel<<<1, 1, 0, r->s>>>(release_d, *gen);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventRecord(e0, r->s));
    step(r, tokens);
    CUDA_CHECK(cudaEventRecord(e1, r->s));
    *release_h = *gen;
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    us[i] = ms * 1e3;
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  return summarize(us);
}

static stats cpu_time_changing(runner *r, int reps) {
  std::vector<double> us(reps);
  for (int i = 0; i < 20; i++) step(r, k_counts[i % k_ncounts]);
  for (int i = 0; i < reps; i++) {
    if (i % 4 == 0) CUDA_CHECK(cudaStreamSynchronize(r->s));
    const double t0 = now_us();
    step(r, k_counts[i % k_ncounts]);
    us[i] = now_us() - t0;
  }
  CUDA_CHECK(cudaStreamSynchronize(r->s));
  return summarize(us);
}

/* Host µs per step of: launch only; runtime update + launch; driver update +
 * launch, on a one-node graph whose plan alternates between pa and pb. */
static void update_costs(mdr_backend *b, mdr_arena *a, unsigned sms, cudaStream_t s, int reps, FILE *f,
                         const char *preset) {
  unsigned ga = 0, gb = 0;
  pb_plan pa = resolve_plan(b, a, 8, sms, &ga), pbp = resolve_plan(b, a, 7, sms, &gb);
  cudaGraph_t g;
  cudaGraphExec_t x;
  cudaGraphNode_t node;
  CUDA_CHECK(cudaGraphCreate(&g, 0));
  void *args[1] = {&pa};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)pb_zero_kernel;
  kp.gridDim = dim3(ga);
  kp.blockDim = dim3(PB_BLOCK);
  kp.kernelParams = args;
  CUDA_CHECK(cudaGraphAddKernelNode(&node, g, NULL, 0, &kp));
  CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
  typedef CUresult (*set_fn)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);
  void *fn = NULL;
  cudaDriverEntryPointQueryResult q;
  CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuGraphExecKernelNodeSetParams", &fn, 12000, cudaEnableDefault, &q));
  cudaKernel_t kern;
  CUDA_CHECK(cudaGetKernel(&kern, (const void *)pb_zero_kernel));
  const char *names[3] = {"launch only", "runtime SetParams + launch", "driver SetParams + launch"};
  printf("re-targeting one node (%zu-byte parameters), host us per step, median / p90:\n", sizeof(pb_plan));
  for (int way = 0; way < 3; way++) {
    std::vector<double> us(reps);
    for (int i = -20; i < reps; i++) {
      if (i % 4 == 0) CUDA_CHECK(cudaStreamSynchronize(s));
      const bool odd = i & 1;
      args[0] = odd ? (void *)&pbp : (void *)&pa;
      const double t0 = now_us();
      if (way == 1) {
        kp.gridDim = dim3(odd ? gb : ga);
        CUDA_CHECK(cudaGraphExecKernelNodeSetParams(x, node, &kp));
      } else if (way == 2) {
        CUDA_KERNEL_NODE_PARAMS dp = {};
        dp.kern = (CUkernel)kern;
        dp.gridDimX = odd ? gb : ga;
        dp.gridDimY = dp.gridDimZ = 1;
        dp.blockDimX = PB_BLOCK;
        dp.blockDimY = dp.blockDimZ = 1;
        dp.kernelParams = args;
        if (((set_fn)fn)((CUgraphExec)x, (CUgraphNode)node, &dp) != CUDA_SUCCESS) {
          fprintf(stderr, "cuGraphExecKernelNodeSetParams failed\n");
          exit(2);
        }
      }
      CUDA_CHECK(cudaGraphLaunch(x, s));
      if (i >= 0) us[i] = now_us() - t0;
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    stats st = summarize(us);
    printf("  %-28s %6.2f / %6.2f\n", names[way], st.med, st.p90);
    if (f) fprintf(f, "%s,%s,,,,,%.3f,%.3f\n", preset, names[way], st.med, st.p90);
  }
  CUDA_CHECK(cudaGraphExecDestroy(x));
  CUDA_CHECK(cudaGraphDestroy(g));

  /* the same with small parameter blocks: 16 bytes, 96 bytes (a
   * __grid_constant__ struct), each with the grid kept or changed */
  uint64_t *out = NULL, tv = 1;
  CUDA_CHECK(cudaMalloc((void **)&out, sizeof *out));
  pb96 big96;
  memset(&big96, 0, sizeof big96);
  big96.out = out;
  for (int kind = 0; kind < 2; kind++) {
    void *targs[2] = {&out, &tv};
    void *bargs[1] = {&big96};
    cudaKernelNodeParams tp = {};
    tp.func = kind ? (void *)pb_96_kernel : (void *)pb_tiny_kernel;
    tp.gridDim = dim3(1);
    tp.blockDim = dim3(32);
    tp.kernelParams = kind ? bargs : targs;
    CUDA_CHECK(cudaGraphCreate(&g, 0));
    CUDA_CHECK(cudaGraphAddKernelNode(&node, g, NULL, 0, &tp));
    CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
    for (int way = 0; way < 3; way++) { /* launch only; update, same grid; update, grid 1 <-> 2 */
      std::vector<double> us(reps);
      for (int i = -20; i < reps; i++) {
        if (i % 4 == 0) CUDA_CHECK(cudaStreamSynchronize(s));
        tv = 7 + (i & 1);
        big96.w[10] = tv;
        tp.gridDim = dim3(way == 2 ? 1 + (i & 1) : 1);
        const double t0 = now_us();
        if (way) CUDA_CHECK(cudaGraphExecKernelNodeSetParams(x, node, &tp));
        CUDA_CHECK(cudaGraphLaunch(x, s));
        if (i >= 0) us[i] = now_us() - t0;
      }
      CUDA_CHECK(cudaStreamSynchronize(s));
      stats st = summarize(us);
      char name[96];
      snprintf(name, sizeof name, "%s params: %s", kind ? "96-byte" : "16-byte",
               way == 0 ? "launch only" : way == 1 ? "SetParams (same grid) + launch" : "SetParams (grid changes) + launch");
      printf("  %-52s %6.2f / %6.2f\n", name, st.med, st.p90);
      if (f) fprintf(f, "%s,%s,,,,,%.3f,%.3f\n", preset, name, st.med, st.p90);
    }
    CUDA_CHECK(cudaGraphExecDestroy(x));
    CUDA_CHECK(cudaGraphDestroy(g));
  }
  CUDA_CHECK(cudaFree(out));
}

int main(int argc, char **argv) {
  int reps = PB_DEFAULT_REPS;
  const char *csv = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
    else {
      fprintf(stderr, "usage: dynamic_switch_probe [--reps N] [--csv FILE]\n");
      return 2;
    }
  }
  if (reps < PB_MIN_REPS) reps = PB_MIN_REPS;
  mdr_backend *b = NULL;
  if (mdr_backend_cuda_create(0, &b) != MDR_OK) {
    printf("no CUDA device: the probe needs a GPU (skipped)\n");
    return 0;
  }
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  uint32_t *release_h = NULL, *release_d = NULL, gen = 0;
  CUDA_CHECK(cudaHostAlloc((void **)&release_h, sizeof *release_h, cudaHostAllocMapped));
  *release_h = 0;
  CUDA_CHECK(cudaHostGetDevicePointer((void **)&release_d, release_h, 0));
  std::vector<uint32_t> ids(PB_M);
  for (size_t i = 0; i < ids.size(); i++) ids[i] = (uint32_t)(i * PB_ID_MULT % PB_VOCAB);

  FILE *f = csv ? fopen(csv, "w") : NULL;
  if (csv && !f) {
    fprintf(stderr, "cannot write %s\n", csv);
    return 2;
  }
  if (f) fprintf(f, "preset,approach,tokens,gpu_us_med,gpu_us_p90,ratio_to_exact,cpu_changing_us_med,cpu_changing_us_p90\n");
  const char *presets[] = {"glm-5.3-flash-tp2", "qwen3-next-80b"};
  for (const char *preset : presets) {
    mdr_model_config cfg;
    mdr_limits lim = {};
    lim.max_batch_tokens = PB_M;
    lim.max_seq_len = PB_SEQ;
    lim.kv_block_size = PB_KV_BLOCK;
    lim.max_batch_size = PB_BATCH;
    mdr_sizes sizes;
    mdr_arena *a = NULL;
    MDR_CHECK(b, mdr_model_preset(preset, &cfg));
    MDR_CHECK(b, mdr_sizes_from_config(&cfg, &lim, &sizes));
    MDR_CHECK(b, mdr_arena_create(b, &sizes, &a));
    MDR_CHECK(b, mdr_arena_set_rows_policy(a, MDR_ROWS_ALL));

    stats gpu[NAPPROACHES][PB_MAX_COUNTS], cpu[NAPPROACHES];
    for (int ap = 0; ap < NAPPROACHES; ap++) {
      runner r = {};
      r.b = b;
      r.s = s;
      r.ids = ids.data();
      begin(&r, (approach)ap, a, (unsigned)sms);
      if (ap == SWITCH) {
        bool ok = true;
        for (int i = 0; i < k_ncounts; i++) ok &= validate(&r, a, k_counts[i]);
        if (!ok) return 1;
      }
      for (int i = 0; i < k_ncounts; i++) gpu[ap][i] = gpu_time(&r, k_counts[i], reps, release_h, release_d, &gen);
      cpu[ap] = cpu_time_changing(&r, reps * 10);
      if (ap != SWITCH) {
        mdr_graph_stats st;
        MDR_CHECK(b, mdr_graph_cache_stats(r.cache, &st));
        fprintf(stderr, "%s %s: captures %llu\n", preset, k_approach[ap], (unsigned long long)st.captures);
      }
      end(&r);
      fprintf(stderr, "%s %s: done\n", preset, k_approach[ap]);
    }
    printf("\n%s, rows policy ALL, M = %d: GPU us per step, median [ratio to exact]\n", preset, PB_M);
    printf("%6s", "tokens");
    for (int ap = 0; ap < NAPPROACHES; ap++) printf(" %24s", k_approach[ap]);
    printf("\n");
    for (int i = 0; i < k_ncounts; i++) {
      printf("%6zu", k_counts[i]);
      for (int ap = 0; ap < NAPPROACHES; ap++) {
        char cell[64];
        snprintf(cell, sizeof cell, "%.2f [%.2fx]", gpu[ap][i].med, gpu[ap][i].med / gpu[EXACT][i].med);
        printf(" %24s", cell);
        if (f)
          fprintf(f, "%s,%s,%zu,%.3f,%.3f,%.4f,%.3f,%.3f\n", preset, k_approach[ap], k_counts[i], gpu[ap][i].med,
                  gpu[ap][i].p90, gpu[ap][i].med / gpu[EXACT][i].med, cpu[ap].med, cpu[ap].p90);
      }
      printf("\n");
    }
    printf("CPU us per step, count changing every step (cycling 1,2,8,64,512,4096), median / p90:\n");
    for (int ap = 0; ap < NAPPROACHES; ap++) printf("  %-18s %6.2f / %6.2f\n", k_approach[ap], cpu[ap].med, cpu[ap].p90);
    update_costs(b, a, (unsigned)sms, s, reps * 10, f, preset);
    mdr_arena_destroy(a);
  }
  if (f) fclose(f);
  CUDA_CHECK(cudaFreeHost(release_h));
  CUDA_CHECK(cudaStreamDestroy(s));
  mdr_backend_destroy(b);
  return 0;
}
