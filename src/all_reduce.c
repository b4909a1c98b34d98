/* all_reduce.c — the all-reduce of an arena buffer's rows
 * (include/mdr/comm.h): the argument checks, the algorithm choice and its
 * table, the one description of a call (mdr_ar_call, kernels/
 * ar_protocol.h) handed to the transport, and the protocol counters' test
 * hook. The transports (src/comm_nccl.c, src/comm_host.c) run the call;
 * the protocol itself is kernels/ar_protocol.h. */
#include <float.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "all_reduce_impl.h"
#include "env.h"

/* the protocol's codes are the public values */
_Static_assert((int)MDR_ARP_BF16 == (int)MDR_DTYPE_BF16 && (int)MDR_ARP_FP16 == (int)MDR_DTYPE_FP16 &&
                   (int)MDR_ARP_FP32 == (int)MDR_DTYPE_FP32,
               "dtype codes");
_Static_assert((int)MDR_ARP_AUTO == (int)MDR_ALL_REDUCE_AUTO && (int)MDR_ARP_NCCL == (int)MDR_ALL_REDUCE_NCCL &&
                   (int)MDR_ARP_ONE_SHOT == (int)MDR_ALL_REDUCE_ONE_SHOT &&
                   (int)MDR_ARP_TWO_SHOT == (int)MDR_ALL_REDUCE_TWO_SHOT,
               "algorithm codes");
_Static_assert(MDR_ARP_ONE_SHOT_MAX_BYTES == MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES, "one-shot scratch");
_Static_assert(MDR_ARP_MAX_RANKS == MDR_ALL_REDUCE_MAX_RANKS, "ranks of mdr's kernels");
_Static_assert(MDR_ARP_NORM_MAX_VECS * MDR_ARP_VEC == MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES, "the fused norm's rows");

size_t mdr_comm_region_off(const mdr_arena *a) { return (mdr_arena_slab_bytes(a) + 255u) & ~(size_t)255u; }

/* One-shot beats two-shot at every size up to its scratch, and two-shot
 * beats both NCCL paths at every size above (docs/TP.md has the
 * measurements), so NCCL is never taken where mdr's kernels run; a machine
 * where NCCL wins above some size sets two_shot_max. */
const mdr_ar_table mdr_ar_auto_table = {
    .one_shot_max = MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES,
    .two_shot_max = SIZE_MAX,
};

const char *mdr_all_reduce_algo_name(mdr_all_reduce_algo a) {
  static const char *const k_names[MDR_ALL_REDUCE_ALGO_COUNT] = {"auto", "nccl", "one-shot", "two-shot"};
  return (int)a >= 0 && a < MDR_ALL_REDUCE_ALGO_COUNT ? k_names[a] : "unknown";
}

mdr_all_reduce_desc mdr_all_reduce_desc_make(mdr_buffer buf, mdr_dtype dt, size_t tokens) {
  return (mdr_all_reduce_desc){.buf = buf,
                               .dtype = dt,
                               .tokens = tokens,
                               .count_ptr = 0,
                               .residual = MDR_BUF_COUNT,
                               .algo = MDR_ALL_REDUCE_AUTO,
                               .norm_output = MDR_BUF_COUNT,
                               .norm_weight = 0,
                               .norm_eps = 0.0f};
}

int mdr_all_reduce_kernels(const mdr_arena *a) {
  const mdr_comm *c = a ? mdr_arena_comm(a) : NULL;
  return c ? c->ops->kernels(c, mdr_arena_slab_base(a)) : 0;
}

/* Why mdr's kernels cannot take `bytes` of rows of row_bytes (NULL: they
 * can). */
static const char *kernel_refusal(const mdr_arena *a, size_t row_bytes, size_t bytes, mdr_all_reduce_algo algo) {
  if (!mdr_all_reduce_kernels(a))
    return "mdr's kernels do not run on this arena (mdr_all_reduce_kernels: see the arena's create)";
  if (row_bytes % MDR_ARP_VEC != 0) return "rows are not a multiple of 16 bytes";
  if (algo == MDR_ALL_REDUCE_ONE_SHOT && bytes > MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES)
    return "the message is over MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES (the one-shot scratch)";
  return NULL;
}

/* AUTO's pick for `bytes` of rows of row_bytes. */
static mdr_all_reduce_algo choose(const mdr_arena *a, size_t row_bytes, size_t bytes, int counted) {
  if (kernel_refusal(a, row_bytes, bytes, MDR_ALL_REDUCE_TWO_SHOT)) return MDR_ALL_REDUCE_NCCL;
  if (counted) return MDR_ALL_REDUCE_AUTO;
  if (bytes <= mdr_ar_auto_table.one_shot_max) return MDR_ALL_REDUCE_ONE_SHOT;
  if (bytes <= mdr_ar_auto_table.two_shot_max) return MDR_ALL_REDUCE_TWO_SHOT;
  return MDR_ALL_REDUCE_NCCL;
}

