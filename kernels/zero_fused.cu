/* zero_fused.cu — one launch clears every buffer of a zero plan and serves
 * the step's staged token ids.
 *
 * Purpose. Before a decode step, up to MDR_ZERO_PLAN_MAX arena buffers
 * (docs/SIZES.md §9) must be zero, wholly or in their leading rows. One
 * cudaMemsetAsync per buffer costs one launch (one graph node) each; these
 * kernels clear the whole plan in one launch, and in graphs the same launch
 * serves the staged step: it copies the step's ids from a ring of slots in
 * mapped pinned memory into token_ids and advances the ring counter
 * (graphs/staging.h owns the ring).
 *
 * Memory layout. Nothing is allocated. A static plan travels by value in
 * the kernel parameters (zf_params_t: up to ZF_SMALL_SEGS segments in about
 * 1 KiB, up to MDR_ZERO_MAX_SEGS in under 4 KiB, with chunk prefix sums and
 * the stage descriptor). Each segment is a byte range [ptr, ptr + bytes) of
 * any size and alignment. The plan is cut into MDR_ZERO_CHUNK chunks
 * (zero_map.h); a block takes one chunk, or strides past the grid's cap;
 * inside a chunk the unaligned head and tail bytes are written one by one
 * and the aligned body with 16-byte stores, ZF_UNROLL of them in flight per
 * thread.
 *
 * The kernels, each with one launcher below:
 *   - zero_list_kernel (EXACT/LADDER graphs, small plans, no host fetch): a
 *     static plan of one launch with at most MDR_ZERO_LIST_MAX chunks,
 *     captured into a graph, travels as the list of its chunks (zero_map.h
 *     section 5), block k clears chunk k after one parameter load; stage
 *     work as below, in block 0;
 *   - zero_static_kernel (eager, and graphs' larger plans or host fetches): the launcher
 *     evaluates the rules at `tokens` and passes FIXED segments and the
 *     prefix sums; one block per chunk, laid out in rows (one row per
 *     segment, no search) when the segments are of similar size; stage
 *     work, if any, runs in one extra block dispatched first that does no
 *     zeroing, so its round trip to host memory overlaps the stores. Its
 *     inline form (ZF_STAGED_INLINE) carries a small step's slot image in
 *     its parameters, set per step by a node update: no ring, no round
 *     trip to host memory (the inline launch without a plan table, when
 *     the plan at the count exceeds the list form's chunks);
 *   - zero_list_inline_kernel (graphs' small host steps without a plan
 *     table, plans of at most ZF_LIST_INLINE chunks): the chunk list, then
 *     the slot image, set per step by a node update;
 *   - zero_table_kernel (DYNAMIC by node update): the plan at t comes from
 *     a table of every count's plan in device memory; the parameters hold
 *     only t and the stage and the grid is fixed, so the host re-targets a
 *     graph node of it with a parameter write. Its inline form,
 *     zero_table_inline_kernel<IMG> (graphs' small host steps, given a
 *     table), adds the slot image after those parameters, in five classes:
 *     about 240 bytes updated per step for a small image (where the static
 *     inline form takes about 1.2 KiB), then, for steps with step inputs,
 *     room for the count's input table (768 bytes) and an image of up to
 *     MDR_STAGE_INLINE_LARGE_BYTES, MDR_STAGE_INLINE_XL_BYTES,
 *     MDR_STAGE_INLINE_XXL_BYTES or MDR_STAGE_INLINE_XXXL_BYTES (2048, 5248,
 *     9344 and 17792 bytes in all). The graph cache passes a table for the
 *     larger classes only: the small class ran no faster in the table form
 *     (docs/KERNELS.md).
 *   - zero_dynamic_kernel (DYNAMIC by device count): t is the slot header's
 *     count, known only on the device. One block (ticket 0) reads it and
 *     publishes it in device memory; all blocks first clear the floor every
 *     t >= 1 clears, then wait for t and clear the rest.
 *
 * Launch limits. ZF_BLOCK threads per block. List: one block per chunk
 * (at most MDR_ZERO_LIST_MAX, +1 stage block), parameters of 4 KiB up to
 * ZF_LIST_SMALL chunks, 8 KiB above. Static: min(chunks, sm_count *
 * ZF_STATIC_BLOCKS_PER_SM) blocks, flat or in rows (+1 stage block or row);
 * dynamic: min(chunks at the largest t, sm_count * ZF_BLOCKS_PER_SM); table:
 * min(chunks at the largest t, sm_count * the blocks of it a SM holds,
 * mdr_cuda_zero_table_blocks_per_sm) +1 stage block; at least 1. At
 * most MDR_ZERO_MAX_SEGS segments per launch: the static and dynamic
 * launchers split longer plans (FETCH on the first launch, ADVANCE on the
 * last, DYNAMIC on all). No allocation, no synchronisation, no host-side
 * wait: legal under stream capture. A chunk is at most 16 KiB, so in-chunk
 * indices are 32-bit. Why each shape was chosen, with the measurements:
 * docs/KERNELS.md. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mdr/arena.h"
#include "staging.cuh"
#include "zero_fused.h"
#include "zero_map.h"

/* Threads per block. */
#define ZF_BLOCK 256
/* Static plans: at most this many blocks per SM in the grid, one chunk
 * each (a grid sized to the plan, like a memset kernel, rather than a
 * resident grid striding over the chunks). Past it, blocks stride. */
#define ZF_STATIC_BLOCKS_PER_SM 1024
/* Static plans in rows (zero_static_kernel): at most this many blocks in
 * all, and no more than twice the plan's chunks plus ZF_ROWS_SLACK (blocks
 * of a row past its segment's end exit at once; a few hundred cost less
 * than a search per block, millions would not). */
#define ZF_ROWS_MAX_BLOCKS 65536
#define ZF_ROWS_SLACK 1024
/* DYNAMIC plans: the grid is fixed at capture for the largest count, so it
 * is sized to stay resident (this many blocks per SM) and strides. The
 * table kernel's grid takes the fewer that fit with its registers
 * (mdr_cuda_zero_table_blocks_per_sm). */
#define ZF_BLOCKS_PER_SM 6
/* 16-byte stores each thread issues back to back. */
/* (The lab in dev/ may build this file with another value to sweep it.) */
#ifndef ZF_UNROLL
#define ZF_UNROLL 4
#endif
static_assert(ZF_BLOCK == MDR_STAGE_BLOCK, "the stage block is one block of the launch");

/* Kernel parameters for up to CAP segments. Two sizes are instantiated: the
 * arena's plans (at most ZF_SMALL_SEGS) travel in about 1 KiB, which keeps
 * graph-node parameter updates and uploads small; anything else in 4 KiB. */
template <int CAP>
struct zf_params_t {
  mdr_zero_seg segs[CAP];     /* static plans: resolved to FIXED */
  uint64_t prefix[CAP + 1];   /* static plans: chunk prefix sums */
  mdr_stage_desc stage;       /* valid when flags != 0 */
  uint64_t tokens;            /* t of a static plan */
  uint32_t n;                 /* segments in this launch */
  uint32_t flags;             /* MDR_STAGE_* of this launch */
};
#define ZF_SMALL_SEGS 20
typedef zf_params_t<MDR_ZERO_MAX_SEGS> zf_params;
typedef zf_params_t<ZF_SMALL_SEGS> zf_params_small;

