/* step_params_probe.cu — a small step's inputs carried in the kernel's
 * parameters, set per step by node update, beside the staging slot's PCIe
 * read.
 *
 * Each case is one graph of one kernel node: the blocks after the stage
 * block(s) clear Z bytes (16 KiB each, 256 threads, 16-byte stores); block
 * 0 copies the step's payload into a device inputs block, every load of a
 * round issued before its stores (as staging/staging.cuh). Variants:
 *   zero-only      block 0 idle: the floor's launch;
 *   device         payload already in device memory: the lower bound;
 *   slot           the host writes a slot of a ring in mapped pinned
 *                  memory and launches; block 0 reads the ring counter
 *                  (device), the slot (PCIe), advances counter and ack; a
 *                  slot is rewritten only once acknowledged (graphs/staging.c);
 *   params         the payload inline in the parameters: per step the host
 *                  fills the struct, cudaGraphExecKernelNodeSetParams,
 *                  cudaGraphLaunch (no ring); the smallest struct of 128
 *                  bytes, 1, 4, 16, 32 KiB that holds it;
 *   params-spread  params with the copy split over one block per KiB
 *                  (divergent parameter loads serialise in an SM's constant
 *                  cache); payloads over 1 KiB only.
 * Payloads at t tokens (sequences = t) behind a 16-byte header (t,
 * sequences, step tag): "ids" (4 B/token); "inputs": ids, positions
 * (4 B/token), sequence lengths (4 B/sequence), a 128-entry int32 block
 * table per sequence, each 16-byte aligned.
 *
 * Timing, µs per step, median and p99:
 *   loop    BATCH steps (host part included) enqueued behind a blocker
 *           kernel, events around them, released: GPU time back to back
 *           (over reps / BATCH batches);
 *   single  blocker, event, one step, event, release: GPU time of one
 *           queued step (mdr-bench's single step);
 *   wall    host clock from the start of the host part to the return of
 *           cudaStreamSynchronize on an idle stream: latency;
 *   cpu     host clock around the host part (fill, update, launch; the
 *           slot's ring wait) in the loop batches.
 * Floors per Z: Z / write ceiling (1 GiB cudaMemsetAsync, this run) + the
 * single empty-kernel graph (mdr-bench's; xfloor = single / it), and
 * Z / cudaMemsetAsync bandwidth at Z + the same.
 * Validation: VALIDATE_STEPS steps before timing and one after, each with
 * inputs block and zero buffer poisoned: the block holds exactly the step's
 * payload then poison, the Z bytes are zero then poison; params variants
 * also run BATCH queued steps with a destination each (validate_queued).
 * A failed case is not timed (exit 1).
 *
 * Build:  the CMake target `step_params_probe` (dev/CMakeLists.txt).
 * Run:    ./step_params_probe [--reps N] [--csv FILE] [--zero-mib A,B,...]
 * Exit 0 done, 1 validation failed, 2 CUDA error or bad arguments, 77 no GPU. */
#include <sched.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "lab.h"

#define BLOCK 256         /* threads per block, stage and zeroing */
#define FETCH_VECS 4      /* 16-byte loads in flight per thread */
#define CHUNK (16u << 10) /* bytes a zeroing block clears */
#define SPREAD_VECS 64u   /* params-spread: vectors (1 KiB) per copying block */
#define SLOTS 32          /* ring slots: more than BATCH */
#define BATCH 16          /* steps per loop batch */
#define WARMUP 20
#define VALIDATE_STEPS 3
#define POISON 0xA5
#define GUARD 4096      /* bytes checked past the payload and past Z */
#define TABLE_WIDTH 128 /* block table entries per sequence */
#define CEILING_BYTES ((size_t)1 << 30)
#define CEILING_REPS 50
#define BLOCKER_TIMEOUT_NS 500000000ull
#define ACK_TIMEOUT_US 5e6
static_assert(BATCH < SLOTS, "a held batch never waits for the ring");
static const size_t k_tokens[] = {1, 2, 4, 8, 16, 32, 64};
/* parameter payload vectors: 128-byte, 1, 4, 16 and 32 KiB structs (the
 * 128-byte one holds the ids of up to 28 tokens: whether a small struct
 * makes the node update cheaper than the 1 KiB one's +1.9 us) */
static const int k_caps[] = {8, 64, 256, 1024, 2043};

enum variant { V_ZERO, V_DEVICE, V_SLOT, V_PARAMS, V_SPREAD };
static const char *k_variant[] = {"zero-only", "device", "slot", "params", "params-spread"};
enum payload { P_IDS, P_INPUTS };
static const char *k_payload[] = {"ids", "inputs"};

