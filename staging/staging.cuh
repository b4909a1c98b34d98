/* staging.cuh — the staging ring's device code: what the stage block of a
 * fused zero-and-stage launch does (kernels/zero_fused.cu includes it; the
 * layout is staging/staging_layout.h, the host side graphs/staging.c).
 *
 * A staged launch serves one step from one block of MDR_STAGE_BLOCK
 * threads, dispatched first so that its round trip to host memory overlaps
 * the zeroing: it reads the ring counter (and, in flight with it, the
 * input table's entries, one a lane of each warp, into registers), then the
 * slot (header, ids, the inputs that take host values) with every load
 * issued before the first store, each warp placing its loads in the slot
 * with warp shuffles (no shared memory, no barrier before them), so a step
 * costs one PCIe round trip whatever its inputs; it copies
 * inputs already in device memory, writes the pad of their rows past the
 * count, publishes the counts for the body, and advances the counter and
 * the ack once every read of the slot has completed. An inline launch
 * (MDR_STAGE_INLINE) carries its slot image in its own parameters: the same
 * code reads it there, and the counter and ack are left alone. A static
 * ring launch may spread a large slot over several stage blocks
 * (MDR_STAGE_SPREAD_MASK in its flags), the last of them to finish
 * advancing the counter and the ack. */
#ifndef MDR_STAGING_CUH
#define MDR_STAGING_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "staging_layout.h"

/* Threads of the block that serves the stage (the launches' block size). */
#define MDR_STAGE_BLOCK 256
/* 16-byte loads in flight per thread while reading host memory. */
#define MDR_STAGE_FETCH_VECS 4
/* Ids one 16-byte vector holds. */
#define MDR_STAGE_IDS_PER_VEC 4u

/* The header is read as one 16-byte vector: x tokens, y copy_tokens,
 * z sequences, w copy_sequences. */
static_assert(sizeof(mdr_stage_header) == 16 && offsetof(mdr_stage_header, copy_tokens) == 4 &&
                  offsetof(mdr_stage_header, sequences) == 8 && offsetof(mdr_stage_header, copy_sequences) == 12,
              "the header is one uint4 in field order");

/* Copy ids [from, nvec) (16-byte vectors) of a slot into token_ids with one
 * block, MDR_STAGE_FETCH_VECS loads in flight per thread before the stores:
 * one round trip to host memory per MDR_STAGE_BLOCK * MDR_STAGE_FETCH_VECS
 * vectors. */
__device__ __forceinline__ void mdr_stage_fetch_vectors(const uint4 *src, uint4 *dst, uint32_t from,
                                                        uint32_t nvec) {
  for (uint32_t base = from; base < nvec; base += MDR_STAGE_BLOCK * MDR_STAGE_FETCH_VECS) {
    uint4 r[MDR_STAGE_FETCH_VECS];
#pragma unroll
    for (int v = 0; v < MDR_STAGE_FETCH_VECS; v++) {
      const uint32_t i = base + v * MDR_STAGE_BLOCK + threadIdx.x;
      if (i < nvec) r[v] = src[i];
    }
#pragma unroll
    for (int v = 0; v < MDR_STAGE_FETCH_VECS; v++) {
      const uint32_t i = base + v * MDR_STAGE_BLOCK + threadIdx.x;
      if (i < nvec) dst[i] = r[v];
    }
  }
}

/* The tail of a copy that is not a whole number of vectors (or not 16-byte
 * aligned at all): ids [from, copy) one by one. */
__device__ __forceinline__ void mdr_stage_fetch_scalars(const uint32_t *src, uint32_t *dst, uint32_t from,
                                                        uint32_t copy) {
  for (uint32_t i = from + threadIdx.x; i < copy; i += MDR_STAGE_BLOCK) dst[i] = src[i];
}

/* Ids that are already in device memory (DEVICE_IDS): copy the first t from
 * ids_src into token_ids with one block (nothing when they are there
 * already), then pad_id up to `copy`. */
__device__ __forceinline__ void mdr_stage_device_ids(const mdr_stage_desc &st, uint32_t t, uint32_t copy) {
  uint32_t *dst = (uint32_t *)st.token_ids;
  if (st.ids_src && st.ids_src != st.token_ids) {
    const bool vec = ((st.ids_src | st.token_ids) & 15u) == 0;
    const uint32_t nvec = vec ? t / MDR_STAGE_IDS_PER_VEC : 0;
    mdr_stage_fetch_vectors((const uint4 *)st.ids_src, (uint4 *)dst, 0, nvec);
    mdr_stage_fetch_scalars((const uint32_t *)st.ids_src, dst, nvec * MDR_STAGE_IDS_PER_VEC, t);
  }
  for (uint32_t i = t + threadIdx.x; i < copy; i += MDR_STAGE_BLOCK) dst[i] = st.pad_id;
}

/* Device ids copied before the rest of a stage block's work, by the
 * block's last threads (thread MDR_STAGE_BLOCK - 1 - i: id i, then its
 * pad): an inline image's vectors are the first threads'
 * (mdr_stage_copy_image), so the ids' round trip to device memory runs
 * beside the image's copy instead of after it, and nothing is held in
 * registers across the copy. Then pad_id up to `copy`. */