/* How a zero_static_kernel launch serves a stage: not at all, from a ring
 * slot (the stage descriptor says where), or from the slot image in its own
 * parameters (MDR_STAGE_INLINE). */
enum { ZF_UNSTAGED = 0, ZF_STAGED = 1, ZF_STAGED_INLINE = 2 };

/* Parameters of an inline launch: the static plan's, then the slot image
 * (MDR_STAGE_INLINE_BYTES). Only this template grows by the image, so ring
 * launches keep their size. The kernel takes them __grid_constant__, so the
 * image's address is a generic address of the parameters and the stage
 * block reads it as it reads a ring slot. */
template <int CAP>
struct zf_inline_params_t {
  zf_params_t<CAP> p;
  uint4 inline_slot[MDR_STAGE_INLINE_BYTES / 16];
};
typedef zf_inline_params_t<ZF_SMALL_SEGS> zf_inline_params_small;
static_assert(MDR_STAGE_INLINE_BYTES % 16 == 0, "the slot image is whole 16-byte vectors");
static_assert(sizeof(zf_inline_params_small) <= MDR_STAGE_INLINE_PARAM_MAX,
              "the inline parameters fit mdr_stage_inline_launch");
static_assert(offsetof(zf_inline_params_small, inline_slot) % 16 == 0, "the slot image is 16-byte aligned");

/* The argument type of zero_static_kernel<CAP, STAGED>, its plan and the
 * address of its slot image (0: none). */
template <int CAP, int STAGED>
struct zf_static_args {
  typedef zf_params_t<CAP> type;
};
template <int CAP>
struct zf_static_args<CAP, ZF_STAGED_INLINE> {
  typedef zf_inline_params_t<CAP> type;
};
template <int CAP>
__device__ __forceinline__ const zf_params_t<CAP> &zf_plan_of(const zf_params_t<CAP> &a) {
  return a;
}
template <int CAP>
__device__ __forceinline__ const zf_params_t<CAP> &zf_plan_of(const zf_inline_params_t<CAP> &a) {
  return a.p;
}
template <int CAP>
__device__ __forceinline__ uint64_t zf_inline_slot_of(const zf_params_t<CAP> &) {
  return 0;
}
template <int CAP>
__device__ __forceinline__ uint64_t zf_inline_slot_of(const zf_inline_params_t<CAP> &a) {
  return (uint64_t)(uintptr_t)&a.inline_slot[0];
}

/* Kernel parameters of a small static plan as its chunk list (zero_map.h
 * section 5): up to CAP chunk words. Two sizes: up to ZF_LIST_SMALL chunks
 * in 4 KiB, up to MDR_ZERO_LIST_MAX in 8 KiB (kernel parameters may take
 * up to 32 KiB since CUDA 12.1 on sm_70+). */
template <int CAP>
struct zf_list_params_t {
  uint64_t chunk[CAP];  /* mdr_zero_list_word of each chunk */
  mdr_stage_desc stage; /* valid when flags != 0 */
  uint64_t tokens;      /* t of the plan */
  uint32_t n;           /* chunks */
  uint32_t flags;       /* MDR_STAGE_* of this launch */
};
#define ZF_LIST_SMALL 480
static_assert(sizeof(zf_list_params_t<ZF_LIST_SMALL>) <= 4096, "the small chunk list stays within 4 KiB");
static_assert(sizeof(zf_list_params_t<MDR_ZERO_LIST_MAX>) <= 8192, "the chunk list stays within 8 KiB");
static_assert(ZF_LIST_SMALL < MDR_ZERO_LIST_MAX, "the small chunk list is the smaller one");

static_assert(sizeof(zf_params) <= 4096, "kernel parameters must stay under 4 KiB");
static_assert(ZF_SMALL_SEGS >= MDR_ZERO_PLAN_MAX, "the arena's plans must fit the small parameter block");
static_assert(ZF_SMALL_SEGS <= MDR_ZERO_MAX_SEGS, "the small parameter block is the smaller one");

// ----------------------------------------------------------------------------
// device helpers

/* One 16-byte zero store. The plan carries addresses as integers, so plain
 * C++ would emit generic stores; these are global memory by contract. */
__device__ __forceinline__ void zf_store16_zero(uint64_t addr) {
  asm volatile("st.global.v4.u32 [%0], {%1, %1, %1, %1};" ::"l"(addr), "r"(0u) : "memory");
}

/* Clear [begin, end) of one chunk: head [begin, body) and tail [tail, end)
 * are < 16 bytes each, body is 16-byte aligned and at most 64 KiB. */
__device__ __forceinline__ void zf_clear_span(const mdr_zero_span sp) {
  const unsigned tid = threadIdx.x;
  if (tid < sp.body - sp.begin) *(unsigned char *)(sp.begin + tid) = 0;
  if (tid < sp.end - sp.tail) *(unsigned char *)(sp.tail + tid) = 0;
  const unsigned n16 = (unsigned)((sp.tail - sp.body) >> 4);
  unsigned i = tid;
  for (; i + (ZF_UNROLL - 1) * ZF_BLOCK < n16; i += ZF_UNROLL * ZF_BLOCK) {
#pragma unroll
    for (int u = 0; u < ZF_UNROLL; u++) zf_store16_zero(sp.body + (uint64_t)(i + u * ZF_BLOCK) * 16u);
  }
  for (; i < n16; i += ZF_BLOCK) zf_store16_zero(sp.body + (uint64_t)i * 16u);
}

/* Warp 0, for one phase of a DYNAMIC launch: the byte range each of up to
 * 64 segments clears (two per lane) as an offset from its start and a
 * length (phase 0: [0, floor); phase 1, t known: [floor, bytes(t))), and the
 * exclusive chunk prefix sums (65 entries; entries past n hold the total). */
__device__ __forceinline__ void zf_scan_phase(const zf_params &p, bool rest, uint64_t t, uint64_t *s_off,
                                              uint64_t *s_len, uint64_t *s_prefix) {
  const unsigned lane = threadIdx.x;
  uint64_t c[2];
#pragma unroll
  for (int j = 0; j < 2; j++) {
    const unsigned i = 2 * lane + j;
    uint64_t off = 0, len = 0;
    if (i < p.n) {
      const uint64_t floor = mdr_zero_seg_floor(&p.segs[i]);
      if (rest) {
        const uint64_t b = mdr_zero_seg_bytes(&p.segs[i], t);
        off = floor;
        len = b > floor ? b - floor : 0;
      } else {
        len = floor;
      }
    }
    s_off[i] = off;
    s_len[i] = len;
    c[j] = mdr_zero_chunks(len);
  }
  const uint64_t pair = c[0] + c[1];
  uint64_t incl = pair;
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    uint64_t v = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= (unsigned)off) incl += v;
  }
  s_prefix[2 * lane] = incl - pair;
  s_prefix[2 * lane + 1] = incl - pair + c[0];
  if (lane == 31) s_prefix[MDR_ZERO_MAX_SEGS] = incl;
}