/* What every kernel of the probe is told (64 bytes). */
struct stage_args {
  uint64_t src;          /* slot: the ring (device address); device: the payload; else 0 */
  uint64_t dst;          /* the device inputs block */
  uint64_t counter;      /* slot: device uint64, slot launches served */
  uint64_t ack;          /* slot: mapped uint64, the counter after the last served launch */
  uint64_t zero;         /* the Z bytes to clear (a CHUNK multiple) */
  uint64_t zero_bytes;   /* Z */
  uint32_t slot_bytes;   /* slot: stride between slots */
  uint32_t nvec;         /* 16-byte vectors of the payload */
  uint32_t stage_blocks; /* blocks before the zeroing ones */
  uint32_t reserved;
};
static_assert(sizeof(stage_args) == 64, "the parameter header is 64 bytes");

/* The kernel parameters: the header, then V vectors of inline payload
 * (params variants; V = 1, unused, for the others). */
template <int V>
struct kargs {
  stage_args a;
  uint4 payload[V];
};
static_assert(sizeof(kargs<2043>) <= 32764, "kernel parameters: at most 32764 bytes (CUDA 12.1+, sm_70+)");

// ----------------------------------------------------------------------------
// kernels

__global__ void k_empty() {}

__device__ __forceinline__ void store16_zero(uint64_t addr) {
  asm volatile("st.global.v4.u32 [%0], {%1, %1, %1, %1};" ::"l"(addr), "r"(0u) : "memory");
}

/* The stage work of block `blockIdx.x` (< stage_blocks): copy the payload's
 * vectors [from, to) into the inputs block, every load of a round before
 * its stores; the slot variant also advances the ring. */
template <int V, int MODE>
__device__ __forceinline__ void stage(const kargs<V> &p) {
  const stage_args &a = p.a;
  const uint32_t tid = threadIdx.x;
  const uint4 *src = (const uint4 *)a.src;
  uint64_t step = 0;
  uint32_t from = 0, to = a.nvec;
  if constexpr (MODE == V_SLOT) {
    step = *(volatile const uint64_t *)a.counter;
    src = (const uint4 *)(a.src + (step % SLOTS) * a.slot_bytes);
  }
  if constexpr (MODE == V_SPREAD) {
    from = blockIdx.x * SPREAD_VECS;
    to = from + SPREAD_VECS < a.nvec ? from + SPREAD_VECS : a.nvec;
  }
  uint4 *dst = (uint4 *)a.dst;
  for (uint32_t base = from; base < to; base += BLOCK * FETCH_VECS) {
    uint4 r[FETCH_VECS];
#pragma unroll
    for (int u = 0; u < FETCH_VECS; u++) {
      const uint32_t i = base + u * BLOCK + tid;
      r[u] = make_uint4(0u, 0u, 0u, 0u);
      if constexpr (MODE == V_PARAMS || MODE == V_SPREAD) {
        if (i < to) r[u] = p.payload[i];
      } else {
        if (i < to) r[u] = src[i];
      }
    }
#pragma unroll
    for (int u = 0; u < FETCH_VECS; u++) {
      const uint32_t i = base + u * BLOCK + tid;
      if (i < to) dst[i] = r[u];
    }
  }
  if constexpr (MODE == V_SLOT) {
    __syncthreads(); /* every read of the slot has completed */
    if (tid == 0) {
      *(volatile uint64_t *)a.counter = step + 1;
      *(volatile uint64_t *)a.ack = step + 1;
    }
  }
}

template <int V, int MODE>
__global__ void __launch_bounds__(BLOCK) k_step(const __grid_constant__ kargs<V> p) {
  if (blockIdx.x < p.a.stage_blocks) {
    if constexpr (MODE != V_ZERO) stage<V, MODE>(p);
    return;
  }
  const uint64_t base = p.a.zero + (uint64_t)(blockIdx.x - p.a.stage_blocks) * CHUNK;
#pragma unroll
  for (uint32_t u = 0; u < CHUNK / 16u / BLOCK; u++) store16_zero(base + (uint64_t)(u * BLOCK + threadIdx.x) * 16u);
}

__global__ void k_blocker(const volatile uint32_t *release, uint32_t generation, uint32_t *timed_out) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (*release < generation) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > BLOCKER_TIMEOUT_NS) {
      *timed_out = 1;
      return;
    }
  }
}