__device__ __forceinline__ void mdr_stage_device_ids_ahead(const mdr_stage_desc &st, uint32_t t, uint32_t copy) {
  uint32_t *dst = (uint32_t *)st.token_ids;
  const uint32_t r = MDR_STAGE_BLOCK - 1u - threadIdx.x;
  if (st.ids_src && st.ids_src != st.token_ids)
    for (uint32_t i = r; i < t; i += MDR_STAGE_BLOCK) dst[i] = ((const uint32_t *)st.ids_src)[i];
  for (uint32_t i = t + r; i < copy; i += MDR_STAGE_BLOCK) dst[i] = st.pad_id;
}

/* The input table into shared memory, one entry a thread (the
 * device-resident inputs and the DYNAMIC stager read it there). The caller
 * synchronises the block before reading s_in. */
__device__ __forceinline__ void mdr_stage_load_table(const mdr_stage_desc &st, mdr_stage_input *s_in) {
  const uint32_t n = st.n_inputs < MDR_STAGE_INPUTS_MAX ? st.n_inputs : MDR_STAGE_INPUTS_MAX;
  if (threadIdx.x < n) s_in[threadIdx.x] = ((const mdr_stage_input *)st.inputs)[threadIdx.x];
}

/* The table entry of input lane - 1 into e, for lanes 1 .. n of every warp
 * (`table`: the device table at st.inputs, or its copy in shared memory);
 * whether this lane has one. Nothing waits for the load here: its first use
 * does (mdr_stage_lane_piece_of). */
__device__ __forceinline__ bool mdr_stage_lane_entry(const mdr_stage_desc &st, const mdr_stage_input *table,
                                                     mdr_stage_input &e) {
  const uint32_t n = st.n_inputs < MDR_STAGE_INPUTS_MAX ? st.n_inputs : MDR_STAGE_INPUTS_MAX;
  const uint32_t lane = threadIdx.x & 31u;
  const bool have = lane >= 1u && lane <= n;
  if (have) e = table[lane - 1u];
  return have;
}

/* One piece of a slot read as a lane of every warp holds it: lane 0 the
 * ids (when they come from the slot), lane 1 + i input i (empty when its
 * values are in device memory or it has no rows at the copy counts), the
 * other lanes empty. The read's vectors are numbered over the pieces in
 * lane order, and so are its tail bytes (a piece's bytes past its last
 * whole vector, or all of them when it is not 16-byte aligned at both
 * ends); the addresses are rebased so that vector i of the read, when it
 * falls in this piece, is at vsrc + 16 i (to vdst + 16 i) and tail byte j at
 * tsrc + j (to tdst + j). */
typedef struct mdr_stage_lane_piece {
  uint64_t vsrc, vdst, tsrc, tdst;
  uint32_t vend, tend;   /* vectors and tail bytes of the pieces up to this lane's (inclusive) */
  uint32_t nvec, ntail;  /* the read's vectors and tail bytes (the same in every lane) */
} mdr_stage_lane_piece;

/* This lane's piece of the slot at `slot` at the copy counts (copy_t,
 * copy_s), the ids in it when `ids`: from the lane's table entry (e, when
 * `have`) and a warp scan, in registers; every lane of the warp calls it. */
__device__ __forceinline__ mdr_stage_lane_piece mdr_stage_lane_piece_of(const mdr_stage_desc &st,
                                                                         const mdr_stage_input &e, bool have,
                                                                         uint64_t slot, bool ids, uint32_t copy_t,
                                                                         uint32_t copy_s) {
  const uint32_t lane = threadIdx.x & 31u;
  uint64_t src = 0, dst = 0;
  uint32_t bytes = 0;
  if (lane == 0) {
    if (ids) {
      src = slot + MDR_STAGE_HEADER_BYTES;
      dst = st.token_ids;
      bytes = copy_t * 4u;
    }
  } else if (have && !e.src) {
    src = slot + e.offset;
    dst = e.dst;
    bytes = (uint32_t)(mdr_stage_input_rows(&e, copy_t, copy_s) * e.row_bytes);
  }
  const bool vec = ((src | dst) & 15u) == 0;
  const uint32_t v = vec ? bytes / 16u : 0u, t = vec ? bytes % 16u : bytes;
  uint32_t vi = v, ti = t;
#pragma unroll
  for (uint32_t off = 1; off < 32u; off *= 2u) {
    const uint32_t va = __shfl_up_sync(0xffffffffu, vi, off), ta = __shfl_up_sync(0xffffffffu, ti, off);
    if (lane >= off) {
      vi += va;
      ti += ta;
    }
  }
  mdr_stage_lane_piece p;
  p.vend = vi;
  p.tend = ti;
  p.nvec = __shfl_sync(0xffffffffu, vi, 31);
  p.ntail = __shfl_sync(0xffffffffu, ti, 31);
  const uint64_t vfirst = vi - v, tfirst = ti - t, tbase = vec ? bytes / 16u * 16u : 0u;
  p.vsrc = src - 16u * vfirst;
  p.vdst = dst - 16u * vfirst;
  p.tsrc = src + tbase - tfirst;
  p.tdst = dst + tbase - tfirst;
  return p;
}