/* Clear the chunks first, first + stride, ... of one DYNAMIC phase. */
__device__ __forceinline__ void zf_clear_phase(const zf_params &p, const uint64_t *s_off, const uint64_t *s_len,
                                               const uint64_t *s_prefix, uint64_t first, uint64_t stride) {
  const uint64_t total = s_prefix[p.n];
  for (uint64_t k = first; k < total; k += stride) {
    const uint32_t s = mdr_zero_locate(s_prefix, p.n, k);
    zf_clear_span(mdr_zero_chunk_span(p.segs[s].ptr + s_off[s], s_len[s], k - s_prefix[s]));
  }
}

// ----------------------------------------------------------------------------
// kernel

/* Static plan: segments resolved to FIXED byte counts and chunk prefix sums
 * on the host (p.segs, p.prefix). Two grid shapes (zf_build picks):
 *   - rows (gridDim.y > 1): row y is segment y and block x of the row its
 *     chunk x, so a block needs one parameter load to know its work, no
 *     search; used when the rows waste few blocks (segments of similar
 *     size, or a small plan). STAGED launches add row 0, whose block 0
 *     serves the stage.
 *   - flat (gridDim.y == 1): a block per chunk of the whole plan, its
 *     segment found by binary search over the prefix sums; STAGED launches
 *     add block 0 for the stage.
 * Either way blocks stride when the plan has more chunks than the grid
 * (ZF_STATIC_BLOCKS_PER_SM per SM), and the stage block is dispatched first,
 * so its round trip to host memory overlaps the zeroing. STAGED is a
 * template argument so that a block finds its work from blockIdx alone;
 * ZF_STAGED_INLINE takes the slot image in the parameters (zf_inline_params_t)
 * and serves the stage from there. */
template <int CAP, int STAGED>
__global__ void __launch_bounds__(ZF_BLOCK)
    zero_static_kernel(const __grid_constant__ typename zf_static_args<CAP, STAGED>::type a) {
  const zf_params_t<CAP> &p = zf_plan_of(a);
  /* stage blocks: the first `first` of a flat grid, of row 0 in rows */
  const unsigned first = STAGED == ZF_STAGED ? mdr_stage_blocks_of(p.flags) : STAGED ? 1u : 0u;
  if (gridDim.y > 1) {
    if constexpr (STAGED != ZF_UNSTAGED) {
      if (blockIdx.y == 0) {
        if (blockIdx.x < first)
          mdr_stage_block(p.stage, p.flags, (uint32_t)p.tokens, zf_inline_slot_of(a), blockIdx.x, first);
        return;
      }
    }
    const mdr_zero_seg &sg = p.segs[blockIdx.y - (STAGED ? 1u : 0u)];
    const uint64_t ptr = sg.ptr, bytes = sg.bytes, chunks = mdr_zero_chunks(bytes);
    for (uint64_t x = blockIdx.x; x < chunks; x += gridDim.x) zf_clear_span(mdr_zero_chunk_span(ptr, bytes, x));
    return;
  }
  if constexpr (STAGED != ZF_UNSTAGED) {
    if (blockIdx.x < first) {
      mdr_stage_block(p.stage, p.flags, (uint32_t)p.tokens, zf_inline_slot_of(a), blockIdx.x, first);
      return;
    }
  }
  const uint64_t total = p.prefix[p.n];
  for (uint64_t k = blockIdx.x - first; k < total; k += gridDim.x - first) {
    const uint32_t s = mdr_zero_locate(p.prefix, p.n, k);
    zf_clear_span(mdr_zero_chunk_span(p.segs[s].ptr, p.segs[s].bytes, k - p.prefix[s]));
  }
}

/* Static plan of at most MDR_ZERO_LIST_MAX chunks, as its chunk list: block
 * k (after the stage block, when STAGED) clears chunk k, whose bounds are
 * one parameter load away; no search, no stride (the grid is the list).
 * On GLM-5.3's plans at 1-8 tokens this is what takes the step closest to
 * one memset node of the same bytes (docs/KERNELS.md). */
template <int CAP, bool STAGED>
__global__ void __launch_bounds__(ZF_BLOCK) zero_list_kernel(const __grid_constant__ zf_list_params_t<CAP> p) {
  if (STAGED && blockIdx.x == 0) {
    mdr_stage_block(p.stage, p.flags, (uint32_t)p.tokens);
    return;
  }
  zf_clear_span(mdr_zero_list_span(p.chunk[blockIdx.x - (STAGED ? 1u : 0u)]));
}

/* STAGE_TABLE (the node-update implementation of MDR_GRAPH_DYNAMIC): the
 * parameters carry t and the stage only (zf_table_params, under 128 bytes,
 * which the host re-targets cheaply); every zeroing block reads count t's
 * entry of the plan table (zero_map.h section 4) into shared memory with one
 * round of coalesced loads, then clears its chunks as a static plan does.
 * Block 0 serves the stage, as in zero_static_kernel. */
struct zf_table_params {
  mdr_stage_desc stage; /* flags include TABLE; table and table_max set */
  uint64_t tokens;      /* t, 1 <= t <= stage.table_max */
  uint32_t n;           /* rules in the table */
  uint32_t flags;       /* FETCH / ADVANCE of this launch */
};

/* The zeroing blocks' work (blocks `first` on; block 0 is the stage
 * block when first is 1): count t's plan from the table. */
__device__ __forceinline__ void zf_table_zero(const zf_table_params &p, unsigned first) {
  __shared__ uint64_t s_ptr[MDR_ZERO_MAX_SEGS], s_bytes[MDR_ZERO_MAX_SEGS];
  __shared__ uint64_t s_prefix[MDR_ZERO_MAX_SEGS + 1];
  const uint64_t *w = (const uint64_t *)p.stage.table;
  const uint64_t *e = w + mdr_plan_table_entry(p.n, p.tokens);
  const unsigned tid = threadIdx.x, n = p.n;
  if (tid < n) {
    s_ptr[tid] = w[tid];
    s_bytes[tid] = e[tid];
  }
  if (tid <= n) s_prefix[tid] = e[n + tid];
  __syncthreads();
  const uint64_t total = s_prefix[n];
  for (uint64_t k = blockIdx.x - first; k < total; k += gridDim.x - first) {
    const uint32_t s = mdr_zero_locate(s_prefix, n, k);
    zf_clear_span(mdr_zero_chunk_span(s_ptr[s], s_bytes[s], k - s_prefix[s]));
  }
}

__global__ void __launch_bounds__(ZF_BLOCK) zero_table_kernel(const __grid_constant__ zf_table_params p) {
  const unsigned first = p.flags ? 1u : 0u; /* a stage block */
  if (first && blockIdx.x == 0) {
    mdr_stage_block(p.stage, p.flags, (uint32_t)p.tokens);
    return;
  }
  zf_table_zero(p, first);
}