/* The kernel of a variant; the params variants' by their payload vectors. */
template <int MODE>
static void *params_kernel(int cap) {
  return cap == 8      ? (void *)k_step<8, MODE>
         : cap == 64   ? (void *)k_step<64, MODE>
         : cap == 256  ? (void *)k_step<256, MODE>
         : cap == 1024 ? (void *)k_step<1024, MODE>
                       : (void *)k_step<2043, MODE>;
}

static void *kernel_for(variant v, int cap) {
  void *const fixed[] = {(void *)k_step<1, V_ZERO>, (void *)k_step<1, V_DEVICE>, (void *)k_step<1, V_SLOT>};
  return v < V_PARAMS ? fixed[v] : v == V_PARAMS ? params_kernel<V_PARAMS>(cap) : params_kernel<V_SPREAD>(cap);
}

// ----------------------------------------------------------------------------
// host state

struct probe {
  cudaStream_t s;
  int reps;
  std::vector<cudaEvent_t> ev_a, ev_b;
  volatile uint32_t *release_h; /* mapped: [0] generation released, [1] a blocker timed out */
  uint32_t *release_d;
  uint32_t generation = 0;
  unsigned char *zero, *dst, *src_dev; /* device: Z + GUARD, inputs block + GUARD, device payload */
  uint64_t *counter;                   /* device: slot launches served */
  unsigned char *ring_h;               /* mapped pinned: SLOTS slots, then the ack */
  uint64_t ring_d, ack_d;
  volatile uint64_t *ack_h;
  size_t slot_bytes;
  uint64_t host_step = 0; /* slot launches enqueued */
};

/* One case: a variant at (Z, payload, t), its graph and parameter image.
 * Built in place and never copied (kp points into it). */
struct kase {
  variant v;
  payload pl;
  size_t t, Z;
  size_t bytes = 0;         /* payload bytes (a 16-byte multiple); 0 for zero-only */
  int cap = 1;              /* payload vectors of the kernel's parameters */
  std::vector<uint4> image; /* the kargs<cap> the host fills */
  void *argp[1];
  cudaKernelNodeParams kp = {};
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  cudaGraphNode_t node = NULL;
};

static double now_us() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static size_t ceil16(size_t x) { return (x + 15u) / 16u * 16u; }

static size_t payload_bytes(payload pl, size_t t) {
  const size_t per_token = ceil16(4 * t);
  return pl == P_IDS ? 16 + per_token : 16 + 3 * per_token + (size_t)TABLE_WIDTH * 4 * t;
}

static uint32_t mix(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u ^ c * 0xC2B2AE3Du;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  return h ^ (h >> 13);
}

static void put32(std::vector<unsigned char> &p, size_t off, uint32_t v) { memcpy(p.data() + off, &v, 4); }

/* The payload of one step: header {t, sequences, tag, kind}, then the
 * arrays at 16-byte aligned offsets (padding zero); values depend on tag. */
static std::vector<unsigned char> make_payload(payload pl, size_t t, uint32_t tag) {
  std::vector<unsigned char> p(payload_bytes(pl, t), 0);
  const size_t c = ceil16(4 * t);
  put32(p, 0, (uint32_t)t);
  put32(p, 4, pl == P_INPUTS ? (uint32_t)t : 0u);
  put32(p, 8, tag);
  put32(p, 12, 0x5EED0000u + pl);
  for (size_t i = 0; i < t; i++) put32(p, 16 + 4 * i, mix(tag, 1, (uint32_t)i) % 151936u);
  if (pl == P_INPUTS) {
    for (size_t i = 0; i < t; i++) {
      put32(p, 16 + c + 4 * i, mix(tag, 2, (uint32_t)i) % 32768u);
      put32(p, 16 + 2 * c + 4 * i, mix(tag, 3, (uint32_t)i) % 32768u + 1u);
    }
    for (size_t j = 0; j < t * TABLE_WIDTH; j++) put32(p, 16 + 3 * c + 4 * j, mix(tag, 4, (uint32_t)j) % 1000000u);
  }
  return p;
}

/* The slot variant may overwrite slot host_step % SLOTS only once the
 * launch that read it last has acknowledged. */
static void ring_wait(probe &P) {
  if (P.host_step - *P.ack_h < SLOTS) return;
  const double t0 = now_us();
  while (P.host_step - *P.ack_h >= SLOTS) {
    if (now_us() - t0 > ACK_TIMEOUT_US) {
      fprintf(stderr, "slot ring: no ack for %.0f s (enqueued %llu, acknowledged %llu)\n", ACK_TIMEOUT_US / 1e6,
              (unsigned long long)P.host_step, (unsigned long long)*P.ack_h);
      exit(2);
    }
    sched_yield();
  }
}