/* The lane of the warp whose piece holds element i of a read, `end` being
 * in each lane the elements of the pieces up to its own (inclusive, as
 * vend and tend): the first lane whose end exceeds i, i.e. the count of
 * lanes whose end is at most i (end never decreases over the lanes). Each lane
 * asks for its own i, so the search reads the other lanes' ends with
 * indexed shuffles (a binary search over the lanes), not with a ballot: a
 * ballot would combine every lane's comparison of its own end with its own
 * i, a count of no lane's piece. Meaningful for i below the last lane's end
 * (the read's total); 31 otherwise, where the caller loads nothing. Every
 * lane of the warp calls it. */
__device__ __forceinline__ uint32_t mdr_stage_piece_lane(uint32_t end, uint32_t i) {
  uint32_t k = 0;
#pragma unroll
  for (uint32_t step = 16; step; step /= 2u)
    if (__shfl_sync(0xffffffffu, end, (int)(k + step - 1u)) <= i) k += step;
  return k;
}

/* Copy, from the slot at `slot`, the ids (`ids`: copy_t of them, when the
 * ids come from the slot) and the rows of every slot input at the copy
 * counts (copy_t, copy_s), every load of a round issued before its stores.
 * e and have: this lane's table entry (mdr_stage_lane_entry). The pieces
 * are each warp's own, in registers: no shared memory and no barrier stand
 * between the table's and the counter's loads and the slot's. With `hdr`,
 * thread 0 also loads the slot's header into *hdr, issued with the first
 * round's loads, once the pieces are known: a header load issued earlier
 * is in flight when the pieces wait for the table entry, and that wait
 * can take the header's round trip to host memory with it (the loads
 * share the warp's wait counters), putting the slot's loads a round trip
 * later. Spread over K stage blocks (blk: this one's index), a round is K
 * blocks' worth of vectors and tail bytes, block blk taking the blk-th
 * MDR_STAGE_BLOCK of each MDR_STAGE_BLOCK * K (K = 1: the whole round).
 * Every thread of the block calls it. */
__device__ __forceinline__ void mdr_stage_copy_slot(const mdr_stage_desc &st, const mdr_stage_input &e, bool have,
                                                    uint64_t slot, bool ids, uint32_t copy_t, uint32_t copy_s,
                                                    uint4 *hdr = nullptr, uint32_t blk = 0, uint32_t blocks = 1) {
  const mdr_stage_lane_piece p = mdr_stage_lane_piece_of(st, e, have, slot, ids && copy_t, copy_t, copy_s);
  const uint32_t tid = threadIdx.x;
  if (hdr && tid == 0) *hdr = *(const uint4 *)slot;
  /* a round: MDR_STAGE_FETCH_VECS vectors and one tail byte per thread, all
   * loaded before any is stored (tail bytes: under 16 per aligned piece, so
   * one round holds them unless a piece is unaligned). The piece of vector
   * i is held by lane mdr_stage_piece_lane(vend, i), of tail byte j by lane
   * mdr_stage_piece_lane(tend, j). The loop is uniform over the block, so
   * every lane takes part in the warp operations. */
  const uint32_t span = MDR_STAGE_BLOCK * blocks, mine = blk * MDR_STAGE_BLOCK + tid;
  for (uint32_t round = 0;; round++) {
    const uint32_t base = round * span * MDR_STAGE_FETCH_VECS, tj = round * span + mine;
    if (base >= p.nvec && round * span >= p.ntail) break;
    uint4 r[MDR_STAGE_FETCH_VECS];
    uint64_t to[MDR_STAGE_FETCH_VECS];
#pragma unroll
    for (int u = 0; u < MDR_STAGE_FETCH_VECS; u++) {
      const uint32_t i = base + u * span + mine;
      const int k = (int)mdr_stage_piece_lane(p.vend, i);
      const uint64_t from = __shfl_sync(0xffffffffu, p.vsrc, k) + 16u * (uint64_t)i;
      to[u] = __shfl_sync(0xffffffffu, p.vdst, k) + 16u * (uint64_t)i;
      if (i < p.nvec) r[u] = *(const uint4 *)from;
    }
    const int k = (int)mdr_stage_piece_lane(p.tend, tj);
    const uint64_t tfrom = __shfl_sync(0xffffffffu, p.tsrc, k) + tj, tto = __shfl_sync(0xffffffffu, p.tdst, k) + tj;
    unsigned char tb = 0;
    if (tj < p.ntail) tb = *(const unsigned char *)tfrom;
#pragma unroll
    for (int u = 0; u < MDR_STAGE_FETCH_VECS; u++) {
      const uint32_t i = base + u * span + mine;
      if (i < p.nvec) *(uint4 *)to[u] = r[u];
    }
    if (tj < p.ntail) *(unsigned char *)tto = tb;
  }
}