/* The inline form of the table kernel (graphs' small host steps: FETCH |
 * INLINE, the descriptor's table set, TABLE not): the table parameters,
 * then the slot image of IMG bytes. Five classes: IMG =
 * MDR_STAGE_INLINE_BYTES (240 bytes in all, where the static inline form
 * zf_inline_params_small carries the whole plan by value in about 1.2 KiB),
 * MDR_STAGE_INLINE_LARGE_BYTES, MDR_STAGE_INLINE_XL_BYTES,
 * MDR_STAGE_INLINE_XXL_BYTES and MDR_STAGE_INLINE_XXXL_BYTES (2048, 5248,
 * 9344 and 17792 bytes), for steps with step inputs. A node of it is
 * updated every step and each launch reads the whole block, so a launch
 * takes the smallest class that holds its image. Block 0 serves the stage from the image, as
 * zero_static_kernel<..., ZF_STAGED_INLINE> does; the others clear count
 * t's plan from the table.
 *
 * A larger class (IMG past the small one: steps with inputs), in this form
 * and the list form, keeps room for the count's input table
 * (MDR_STAGE_INLINE_TABLE entries) before its image, at the launch's
 * table_offset. The graph cache writes the table there, so the stage block
 * reads its entries from the parameters as it reads the image, not from
 * device memory: a step whose zeroing is short waits for that load before
 * its first store (on an H200 under MDR_ROWS_ALL the step with inputs at
 * 1-2 sequences came within 0.06-0.13 us of the ids-only step, from
 * 0.35-0.38; docs/GRAPHS.md). Left zeroed, the table in device memory
 * serves. */
#define ZF_TAB(IMG) ((IMG) > MDR_STAGE_INLINE_BYTES)
template <unsigned IMG, bool TAB = ZF_TAB(IMG)>
struct zf_table_inline_params_t {
  zf_table_params p;
  uint4 inline_slot[IMG / 16];
};
template <unsigned IMG>
struct zf_table_inline_params_t<IMG, true> {
  zf_table_params p;
  mdr_stage_input table[MDR_STAGE_INLINE_TABLE];
  uint4 inline_slot[IMG / 16];
};

/* An inline form's parameters P with an image of IMG bytes: whole 16-byte
 * vectors, 16-byte aligned in the parameters, ending them, the whole
 * fitting mdr_stage_inline_launch. */
template <class P, unsigned IMG>
constexpr bool zf_inline_layout_ok() {
  return IMG % 16 == 0 && offsetof(P, inline_slot) % 16 == 0 && sizeof(P) == offsetof(P, inline_slot) + IMG &&
         sizeof(P) <= MDR_STAGE_INLINE_PARAM_MAX;
}
template <unsigned IMG>
constexpr bool zf_inline_class_ok() {
  return zf_inline_layout_ok<zf_table_inline_params_t<IMG>, IMG>();
}
static_assert(zf_inline_class_ok<MDR_STAGE_INLINE_BYTES>() && zf_inline_class_ok<MDR_STAGE_INLINE_LARGE_BYTES>() &&
                  zf_inline_class_ok<MDR_STAGE_INLINE_XL_BYTES>() && zf_inline_class_ok<MDR_STAGE_INLINE_XXL_BYTES>() &&
                  zf_inline_class_ok<MDR_STAGE_INLINE_XXXL_BYTES>(),
              "the image classes' parameter layouts");
static_assert(MDR_STAGE_INLINE_BYTES < MDR_STAGE_INLINE_LARGE_BYTES &&
                  MDR_STAGE_INLINE_LARGE_BYTES < MDR_STAGE_INLINE_XL_BYTES &&
                  MDR_STAGE_INLINE_XL_BYTES < MDR_STAGE_INLINE_XXL_BYTES &&
                  MDR_STAGE_INLINE_XXL_BYTES < MDR_STAGE_INLINE_XXXL_BYTES,
              "the classes grow");

/* The inline form of the chunk list (graphs' host steps whose plan at the
 * count has at most ZF_LIST_INLINE chunks, about 8.9 MB, in the small,
 * large and extra-large image classes): the list parameters (4480 bytes),
 * then (past the small class) room for the input table, then the image
 * class's bytes: 4592, 6400 or 9600 in all. A block learns its chunk from one parameter load,
 * as zero_list_kernel's do, where the static inline form searches prefix
 * sums and the table form loads the plan from device memory first (on an
 * H200 under MDR_ROWS_ALL, ids-only steps at 1-8 tokens took 0.85-0.93x
 * of the static form's GPU time, steps with inputs at 2-8 sequences
 * 0.90-0.97x of the table form's, docs/KERNELS.md). Block 0 serves the
 * stage from the image. */
#define ZF_LIST_INLINE MDR_ZERO_LIST_INLINE_MAX
template <unsigned IMG, bool TAB = ZF_TAB(IMG)>
struct zf_list_inline_params_t {
  zf_list_params_t<ZF_LIST_INLINE> p;
  uint4 inline_slot[IMG / 16];
};
template <unsigned IMG>
struct zf_list_inline_params_t<IMG, true> {
  zf_list_params_t<ZF_LIST_INLINE> p;
  mdr_stage_input table[MDR_STAGE_INLINE_TABLE];
  uint4 inline_slot[IMG / 16];
};
/* The parameters' input table, in either inline form: nullptr in a
 * class without one. */
template <template <unsigned, bool> class P, unsigned IMG>
__host__ __device__ inline const mdr_stage_input *zf_ptab(const P<IMG, true> &a) {
  return a.table;
}
template <template <unsigned, bool> class P, unsigned IMG>
__host__ __device__ inline const mdr_stage_input *zf_ptab(const P<IMG, false> &) {
  return nullptr;
}
template <unsigned IMG>
constexpr bool zf_list_inline_ok() {
  return zf_inline_layout_ok<zf_list_inline_params_t<IMG>, IMG>();
}
static_assert(zf_list_inline_ok<MDR_STAGE_INLINE_BYTES>() && zf_list_inline_ok<MDR_STAGE_INLINE_LARGE_BYTES>() &&
                  zf_list_inline_ok<MDR_STAGE_INLINE_XL_BYTES>(),
              "the list inline form's parameters: the image ends them, within mdr_stage_inline_launch");

template <unsigned IMG>
__global__ void __launch_bounds__(ZF_BLOCK)
    zero_list_inline_kernel(const __grid_constant__ zf_list_inline_params_t<IMG> a) {
  if (blockIdx.x == 0) {
    mdr_stage_inline_block(a.p.stage, a.p.flags, (uint32_t)a.p.tokens, (uint64_t)(uintptr_t)&a.inline_slot[0],
                           zf_ptab(a));
    return;
  }
  zf_clear_span(mdr_zero_list_span(a.p.chunk[blockIdx.x - 1]));
}

template <unsigned IMG>
__global__ void __launch_bounds__(ZF_BLOCK)
    zero_table_inline_kernel(const __grid_constant__ zf_table_inline_params_t<IMG> a) {
  if (blockIdx.x == 0) {
    mdr_stage_inline_block(a.p.stage, a.p.flags, (uint32_t)a.p.tokens, (uint64_t)(uintptr_t)&a.inline_slot[0],
                           zf_ptab(a));
    return;
  }
  zf_table_zero(a.p, 1u);
}