/* Return st, recording the text on b unless b is NULL (a query records
 * nothing). */
static mdr_status
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    refuse(mdr_backend *b, mdr_status st, const char *fmt, ...) {
  if (!b) return st;
  char text[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  return mdr_backend_fail(b, st, "%s", text);
}

/* The rows of `buf` as elements of dt: row bytes, or 0 with the failure
 * recorded on rec (NULL: nowhere). */
static size_t row_bytes_of(const mdr_arena *a, mdr_backend *rec, mdr_buffer buf, mdr_dtype dt, const char *role) {
  const size_t esize = mdr_dtype_bytes(dt), m = mdr_arena_max_batch_tokens(a), bytes = mdr_arena_bytes(a, buf);
  const mdr_dptr ptr = mdr_arena_ptr(a, buf);
  if (!ptr || bytes % m != 0 || (bytes / m) % esize != 0) {
    refuse(rec, MDR_ERR_INVALID_ARGUMENT,
           "all-reduce: %s buffer %s has no rows of %zu-byte elements (%zu bytes, %zu rows)", role,
           mdr_buffer_name(buf) ? mdr_buffer_name(buf) : "(unknown)", esize, bytes, m);
    return 0;
  }
  return bytes / m;
}

/* The fused RMSNorm's fields (include/mdr/comm.h): MDR_OK, or the refusal
 * naming the field. */
static mdr_status check_norm(const mdr_arena *a, mdr_backend *b, const mdr_all_reduce_desc *d, size_t row_bytes) {
  if (d->norm_output == MDR_BUF_COUNT) {
    if (d->norm_weight)
      return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: norm_weight is set but norm_output is MDR_BUF_COUNT "
                                                 "(no fused norm): set norm_output, or norm_weight to 0");
    if (d->norm_eps != 0.0f)
      return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: norm_eps is set but norm_output is MDR_BUF_COUNT "
                                                 "(no fused norm): set norm_output, or norm_eps to 0");
    return MDR_OK;
  }
  if ((int)d->norm_output < 0 || d->norm_output > MDR_BUF_COUNT)
    return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: norm_output %d is not a buffer (or MDR_BUF_COUNT)",
                  (int)d->norm_output);
  if (d->dtype != MDR_DTYPE_BF16 && d->dtype != MDR_DTYPE_FP16)
    return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: norm_output (the fused RMSNorm) takes bf16 or fp16 rows, "
                                               "not %s", d->dtype == MDR_DTYPE_FP32 ? "fp32" : "this dtype");
  if (d->residual == MDR_BUF_COUNT)
    return refuse(b, MDR_ERR_INVALID_ARGUMENT,
                  "all-reduce: norm_output needs a residual (the norm is of the residual after the add)");
  if (d->norm_output == d->buf || d->norm_output == d->residual)
    return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: norm_output is the %s buffer itself",
                  d->norm_output == d->buf ? "reduced" : "residual");
  const size_t nb = row_bytes_of(a, b, d->norm_output, d->dtype, "the norm_output");
  if (!nb) return MDR_ERR_INVALID_ARGUMENT;
  if (nb != row_bytes)
    return refuse(b, MDR_ERR_INVALID_ARGUMENT,
                  "all-reduce: norm_output rows of %zu bytes, reduced rows of %zu: they must match", nb, row_bytes);
  if (!d->norm_weight)
    return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: norm_output is set but norm_weight is 0 (the norm's "
                                               "weight: a device address of one row of dtype)");
  if (d->norm_weight % MDR_ARP_VEC != 0)
    return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: norm_weight 0x%llx is not 16-byte aligned",
                  (unsigned long long)d->norm_weight);
  if (!(d->norm_eps >= 0.0f && d->norm_eps <= FLT_MAX))
    return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: norm_eps %g is not a finite value >= 0",
                  (double)d->norm_eps);
  if (row_bytes % MDR_ARP_VEC != 0)
    return refuse(b, MDR_ERR_UNSUPPORTED,
                  "all-reduce: norm_output rows of %zu bytes are not whole 16-byte vectors (the fused norm's order)",
                  row_bytes);
  if (row_bytes > MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES)
    return refuse(b, MDR_ERR_UNSUPPORTED, "all-reduce: norm_output rows of %zu bytes are over "
                                          "MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES (%zu)",
                  row_bytes, MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES);
  return MDR_OK;
}