/* Up to 16 bytes of v (its first n) stored at `to`: one 16-byte store when
 * whole and aligned, else byte by byte (a destination need not be 16-byte
 * aligned, nor a piece a whole number of vectors). */
__device__ __forceinline__ void mdr_stage_store_part(uint64_t to, const uint4 &v, uint32_t n) {
  if (n == 16u && (to & 15u) == 0) {
    *(uint4 *)to = v;
    return;
  }
  for (uint32_t b = 0; b < n; b++) {
    const uint32_t w = b < 4u ? v.x : b < 8u ? v.y : b < 12u ? v.z : v.w;
    *(unsigned char *)(to + b) = (unsigned char)(w >> (8u * (b & 3u)));
  }
}

/* The largest inline image mdr_stage_copy_image deals over the warps, in
 * vectors: the large class's. */
#define MDR_STAGE_IMAGE_DEALT (MDR_STAGE_INLINE_LARGE_BYTES / 16u)
static_assert(MDR_STAGE_BLOCK % 32 == 0, "the stage block is whole warps");

/* Whether mdr_stage_copy_image deals an image of `nv` vectors over the
 * warps (else it keeps them in a row). */
__host__ __device__ __forceinline__ bool mdr_stage_image_dealt(uint32_t nv) { return nv <= MDR_STAGE_IMAGE_DEALT; }

/* An inline launch's image copied (FETCH | INLINE with the image's bytes in
 * st.inline_bytes): every vector of the image is loaded first, from the
 * launch's own parameters, which needs nothing else; only then does each
 * thread wait for its lane's input-table entry (issued before, from device
 * memory) and store its vectors where the pieces holding them go. So the
 * table's load and the image's overlap, where mdr_stage_copy_slot places
 * each load in the slot before issuing it (a slot over PCIe is read in
 * rounds, and its loads need their pieces). The pieces (lane 0 the ids,
 * lane 1 + i input i, as mdr_stage_lane_piece_of) start at 16-byte aligned
 * offsets of the image (graphs/staging.c lays them out so), so a vector
 * belongs to one piece at most; one past a piece's end, or in no piece (the
 * header, the alignment gaps, a device-resident input), is not stored. The
 * header is vector 0, into *hdr from thread 0. Every thread of the one
 * stage block calls it (an inline launch has one). The ids are the image's
 * (lane 0) when `ids`; a device-id step's image (DEVICE_IDS) carries the
 * header and the host inputs only, its ids room unused, and its ids are
 * copied from the device after.
 *
 * Which thread takes which vector: a generic load of the launch's
 * parameters waits on the 32-byte sectors its warp's lanes touch, so an
 * image of the large class or smaller (at most MDR_STAGE_IMAGE_DEALT
 * vectors: 1-2 sequences of a decode step's inputs) is dealt over the
 * block's warps, vector j to lane j / W of warp j % W (W warps), a few
 * sectors a warp where 32 vectors in a row make warp 0 wait on 16. A
 * larger image keeps the vectors in a row (thread j takes vector j of each
 * MDR_STAGE_BLOCK): dealt, each lane's vector would sit in a sector of its
 * own, twice the sectors a load (docs/GRAPHS.md, "Small steps inline").
 * Thread 0 takes vector 0 either way. */
__device__ __forceinline__ void mdr_stage_copy_image(const mdr_stage_desc &st, const mdr_stage_input &e, bool have,
                                                     uint64_t image, bool ids, uint32_t copy_t, uint32_t copy_s,
                                                     uint4 *hdr) {
  constexpr uint32_t R = 2; /* vectors a thread loads a round: an extra-large image (272 vectors) in one */
  const uint32_t tid = threadIdx.x, lane = tid & 31u;
  const uint32_t nv = (st.inline_bytes + 15u) / 16u;
  const uint32_t n = st.n_inputs < MDR_STAGE_INPUTS_MAX ? st.n_inputs : MDR_STAGE_INPUTS_MAX;
  /* this thread's vector of each MDR_STAGE_BLOCK: dealt over the warps, or in a row */
  const uint32_t mine = mdr_stage_image_dealt(nv) ? lane * (MDR_STAGE_BLOCK / 32u) + tid / 32u : tid;
  for (uint32_t base = 0; base < nv; base += R * MDR_STAGE_BLOCK) {
    uint4 r[R];
#pragma unroll
    for (uint32_t u = 0; u < R; u++) {
      const uint32_t j = base + u * MDR_STAGE_BLOCK + mine;
      if (j < nv) r[u] = ((const uint4 *)image)[j];
    }
    if (base == 0 && hdr && tid == 0) *hdr = r[0];
    /* this lane's piece: [off, off + len) of the image, to dst */
    uint32_t off = 0, len = 0;
    uint64_t dst = 0;
    if (lane == 0) {
      off = MDR_STAGE_HEADER_BYTES;
      len = ids ? copy_t * 4u : 0u;
      dst = st.token_ids;
    } else if (have && !e.src) {
      off = e.offset;
      len = (uint32_t)(mdr_stage_input_rows(&e, copy_t, copy_s) * e.row_bytes);
      dst = e.dst;
    }
    uint64_t to[R] = {};
    uint32_t part[R] = {};
    for (uint32_t k = 0; k <= n; k++) { /* uniform over the warp: each piece's bounds from its lane */
      const uint32_t ko = __shfl_sync(0xffffffffu, off, (int)k), kl = __shfl_sync(0xffffffffu, len, (int)k);
      const uint64_t kd = __shfl_sync(0xffffffffu, dst, (int)k);
#pragma unroll
      for (uint32_t u = 0; u < R; u++) {
        const uint32_t o = 16u * (base + u * MDR_STAGE_BLOCK + mine);
        if (o >= ko && o - ko < kl) {
          to[u] = kd + (o - ko);
          part[u] = kl - (o - ko) < 16u ? kl - (o - ko) : 16u;
        }
      }
    }
#pragma unroll
    for (uint32_t u = 0; u < R; u++)
      if (base + u * MDR_STAGE_BLOCK + mine < nv && part[u]) mdr_stage_store_part(to[u], r[u], part[u]);
  }
}