/* The host part of one step: fill, update, launch. */
static void host_part(probe &P, kase &k, const unsigned char *pay) {
  if (k.v == V_SLOT) {
    ring_wait(P);
    memcpy(P.ring_h + (P.host_step % SLOTS) * P.slot_bytes, pay, k.bytes);
    P.host_step++;
  } else if (k.v == V_PARAMS || k.v == V_SPREAD) {
    memcpy((unsigned char *)k.image.data() + sizeof(stage_args), pay, k.bytes);
    CUDA_CHECK(cudaGraphExecKernelNodeSetParams(k.x, k.node, &k.kp));
  }
  CUDA_CHECK(cudaGraphLaunch(k.x, P.s));
}

/* A graph of the one kernel node k.kp, instantiated and uploaded. */
static void instantiate(probe &P, kase &k) {
  CUDA_CHECK(cudaGraphCreate(&k.g, 0));
  CUDA_CHECK(cudaGraphAddKernelNode(&k.node, k.g, NULL, 0, &k.kp));
  CUDA_CHECK(cudaGraphInstantiate(&k.x, k.g, 0));
  CUDA_CHECK(cudaGraphUpload(k.x, P.s));
}

static void build(probe &P, kase &k) {
  stage_args a;
  memset(&a, 0, sizeof a);
  a.dst = (uint64_t)(uintptr_t)P.dst;
  a.zero = (uint64_t)(uintptr_t)P.zero;
  a.zero_bytes = k.Z;
  a.nvec = (uint32_t)(k.bytes / 16);
  a.stage_blocks = 1;
  if (k.v == V_SLOT) {
    a.src = P.ring_d;
    a.counter = (uint64_t)(uintptr_t)P.counter;
    a.ack = P.ack_d;
    a.slot_bytes = (uint32_t)P.slot_bytes;
  } else if (k.v == V_DEVICE) {
    a.src = (uint64_t)(uintptr_t)P.src_dev;
  } else if (k.v == V_SPREAD) {
    a.stage_blocks = (a.nvec + SPREAD_VECS - 1) / SPREAD_VECS;
  }
  k.image.assign((sizeof(stage_args) + 16u * (size_t)k.cap) / 16u, make_uint4(0u, 0u, 0u, 0u));
  memcpy(k.image.data(), &a, sizeof a);
  k.argp[0] = k.image.data();
  k.kp.func = kernel_for(k.v, k.cap);
  k.kp.gridDim = dim3((unsigned)(a.stage_blocks + k.Z / CHUNK));
  k.kp.blockDim = dim3(BLOCK);
  k.kp.kernelParams = k.argp;
  instantiate(P, k);
}

static void destroy(kase &k) {
  if (k.x) CUDA_CHECK(cudaGraphExecDestroy(k.x));
  if (k.g) CUDA_CHECK(cudaGraphDestroy(k.g));
  k.x = NULL;
  k.g = NULL;
}

// ----------------------------------------------------------------------------
// the blocker: holds the stream until the host releases it

static void hold(probe &P) {
  k_blocker<<<1, 1, 0, P.s>>>(P.release_d, P.generation + 1, P.release_d + 1);
  CUDA_CHECK(cudaGetLastError());
}

static void release(probe &P) {
  P.generation++;
  __atomic_store_n((uint32_t *)P.release_h, P.generation, __ATOMIC_RELEASE);
}

/* Whether a blocker gave up waiting (a host call waited for the GPU while
 * the stream was held); clears the flag. */
static bool blocker_timed_out(probe &P) {
  if (!P.release_h[1]) return false;
  P.release_h[1] = 0;
  return true;
}

// ----------------------------------------------------------------------------
// validation

/* Read n = want.size() bytes at dev and compare; say where they differ. */
static bool check(const kase &k, const char *when, const char *what, const void *dev,
                  const std::vector<unsigned char> &want) {
  std::vector<unsigned char> got(want.size());
  CUDA_CHECK(cudaMemcpy(got.data(), dev, got.size(), cudaMemcpyDeviceToHost));
  const auto m = std::mismatch(got.begin(), got.end(), want.begin());
  if (m.first == got.end()) return true;
  fprintf(stderr, "VALIDATION FAILED (%s): %s, Z %zu, %s, t=%zu: %s byte %zu is 0x%02x, want 0x%02x\n", when,
          k_variant[k.v], k.Z, k_payload[k.pl], k.t, what, (size_t)(m.first - got.begin()), *m.first, *m.second);
  return false;
}