/* Check d against a; on success *out is the call's part of the call and
 * *algo what runs (NCCL, ONE_SHOT, TWO_SHOT, or AUTO: the kernel picks).
 * Records the failure's text otherwise (when `record`). Nothing is
 * enqueued here. */
static mdr_status resolve(const mdr_arena *a, const mdr_all_reduce_desc *d, int record, mdr_ar_call *out,
                          mdr_all_reduce_algo *algo) {
  if (!a) return MDR_ERR_INVALID_ARGUMENT;
  mdr_backend *b = record ? mdr_arena_backend(a) : NULL;
  if (!d) return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: NULL descriptor");
  if (!mdr_arena_comm(a))
    return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: the arena is not on a communicator");
  if (d->dtype != MDR_DTYPE_BF16 && d->dtype != MDR_DTYPE_FP16 && d->dtype != MDR_DTYPE_FP32)
    return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: dtype %d is not bf16, fp16 or fp32",
                            (int)d->dtype);
  if ((int)d->algo < 0 || d->algo >= MDR_ALL_REDUCE_ALGO_COUNT)
    return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: algo %d is not a mdr_all_reduce_algo",
                            (int)d->algo);
  const size_t row_bytes = row_bytes_of(a, b, d->buf, d->dtype, "the");
  if (!row_bytes) return MDR_ERR_INVALID_ARGUMENT;
  const int has_res = d->residual != MDR_BUF_COUNT;
  if (has_res) {
    if (d->residual == d->buf)
      return refuse(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: the residual is the reduced buffer itself");
    const size_t rb = row_bytes_of(a, b, d->residual, d->dtype, "the residual");
    if (!rb) return MDR_ERR_INVALID_ARGUMENT;
    if (rb != row_bytes)
      return refuse(b, MDR_ERR_INVALID_ARGUMENT,
                              "all-reduce: residual rows of %zu bytes, reduced rows of %zu: they must match", rb,
                              row_bytes);
  }
  const mdr_status nst = check_norm(a, b, d, row_bytes);
  if (nst != MDR_OK) return nst;
  const size_t m = mdr_arena_max_batch_tokens(a);
  if (d->tokens > m)
    return refuse(b, MDR_ERR_OUT_OF_RANGE, "all-reduce: %zu tokens (0 .. %zu)", d->tokens, m);
  if (d->count_ptr && d->tokens == 0)
    return refuse(b, MDR_ERR_INVALID_ARGUMENT,
                            "all-reduce: a count read on the device needs a bound (tokens > 0)");
  const size_t bytes = d->tokens * row_bytes;
  *algo = d->algo;
  if (d->algo == MDR_ALL_REDUCE_ONE_SHOT || d->algo == MDR_ALL_REDUCE_TWO_SHOT) {
    const char *why = kernel_refusal(a, row_bytes, bytes, d->algo);
    if (why)
      return refuse(b, MDR_ERR_UNSUPPORTED, "all-reduce: %s of %zu bytes refused: %s",
                              mdr_all_reduce_algo_name(d->algo), bytes, why);
  } else if (d->algo == MDR_ALL_REDUCE_AUTO) {
    *algo = choose(a, row_bytes, bytes, d->count_ptr != 0);
  }
  const mdr_dptr slab = mdr_arena_slab_base(a);
  memset(out, 0, sizeof *out);
  out->buf_off = (size_t)(mdr_arena_ptr(a, d->buf) - slab);
  out->res_off = has_res ? (size_t)(mdr_arena_ptr(a, d->residual) - slab) : MDR_ARP_NO_RESIDUAL;
  out->row_bytes = row_bytes;
  out->rows = d->tokens;
  out->count_ptr = (const uint32_t *)(uintptr_t)d->count_ptr;
  out->one_shot_max = mdr_ar_auto_table.one_shot_max;
  out->dtype = (int)d->dtype;
  out->algo = (int)*algo;
  out->region_off = mdr_comm_region_off(a);
  if (d->norm_output != MDR_BUF_COUNT) {
    out->norm_weight = (const void *)(uintptr_t)d->norm_weight;
    out->norm_off = (size_t)(mdr_arena_ptr(a, d->norm_output) - slab);
    out->norm_eps = d->norm_eps;
    out->norm_fuse = mdr_arena_comm(a)->norm_fuse;
  }
  return MDR_OK;
}