/* Inputs already in device memory: copy each one's rows at the real counts
 * (t, s) from src to dst (nothing when they are the same), then its pad
 * value into the rows up to the copy counts (device to device: no round
 * trip to host memory). s_in: the input table in shared memory (one load
 * for the whole table, not one dependent load an input). Every thread of
 * the block calls it. */
__device__ __forceinline__ void mdr_stage_device_inputs(const mdr_stage_desc &st, const mdr_stage_input *s_in,
                                                        uint32_t t, uint32_t s, uint32_t copy_t, uint32_t copy_s) {
  const uint32_t n = st.n_inputs < MDR_STAGE_INPUTS_MAX ? st.n_inputs : MDR_STAGE_INPUTS_MAX;
  for (uint32_t i = 0; i < n; i++) {
    const mdr_stage_input in = s_in[i];
    if (!in.src) continue;
    const uint64_t bytes = mdr_stage_input_rows(&in, t, s) * in.row_bytes;
    const uint64_t copy_bytes = mdr_stage_input_rows(&in, copy_t, copy_s) * in.row_bytes;
    if (in.src != in.dst) {
      const uint64_t nvec = bytes / 16u;
      for (uint64_t v = threadIdx.x; v < nvec; v += MDR_STAGE_BLOCK)
        ((uint4 *)in.dst)[v] = ((const uint4 *)in.src)[v];
      for (uint64_t b = nvec * 16u + threadIdx.x; b < bytes; b += MDR_STAGE_BLOCK)
        ((unsigned char *)in.dst)[b] = ((const unsigned char *)in.src)[b];
    }
    const uint32_t e = in.elem_bytes;
    for (uint64_t b = bytes + (uint64_t)threadIdx.x * e; b < copy_bytes; b += (uint64_t)MDR_STAGE_BLOCK * e) {
      switch (e) {
        case 1: *(uint8_t *)(in.dst + b) = (uint8_t)in.pad; break;
        case 2: *(uint16_t *)(in.dst + b) = (uint16_t)in.pad; break;
        case 4: *(uint32_t *)(in.dst + b) = (uint32_t)in.pad; break;
        default: *(uint64_t *)(in.dst + b) = in.pad; break;
      }
    }
  }
}

/* The slot of staged launch `step` in the ring. The ring's length
 * (MDR_GRAPH_STAGING_SLOTS) is a power of two: a mask then, where a 64-bit
 * remainder takes some 400 cycles on the stage's critical path, between the
 * counter's load and the slot's. */
__device__ __forceinline__ uint64_t mdr_stage_slot_of(const mdr_stage_desc &st, uint64_t step) {
  const uint64_t k = (st.slots & (st.slots - 1u)) == 0u ? step & (uint64_t)(st.slots - 1u) : step % st.slots;
  return st.ring + k * st.slot_bytes;
}

/* Write the counts the body reads. */
__device__ __forceinline__ void mdr_stage_publish_counts(const mdr_stage_desc &st, uint32_t t, uint32_t s) {
  ((uint32_t *)st.count_out)[0] = t;
  ((uint32_t *)st.count_out)[1] = s;
}

/* The flags bits mdr_stage_block tests (a caller may fix them at compile
 * time: its KNOWN). */
#define MDR_STAGE_KNOWN_BITS (MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_DEVICE_IDS | MDR_STAGE_INLINE)