/* Poison, one step of payload `tag`, then the inputs block holds exactly
 * that payload and GUARD bytes of poison, the Z bytes are zero and GUARD
 * bytes of poison follow them. */
static bool validate(probe &P, kase &k, uint32_t tag, const char *when) {
  std::vector<unsigned char> pay;
  if (k.v != V_ZERO) pay = make_payload(k.pl, k.t, tag);
  /* stream-ordered: a pageable cudaMemcpy may return before its DMA is done,
   * and P.s does not wait for the legacy stream */
  if (k.v == V_DEVICE) CUDA_CHECK(cudaMemcpyAsync(P.src_dev, pay.data(), k.bytes, cudaMemcpyHostToDevice, P.s));
  CUDA_CHECK(cudaMemsetAsync(P.dst, POISON, k.bytes + GUARD, P.s));
  CUDA_CHECK(cudaMemsetAsync(P.zero, POISON, k.Z + GUARD, P.s));
  host_part(P, k, pay.data());
  CUDA_CHECK(cudaStreamSynchronize(P.s));
  CUDA_CHECK(cudaGetLastError());
  pay.resize(k.bytes + GUARD, POISON);
  std::vector<unsigned char> zero(k.Z, 0);
  zero.resize(k.Z + GUARD, POISON);
  return check(k, when, "inputs block", P.dst, pay) && check(k, when, "zero buffer", P.zero, zero);
}

/* Params variants: BATCH steps enqueued behind the blocker, each with its
 * own payload and its own destination (set in the same node update), then
 * released: destination i must hold step i's payload, so no update reached
 * a launch enqueued before it (the claim that no ring is needed). */
static bool validate_queued(probe &P, kase &k, uint32_t *tag) {
  const size_t stride = P.slot_bytes;
  std::vector<unsigned char> want;
  CUDA_CHECK(cudaMemsetAsync(P.dst, POISON, stride * BATCH, P.s));
  hold(P);
  for (int i = 0; i < BATCH; i++) {
    std::vector<unsigned char> pay = make_payload(k.pl, k.t, (*tag)++);
    const uint64_t dst = (uint64_t)(uintptr_t)(P.dst + i * stride);
    memcpy((unsigned char *)k.image.data() + offsetof(stage_args, dst), &dst, sizeof dst);
    host_part(P, k, pay.data());
    pay.resize(stride, POISON);
    want.insert(want.end(), pay.begin(), pay.end());
  }
  release(P);
  const uint64_t dst = (uint64_t)(uintptr_t)P.dst;
  memcpy((unsigned char *)k.image.data() + offsetof(stage_args, dst), &dst, sizeof dst);
  CUDA_CHECK(cudaStreamSynchronize(P.s));
  if (blocker_timed_out(P))
    printf("note: %s t=%zu: the blocker timed out while the steps were enqueued\n", k_variant[k.v], k.t);
  return check(k, "queued steps", "destinations (one stride per step)", P.dst, want);
}

// ----------------------------------------------------------------------------
// timing

struct dist {
  double med = 0, p99 = 0;
};

static dist summarize(std::vector<double> v) {
  dist d;
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  d.med = v[(size_t)(0.5 * (double)(v.size() - 1) + 0.5)];
  d.p99 = v[(size_t)(0.99 * (double)(v.size() - 1) + 0.5)];
  return d;
}

struct result {
  dist loop, single, wall, cpu;
  std::string note; /* why a figure is missing */
};

