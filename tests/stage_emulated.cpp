/* stage_emulated.cpp — the stage block of staging/staging.cuh run on the
 * CPU, thread by thread, against the host twin (mdr_zero_fused_host).
 *
 * The device code is compiled as it is, with tests/emulate/cuda_runtime.h
 * in place of the toolkit's: each of the block's MDR_STAGE_BLOCK threads is
 * a host thread, the 32 lanes of a warp meet at every warp function (each
 * lane's value in, the function's result out, as the hardware computes it
 * from every lane's own operands), the block at every __syncthreads. A warp
 * function that a lane of the warp does not reach, or reaches as a
 * different function, and a barrier some thread does not reach, stop the
 * program with a message, as do partial masks (the device code uses full
 * masks only, and a lane never diverges from its warp at these points).
 *
 * Each case builds two identical worlds in host memory (the staging ring
 * with its slot written, the input table, destinations, device-resident
 * sources, the ring counter and ack), runs the emulated block on one and
 * the host twin on the other, and compares every byte of both worlds but
 * the input table (which holds each world's own addresses): the ids, every
 * input's rows and pad, the counts, the counter and ack, and the guard bytes
 * around every region (a store outside a destination shows there; a load or
 * store at a wild address ends the program). Cases draw the inputs (count,
 * shapes, element sizes, widths, slot or device values, destinations not
 * 16-byte aligned), the counts and their padding, the ring position and the
 * launch's flags (static, DEVICE_IDS, DYNAMIC, INLINE: the slot given as the
 * launch's parameters, the counter neither read nor advanced, with host or
 * device ids; most INLINE
 * cases with the image's bytes given, so that the image is loaded whole
 * before the input table is waited for, the rest placed as a ring slot;
 * a third with the input table in the launch's parameters, the one in
 * device memory cleared, and a third with that room left zeroed, so that
 * the device table serves). An INLINE launch runs through
 * mdr_stage_inline_block, as the inline kernels' block 0 does: a
 * host-valued one in the block compiled for its flags, the rest in the
 * general block; its image is dealt over the warps when small.
 *
 * A plain program (no Criterion): exit 0 when every case matches, 1 on a
 * mismatch; a fault aborts. Usage: stage_emulated [cases] [seed] [spread|inline]
 * (inline: every case an INLINE launch with inputs, its table in its
 * parameters or not, half of them with device ids, a third of them with
 * over a thousand tokens; it fails unless the cases drew both blocks and
 * both of the image's layouts, dealt and in a row;
 * spread: every case a launch whose stage is spread over 2-6 blocks, run
 * one after another, the counter checked unadvanced until the last; half
 * of them with device ids, which the first block alone copies). */
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "staging.cuh"

extern "C" void mdr_zero_fused_host_inline(const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                           const mdr_stage_desc *stage, const void *inline_slot,
                                           const void *inline_table);