/* Serve a staged step of a static or TABLE launch from one block: `copy` is
 * the launch's ids count (known on the host), copy_sequences the
 * per-sequence rows (in the descriptor). Reads the counter, then in one
 * round trip to host memory the slot's header, ids and inputs; copies the
 * device-resident inputs; advances the counter and the ack. Only this block
 * touches the counter in such a launch, so no cross-block handshake is
 * needed, unless the launch spreads its stage over several blocks
 * (`blocks` > 1, mdr_stage_blocks_of its flags; blk this one's index: the
 * host sets it only for launches that fetch and advance with every input
 * in the slot, and only zero_static_kernel's ring form passes it, so the
 * other kernels' stage blocks compile with blocks = 1): then each takes its
 * share of the slot's vectors, block 0 the header and the counts, and the
 * last to finish advances. The ack is a plain posted write: the host only
 * needs to learn, eventually, that every read of the slot has completed, which holds once
 * the values read have been stored. With MDR_STAGE_INLINE the slot is at
 * `inline_slot` (the generic address of the launch's own parameter copy of
 * the slot image) and the counter is neither read nor advanced: the same
 * loads, from the parameters instead of host memory. `ptable`: the
 * launch's own copy of the input table (the generic address of its room in
 * the parameters, MDR_STAGE_INLINE_TABLE entries), read in place of
 * st.inputs when the caller wrote it there (an entry's destination is
 * never 0); nullptr, or room left zeroed, reads st.inputs.
 *
 * KNOWN: 0, or the launch's MDR_STAGE_KNOWN_BITS as the caller has tested
 * them, so that the compiler drops the paths those bits rule out (a
 * second copy of the block's code, mdr_stage_inline_block). */