/* step(i) enqueues step i (the host part); reps steps per mode. */
static result measure(probe &P, int reps, const std::function<void(int)> &step) {
  result r;
  for (int i = 0; i < WARMUP; i++) step(i);
  CUDA_CHECK(cudaStreamSynchronize(P.s));
  std::vector<double> loop, cpu, single(reps), wall(reps);
  for (int done = 0; done < reps; done += BATCH) {
    const int n = std::min(BATCH, reps - done);
    hold(P);
    CUDA_CHECK(cudaEventRecord(P.ev_a[0], P.s));
    for (int i = 0; i < n; i++) {
      const double t0 = now_us();
      step(done + i);
      cpu.push_back(now_us() - t0);
    }
    CUDA_CHECK(cudaEventRecord(P.ev_b[0], P.s));
    release(P);
    CUDA_CHECK(cudaStreamSynchronize(P.s));
    if (blocker_timed_out(P)) {
      r.note = "blocker timed out in a loop batch: a host call waited for the GPU";
      r.cpu = summarize(cpu);
      return r;
    }
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, P.ev_a[0], P.ev_b[0]));
    loop.push_back(ms * 1e3 / n);
  }
  r.loop = summarize(loop);
  r.cpu = summarize(cpu);
  for (int i = 0; i < reps; i++) {
    hold(P);
    CUDA_CHECK(cudaEventRecord(P.ev_a[i], P.s));
    step(i);
    CUDA_CHECK(cudaEventRecord(P.ev_b[i], P.s));
    release(P);
    if (i % 64 == 63) CUDA_CHECK(cudaStreamSynchronize(P.s));
  }
  CUDA_CHECK(cudaStreamSynchronize(P.s));
  if (blocker_timed_out(P)) {
    r.note = "blocker timed out in single steps";
    return r;
  }
  for (int i = 0; i < reps; i++) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, P.ev_a[i], P.ev_b[i]));
    single[i] = ms * 1e3;
  }
  r.single = summarize(single);
  for (int i = 0; i < reps; i++) {
    const double t0 = now_us();
    step(i);
    CUDA_CHECK(cudaStreamSynchronize(P.s));
    wall[i] = now_us() - t0;
  }
  r.wall = summarize(wall);
  CUDA_CHECK(cudaGetLastError());
  return r;
}

// ----------------------------------------------------------------------------
// report

/* The floors of one Z (every row of that Z carries them into the CSV). */
struct zfloor {
  double floor_us, floor_at_size_us, bare_us, ceiling_gbps, memset_gbps;
};

struct row {
  size_t Z, t;
  std::string payload, variant;
  size_t bytes, param_bytes;
  zfloor f;
  result r;
};

static void print_row(const row &w) {
  printf("%-7s %3zu %-13s %6zu %6zu", w.payload.c_str(), w.t, w.variant.c_str(), w.bytes, w.param_bytes);
  if (w.r.single.med > 0)
    printf(" %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %6.2f %6.2f %6.2f", w.r.loop.med, w.r.loop.p99, w.r.single.med,
           w.r.single.p99, w.r.wall.med, w.r.wall.p99, w.r.cpu.med, w.r.cpu.p99, w.r.single.med / w.f.floor_us);
  printf("%s%s\n", w.r.note.empty() ? "" : "  ", w.r.note.c_str());
  fflush(stdout);
}

static bool write_csv(const char *path, const std::vector<row> &rows) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return false;
  }
  fprintf(f,
          "zero_bytes,payload,tokens,variant,payload_bytes,param_bytes,loop_med_us,loop_p99_us,single_med_us,"
          "single_p99_us,wall_med_us,wall_p99_us,cpu_med_us,cpu_p99_us,floor_us,floor_at_size_us,bare_single_us,"
          "ceiling_gbps,memset_at_size_gbps,note\n");
  for (const row &w : rows)
    fprintf(f, "%zu,%s,%zu,%s,%zu,%zu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%.1f,\"%s\"\n", w.Z,
            w.payload.c_str(), w.t, w.variant.c_str(), w.bytes, w.param_bytes, w.r.loop.med, w.r.loop.p99,
            w.r.single.med, w.r.single.p99, w.r.wall.med, w.r.wall.p99, w.r.cpu.med, w.r.cpu.p99, w.f.floor_us,
            w.f.floor_at_size_us, w.f.bare_us, w.f.ceiling_gbps, w.f.memset_gbps, w.r.note.c_str());
  return fclose(f) == 0;
}

// ----------------------------------------------------------------------------