/* STAGE_DYNAMIC (the device-count implementation of MDR_GRAPH_DYNAMIC): the
 * token count t is the slot header's, known only on the device, and reading
 * host memory takes a PCIe round trip. So (mdr_stage_sync in zero_map.h):
 *   - every block takes a ticket; the block with ticket 0 (the stager)
 *     reads the header, publishes t in device memory at once, and copies
 *     the ids (the first ZF_BLOCK vectors in the header's round trip);
 *   - meanwhile every block clears its share of the floor (what any t >= 1
 *     clears, from the rules alone);
 *   - then each block waits for the published t (a device-memory load, not
 *     a PCIe read per block) and clears the rest, [floor, bytes(t));
 *   - the last block to finish resets the tickets and, on the last launch
 *     of a plan (ADVANCE), advances the counter and writes the ack.
 * Blocks take chunks in ticket order, so the first to start take the first
 * chunks. */
__global__ void __launch_bounds__(ZF_BLOCK, ZF_BLOCKS_PER_SM)
    zero_dynamic_kernel(const __grid_constant__ zf_params p) {
  __shared__ uint64_t s_off[MDR_ZERO_MAX_SEGS], s_len[MDR_ZERO_MAX_SEGS];
  __shared__ uint64_t s_prefix[MDR_ZERO_MAX_SEGS + 1];
  __shared__ uint64_t s_step;
  __shared__ uint32_t s_ticket, s_tokens;
  mdr_stage_sync *sync = (mdr_stage_sync *)p.stage.done;
  const uint32_t flags = p.flags;

  if (threadIdx.x == 32) { /* warp 1, while warp 0 scans the floor */
    s_ticket = atomicAdd(&sync->ticket, 1u);
    s_step = *(volatile const uint64_t *)p.stage.counter;
  }
  if (threadIdx.x < 32) zf_scan_phase(p, false, 0, s_off, s_len, s_prefix);
  __syncthreads();
  const uint64_t step = s_step, vblock = s_ticket;
  const bool stager = vblock == 0;

  if (stager) mdr_stage_dynamic(p.stage, flags, step, &sync->published, &s_tokens);

  zf_clear_phase(p, s_off, s_len, s_prefix, vblock, gridDim.x); /* the floor */

  if (!stager && threadIdx.x == 0) {
    const uint32_t want = (uint32_t)(step + 1);
    uint64_t v;
    while (((v = *(volatile const uint64_t *)&sync->published) >> 32) != want) __nanosleep(32);
    s_tokens = (uint32_t)v;
  }
  __syncthreads(); /* t known; every thread is done with the floor's prefix sums */
  if (threadIdx.x < 32) zf_scan_phase(p, true, s_tokens, s_off, s_len, s_prefix);
  __syncthreads();
  zf_clear_phase(p, s_off, s_len, s_prefix, vblock, gridDim.x); /* the rest */

  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned prev = atomicAdd(&sync->done, 1u);
    if (prev == gridDim.x - 1) { /* every block has started and finished */
      *(volatile uint32_t *)&sync->done = 0u;
      *(volatile uint32_t *)&sync->ticket = 0u;
      if (flags & MDR_STAGE_ADVANCE) {
        *(volatile uint64_t *)p.stage.counter = step + 1;
        *(volatile uint64_t *)p.stage.ack = step + 1;
      }
    }
  }
}

// ----------------------------------------------------------------------------
// launchers

/* Build the parameters and grid of launch j (of `launches`) of a static or
 * dynamic plan. Returns 0 when the launch has nothing to do. */
template <int CAP>
static int zf_build(const mdr_zero_seg *segs, size_t n, uint64_t tokens, const mdr_stage_desc *stage,
                    int sm_count, size_t j, size_t launches, zf_params_t<CAP> *p, dim3 *grid) {
  const bool dynamic = stage && (stage->flags & MDR_STAGE_DYNAMIC);
  const uint64_t max_grid = (uint64_t)sm_count * (dynamic ? ZF_BLOCKS_PER_SM : ZF_STATIC_BLOCKS_PER_SM);
  const uint32_t stage_flags =
      stage ? stage->flags &
                  (MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_DYNAMIC | MDR_STAGE_DEVICE_IDS | MDR_STAGE_INLINE)
            : 0u; /* not TABLE */
  memset(p, 0, sizeof *p);
  const size_t first = j * MDR_ZERO_MAX_SEGS;
  const size_t count = n - first < (size_t)CAP ? n - first : (size_t)CAP;
  uint32_t flags = stage_flags & MDR_STAGE_DYNAMIC;
  if (j == 0) flags |= stage_flags & (MDR_STAGE_FETCH | MDR_STAGE_DEVICE_IDS | MDR_STAGE_INLINE);
  if (j == launches - 1) flags |= stage_flags & MDR_STAGE_ADVANCE;
  /* a stage spread over several blocks: one launch that fetches and
   * advances, its inputs from a ring slot (its ids from the slot too, or
   * from the device by the first stage block) */
  if ((flags & (MDR_STAGE_FETCH | MDR_STAGE_ADVANCE)) == (MDR_STAGE_FETCH | MDR_STAGE_ADVANCE) &&
      !(flags & (MDR_STAGE_INLINE | MDR_STAGE_DYNAMIC)))
    flags |= stage->flags & MDR_STAGE_SPREAD_MASK;
  if (flags) p->stage = *stage;
  p->flags = flags;
  p->tokens = tokens;

  uint64_t chunks = 0, most = 0;
  if (dynamic) {
    for (size_t i = 0; i < count; i++) {
      p->segs[i] = segs[first + i];
      const uint64_t c = mdr_zero_chunks(mdr_zero_seg_max_bytes(&p->segs[i]));
      chunks = c > UINT64_MAX - chunks ? UINT64_MAX : chunks + c;
    }
    p->n = (uint32_t)count;
    const uint64_t g = chunks < max_grid ? chunks : max_grid;
    *grid = dim3((unsigned)(g ? g : 1));
    return 1;
  }
  p->n = (uint32_t)mdr_zero_plan_at(segs + first, count, tokens, p->segs);
  for (uint32_t i = 0; i < p->n; i++) {
    p->prefix[i] = chunks;
    const uint64_t c = mdr_zero_chunks(p->segs[i].bytes);
    chunks += c;
    most = c > most ? c : most;
  }
  p->prefix[p->n] = chunks;
  if (chunks == 0 && flags == 0) return 0; /* nothing to clear, no stage work */
  const unsigned staged = flags ? mdr_stage_blocks_of(flags) : 0u; /* stage blocks */
  const uint64_t row = most < max_grid ? most : max_grid;
  if (p->n > 0 && row * p->n <= ZF_ROWS_MAX_BLOCKS && row * p->n <= 2 * chunks + ZF_ROWS_SLACK) {
    /* rows: row 0 holds the stage blocks */
    *grid = dim3((unsigned)(row > staged ? row : staged), p->n + (staged ? 1u : 0u));
    return 1;
  }
  const uint64_t g = chunks < max_grid ? chunks : max_grid;
  *grid = dim3((unsigned)(g + staged)); /* flat */
  return 1;
}

static size_t zf_launches(size_t n) { return n == 0 ? 1 : (n + MDR_ZERO_MAX_SEGS - 1) / MDR_ZERO_MAX_SEGS; }

