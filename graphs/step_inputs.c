/* step_inputs.c — a graph cache's step inputs (include/mdr/graph.h):
 * their declaration, checked and resolved at create into the staging
 * ring's slot layout (staging/staging_layout.h), the step calls that carry
 * their values, and the layout queries a binding shows as decode_meta.
 * The steps themselves are graph_cache.c's. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_cache_impl.h"

/* A refusal of the input options, naming the input and the field. */
#define INPUT_FAIL(i, in, ...) input_fail(c->b, i, in, __VA_ARGS__)
static mdr_status input_fail(mdr_backend *b, size_t i, const mdr_step_input *in, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static mdr_status input_fail(mdr_backend *b, size_t i, const mdr_step_input *in, const char *fmt, ...) {
  char what[MDR_BACKEND_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "graph cache options: inputs[%zu] (\"%.64s\").%s", i,
                          in->name ? in->name : "", what);
}

/* Whether [p, p + n) is device memory (as far as the backend can tell). */
static mdr_status check_device(mdr_graph_cache *c, size_t i, const mdr_step_input *in, const char *field,
                               mdr_dptr p, size_t n) {
  if (!p) return INPUT_FAIL(i, in, "%s: 0", field);
  if (p % 16) return INPUT_FAIL(i, in, "%s: 0x%llx is not 16-byte aligned", field, (unsigned long long)p);
  int ok = 0;
  mdr_status st = mdr_be_is_device_memory(c->b, p, n, &ok);
  if (st != MDR_OK) return st;
  if (!ok)
    return INPUT_FAIL(i, in, "%s: [0x%llx, +%zu) is not device memory", field, (unsigned long long)p, n);
  return MDR_OK;
}

/* Whether [p, p + n) and [q, q + m) share a byte. */
static int overlaps(mdr_dptr p, size_t n, mdr_dptr q, size_t m) { return n && m && p < q + m && q < p + n; }

/* The name of the first buffer of the cache's zero plan (any rule's whole
 * extent: every count, poison too) that [p, p + n) shares a byte with
 * ("?" for a rule that starts no arena buffer), or NULL when none. */
static const char *plan_overlap(const mdr_graph_cache *c, mdr_dptr p, size_t n) {
  for (size_t r = 0; r < c->n_rules; r++) {
    if (!overlaps(p, n, c->rules[r].ptr, c->rules[r].bytes)) continue;
    for (int k = 0; k < MDR_BUF_COUNT; k++)
      if (mdr_arena_ptr(c->arena, (mdr_buffer)k) == c->rules[r].ptr) return mdr_buffer_name((mdr_buffer)k);
    return "?";
  }
  return NULL;
}

/* The staged launch writes a destination while its zeroing blocks clear
 * the plan's buffers and its other lanes write the other inputs, in no set
 * order: a destination that shares a byte with what the cache's zeroing or
 * poison may write (any rule's whole extent), with the arena's token_ids,
 * or with another input's destination or source, would keep or lose its
 * values by chance on the GPU; so would a source that overlaps any of
 * those (the launch writes them as it reads the source), or its own
 * destination without being it. Refused here, naming the field; the
 * inputs before i are resolved. */
static mdr_status check_disjoint(mdr_graph_cache *c, size_t i, const mdr_step_input *in, mdr_dptr dst,
                                 size_t bytes) {
  const char *field = in->dest == MDR_INPUT_TO_ARENA ? "offset" : "address";
  if (overlaps(dst, bytes, mdr_arena_token_ids(c->arena), mdr_arena_token_ids_bytes(c->arena)))
    return INPUT_FAIL(i, in, "%s: [0x%llx, +%zu) overlaps token_ids, which holds the ids", field,
                      (unsigned long long)dst, bytes);
  const char *zeroed = plan_overlap(c, dst, bytes);
  if (zeroed)
    return INPUT_FAIL(i, in, "%s: [0x%llx, +%zu) overlaps %s, which the cache's zeroing clears", field,
                      (unsigned long long)dst, bytes, zeroed);
  const mdr_dptr src = in->device_src;
  if (src && src != dst) {
    if (overlaps(src, bytes, dst, bytes))
      return INPUT_FAIL(i, in, "device_src: overlaps its own destination without being it");
    if (overlaps(src, bytes, mdr_arena_token_ids(c->arena), mdr_arena_token_ids_bytes(c->arena)))
      return INPUT_FAIL(i, in, "device_src: [0x%llx, +%zu) overlaps token_ids, which the launch writes",
                        (unsigned long long)src, bytes);
    if ((zeroed = plan_overlap(c, src, bytes)) != NULL)
      return INPUT_FAIL(i, in, "device_src: [0x%llx, +%zu) overlaps %s, which the cache's zeroing clears",
                        (unsigned long long)src, bytes, zeroed);
  }
  for (size_t k = 0; k < i; k++) {
    const mdr_step_input_info *o = &c->inputs[1 + k];
    if (overlaps(dst, bytes, o->dst, o->max_bytes))
      return INPUT_FAIL(i, in, "%s: overlaps inputs[%zu]'s destination", field, k);
    if (o->device_src && overlaps(dst, bytes, o->device_src, o->max_bytes))
      return INPUT_FAIL(i, in, "%s: overlaps inputs[%zu]'s device_src", field, k);
    if (src && overlaps(src, bytes, o->dst, o->max_bytes))
      return INPUT_FAIL(i, in, "device_src: overlaps inputs[%zu]'s destination", k);
  }
  return MDR_OK;
}

mdr_status mdr_gc_check_device_ids(mdr_graph_cache *c, mdr_dptr src, size_t t) {
  const mdr_dptr ids = mdr_arena_token_ids(c->arena);
  if (src == ids || (src == c->ids_checked && t <= c->ids_checked_tokens)) return MDR_OK;
  const size_t n = t * sizeof(uint32_t);
  if (overlaps(src, n, ids, mdr_arena_token_ids_bytes(c->arena)))
    return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT,
                            "graph cache: device token_ids [0x%llx, +%zu) overlap the arena's token_ids "
                            "without being them",
                            (unsigned long long)src, n);
  const char *zeroed = plan_overlap(c, src, n);
  if (zeroed)
    return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT,
                            "graph cache: device token_ids [0x%llx, +%zu) overlap %s, which the step's zeroing clears",
                            (unsigned long long)src, n, zeroed);
  for (size_t i = 1; i <= c->n_inputs; i++)
    if (overlaps(src, n, c->inputs[i].dst, c->inputs[i].max_bytes))
      return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT,
                              "graph cache: device token_ids [0x%llx, +%zu) overlap input %zu (\"%s\")'s "
                              "destination",
                              (unsigned long long)src, n, i, c->inputs[i].name);
  c->ids_checked = src;
  c->ids_checked_tokens = t;
  return MDR_OK;
}