/* One case: validate, time, validate again; a row. */
static row run_case(probe &P, variant v, payload pl, size_t t, size_t Z, bool large_params, const zfloor &f,
                    uint32_t *tag, bool *ok) {
  kase k;
  k.v = v;
  k.pl = pl;
  k.t = t;
  k.Z = Z;
  k.bytes = v == V_ZERO ? 0 : payload_bytes(pl, t);
  row w = {Z, t, v == V_ZERO ? "-" : k_payload[pl], k_variant[v], k.bytes, 0, f, result()};
  if (v == V_PARAMS || v == V_SPREAD) {
    k.cap = 0;
    for (int c : k_caps)
      if (!k.cap && (size_t)c >= k.bytes / 16) k.cap = c;
    if (!k.cap || (k.cap > 256 && !large_params)) {
      w.r.note = k.cap ? "n/a: parameters over 4 KiB need a CUDA 12.1+ driver"
                       : "n/a: the payload exceeds the 32764-byte parameter limit";
      return w;
    }
  }
  w.param_bytes = sizeof(stage_args) + 16u * (size_t)k.cap;
  build(P, k);
  bool valid = true;
  for (int i = 0; i < VALIDATE_STEPS && valid; i++) valid = validate(P, k, (*tag)++, "before timing");
  if (valid && (v == V_PARAMS || v == V_SPREAD)) valid = validate_queued(P, k, tag);
  if (valid) {
    std::vector<std::vector<unsigned char>> pays;
    for (int i = 0; i < 4; i++) pays.push_back(make_payload(pl, t, (*tag)++));
    w.r = measure(P, P.reps, [&](int i) { host_part(P, k, pays[i & 3].data()); });
    valid = validate(P, k, (*tag)++, "after timing");
    if (!valid) w.r.note += w.r.note.empty() ? "VALIDATION FAILED after timing" : "; VALIDATION FAILED after timing";
  } else {
    w.r.note = "VALIDATION FAILED: not timed";
  }
  *ok = *ok && valid;
  destroy(k);
  return w;
}