template <uint32_t KNOWN = 0u>
__device__ __forceinline__ void mdr_stage_block(const mdr_stage_desc &st, uint32_t flags, uint32_t copy,
                                                uint64_t inline_slot = 0, uint32_t blk = 0, uint32_t blocks = 1,
                                                const mdr_stage_input *ptable = nullptr) {
  static_assert((KNOWN & ~(uint32_t)MDR_STAGE_KNOWN_BITS) == 0u, "KNOWN: stage bits the block tests");
  if (KNOWN) flags = (flags & ~(uint32_t)MDR_STAGE_KNOWN_BITS) | KNOWN; /* known bits: constants from here */
  const uint32_t copy_s = st.copy_sequences;
  __shared__ mdr_stage_input s_in[MDR_STAGE_INPUTS_MAX];
  if ((flags & (MDR_STAGE_FETCH | MDR_STAGE_ADVANCE)) == 0) {
    if (st.n_inputs) mdr_stage_load_table(st, s_in);
    /* device ids whose count the launch carries (EXACT device steps): no
     * slot and no counter to read, so nothing to wait for before the copy;
     * a step at 1-8 tokens is short enough for that wait to show. Inputs
     * here are all in device memory (the cache reads a slot otherwise). */
    if (flags & MDR_STAGE_DEVICE_IDS) {
      if (threadIdx.x == 0) mdr_stage_publish_counts(st, copy, copy_s);
      mdr_stage_device_ids(st, copy, copy);
      if (st.n_inputs) {
        __syncthreads(); /* the table is in s_in */
        mdr_stage_device_inputs(st, s_in, copy, copy_s, copy, copy_s);
      }
    }
    return;
  }
  __shared__ uint32_t s_tokens, s_seqs;
  /* this lane's table entry, into registers: issued before the counter's
   * load and waited for only where the slot's pieces are computed, so the
   * two device reads overlap and nothing (no shared-memory store, no
   * barrier) stands between them and the slot's loads */
  mdr_stage_input e = {};
  bool have;
  if (ptable && st.n_inputs <= MDR_STAGE_INLINE_TABLE) {
    /* the launch's own copy of the table, when its caller wrote one (an
     * entry's destination is never 0); else the table in device memory */
    have = mdr_stage_lane_entry(st, ptable, e);
    if (have && e.dst == 0) e = ((const mdr_stage_input *)st.inputs)[(threadIdx.x & 31u) - 1u];
  } else {
    have = mdr_stage_lane_entry(st, (const mdr_stage_input *)st.inputs, e);
  }
  const bool inl = (flags & MDR_STAGE_INLINE) != 0;
  const uint64_t step = inl ? 0 : *(volatile const uint64_t *)st.counter; /* one broadcast load */
  const uint64_t slot = inl ? inline_slot : mdr_stage_slot_of(st, step);
  const uint64_t ids = slot + MDR_STAGE_HEADER_BYTES;
  const bool fetch = flags & MDR_STAGE_FETCH;
  /* the step's real counts, in thread 0 (the header's once read) */
  uint32_t tokens = copy, seqs = copy_s;
  bool late = false; /* inputs kept in place only: their pad rows after the last barrier */
  /* the inputs belong to the launch that fetches (or takes device ids): a
   * plan split over several launches has its later ones only advance (a
   * copy there would write the sources' rows over the first launch's pad) */
  if (st.n_inputs && (flags & (MDR_STAGE_FETCH | MDR_STAGE_DEVICE_IDS))) {
    /* an inline device-id step: the real count is in the image's header
     * (the launch's own parameters, no round trip), so its ids are copied
     * first, beside the image's copy, where they would otherwise follow it
     * and a barrier on the step's critical path */
    const bool pre = inl && fetch && (flags & MDR_STAGE_DEVICE_IDS);
    if (pre) mdr_stage_device_ids_ahead(st, ((const mdr_stage_header *)slot)->tokens, copy);
    /* the header's load is issued with the slot's, and waited for after:
     * one plain 16-byte load, as the ids-only path reads it. The slot is
     * written before the launch is enqueued, so no stronger load is needed;
     * volatile field loads would be strong system-scope reads of host
     * memory, one request a field, that cannot merge with the plain loads
     * of the ids in the same sector */
    uint4 hv = make_uint4(copy, copy, copy_s, copy_s);
    if (fetch && inl && st.inline_bytes) /* one stage block: an inline launch's */
      mdr_stage_copy_image(st, e, have, slot, !(flags & MDR_STAGE_DEVICE_IDS), copy, copy_s, &hv);
    else if (fetch)
      mdr_stage_copy_slot(st, e, have, slot, !(flags & MDR_STAGE_DEVICE_IDS), copy, copy_s, blk == 0 ? &hv : nullptr,
                          blk, blocks);
    /* whether an input in device memory is to be copied: every warp holds
     * the whole table (lanes 1 .. n), so each warp's vote is the block's
     * answer, with no barrier; without one (and without device ids) the
     * step is done once the slot's loads are stored. Inputs kept in place
     * (device_src at the destination: a block table the engine keeps on
     * the device) only want their pad rows: those wait for the block's
     * last barrier, after which every thread knows the real counts, and
     * are skipped when no count falls short (docs/GRAPHS.md) */
    const bool device_inputs = __ballot_sync(0xffffffffu, have && e.src != 0 && e.src != e.dst) != 0u;
    /* device ids are the first stage block's alone: a launch that spreads
     * its slot's read has the real count in that block only (the others'
     * hv is the copy count) */
    const bool ids_here = (flags & MDR_STAGE_DEVICE_IDS) && !pre && blk == 0;
    if (device_inputs || ids_here) {
      if (threadIdx.x < 32u && have) s_in[threadIdx.x - 1u] = e;
      if (threadIdx.x == 0) {
        s_tokens = hv.x; /* mdr_stage_header: tokens, copy_tokens, sequences, copy_sequences */
        s_seqs = hv.z;
      }
      __syncthreads();
      if (ids_here) mdr_stage_device_ids(st, s_tokens, copy);
      mdr_stage_device_inputs(st, s_in, s_tokens, s_seqs, copy, copy_s);
    } else if (__ballot_sync(0xffffffffu, have && e.src != 0) != 0u) {
      if (threadIdx.x < 32u && have) s_in[threadIdx.x - 1u] = e;
      if (threadIdx.x == 0) {
        s_tokens = hv.x;
        s_seqs = hv.z;
      }
      late = true;
    }
    tokens = hv.x;
    seqs = hv.z;
  } else if (flags & MDR_STAGE_DEVICE_IDS) { /* no ids from host memory; the count only with FETCH */
    if (threadIdx.x == 0) {
      s_tokens = fetch ? ((const mdr_stage_header *)slot)->tokens : copy;
      s_seqs = fetch ? ((const mdr_stage_header *)slot)->sequences : copy_s;
    }
    __syncthreads();
    mdr_stage_device_ids(st, s_tokens, copy);
    tokens = s_tokens;
    seqs = s_seqs;
  } else if (fetch) {
    /* the header in thread 0's registers, its load issued with the ids':
     * a store of its fields before the ids' loads would hold warp 0's
     * loads back a round trip to host memory */
    uint4 hv = make_uint4(copy, copy, copy_s, copy_s);
    if (threadIdx.x == 0) hv = *(const uint4 *)slot; /* tokens, copy_tokens, sequences, copy_sequences */
    const bool vec = ((ids | st.token_ids) & 15u) == 0;
    const uint32_t nvec = vec ? copy / MDR_STAGE_IDS_PER_VEC : 0;
    mdr_stage_fetch_vectors((const uint4 *)ids, (uint4 *)st.token_ids, 0, nvec);
    mdr_stage_fetch_scalars((const uint32_t *)ids, (uint32_t *)st.token_ids, nvec * MDR_STAGE_IDS_PER_VEC, copy);
    tokens = hv.x;
    seqs = hv.z;
  }
  __syncthreads(); /* every load of the slot has completed */
  if (late && (s_tokens < copy || s_seqs < copy_s)) mdr_stage_device_inputs(st, s_in, s_tokens, s_seqs, copy, copy_s);
  if (threadIdx.x == 0) {
    if (blk == 0 && (flags & (MDR_STAGE_FETCH | MDR_STAGE_DEVICE_IDS))) mdr_stage_publish_counts(st, tokens, seqs);
    bool last = true;
    if (blocks > 1u) { /* the last stage block to finish reading the slot advances */
      mdr_stage_sync *sync = (mdr_stage_sync *)st.done;
      __threadfence();
      last = atomicAdd(&sync->done, 1u) == blocks - 1u;
      if (last) sync->done = 0; /* left zeroed, as each launch leaves it */
    }
    if (last && (flags & MDR_STAGE_ADVANCE) && !inl) {
      *(volatile uint64_t *)st.counter = step + 1;
      *(volatile uint64_t *)st.ack = step + 1;
    }
  }
}