/* Check and resolve one declared input into c->inputs[1 + i] and the
 * device table entry *d (slot offset laid out by the staging ring). */
static mdr_status resolve_input(mdr_graph_cache *c, size_t i, const mdr_step_input *in, mdr_stage_input *d,
                                uint64_t *max_rows) {
  if (!in->name || !in->name[0]) return INPUT_FAIL(i, in, "name: NULL or empty");
  if (strcmp(in->name, "token_ids") == 0)
    return INPUT_FAIL(i, in, "name: \"token_ids\" is the implicit first input");
  for (size_t k = 0; k < i; k++)
    if (strcmp(c->inputs[1 + k].name, in->name) == 0) return INPUT_FAIL(i, in, "name: duplicates inputs[%zu]", k);
  const size_t e = in->elem_bytes;
  if (e != 1 && e != 2 && e != 4 && e != 8) return INPUT_FAIL(i, in, "elem_bytes: %zu (1, 2, 4 or 8)", e);
  if ((int)in->shape < 0 || in->shape >= MDR_INPUT_SHAPE_COUNT) return INPUT_FAIL(i, in, "shape: unknown value");
  const size_t width = in->width ? in->width : 1;
  size_t rows = in->max_rows;
  if (in->shape == MDR_INPUT_PER_TOKEN) {
    if (!rows) rows = c->max_tokens;
    if (rows > c->max_tokens)
      return INPUT_FAIL(i, in, "max_rows: %zu, more than max_batch_tokens (%zu)", rows, c->max_tokens);
  } else if (in->shape == MDR_INPUT_PER_SEQUENCE) {
    if (!rows) rows = c->max_sequences;
    if (rows > c->max_sequences)
      return INPUT_FAIL(i, in, "max_rows: %zu, more than max_sequences (%zu)", rows, c->max_sequences);
  } else if (!rows) {
    return INPUT_FAIL(i, in, "max_rows: 0 (a FIXED input carries max_rows rows every step)");
  }
  if (width > UINT32_MAX / e || rows > UINT32_MAX || rows > MDR_STAGING_SLOT_MAX_BYTES / (width * e))
    return INPUT_FAIL(i, in, "max_rows * width * elem_bytes (%zu * %zu * %zu) overflows a staging slot", rows,
                      width, e);
  const size_t row_bytes = width * e, max_bytes = rows * row_bytes;
  mdr_dptr dst = 0;
  if (in->dest == MDR_INPUT_TO_ARENA) {
    if ((int)in->buffer < 0 || in->buffer >= MDR_BUF_COUNT || !mdr_arena_ptr(c->arena, in->buffer))
      return INPUT_FAIL(i, in, "buffer: not a buffer of the arena (unknown, or of size 0)");
    const size_t have = mdr_arena_bytes(c->arena, in->buffer);
    if (in->offset > have || max_bytes > have - in->offset)
      return INPUT_FAIL(i, in, "offset: %zu + %zu bytes runs past the arena buffer's %zu", in->offset, max_bytes,
                        have);
    if (in->buffer == MDR_BUF_TOKEN_IDS) return INPUT_FAIL(i, in, "buffer: token_ids holds the ids");
    dst = mdr_arena_ptr(c->arena, in->buffer) + in->offset;
    if (dst % 16) return INPUT_FAIL(i, in, "offset: %zu is not 16-byte aligned", in->offset);
  } else if (in->dest == MDR_INPUT_TO_DEVICE) {
    mdr_status st = check_device(c, i, in, "address", in->address, max_bytes);
    if (st != MDR_OK) return st;
    dst = in->address;
  } else {
    return INPUT_FAIL(i, in, "dest: unknown value");
  }
  if (in->device_src) {
    mdr_status st = check_device(c, i, in, "device_src", in->device_src, max_bytes);
    if (st != MDR_OK) return st;
  }
  mdr_status st = check_disjoint(c, i, in, dst, max_bytes);
  if (st != MDR_OK) return st;
  const uint64_t pad = e == 8 ? in->pad : in->pad & ((UINT64_C(1) << (8 * e)) - 1u);
  c->inputs[1 + i] = (mdr_step_input_info){.elem_bytes = e,
                                           .shape = in->shape,
                                           .width = width,
                                           .max_rows = rows,
                                           .row_bytes = row_bytes,
                                           .max_bytes = max_bytes,
                                           .dst = dst,
                                           .device_src = in->device_src,
                                           .pad = pad};
  *d = (mdr_stage_input){.dst = dst,
                         .src = in->device_src,
                         .pad = pad,
                         .row_bytes = (uint32_t)row_bytes,
                         .rows = in->shape == MDR_INPUT_PER_TOKEN      ? MDR_STAGE_ROWS_TOKENS
                                 : in->shape == MDR_INPUT_PER_SEQUENCE ? MDR_STAGE_ROWS_SEQUENCES
                                                                       : MDR_STAGE_ROWS_FIXED,
                         .max_rows = (uint32_t)rows,
                         .elem_bytes = (uint32_t)e};
  *max_rows = rows;
  return MDR_OK;
}