mdr_all_reduce_algo mdr_all_reduce_choice(const mdr_arena *a, const mdr_all_reduce_desc *d) {
  if (!a || !d || !mdr_arena_comm(a)) return MDR_ALL_REDUCE_ALGO_COUNT;
  /* the call's own checks, recorded nowhere (a query leaves the
   * backend's last error alone) */
  mdr_ar_call call;
  mdr_all_reduce_algo algo;
  const mdr_status st = resolve(a, d, 0, &call, &algo);
  return st == MDR_OK ? algo : MDR_ALL_REDUCE_ALGO_COUNT;
}

int mdr_all_reduce_norm_fused(const mdr_arena *a, const mdr_all_reduce_desc *d) {
  if (!a || !d || !mdr_arena_comm(a) || d->norm_output == MDR_BUF_COUNT) return -1;
  mdr_ar_call call;
  mdr_all_reduce_algo algo;
  if (resolve(a, d, 0, &call, &algo) != MDR_OK) return -1;
  /* NCCL's path: the norm in its own kernel after the collective */
  return algo != MDR_ALL_REDUCE_NCCL && mdr_arp_norm_fused(&call) ? 1 : 0;
}

mdr_status mdr_all_reduce(mdr_arena *a, const mdr_all_reduce_desc *d, mdr_stream stream) {
  mdr_ar_call call;
  mdr_all_reduce_algo algo;
  mdr_status st = resolve(a, d, 1, &call, &algo);
  if (st != MDR_OK) return st;
  mdr_comm *c = mdr_arena_comm(a);
  st = mdr_comm_check_alive(c, "all-reduce");
  if (st != MDR_OK || d->tokens == 0) return st;
  st = c->ops->all_reduce(c, &call, mdr_arena_slab_base(a), stream);
  if (st != MDR_OK) mdr_comm_mark_aborted(c); /* no peer waits for this rank's missing share */
  return st;
}

mdr_status mdr_all_reduce_state(mdr_arena *a, mdr_arp_block *get, const mdr_arp_block *set) {
  if (!a) return MDR_ERR_INVALID_ARGUMENT;
  mdr_comm *c = mdr_arena_comm(a);
  if (!c)
    return mdr_backend_fail(mdr_arena_backend(a), MDR_ERR_INVALID_ARGUMENT,
                            "all-reduce state: the arena is not on a communicator");
  if (!set && !get) return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "all-reduce state: NULL out");
  mdr_status st = mdr_comm_check_alive(c, "all-reduce state");
  if (st != MDR_OK) return st;
  return c->ops->state(c, mdr_arena_slab_base(a), mdr_comm_region_off(a), get, set);
}

mdr_status mdr_all_reduce_call_of(mdr_arena *a, mdr_ar_call *out) {
  if (!a || !out) return MDR_ERR_INVALID_ARGUMENT;
  mdr_comm *c = mdr_arena_comm(a);
  if (!c)
    return mdr_backend_fail(mdr_arena_backend(a), MDR_ERR_INVALID_ARGUMENT,
                            "all-reduce call: the arena is not on a communicator");
  if (!c->ops->call_of)
    return mdr_backend_fail(c->b, MDR_ERR_UNSUPPORTED, "all-reduce call: the %s communicator has no kernel call",
                            c->ops->name);
  memset(out, 0, sizeof *out);
  out->res_off = MDR_ARP_NO_RESIDUAL;
  out->region_off = mdr_comm_region_off(a);
  return c->ops->call_of(c, out, mdr_arena_slab_base(a));
}

long mdr_ar_timeout_ms(mdr_backend *b) { return mdr_env_ms(b, "MDR_AR_TIMEOUT_MS", "communicator"); }

int mdr_ar_norm_fuse(mdr_backend *b) {
  const char *v = getenv("MDR_AR_NORM_FUSE");
  const int mode = mdr_arp_norm_fuse_parse(v);
  if (mode >= 0) return mode;
  mdr_backend_fail(b, MDR_OK, "communicator: MDR_AR_NORM_FUSE=\"%.40s\" not recognised (auto, always, never): "
                   "taken as auto", v);
  return MDR_ARP_NORM_FUSE_AUTO;
}

void mdr_ar_report_text(const volatile uint32_t *report, int rank, char *buf, size_t n) {
  const uint32_t cause = report[MDR_ARP_REP_CAUSE], wait = report[MDR_ARP_REP_WAIT];
  snprintf(buf, n, "rank %d's all-reduce gave up waiting for rank %u at %s (block %u, call %u): %s", rank,
           (unsigned)report[MDR_ARP_REP_PEER], mdr_arp_wait_name(wait), (unsigned)report[MDR_ARP_REP_BLOCK],
           (unsigned)report[MDR_ARP_REP_CALL], mdr_arp_cause_name(cause));
}