/* Whether mdr_stage_inline_block serves an inline launch of these flags by
 * the block compiled for FETCH | INLINE (a host-valued step). */
__host__ __device__ __forceinline__ bool mdr_stage_inline_known(uint32_t flags) {
  return (flags & MDR_STAGE_KNOWN_BITS) == (MDR_STAGE_FETCH | MDR_STAGE_INLINE);
}

/* The stage block of an inline launch (one stage block, its slot image at
 * inline_slot in its parameters, its input table at ptable or nullptr):
 * a host-valued step (FETCH | INLINE, neither device ids nor ADVANCE)
 * takes mdr_stage_block compiled for those bits, without the ring's
 * counter, the slot's rounds, the device ids' paths or the spread, so that
 * block 0 runs a short path with few branches to code it has not run in
 * the launch; other inline steps (device ids) take the general block. The
 * same work either way. Every thread of the block calls it. */
__device__ __forceinline__ void mdr_stage_inline_block(const mdr_stage_desc &st, uint32_t flags, uint32_t copy,
                                                       uint64_t inline_slot, const mdr_stage_input *ptable) {
  if (mdr_stage_inline_known(flags))
    mdr_stage_block<MDR_STAGE_FETCH | MDR_STAGE_INLINE>(st, flags, copy, inline_slot, 0, 1, ptable);
  else
    mdr_stage_block(st, flags, copy, inline_slot, 0, 1, ptable);
}

/* The stager of a DYNAMIC launch by device count (the block holding ticket
 * 0): reads the slot's header, publishes t at `published` at once for the
 * other blocks, then copies the ids (the first MDR_STAGE_BLOCK vectors in
 * the header's round trip) and the inputs at the header's counts (no
 * padding: a DYNAMIC step copies exactly its counts). Sets *s_tokens to t.
 * Every thread of the block calls it. */
__device__ __forceinline__ void mdr_stage_dynamic(const mdr_stage_desc &st, uint32_t flags, uint64_t step,
                                                  volatile uint64_t *published, uint32_t *s_tokens) {
  __shared__ uint32_t s_copy, s_seqs, s_copy_seqs;
  __shared__ mdr_stage_input s_in[MDR_STAGE_INPUTS_MAX];
  if (st.n_inputs) mdr_stage_load_table(st, s_in); /* in flight with the header's load; the sync below */
  const uint64_t slot = mdr_stage_slot_of(st, step);
  const uint64_t ids = slot + MDR_STAGE_HEADER_BYTES;
  const bool device_ids = flags & MDR_STAGE_DEVICE_IDS;
  const bool fetch = (flags & MDR_STAGE_FETCH) && !device_ids; /* ids from the slot */
  const bool vec = ((ids | st.token_ids) & 15u) == 0;
  uint4 spec = make_uint4(0u, 0u, 0u, 0u);
  uint32_t spec_vecs = 0;
  if (threadIdx.x == 0) { /* one plain 16-byte load of the header (as mdr_stage_block's) */
    const uint4 h = *(const uint4 *)slot; /* tokens, copy_tokens, sequences, copy_sequences */
    *s_tokens = h.x;
    s_copy = h.y;
    s_seqs = h.z;
    s_copy_seqs = h.w;
    *published = ((uint64_t)(uint32_t)(step + 1) << 32) | h.x;
  }
  if (fetch && vec) {
    spec_vecs = (uint32_t)((st.slot_bytes - MDR_STAGE_HEADER_BYTES) / 16u);
    if (spec_vecs > MDR_STAGE_BLOCK) spec_vecs = MDR_STAGE_BLOCK;
    if (threadIdx.x < spec_vecs) spec = ((const uint4 *)ids)[threadIdx.x];
  }
  __syncthreads();
  if (fetch) {
    const uint32_t copy = s_copy, nvec = vec ? copy / MDR_STAGE_IDS_PER_VEC : 0;
    if (threadIdx.x < nvec && threadIdx.x < spec_vecs) ((uint4 *)st.token_ids)[threadIdx.x] = spec;
    mdr_stage_fetch_vectors((const uint4 *)ids, (uint4 *)st.token_ids, spec_vecs, nvec);
    mdr_stage_fetch_scalars((const uint32_t *)ids, (uint32_t *)st.token_ids, nvec * MDR_STAGE_IDS_PER_VEC, copy);
  } else if (device_ids) {
    mdr_stage_device_ids(st, *s_tokens, s_copy);
  }
  if (st.n_inputs) {
    if (flags & MDR_STAGE_FETCH) {
      mdr_stage_input e = {};
      const bool have = mdr_stage_lane_entry(st, s_in, e);
      mdr_stage_copy_slot(st, e, have, slot, false, s_copy, s_copy_seqs);
    }
    mdr_stage_device_inputs(st, s_in, *s_tokens, s_seqs, s_copy, s_copy_seqs);
  }
  if (threadIdx.x == 0 && (fetch || device_ids)) mdr_stage_publish_counts(st, *s_tokens, s_seqs);
}

#endif