namespace {

constexpr unsigned kWarp = 32;
constexpr unsigned kBlock = MDR_STAGE_BLOCK;
static_assert(kBlock % kWarp == 0, "whole warps");

[[noreturn]] void die(const char *what) {
  std::fprintf(stderr, "stage_emulated: %s (thread %u)\n", what, threadIdx.x);
  std::fflush(stderr);
  std::abort();
}

/* A reusable barrier of n threads; a thread that waits past the timeout
 * reports that some thread never arrived (a warp function or barrier in
 * divergent code). */
class Barrier {
 public:
  explicit Barrier(unsigned n) : n_(n) {}
  void wait(const char *what) {
    std::unique_lock<std::mutex> l(m_);
    const unsigned long g = gen_;
    if (++count_ == n_) {
      count_ = 0;
      gen_++;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(l, std::chrono::seconds(30), [&] { return gen_ != g; })) {
      std::string msg = std::string(what) + " not reached by every thread it must be";
      die(msg.c_str());
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  const unsigned n_;
  unsigned count_ = 0;
  unsigned long gen_ = 0;
};

enum WarpOp { OP_SHFL = 1, OP_SHFL_UP, OP_BALLOT };

struct Warp {
  Barrier bar{kWarp};
  uint64_t val[kWarp];
  int op[kWarp];
};

struct Block {
  Barrier bar{kBlock};
  Warp warps[kBlock / kWarp];
};

Block *g_block;

/* Every lane of the warp posts its operand; each then computes its result
 * from all of them with `pick`; nobody posts again before all have read. */
template <class Pick>
uint64_t warp_op(unsigned mask, int width, int op, uint64_t v, Pick pick) {
  if (mask != 0xffffffffu) die("a warp function with a partial mask");
  if (width != (int)kWarp) die("a warp function on a sub-warp width");
  const unsigned lane = threadIdx.x % kWarp;
  Warp &w = g_block->warps[threadIdx.x / kWarp];
  w.val[lane] = v;
  w.op[lane] = op;
  w.bar.wait("a warp function");
  for (unsigned l = 0; l < kWarp; l++)
    if (w.op[l] != op) die("lanes of one warp in different warp functions");
  const uint64_t r = pick(w.val, lane);
  w.bar.wait("a warp function");
  return r;
}

uint64_t shfl(unsigned mask, uint64_t v, int src, int width) {
  /* a source lane outside the warp reads lane src modulo the width */
  return warp_op(mask, width, OP_SHFL, v, [&](const uint64_t *all, unsigned) { return all[(unsigned)src % kWarp]; });
}

/* Run `body` as one block: MDR_STAGE_BLOCK host threads, threadIdx.x set. */
template <class Body>
void run_block(Body body) {
  Block block;
  g_block = &block;
  std::vector<std::thread> threads;
  threads.reserve(kBlock);
  for (unsigned i = 0; i < kBlock; i++)
    threads.emplace_back([i, &body] {
      threadIdx.x = i;
      body();
    });
  for (auto &t : threads) t.join();
  g_block = nullptr;
}

}  // namespace

unsigned int __shfl_sync(unsigned mask, unsigned int var, int src_lane, int width) {
  return (unsigned int)shfl(mask, var, src_lane, width);
}
int __shfl_sync(unsigned mask, int var, int src_lane, int width) {
  return (int)(unsigned int)shfl(mask, (unsigned int)var, src_lane, width);
}
unsigned long __shfl_sync(unsigned mask, unsigned long var, int src_lane, int width) {
  return (unsigned long)shfl(mask, var, src_lane, width);
}
unsigned long long __shfl_sync(unsigned mask, unsigned long long var, int src_lane, int width) {
  return (unsigned long long)shfl(mask, var, src_lane, width);
}
unsigned int __shfl_up_sync(unsigned mask, unsigned int var, unsigned int delta, int width) {
  /* lanes below delta keep their own value */
  return (unsigned int)warp_op(mask, width, OP_SHFL_UP, var, [&](const uint64_t *all, unsigned lane) {
    return lane >= delta ? all[lane - delta] : all[lane];
  });
}
unsigned int __ballot_sync(unsigned mask, int predicate) {
  return (unsigned int)warp_op(mask, 32, OP_BALLOT, predicate != 0, [](const uint64_t *all, unsigned) {
    uint64_t bits = 0;
    for (unsigned l = 0; l < kWarp; l++) bits |= (all[l] ? 1ull : 0ull) << l;
    return bits;
  });
}
void __syncthreads(void) { g_block->bar.wait("__syncthreads"); }

namespace {

constexpr unsigned char POISON = 0xA5;
constexpr uint64_t GAP = 64; /* guard bytes after every region */

struct Rng {
  uint64_t s;
  uint64_t next() { /* splitmix64 */
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return next() % n; }
};

/* What a case draws; both worlds are built from it. */
struct InputSpec {
  uint32_t rows, elem, width, max_rows, mis; /* mis: the destination's offset from 16-byte alignment */
  bool device, in_place;
  uint64_t pad;
};

struct Case {
  uint32_t flags, n, max_tokens, max_seqs, slots; /* slots: the ring's length (3: not a power of two) */
  uint32_t blocks; /* stage blocks the launch spreads its slot's read over (1: one) */
  uint32_t image;  /* INLINE: the image's bytes given (the cache's launches), so the block loads it whole
                      before it waits for the input table (mdr_stage_copy_image); 0: placed as a slot is */
  uint32_t ptable; /* INLINE: 0 no table in the launch's parameters; 1 the table written there (the
                      cache's larger classes), the one in device memory then cleared, so that a block
                      that read it would place nothing; 2 room for one left zeroed (the device table
                      then serves) */
  uint32_t t, copy, s, copy_s, step, ids_mis, ids_src_kind; /* ids_src: 0 none, 1 token_ids, 2 its own */
  InputSpec in[MDR_STAGE_INPUTS_MAX];
  uint64_t fill_seed;
};

struct Region {
  std::string name;
  uint64_t off, len;
};

struct World {
  unsigned char *mem = nullptr;
  uint64_t bytes = 0;
  mdr_stage_desc desc{};
  uint64_t table_off = 0, table_len = 0;
  std::vector<Region> regions;
  ~World() { std::free(mem); }
};

uint64_t up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Lay the world out, fill it, write the slot: the same bytes at any base. */
void build(const Case &c, World &w) {
  std::vector<Region> &r = w.regions;
  uint64_t at = 0;
  auto place = [&](const char *name, uint64_t len, uint64_t align, uint64_t mis) {
    at = up(at, align) + mis;
    r.push_back(Region{name, at, len});
    const uint64_t off = at;
    at += len + GAP;
    return off;
  };
  const uint64_t ctl = place("counter, sync, counts, ack", 64, 256, 0);
  w.table_off = place("input table", MDR_STAGE_INPUTS_MAX * sizeof(mdr_stage_input), 256, 0);
  w.table_len = MDR_STAGE_INPUTS_MAX * sizeof(mdr_stage_input);
  /* the slot as graphs/staging.c lays it out */
  mdr_stage_input table[MDR_STAGE_INPUTS_MAX];
  std::memset(table, 0, sizeof table);
  uint64_t end = MDR_STAGE_HEADER_BYTES + (uint64_t)c.max_tokens * 4u;
  for (uint32_t i = 0; i < c.n; i++) {
    const InputSpec &s = c.in[i];
    mdr_stage_input &e = table[i];
    e.rows = s.rows;
    e.elem_bytes = s.elem;
    e.row_bytes = s.elem * s.width;
    e.max_rows = s.max_rows;
    e.pad = s.pad;
    if (!s.device) {
      end = up(end, 16);
      e.offset = (uint32_t)end;
      end += (uint64_t)s.max_rows * e.row_bytes;
    }
  }
  const uint64_t slot_bytes = up(end, 256);
  const uint64_t ring = place("ring", slot_bytes * c.slots, 256, 0);
  const uint64_t ids = place("token_ids", (uint64_t)c.max_tokens * 4u, 256, c.ids_mis);
  const uint64_t ids_src = c.ids_src_kind == 2 ? place("ids_src", (uint64_t)c.max_tokens * 4u, 256, 0) : 0;
  uint64_t dst[MDR_STAGE_INPUTS_MAX] = {0}, src[MDR_STAGE_INPUTS_MAX] = {0};
  for (uint32_t i = 0; i < c.n; i++) {
    const uint64_t bytes = (uint64_t)c.in[i].max_rows * table[i].row_bytes;
    dst[i] = place(("input " + std::to_string(i)).c_str(), bytes, 256, c.in[i].device ? 0 : c.in[i].mis);
    if (c.in[i].device && !c.in[i].in_place) src[i] = place(("source " + std::to_string(i)).c_str(), bytes, 256, 0);
  }
  w.bytes = up(at, 256);
  w.mem = (unsigned char *)std::aligned_alloc(256, w.bytes);
  if (!w.mem) die("out of memory");
  std::memset(w.mem, POISON, w.bytes);
  const uint64_t base = (uint64_t)(uintptr_t)w.mem;
  Rng fill{c.fill_seed};
  for (uint64_t k = 0; k < slot_bytes * c.slots; k++) w.mem[ring + k] = (unsigned char)fill.next();
  if (ids_src)
    for (uint64_t k = 0; k < (uint64_t)c.max_tokens * 4u; k++) w.mem[ids_src + k] = (unsigned char)fill.next();
  for (uint32_t i = 0; i < c.n; i++) {
    const uint64_t bytes = (uint64_t)c.in[i].max_rows * table[i].row_bytes;
    const uint64_t from = c.in[i].device ? (c.in[i].in_place ? dst[i] : src[i]) : 0;
    if (from)
      for (uint64_t k = 0; k < bytes; k++) w.mem[from + k] = (unsigned char)fill.next();
    table[i].dst = base + dst[i];
    table[i].src = from ? base + from : 0;
  }
  std::memcpy(w.mem + w.table_off, table, c.n * sizeof(mdr_stage_input));
  /* the ring counter at the case's step, the sync words zeroed (as a launch
   * leaves them), the counts and ack poisoned */
  const uint64_t step = c.step;
  /* an INLINE launch reads no counter: the ring's points elsewhere, so a
   * launch that read the ring instead would read another slot */
  const uint64_t counter = (c.flags & MDR_STAGE_INLINE) ? step + 3 : step;
  std::memcpy(w.mem + ctl, &counter, 8);
  std::memset(w.mem + ctl + 8, 0, 16);
  unsigned char *slot = w.mem + ring + (step % c.slots) * slot_bytes;
  const mdr_stage_header h = {c.t, c.copy, c.s, c.copy_s};
  std::memcpy(slot, &h, sizeof h);
  mdr_stage_desc &d = w.desc;
  std::memset(&d, 0, sizeof d);
  d.ring = base + ring;
  d.slot_bytes = slot_bytes;
  d.counter = base + ctl;
  d.done = base + ctl + 8;
  d.count_out = base + ctl + 32;
  d.ack = base + ctl + 40;
  d.token_ids = base + ids;
  d.slots = c.slots;
  d.flags = c.flags;
  d.ids_src = c.ids_src_kind == 1 ? base + ids : c.ids_src_kind == 2 ? base + ids_src : 0;
  d.pad_id = 0x7FFFFFFFu;
  d.n_inputs = c.n;
  d.inputs = c.n ? base + w.table_off : 0;
  d.copy_sequences = c.copy_s;
  /* the image's bytes, as the cache sets them: the layout's end (the pad
   * rows to max_rows included) */
  d.inline_bytes = (c.flags & MDR_STAGE_INLINE) && c.image ? (uint32_t)end : 0u;
}

/* The launch's stage work on the emulated device: the static stage block,
 * or the DYNAMIC stager with what zero_dynamic_kernel does around it (the
 * counter read before, the counter and ack advanced by the last block). */
/* An INLINE launch's slot: the case's slot, standing for the launch's
 * parameters (0 for ring launches). */
uint64_t inline_slot_of(const Case &c, const World &w) {
  return (c.flags & MDR_STAGE_INLINE) ? w.desc.ring + (c.step % c.slots) * w.desc.slot_bytes : 0;
}

/* What the cases drew of the inline stage block's paths: launches the
 * block compiled for FETCH | INLINE served (mdr_stage_inline_block), other
 * inline launches, and inline images dealt over the warps or in a row
 * (mdr_stage_copy_image). */
struct InlinePaths {
  unsigned known = 0, general = 0, dealt = 0, in_row = 0;
} g_paths;

void run_device(const Case &c, World &w) {
  const mdr_stage_desc &st = w.desc;
  if (!(c.flags & MDR_STAGE_DYNAMIC)) {
    const uint64_t inl = inline_slot_of(c, w);
    const uint32_t flags = c.flags | ((c.blocks - 1u) << MDR_STAGE_SPREAD_SHIFT);
    mdr_stage_sync *sync = (mdr_stage_sync *)(uintptr_t)st.done;
    const uint64_t counter = *(const uint64_t *)(uintptr_t)st.counter;
    /* the launch's own copy of the input table (Case::ptable) */
    mdr_stage_input ptab[MDR_STAGE_INLINE_TABLE];
    std::memset(ptab, 0, sizeof ptab);
    if (c.ptable == 1) {
      std::memcpy(ptab, w.mem + w.table_off, c.n * sizeof(mdr_stage_input));
      std::memset(w.mem + w.table_off, 0, w.table_len);
    }
    const mdr_stage_input *pt = c.ptable ? ptab : nullptr;
    if (inl) { /* an inline launch: one stage block, as the inline kernels serve it */
      (mdr_stage_inline_known(flags) ? g_paths.known : g_paths.general)++;
      if (st.inline_bytes && st.n_inputs)
        (mdr_stage_image_dealt((st.inline_bytes + 15u) / 16u) ? g_paths.dealt : g_paths.in_row)++;
      run_block([&] { mdr_stage_inline_block(st, flags, c.copy, inl, pt); });
      return;
    }
    for (uint32_t blk = 0; blk < c.blocks; blk++) { /* the stage blocks, one after another */
      run_block([&] { mdr_stage_block(st, flags, c.copy, inl, blk, c.blocks, pt); });
      if (blk + 1u == c.blocks) break;
      /* before the last: counted, and nothing advanced */
      if (sync->done != blk + 1u) die("a stage block did not count itself done");
      if (*(const uint64_t *)(uintptr_t)st.counter != counter) die("the counter advanced before every stage block finished");
    }
    return;
  }
  const uint64_t step = *(const uint64_t *)(uintptr_t)st.counter;
  mdr_stage_sync *sync = (mdr_stage_sync *)(uintptr_t)st.done;
  static uint32_t s_tokens;
  run_block([&] {
    mdr_stage_dynamic(st, c.flags, step, &sync->published, &s_tokens);
    __syncthreads();
    if (threadIdx.x == 0 && (c.flags & MDR_STAGE_ADVANCE)) {
      *(volatile uint64_t *)(uintptr_t)st.counter = step + 1;
      *(volatile uint64_t *)(uintptr_t)st.ack = step + 1;
    }
  });
}

/* A case; with `spread`, a launch that spreads its slot's read over 2-6
 * stage blocks (fetch and advance from a ring slot, every input in it);
 * with `inl`, an INLINE launch with at least one input. */
Case draw(Rng &g, bool spread, bool inl) {
  Case c;
  std::memset(&c, 0, sizeof c);
  static const uint32_t flag_sets[] = {
      MDR_STAGE_FETCH | MDR_STAGE_ADVANCE,
      MDR_STAGE_FETCH,
      MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_DEVICE_IDS,
      MDR_STAGE_DEVICE_IDS,
      MDR_STAGE_ADVANCE, /* the last launch of a plan split over several: it only advances */
      MDR_STAGE_DYNAMIC | MDR_STAGE_FETCH | MDR_STAGE_ADVANCE,
      MDR_STAGE_DYNAMIC | MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_DEVICE_IDS,
      MDR_STAGE_FETCH | MDR_STAGE_INLINE, /* the slot image in the launch's parameters: counter and ack untouched */
      MDR_STAGE_FETCH | MDR_STAGE_INLINE | MDR_STAGE_DEVICE_IDS, /* the same, the ids from the device */
  };
  c.flags = flag_sets[g.below(sizeof flag_sets / sizeof flag_sets[0])];
  if (spread) c.flags = MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | (g.below(2) ? (uint32_t)MDR_STAGE_DEVICE_IDS : 0u);
  if (inl) c.flags = MDR_STAGE_FETCH | MDR_STAGE_INLINE | (g.below(2) ? (uint32_t)MDR_STAGE_DEVICE_IDS : 0u);
  /* mostly small steps; some whose read takes more than one round */
  c.max_tokens = g.below(inl ? 3 : 6) == 0 ? 1024 + (uint32_t)g.below(4096) : 1 + (uint32_t)g.below(96);
  c.max_seqs = 1 + (uint32_t)g.below(12);
  c.t = 1 + (uint32_t)g.below(c.max_tokens);
  /* a quarter at the real token count: padding by sequences alone */
  c.copy = g.below(4) == 0 ? c.t : c.t + (uint32_t)g.below(c.max_tokens - c.t + 1);
  /* ... and padded past the real count */
  if (spread && (c.flags & MDR_STAGE_DEVICE_IDS) && c.t > 1 && c.copy == c.t) c.t -= 1 + (uint32_t)g.below(c.t - 1);
  const uint32_t smax = c.t < c.max_seqs ? c.t : c.max_seqs;
  c.s = 1 + (uint32_t)g.below(smax);
  c.copy_s = c.s + (uint32_t)g.below(c.max_seqs - c.s + 1);
  c.slots = g.below(4) == 0 ? 3u : 4u;
  c.step = (uint32_t)g.below(3 * c.slots);
  c.ids_mis = g.below(4) == 0 ? 4u * (uint32_t)g.below(4) : 0u; /* ids stay 4-byte aligned */
  c.ids_src_kind = (uint32_t)g.below(3);
  /* spread device-id launches: ids from a buffer of their own (what only
   * the first stage block, which knows the real count, may copy) */
  if (spread && (c.flags & MDR_STAGE_DEVICE_IDS)) c.ids_src_kind = 2;
  /* inline device-id launches: mostly from a buffer of their own (copied
   * ahead of the image by the block's last threads, strided past a block) */
  if (inl && (c.flags & MDR_STAGE_DEVICE_IDS) && g.below(4) != 0) c.ids_src_kind = 2;
  c.n = (uint32_t)g.below(MDR_STAGE_INPUTS_MAX + 1);
  if ((spread || inl) && c.n == 0) c.n = 1;
  const bool only_device = (c.flags & (MDR_STAGE_FETCH | MDR_STAGE_DYNAMIC)) == 0;
  for (uint32_t i = 0; i < c.n; i++) {
    InputSpec &s = c.in[i];
    static const uint32_t elems[] = {1, 2, 4, 8};
    s.rows = (uint32_t)g.below(3);
    s.elem = elems[g.below(4)];
    /* wide rows (a block table) on the smaller steps only, to bound the worlds */
    s.width = 1 + (uint32_t)g.below(c.max_tokens <= 96 && g.below(4) == 0 ? 160 : 6);
    const uint32_t natural = s.rows == MDR_STAGE_ROWS_TOKENS ? c.max_tokens : s.rows == MDR_STAGE_ROWS_SEQUENCES ? c.max_seqs : 1 + (uint32_t)g.below(8);
    /* some destinations hold fewer rows than a padded count reaches */
    s.max_rows = g.below(5) == 0 ? 1 + (uint32_t)g.below(natural) : natural;
    s.device = only_device || g.below(3) == 0;
    s.in_place = s.device && g.below(4) == 0;
    s.mis = g.below(3) == 0 ? s.elem * (uint32_t)g.below(16 / s.elem) : 0u;
    s.pad = g.next();
  }
  /* a quarter with every device input kept in place (a block table the
   * engine keeps on the device): their pad rows, written only when a count
   * falls short, are the stage's only device-input work */
  if (g.below(4) == 0)
    for (uint32_t i = 0; i < c.n; i++) c.in[i].in_place = c.in[i].device;
  /* a third of the launches that may spread their read (fetch and advance
   * from a ring slot, every input in it; the ids from it or from the
   * device) take 2-6 stage blocks */
  c.blocks = 1;
  if ((c.flags & ~(uint32_t)MDR_STAGE_DEVICE_IDS) == (MDR_STAGE_FETCH | MDR_STAGE_ADVANCE) && c.n > 0 &&
      (spread || g.below(3) == 0)) {
    c.blocks = 2 + (uint32_t)g.below(5);
    for (uint32_t i = 0; i < c.n; i++) c.in[i].device = c.in[i].in_place = false;
  }
  c.image = (c.flags & MDR_STAGE_INLINE) && g.below(4) != 0;
  c.ptable = (c.flags & MDR_STAGE_INLINE) ? (uint32_t)g.below(3) : 0u;
  c.fill_seed = g.next();
  return c;
}

int compare(const Case &c, const World &dev, const World &twin, unsigned index) {
  for (uint64_t k = 0; k < dev.bytes; k++) {
    if (k >= dev.table_off && k < dev.table_off + dev.table_len) continue;
    if (dev.mem[k] == twin.mem[k]) continue;
    const char *where = "a gap between regions";
    uint64_t rel = k;
    for (const Region &r : dev.regions)
      if (k >= r.off && k < r.off + r.len + GAP) {
        where = r.name.c_str();
        rel = k - r.off;
        break;
      }
    std::fprintf(stderr,
                 "case %u: flags %#x, %u inputs, t %u copy %u, s %u copy_s %u, max_tokens %u: byte %llu of %s "
                 "(past its end when at or over its length): device %#x, host twin %#x\n",
                 index, c.flags, c.n, c.t, c.copy, c.s, c.copy_s, c.max_tokens, (unsigned long long)rel, where,
                 dev.mem[k], twin.mem[k]);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  const unsigned cases = argc > 1 ? (unsigned)std::strtoul(argv[1], nullptr, 10) : 24u;
  Rng g{argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20261202ull};
  const bool spread_only = argc > 3 && std::strcmp(argv[3], "spread") == 0;
  const bool inline_only = argc > 3 && std::strcmp(argv[3], "inline") == 0;
  unsigned failed = 0, spread = 0;
  for (unsigned i = 0; i < cases; i++) {
    const Case c = draw(g, spread_only, inline_only);
    World dev, twin;
    build(c, dev);
    build(c, twin);
    spread += c.blocks > 1;
    run_device(c, dev);
    /* the host mirror given the launch's table as the device block is
     * (Case::ptable), its table in device memory cleared alike */
    mdr_stage_input ptab[MDR_STAGE_INLINE_TABLE] = {};
    if (c.ptable == 1) {
      std::memcpy(ptab, twin.mem + twin.table_off, c.n * sizeof(mdr_stage_input));
      std::memset(twin.mem + twin.table_off, 0, twin.table_len);
    }
    mdr_zero_fused_host_inline(nullptr, 0, c.copy, &twin.desc, (const void *)(uintptr_t)inline_slot_of(c, twin),
                               c.ptable ? ptab : nullptr);
    failed += (unsigned)compare(c, dev, twin, i);
  }
  std::printf("stage_emulated: %u cases (%u spread over several stage blocks), %u mismatched\n", cases, spread,
              failed);
  std::printf("stage_emulated: inline launches: %u by the block compiled for FETCH | INLINE, %u by the general "
              "block; images with inputs: %u dealt over the warps, %u in a row\n",
              g_paths.known, g_paths.general, g_paths.dealt, g_paths.in_row);
  if (inline_only && (!g_paths.known || !g_paths.general || !g_paths.dealt || !g_paths.in_row)) {
    std::printf("stage_emulated: the inline cases did not draw every path\n");
    return 1;
  }
  return failed ? 1 : 0;
}