int main(int argc, char **argv) {
  int reps = 2000;
  const char *csv = NULL;
  std::vector<size_t> zs;
  for (int i = 1; i < argc; i++) {
    const bool has = i + 1 < argc;
    if (!strcmp(argv[i], "--reps") && has)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--csv") && has)
      csv = argv[++i];
    else if (!strcmp(argv[i], "--zero-mib") && has)
      for (char *tok = strtok(argv[++i], ","); tok; tok = strtok(NULL, ","))
        zs.push_back(atoi(tok) > 0 && atoi(tok) <= 4096 ? (size_t)atoi(tok) << 20 : 0);
    else
      reps = -1;
  }
  if (zs.empty()) zs = {(size_t)2 << 20, (size_t)16 << 20};
  if (reps < BATCH || reps > 100000 || std::count(zs.begin(), zs.end(), (size_t)0)) {
    fprintf(stderr, "usage: step_params_probe [--reps %d..100000] [--csv FILE] [--zero-mib 2,16 (1..4096 each)]\n",
            BATCH);
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    printf("step_params_probe: no CUDA device (skipped)\n");
    return 77;
  }
  int driver = 0, runtime = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  const bool large_params = driver >= 12010; /* parameters over 4 KiB: CUDA 12.1 drivers and later */
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));

  probe P;
  P.reps = reps;
  CUDA_CHECK(cudaStreamCreateWithFlags(&P.s, cudaStreamNonBlocking));
  P.ev_a.resize(reps);
  P.ev_b.resize(reps);
  for (int i = 0; i < reps; i++) {
    CUDA_CHECK(cudaEventCreate(&P.ev_a[i]));
    CUDA_CHECK(cudaEventCreate(&P.ev_b[i]));
  }
  const size_t max_z = *std::max_element(zs.begin(), zs.end());
  const size_t max_bytes = payload_bytes(P_INPUTS, k_tokens[sizeof k_tokens / sizeof *k_tokens - 1]);
  P.slot_bytes = (max_bytes + 255u) / 256u * 256u;
  CUDA_CHECK(cudaMalloc((void **)&P.zero, max_z + GUARD));
  CUDA_CHECK(cudaMalloc((void **)&P.dst, P.slot_bytes * BATCH + GUARD)); /* BATCH strides: validate_queued */
  CUDA_CHECK(cudaMalloc((void **)&P.src_dev, max_bytes));
  CUDA_CHECK(cudaMalloc((void **)&P.counter, sizeof(uint64_t)));
  CUDA_CHECK(cudaMemsetAsync(P.counter, 0, sizeof(uint64_t), P.s));
  CUDA_CHECK(cudaStreamSynchronize(P.s));
  /* one mapped block: the ring's SLOTS slots, the ack, the blocker's words */
  const size_t ring_n = P.slot_bytes * SLOTS;
  void *h = NULL, *d = NULL;
  CUDA_CHECK(cudaHostAlloc(&h, ring_n + 256, cudaHostAllocMapped));
  memset(h, 0, ring_n + 256);
  CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
  P.ring_h = (unsigned char *)h;
  P.ring_d = (uint64_t)(uintptr_t)d;
  P.ack_h = (volatile uint64_t *)(P.ring_h + ring_n);
  P.ack_d = P.ring_d + ring_n;
  P.release_h = (volatile uint32_t *)(P.ring_h + ring_n + 64);
  P.release_d = (uint32_t *)((unsigned char *)d + ring_n + 64);
  printf("device %s, %d SMs; driver %d, runtime %d; reps %d (loop: batches of %d), ring %d slots of %zu bytes\n",
         prop.name, prop.multiProcessorCount, driver, runtime, reps, BATCH, SLOTS, P.slot_bytes);
  if (!large_params) printf("driver older than 12.1: params variants over 4 KiB are skipped\n");

  /* the write ceiling and the launch term of the floor */
  void *big = NULL;
  CUDA_CHECK(cudaMalloc(&big, CEILING_BYTES));
  const result ceil_r =
      measure(P, std::min(CEILING_REPS, reps), [&](int) { CUDA_CHECK(cudaMemsetAsync(big, 0, CEILING_BYTES, P.s)); });
  CUDA_CHECK(cudaFree(big));
  const double ceiling_gbps = (double)CEILING_BYTES / (ceil_r.single.med * 1e3);
  kase bare;
  bare.kp.func = (void *)k_empty;
  bare.kp.gridDim = bare.kp.blockDim = dim3(1);
  instantiate(P, bare);
  const result bare_r = measure(P, reps, [&](int) { CUDA_CHECK(cudaGraphLaunch(bare.x, P.s)); });
  printf(
      "write ceiling (1 GiB cudaMemsetAsync, single): %.1f GB/s; empty 1-kernel graph: single %.2f us, "
      "back to back %.2f us, wall %.2f us\n",
      ceiling_gbps, bare_r.single.med, bare_r.loop.med, bare_r.wall.med);
  printf(
      "us per step, median and p99: loop = GPU back to back (batches of %d), single = GPU of one queued step, "
      "wall = host start to sync return, cpu = host part; xfloor = single / floor\n",
      BATCH);

  std::vector<row> rows;
  bool ok = true;
  uint32_t tag = 1;
  for (size_t Z : zs) {
    const result ms_r = measure(P, reps, [&](int) { CUDA_CHECK(cudaMemsetAsync(P.zero, 0, Z, P.s)); });
    const zfloor f = {(double)Z / (ceiling_gbps * 1e3) + bare_r.single.med, ms_r.single.med + bare_r.single.med,
                      bare_r.single.med, ceiling_gbps, (double)Z / (ms_r.single.med * 1e3)};
    printf(
        "\nZ = %zu MiB: floor %.2f us (Z at the ceiling + empty graph); Z at memset's %.1f GB/s at this size "
        "+ empty graph: %.2f us\n",
        Z >> 20, f.floor_us, f.memset_gbps, f.floor_at_size_us);
    printf("%-7s %3s %-13s %6s %6s %7s %7s %7s %7s %7s %7s %6s %6s %6s\n", "payload", "t", "variant", "bytes", "param",
           "loop", "p99", "single", "p99", "wall", "p99", "cpu", "p99", "xfloor");
    auto add = [&](const row &w) {
      rows.push_back(w);
      print_row(w);
    };
    add({Z, 0, "-", "bare", 0, 0, f, bare_r});
    add({Z, 0, "-", "memset", 0, 0, f, ms_r});
    add(run_case(P, V_ZERO, P_IDS, 0, Z, large_params, f, &tag, &ok));
    for (payload pl : {P_IDS, P_INPUTS})
      for (size_t t : k_tokens)
        for (variant v : {V_DEVICE, V_SLOT, V_PARAMS, V_SPREAD})
          /* params-spread with one copying block is the params case itself */
          if (v != V_SPREAD || payload_bytes(pl, t) > SPREAD_VECS * 16u)
            add(run_case(P, v, pl, t, Z, large_params, f, &tag, &ok));
  }
  if (csv && !write_csv(csv, rows)) return 2;
  destroy(bare);
  for (int i = 0; i < reps; i++) {
    CUDA_CHECK(cudaEventDestroy(P.ev_a[i]));
    CUDA_CHECK(cudaEventDestroy(P.ev_b[i]));
  }
  CUDA_CHECK(cudaFree(P.zero));
  CUDA_CHECK(cudaFree(P.dst));
  CUDA_CHECK(cudaFree(P.src_dev));
  CUDA_CHECK(cudaFree(P.counter));
  CUDA_CHECK(cudaFreeHost(P.ring_h));
  CUDA_CHECK(cudaStreamDestroy(P.s));
  if (!ok) {
    printf("validation FAILED (see above): failed cases were not timed or are marked\n");
    return 1;
  }
  printf("every case validated before and after it was timed\n");
  return 0;
}