/* The ids as input 0, then every declared input; the staging ring laid out
 * for them. */
mdr_status mdr_gc_setup_inputs(mdr_graph_cache *c, const mdr_graph_cache_options *o) {
  const size_t m = c->max_tokens;
  if (o->max_sequences > m)
    return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT,
                            "graph cache options: max_sequences: %zu, more than max_batch_tokens (%zu): a "
                            "step's sequences never outnumber its tokens",
                            o->max_sequences, m);
  c->max_sequences = o->max_sequences ? o->max_sequences : m;
  if (o->n_inputs > MDR_STEP_INPUTS_MAX)
    return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "graph cache options: n_inputs: %zu (at most %d)",
                            o->n_inputs, MDR_STEP_INPUTS_MAX);
  if (o->n_inputs && !o->inputs)
    return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "graph cache options: inputs: NULL with n_inputs %zu",
                            o->n_inputs);
  c->inputs[0] = (mdr_step_input_info){.name = "token_ids",
                                       .elem_bytes = 4,
                                       .shape = MDR_INPUT_PER_TOKEN,
                                       .width = 1,
                                       .max_rows = m,
                                       .row_bytes = 4,
                                       .max_bytes = 4 * m,
                                       .dst = mdr_arena_token_ids(c->arena),
                                       .slot_offset = MDR_STAGE_HEADER_BYTES,
                                       .pad = c->o.pad_token_id};
  mdr_stage_input dev[MDR_STEP_INPUTS_MAX];
  uint64_t max_rows[MDR_STEP_INPUTS_MAX];
  size_t name_bytes = 0;
  for (size_t i = 0; i < o->n_inputs; i++) {
    const mdr_step_input *in = &o->inputs[i];
    mdr_status st = resolve_input(c, i, in, &dev[i], &max_rows[i]);
    c->inputs[1 + i].name = in->name; /* the caller's until copied below: the duplicate check reads it */
    if (st != MDR_OK) return st;
    name_bytes += strlen(in->name) + 1;
    c->n_host_inputs += in->device_src == 0;
    c->n_seq_inputs += in->shape == MDR_INPUT_PER_SEQUENCE;
  }
  c->n_inputs = o->n_inputs;
  if (name_bytes) {
    c->names = malloc(name_bytes);
    if (!c->names) return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_MEMORY, "graph cache: input names");
    char *p = c->names;
    for (size_t i = 0; i < o->n_inputs; i++) {
      const size_t len = strlen(o->inputs[i].name) + 1;
      memcpy(p, o->inputs[i].name, len);
      c->inputs[1 + i].name = p;
      p += len;
    }
  }
  mdr_status st = mdr_staging_init(&c->staging, c->b, m, dev, max_rows, o->n_inputs);
  if (st != MDR_OK) return st;
  for (size_t i = 0; i < o->n_inputs; i++) c->inputs[1 + i].slot_offset = c->staging.inputs[i].offset;
  return MDR_OK;
}