/* Fill the parameters of a chunk list of k words. */
template <int CAP>
static void zf_fill_list(const uint64_t *words, uint32_t k, uint64_t tokens, const mdr_stage_desc *stage,
                         zf_list_params_t<CAP> *p) {
  memset(p, 0, sizeof *p);
  memcpy(p->chunk, words, k * sizeof *words);
  p->n = k;
  p->tokens = tokens;
  p->flags = stage ? stage->flags & (MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_DEVICE_IDS) : 0u;
  if (p->flags) p->stage = *stage;
}

template <int CAP>
static cudaError_t zf_launch_list(const zf_list_params_t<CAP> &p, cudaStream_t stream) {
  if (p.n == 0 && p.flags == 0) return cudaSuccess; /* nothing to clear, no stage work */
  if (p.flags) {
    zero_list_kernel<CAP, true><<<p.n + 1, ZF_BLOCK, 0, stream>>>(p);
  } else {
    zero_list_kernel<CAP, false><<<p.n, ZF_BLOCK, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

/* A plan of one launch whose chunks fit the list, that reads no host memory
 * and is being captured: zero_list_kernel, in the smaller parameter block
 * that holds it. *taken = 0 otherwise (the caller falls back to the prefix
 * sums). Both exceptions were measured (docs/KERNELS.md):
 *   - a launch that fetches from the staging slot (FETCH): there the stage
 *     block's PCIe round trip is the step's critical path, and the list's
 *     earlier stores slowed it at 4-8 tokens;
 *   - an eager launch: the list gains little GPU time there and costs CPU
 *     at every launch (building the words, 4-8 KiB of parameters), which a
 *     graph pays once, at capture. */
static cudaError_t zf_try_list(const mdr_zero_seg *segs, size_t n, uint64_t tokens, const mdr_stage_desc *stage,
                               cudaStream_t stream, int *taken) {
  *taken = 0;
  if (n > MDR_ZERO_MAX_SEGS || !mdr_zero_list_allowed(stage ? stage->flags : 0u)) return cudaSuccess;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  const cudaError_t ce = cudaStreamIsCapturing(stream, &cap);
  if (ce != cudaSuccess) return ce; /* reported by the caller, as a failed launch would be */
  if (cap != cudaStreamCaptureStatusActive) return cudaSuccess;
  mdr_zero_seg fixed[MDR_ZERO_MAX_SEGS];
  uint64_t words[MDR_ZERO_LIST_MAX];
  const uint32_t m = (uint32_t)mdr_zero_plan_at(segs, n, tokens, fixed);
  const uint32_t k = mdr_zero_list_build(fixed, m, words, MDR_ZERO_LIST_MAX);
  if (k == MDR_ZERO_LIST_NONE) return cudaSuccess;
  *taken = 1;
  if (k <= ZF_LIST_SMALL) {
    zf_list_params_t<ZF_LIST_SMALL> p;
    zf_fill_list(words, k, tokens, stage, &p);
    return zf_launch_list(p, stream);
  }
  zf_list_params_t<MDR_ZERO_LIST_MAX> p;
  zf_fill_list(words, k, tokens, stage, &p);
  return zf_launch_list(p, stream);
}

/* A static plan: its chunk list when zf_try_list takes it; otherwise
 * zero_static_kernel, plans of at most ZF_SMALL_SEGS segments in the small
 * parameter block (one launch), longer ones in launches of
 * MDR_ZERO_MAX_SEGS. */
static cudaError_t zf_launch_static(const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                    const mdr_stage_desc *stage, cudaStream_t stream, int sm_count) {
  int listed = 0;
  const cudaError_t le = zf_try_list(segs, n, tokens, stage, stream, &listed);
  if (listed || le != cudaSuccess) return le;
  if (n <= ZF_SMALL_SEGS) {
    zf_params_small p;
    dim3 grid;
    if (!zf_build(segs, n, tokens, stage, sm_count, 0, 1, &p, &grid)) return cudaSuccess;
    if (p.flags) {
      zero_static_kernel<ZF_SMALL_SEGS, ZF_STAGED><<<grid, ZF_BLOCK, 0, stream>>>(p);
    } else {
      zero_static_kernel<ZF_SMALL_SEGS, ZF_UNSTAGED><<<grid, ZF_BLOCK, 0, stream>>>(p);
    }
    return cudaGetLastError();
  }
  const size_t launches = zf_launches(n);
  for (size_t j = 0; j < launches; j++) {
    zf_params p;
    dim3 grid;
    if (!zf_build(segs, n, tokens, stage, sm_count, j, launches, &p, &grid)) continue;
    if (p.flags) {
      zero_static_kernel<MDR_ZERO_MAX_SEGS, ZF_STAGED><<<grid, ZF_BLOCK, 0, stream>>>(p);
    } else {
      zero_static_kernel<MDR_ZERO_MAX_SEGS, ZF_UNSTAGED><<<grid, ZF_BLOCK, 0, stream>>>(p);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

/* zero_dynamic_kernel: one launch per MDR_ZERO_MAX_SEGS rules, each
 * evaluating its rules at the slot's count. */
static cudaError_t zf_launch_dynamic(const mdr_zero_seg *segs, size_t n, const mdr_stage_desc *stage,
                                     cudaStream_t stream, int sm_count) {
  const size_t launches = zf_launches(n);
  for (size_t j = 0; j < launches; j++) {
    zf_params p;
    dim3 grid;
    if (!zf_build(segs, n, 0, stage, sm_count, j, launches, &p, &grid)) continue;
    zero_dynamic_kernel<<<grid, ZF_BLOCK, 0, stream>>>(p);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

static_assert(sizeof(zf_table_params) <= MDR_CUDA_LAUNCH_PARAM_BYTES, "table parameters fit mdr_cuda_launch");

/* Blocks of zero_table_kernel one SM holds at once, as the runtime said at
 * mdr_cuda_zero_preload (the fewest over the devices preloaded), at most
 * ZF_BLOCKS_PER_SM; 0 before any preload. The table kernel's grid strides
 * and is sized to stay resident, but ptxas gives the kernel its stage
 * code's registers (64 on sm_90), so fewer than ZF_BLOCKS_PER_SM fit: a
 * grid of ZF_BLOCKS_PER_SM a SM ran in one and a half waves (on an H200,
 * sized to what fits, DYNAMIC steps took 0.94-0.98x the GPU time at seed
 * policy; docs/KERNELS.md). */
static int zf_table_per_sm;

extern "C" int mdr_cuda_zero_table_blocks_per_sm(void) {
  const int n = __atomic_load_n(&zf_table_per_sm, __ATOMIC_RELAXED);
  return n > 0 ? n : ZF_BLOCKS_PER_SM;
}

extern "C" int mdr_cuda_zero_table_launch(const mdr_zero_seg *rules, size_t n, uint64_t tokens,
                                          const mdr_stage_desc *stage, int sm_count, mdr_cuda_launch *out) {
  if (!stage || !mdr_stage_table_ok(stage, n, tokens) || sm_count <= 0) return (int)cudaErrorInvalidValue;
  zf_table_params p;
  memset(&p, 0, sizeof p);
  p.stage = *stage;
  p.tokens = tokens;
  p.n = (uint32_t)n;
  p.flags = stage->flags & (MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_DEVICE_IDS);
  /* The grid depends on the table only (its largest plan, resident blocks),
   * not on t: re-targeting the node then changes parameters only. */
  uint64_t chunks = 0;
  for (size_t i = 0; i < n; i++) chunks += mdr_zero_chunks(mdr_zero_seg_bytes(&rules[i], stage->table_max));
  const uint64_t max_grid = (uint64_t)sm_count * (uint64_t)mdr_cuda_zero_table_blocks_per_sm();
  uint64_t g = chunks < max_grid ? chunks : max_grid;
  if (p.flags) g += 1;
  memset(out, 0, sizeof *out);
  out->func = (const void *)zero_table_kernel;
  out->grid[0] = (unsigned)(g ? g : 1);
  out->grid[1] = out->grid[2] = 1;
  out->block[0] = ZF_BLOCK;
  out->block[1] = out->block[2] = 1;
  out->param_bytes = sizeof p;
  memcpy(out->param, &p, sizeof p);
  return 0;
}

/* zero_table_kernel: the launch mdr_cuda_zero_table_launch describes. */
static cudaError_t zf_launch_table(const mdr_zero_seg *rules, size_t n, uint64_t tokens,
                                   const mdr_stage_desc *stage, cudaStream_t stream, int sm_count) {
  mdr_cuda_launch l;
  if (mdr_cuda_zero_table_launch(rules, n, tokens, stage, sm_count, &l) != 0) return cudaErrorInvalidValue;
  void *args[1] = {l.param};
  const cudaError_t e = cudaLaunchKernel(l.func, dim3(l.grid[0], l.grid[1], l.grid[2]),
                                         dim3(l.block[0], l.block[1], l.block[2]), args, 0, stream);
  const cudaError_t last = cudaGetLastError();
  return e != cudaSuccess ? e : last;
}

/* The inline launch in the table form (zero_table_inline_kernel<IMG>):
 * the table parameters at `tokens`, the image (IMG bytes) zeroed after
 * them. The count is the graph's for the node's life (only the image
 * changes per step), so the grid is sized to the plan at `tokens` as a
 * static plan's: a block per chunk up to ZF_STATIC_BLOCKS_PER_SM per SM
 * (striding past it), +1 stage block. */
template <unsigned IMG>
static void zf_table_inline_build(const mdr_zero_seg *segs, size_t n, uint64_t tokens, const mdr_stage_desc *stage,
                                  int sm_count, mdr_stage_inline_launch *out) {
  zf_table_inline_params_t<IMG> a;
  memset(&a, 0, sizeof a);
  a.p.stage = *stage;
  a.p.tokens = tokens;
  a.p.n = (uint32_t)n;
  a.p.flags = stage->flags & (MDR_STAGE_FETCH | MDR_STAGE_INLINE | MDR_STAGE_DEVICE_IDS);
  uint64_t chunks = 0;
  for (size_t i = 0; i < n; i++) chunks += mdr_zero_chunks(mdr_zero_seg_bytes(&segs[i], tokens));
  const uint64_t max_grid = (uint64_t)sm_count * ZF_STATIC_BLOCKS_PER_SM;
  memset(out, 0, sizeof *out);
  out->func = (const void *)zero_table_inline_kernel<IMG>;
  out->grid[0] = (uint32_t)((chunks < max_grid ? chunks : max_grid) + 1);
  out->grid[1] = out->grid[2] = 1;
  out->block[0] = ZF_BLOCK;
  out->block[1] = out->block[2] = 1;
  out->param_bytes = sizeof a;
  out->slot_offset = offsetof(zf_table_inline_params_t<IMG>, inline_slot);
  const mdr_stage_input *t = zf_ptab(a);
  out->table_offset = t ? (uint64_t)((const char *)t - (const char *)&a) : 0;
  memcpy(out->param, &a, sizeof a);
}

/* The inline launch in the list form (zero_list_inline_kernel<IMG>): the
 * chunk list of the plan at `tokens` (k words), then the image class's IMG
 * bytes zeroed; a block per chunk, +1 stage block. */
template <unsigned IMG>
static void zf_list_inline_build(const uint64_t *words, uint32_t k, uint64_t tokens, const mdr_stage_desc *stage,
                                 mdr_stage_inline_launch *out) {
  zf_list_inline_params_t<IMG> a;
  memset(&a, 0, sizeof a);
  memcpy(a.p.chunk, words, k * sizeof *words);
  a.p.n = k;
  a.p.tokens = tokens;
  a.p.flags = stage->flags & (MDR_STAGE_FETCH | MDR_STAGE_INLINE | MDR_STAGE_DEVICE_IDS);
  a.p.stage = *stage;
  memset(out, 0, sizeof *out);
  out->func = (const void *)zero_list_inline_kernel<IMG>;
  out->grid[0] = k + 1;
  out->grid[1] = out->grid[2] = 1;
  out->block[0] = ZF_BLOCK;
  out->block[1] = out->block[2] = 1;
  out->param_bytes = sizeof a;
  out->slot_offset = offsetof(zf_list_inline_params_t<IMG>, inline_slot);
  const mdr_stage_input *t = zf_ptab(a);
  out->table_offset = t ? (uint64_t)((const char *)t - (const char *)&a) : 0;
  memcpy(out->param, &a, sizeof a);
}

extern "C" int mdr_cuda_zero_inline_launch(const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                           const mdr_stage_desc *stage, int sm_count,
                                           mdr_stage_inline_launch *out) {
  const uint32_t not_with = MDR_STAGE_ADVANCE | MDR_STAGE_DYNAMIC | MDR_STAGE_TABLE; /* DEVICE_IDS may join */
  if (!stage || (stage->flags & (MDR_STAGE_FETCH | MDR_STAGE_INLINE)) != (MDR_STAGE_FETCH | MDR_STAGE_INLINE) ||
      (stage->flags & not_with) || (n && !segs) || sm_count <= 0)
    return (int)cudaErrorInvalidValue;
  /* the classes a launch may take, as the host backend's: the larger ones
   * only with a plan table that serves the count (the graph cache passes
   * one for them) */
  const bool table = mdr_stage_table_ok(stage, n, tokens);
  /* the class (staging_layout.h): the smallest that holds the image, the
   * small one only without a table, at least the large one with inputs */
  const uint32_t cls = mdr_stage_inline_class(stage, table);
  if (cls == 0) return (int)cudaErrorInvalidValue;
  /* the chunk list when the plan at the count fits it, up to the
   * extra-large class (the two larger classes take the table form, as
   * measured) */
  if (n <= MDR_ZERO_MAX_SEGS && cls <= MDR_STAGE_INLINE_XL_BYTES) {
    mdr_zero_seg fixed[MDR_ZERO_MAX_SEGS];
    uint64_t words[ZF_LIST_INLINE];
    const uint32_t m = (uint32_t)mdr_zero_plan_at(segs, n, tokens, fixed);
    const uint32_t k = mdr_zero_list_build(fixed, m, words, ZF_LIST_INLINE);
    if (k != MDR_ZERO_LIST_NONE) {
      if (cls == MDR_STAGE_INLINE_BYTES)
        zf_list_inline_build<MDR_STAGE_INLINE_BYTES>(words, k, tokens, stage, out);
      else if (cls == MDR_STAGE_INLINE_LARGE_BYTES)
        zf_list_inline_build<MDR_STAGE_INLINE_LARGE_BYTES>(words, k, tokens, stage, out);
      else
        zf_list_inline_build<MDR_STAGE_INLINE_XL_BYTES>(words, k, tokens, stage, out);
      return 0;
    }
  }
  /* a plan past the list and a table that serves the count: the table
   * form, in that class */
  if (table) {
    if (cls == MDR_STAGE_INLINE_BYTES)
      zf_table_inline_build<MDR_STAGE_INLINE_BYTES>(segs, n, tokens, stage, sm_count, out);
    else if (cls == MDR_STAGE_INLINE_LARGE_BYTES)
      zf_table_inline_build<MDR_STAGE_INLINE_LARGE_BYTES>(segs, n, tokens, stage, sm_count, out);
    else if (cls == MDR_STAGE_INLINE_XL_BYTES)
      zf_table_inline_build<MDR_STAGE_INLINE_XL_BYTES>(segs, n, tokens, stage, sm_count, out);
    else if (cls == MDR_STAGE_INLINE_XXL_BYTES)
      zf_table_inline_build<MDR_STAGE_INLINE_XXL_BYTES>(segs, n, tokens, stage, sm_count, out);
    else
      zf_table_inline_build<MDR_STAGE_INLINE_XXXL_BYTES>(segs, n, tokens, stage, sm_count, out);
    return 0;
  }
  /* else the static form, which carries the small class only */
  if (n > ZF_SMALL_SEGS) return (int)cudaErrorInvalidValue;
  zf_inline_params_small a;
  memset(&a, 0, sizeof a);
  dim3 grid;
  (void)zf_build(segs, n, tokens, stage, sm_count, 0, 1, &a.p, &grid); /* staged: always a launch */
  memset(out, 0, sizeof *out);
  out->func = (const void *)zero_static_kernel<ZF_SMALL_SEGS, ZF_STAGED_INLINE>;
  out->grid[0] = grid.x;
  out->grid[1] = grid.y;
  out->grid[2] = grid.z;
  out->block[0] = ZF_BLOCK;
  out->block[1] = out->block[2] = 1;
  out->param_bytes = sizeof a;
  out->slot_offset = offsetof(zf_inline_params_small, inline_slot);
  memcpy(out->param, &a, sizeof a);
  return 0;
}

extern "C" int mdr_cuda_zero_inline(const mdr_zero_seg *segs, size_t n, uint64_t tokens, const mdr_stage_desc *stage,
                                    void *stream, int sm_count, mdr_stage_inline_launch *out) {
  const int d = mdr_cuda_zero_inline_launch(segs, n, tokens, stage, sm_count, out);
  if (d != 0) return d;
  void *args[1] = {out->param};
  const cudaError_t e = cudaLaunchKernel(out->func, dim3(out->grid[0], out->grid[1], out->grid[2]),
                                         dim3(out->block[0], out->block[1], out->block[2]), args, 0,
                                         (cudaStream_t)stream);
  const cudaError_t last = cudaGetLastError();
  return (int)(e != cudaSuccess ? e : last);
}

extern "C" int mdr_cuda_zero_preload(mdr_cuda_kernel_fn *out) {
  const void *kernels[] = {
      (const void *)zero_static_kernel<ZF_SMALL_SEGS, ZF_STAGED>,
      (const void *)zero_static_kernel<ZF_SMALL_SEGS, ZF_UNSTAGED>,
      (const void *)zero_static_kernel<ZF_SMALL_SEGS, ZF_STAGED_INLINE>,
      (const void *)zero_static_kernel<MDR_ZERO_MAX_SEGS, ZF_STAGED>,
      (const void *)zero_static_kernel<MDR_ZERO_MAX_SEGS, ZF_UNSTAGED>, (const void *)zero_table_kernel,
      (const void *)zero_list_inline_kernel<MDR_STAGE_INLINE_BYTES>,
      (const void *)zero_list_inline_kernel<MDR_STAGE_INLINE_LARGE_BYTES>,
      (const void *)zero_list_inline_kernel<MDR_STAGE_INLINE_XL_BYTES>,
      (const void *)zero_table_inline_kernel<MDR_STAGE_INLINE_BYTES>,
      (const void *)zero_table_inline_kernel<MDR_STAGE_INLINE_LARGE_BYTES>,
      (const void *)zero_table_inline_kernel<MDR_STAGE_INLINE_XL_BYTES>,
      (const void *)zero_table_inline_kernel<MDR_STAGE_INLINE_XXL_BYTES>,
      (const void *)zero_table_inline_kernel<MDR_STAGE_INLINE_XXXL_BYTES>,
      (const void *)zero_list_kernel<ZF_LIST_SMALL, true>, (const void *)zero_list_kernel<ZF_LIST_SMALL, false>,
      (const void *)zero_list_kernel<MDR_ZERO_LIST_MAX, true>,
      (const void *)zero_list_kernel<MDR_ZERO_LIST_MAX, false>,
      (const void *)zero_dynamic_kernel,
  };
  static_assert(sizeof kernels / sizeof kernels[0] == MDR_CUDA_ZERO_KERNELS, "MDR_CUDA_ZERO_KERNELS");
  for (size_t i = 0; i < MDR_CUDA_ZERO_KERNELS; i++) {
    cudaFuncAttributes at;
    cudaError_t e = cudaFuncGetAttributes(&at, kernels[i]);
    if (e != cudaSuccess) return (int)e;
    if (!out) continue;
    /* the function for the driver's node update; without it (NULL) the
     * runtime's update serves this kernel, so a failed lookup fails nothing */
    cudaFunction_t f = NULL;
    if (cudaGetFuncBySymbol(&f, kernels[i]) != cudaSuccess) {
      (void)cudaGetLastError();
      f = NULL;
    }
    out[i].symbol = kernels[i];
    out[i].function = (void *)f;
  }
  /* the table kernel's resident blocks a SM on this device (its grid's
   * size), kept as the fewest over the devices preloaded */
  int fit = 0;
  const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, zero_table_kernel, ZF_BLOCK, 0);
  if (e != cudaSuccess) return (int)e;
  fit = fit < 1 ? 1 : fit > ZF_BLOCKS_PER_SM ? ZF_BLOCKS_PER_SM : fit;
  int seen = __atomic_load_n(&zf_table_per_sm, __ATOMIC_RELAXED);
  while ((seen == 0 || fit < seen) &&
         !__atomic_compare_exchange_n(&zf_table_per_sm, &seen, fit, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return 0;
}

extern "C" int mdr_cuda_zero_and_stage(const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                       const mdr_stage_desc *stage, void *stream, int sm_count) {
  if (n == 0 && !stage) return 0;
  if (sm_count <= 0) return (int)cudaErrorInvalidValue;
  const cudaStream_t s = (cudaStream_t)stream;
  if (stage && (stage->flags & MDR_STAGE_TABLE)) return (int)zf_launch_table(segs, n, tokens, stage, s, sm_count);
  if (stage && (stage->flags & MDR_STAGE_DYNAMIC)) return (int)zf_launch_dynamic(segs, n, stage, s, sm_count);
  return (int)zf_launch_static(segs, n, tokens, stage, s, sm_count);
}