static mdr_status check_values(const mdr_graph_cache *c, const void *const *values, size_t n_values) {
  if (n_values != 1 + c->n_inputs)
    return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT,
                            "graph cache: n_values: %zu, but the cache has %zu inputs (token_ids and %zu declared)",
                            n_values, 1 + c->n_inputs, c->n_inputs);
  if (!values) return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "graph cache: values: NULL");
  return MDR_OK;
}

mdr_status mdr_graph_cache_step_inputs(mdr_graph_cache *c, const void *const *values, size_t n_values, size_t tokens,
                                       size_t sequences) {
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  mdr_status st = check_values(c, values, n_values);
  if (st != MDR_OK) return st;
  const step_call call = {.host_ids = values[0], .values = values, .tokens = tokens, .sequences = sequences};
  return mdr_gc_step(c, &call, (step_ids){IDS_HOST, 0});
}

mdr_status mdr_graph_cache_step_inputs_device(mdr_graph_cache *c, mdr_dptr token_ids, const void *const *values,
                                              size_t n_values, size_t tokens, size_t sequences) {
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  mdr_status st = check_values(c, values, n_values);
  if (st != MDR_OK) return st;
  const step_call call = {.values = values, .tokens = tokens, .sequences = sequences};
  step_ids ids = mdr_gc_device_ids(c, token_ids);
  /* a count the device graph publishes on its own (no slot read) but not
   * this step's: the counted kind, which reads the slot header */
  if (!mdr_gc_device_carries_sequences(c) && sequences != mdr_gc_default_sequences(c, tokens))
    ids.kind = IDS_DEVICE_COUNTED;
  return mdr_gc_step(c, &call, ids);
}

size_t mdr_graph_cache_step_input_count(const mdr_graph_cache *c) { return c ? 1 + c->n_inputs : 0; }

mdr_status mdr_graph_cache_step_input_info(const mdr_graph_cache *c, size_t index, mdr_step_input_info *out) {
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  if (!out) return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "graph cache: step input info into NULL");
  if (index > c->n_inputs)
    return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_RANGE, "graph cache: step input %zu (the cache has 0 .. %zu)", index,
                            c->n_inputs);
  *out = c->inputs[index];
  return MDR_OK;
}

mdr_status mdr_graph_cache_step_input_find(const mdr_graph_cache *c, const char *name, size_t *index) {
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  if (!name || !index)
    return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "graph cache: step input find: NULL %s",
                            !name ? "name" : "index");
  for (size_t i = 0; i <= c->n_inputs; i++)
    if (strcmp(c->inputs[i].name, name) == 0) {
      *index = i;
      return MDR_OK;
    }
  return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_RANGE, "graph cache: no step input named \"%.64s\"", name);
}

size_t mdr_graph_cache_slot_bytes(const mdr_graph_cache *c) { return c ? c->staging.slot_bytes : 0; }

