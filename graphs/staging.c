/* staging.c — the staging ring of a graph cache (graphs/staging.h). */
#include "staging.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* Layout of the device block. */
enum {
  BLOCK_COUNTER = 0, /* uint64: staged launches served */
  BLOCK_SYNC = 8,    /* mdr_stage_sync, 16 bytes */
  BLOCK_COUNT = 32,  /* uint32[2]: the current step's real token and sequence counts */
  BLOCK_INPUTS = 256 /* the input table: mdr_stage_input[n] */
};
/* Bytes after the ring's last slot: the ack word, padded to the slots'
 * alignment. */
enum { ACK_BYTES = 256 };
/* Polls of the ack between two queries of the stream while waiting. */
enum { POLLS_PER_QUERY = 64 };

static uint64_t ceil16(uint64_t x) { return (x + 15u) / 16u * 16u; }

mdr_status mdr_staging_init(mdr_staging *s, mdr_backend *b, size_t max_tokens, const mdr_stage_input *inputs,
                            const uint64_t *max_rows, size_t n) {
  memset(s, 0, sizeof *s);
  if (n > MDR_STAGE_INPUTS_MAX)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "staging: %zu inputs (at most %d)", n,
                            MDR_STAGE_INPUTS_MAX);
  /* the slot: header, ids, then each host input at its largest count */
  uint64_t end = MDR_STAGE_HEADER_BYTES + (uint64_t)max_tokens * 4u;
  int over = max_tokens > MDR_STAGING_SLOT_MAX_BYTES / 4;
  for (size_t i = 0; i < n && !over; i++) {
    s->inputs[i] = inputs[i];
    s->inputs[i].offset = 0;
    if (inputs[i].src) continue;
    const uint64_t bytes = max_rows[i] * inputs[i].row_bytes;
    if (inputs[i].row_bytes && max_rows[i] > MDR_STAGING_SLOT_MAX_BYTES / inputs[i].row_bytes) {
      over = 1;
      break;
    }
    end = ceil16(end);
    s->inputs[i].offset = (uint32_t)end;
    end += bytes;
    over = end > MDR_STAGING_SLOT_MAX_BYTES;
  }
  if (over)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT,
                            "staging: the ids and inputs at their largest counts overflow a staging slot "
                            "(more than MDR_STAGING_SLOT_MAX_BYTES, %zu bytes)",
                            (size_t)MDR_STAGING_SLOT_MAX_BYTES);
  s->n_inputs = n;
  s->b = b;
  s->slot_bytes = (size_t)((end + 255u) / 256u * 256u);
  const size_t ring_bytes = s->slot_bytes * MDR_GRAPH_STAGING_SLOTS;
  void *ring_host = NULL;
  mdr_status st = mdr_be_alloc_pinned(b, ring_bytes + ACK_BYTES, &ring_host, &s->ring_dev);
  if (st != MDR_OK) {
    memset(s, 0, sizeof *s);
    return st;
  }
  s->ring_host = ring_host;
  memset(s->ring_host, 0, ring_bytes + ACK_BYTES);
  s->ack_host = (volatile uint64_t *)(s->ring_host + ring_bytes);
  const size_t block_bytes = BLOCK_INPUTS + MDR_STAGE_INPUTS_MAX * sizeof(mdr_stage_input);
  st = mdr_be_alloc_device(b, block_bytes, &s->block);
  if (st == MDR_OK) st = mdr_be_fill(b, s->block, 0, BLOCK_INPUTS);
  if (st == MDR_OK && n) st = mdr_be_copy_h2d(b, s->block + BLOCK_INPUTS, s->inputs, n * sizeof *s->inputs);
  if (st != MDR_OK) mdr_staging_fini(s);
  return st;
}

void mdr_staging_fini(mdr_staging *s) {
  if (!s->b) return;
  mdr_be_free_device(s->b, s->inline_tables);
  mdr_be_free_device(s->b, s->block);
  mdr_be_free_pinned(s->b, s->ring_host);
  memset(s, 0, sizeof *s);
}

/* The ack word is written by the device only; host_step by this thread. */
static mdr_status check_ack(mdr_staging *s, uint64_t ack) {
  if (ack <= s->host_step) return MDR_OK;
  return mdr_backend_fail(s->b, MDR_ERR_STATE,
                          "staging: the device acknowledged %llu staged launches but this cache enqueued "
                          "%llu (a staged launch ran that the cache did not enqueue, e.g. a replayed "
                          "capture of a step): the ring is corrupt; destroy the cache",
                          (unsigned long long)ack, (unsigned long long)s->host_step);
}

/* After a failed step: let the stream drain, then take the device's count
 * of staged launches served as the host's. */
static mdr_status resync(mdr_staging *s, mdr_stream stream) {
  for (;;) {
    int idle = 0;
    mdr_status st = mdr_be_stream_query(s->b, stream, &idle);
    if (st != MDR_OK) return st;
    if (idle) break;
    sched_yield();
  }
  s->host_step = *s->ack_host;
  s->resync = 0;
  return MDR_OK;
}

mdr_status mdr_staging_wait(mdr_staging *s, mdr_stream stream) {
  if (s->resync) {
    mdr_status rs = resync(s, stream);
    if (rs != MDR_OK) return rs;
  }
  uint64_t ack = *s->ack_host;
  mdr_status st = check_ack(s, ack);
  for (unsigned polls = 1; st == MDR_OK && s->host_step - ack >= MDR_GRAPH_STAGING_SLOTS; polls++) {
    if (polls % POLLS_PER_QUERY == 0) {
      int idle = 0;
      st = mdr_be_stream_query(s->b, stream, &idle);
      if (st != MDR_OK) return st;
      ack = *s->ack_host;
      if (idle && s->host_step - ack >= MDR_GRAPH_STAGING_SLOTS && ack <= s->host_step)
        return mdr_backend_fail(s->b, MDR_ERR_STATE,
                                "staging: stream idle but staged launch %llu never finished",
                                (unsigned long long)(s->host_step - MDR_GRAPH_STAGING_SLOTS));
    } else {
      sched_yield();
    }
    ack = *s->ack_host;
    st = check_ack(s, ack);
  }
  return st;
}

/* Fill n elements of elem_bytes bytes at dst with the low bytes of v. A
 * padded block table is hundreds of elements: past a few, the filled
 * prefix is copied onto the rest, doubling (log n copies, not n). */
static void fill_elems(unsigned char *dst, size_t n, size_t elem_bytes, uint64_t v) {
  if (n == 0) return;
  for (size_t k = 0; k < elem_bytes; k++) dst[k] = (unsigned char)(v >> (8 * k)); /* little-endian, as the device */
  const size_t total = n * elem_bytes;
  if (n <= 16) {
    for (size_t at = elem_bytes; at < total; at += elem_bytes) memcpy(dst + at, dst, elem_bytes);
    return;
  }
  for (size_t done = elem_bytes; done < total;) {
    const size_t c = done < total - done ? done : total - done;
    memcpy(dst + done, dst, c);
    done += c;
  }
}

/* The writer of a slot or an inline image: the header, the ids, each host
 * input at offset[i]. */
static void write_image(const mdr_staging *s, unsigned char *slot, const uint32_t *offset,
                        const mdr_staging_step *p) {
  const mdr_stage_header h = {.tokens = (uint32_t)p->tokens,
                              .copy_tokens = (uint32_t)p->copy_tokens,
                              .sequences = (uint32_t)p->sequences,
                              .copy_sequences = (uint32_t)p->copy_sequences};
  if (p->ids) {
    uint32_t *dst = (uint32_t *)(slot + MDR_STAGE_HEADER_BYTES);
    memcpy(dst, p->ids, p->tokens * sizeof *p->ids);
    for (size_t i = p->tokens; i < p->copy_tokens; i++) dst[i] = p->pad_id;
  }
  for (size_t i = 0; i < s->n_inputs && p->values; i++) {
    const mdr_stage_input *in = &s->inputs[i];
    if (in->src) continue;
    const size_t rows = (size_t)mdr_stage_input_rows(in, p->tokens, p->sequences);
    const size_t copy = (size_t)mdr_stage_input_rows(in, p->copy_tokens, p->copy_sequences);
    unsigned char *dst = slot + offset[i];
    if (rows) memcpy(dst, p->values[i], rows * in->row_bytes);
    if (copy > rows) fill_elems(dst + rows * in->row_bytes, (copy - rows) * (in->row_bytes / in->elem_bytes),
                                in->elem_bytes, in->pad);
  }
  memcpy(slot, &h, sizeof h);
}

void mdr_staging_write(mdr_staging *s, const mdr_staging_step *p) {
  uint32_t offset[MDR_STAGE_INPUTS_MAX];
  for (size_t i = 0; i < s->n_inputs; i++) offset[i] = s->inputs[i].offset;
  write_image(s, s->ring_host + (s->host_step % MDR_GRAPH_STAGING_SLOTS) * s->slot_bytes, offset, p);
}

void mdr_staging_write_inline(const mdr_staging *s, unsigned char *image, const mdr_staging_step *p) {
  write_image(s, image, s->inline_offset[p->copy_tokens], p);
}

/* Count g's image at copy counts (g, copy_s): the header, the ids, then
 * each host input's rows at those counts, each 16-byte aligned. */
static uint64_t inline_layout(const mdr_staging *s, size_t g, size_t copy_s, uint32_t *offset) {
  uint64_t end = MDR_STAGE_HEADER_BYTES + (uint64_t)g * 4u;
  for (size_t i = 0; i < s->n_inputs; i++) {
    const mdr_stage_input *in = &s->inputs[i];
    offset[i] = 0;
    if (in->src) continue;
    end = ceil16(end);
    offset[i] = (uint32_t)end;
    end += mdr_stage_input_rows(in, g, copy_s) * in->row_bytes;
  }
  return end;
}

mdr_status mdr_staging_inline_init(mdr_staging *s, size_t max_tokens, size_t max_sequences) {
  const size_t counts = max_tokens < MDR_STAGING_INLINE_COUNTS ? max_tokens : MDR_STAGING_INLINE_COUNTS;
  size_t n_host = 0;
  for (size_t i = 0; i < s->n_inputs; i++) n_host += s->inputs[i].src == 0;
  mdr_stage_input *tables = NULL;
  if (n_host) {
    tables = calloc(counts * s->n_inputs, sizeof *tables);
    if (!tables) return mdr_backend_fail(s->b, MDR_ERR_OUT_OF_MEMORY, "staging: inline input tables");
  }
  for (size_t g = 1; g <= counts; g++) {
    const size_t copy_s = g < max_sequences ? g : max_sequences;
    const uint64_t bytes = inline_layout(s, g, copy_s, s->inline_offset[g]);
    s->inline_bytes[g] = bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)bytes;
    s->inline_copy_sequences[g] = (uint32_t)copy_s;
    for (size_t i = 0; tables && i < s->n_inputs; i++) {
      tables[(g - 1) * s->n_inputs + i] = s->inputs[i];
      tables[(g - 1) * s->n_inputs + i].offset = s->inline_offset[g][i];
    }
  }
  mdr_status st = MDR_OK;
  if (tables) {
    const size_t bytes = counts * s->n_inputs * sizeof *tables;
    st = mdr_be_alloc_device(s->b, bytes, &s->inline_tables);
    if (st == MDR_OK) st = mdr_be_copy_h2d(s->b, s->inline_tables, tables, bytes);
    if (st != MDR_OK) {
      mdr_be_free_device(s->b, s->inline_tables);
      s->inline_tables = 0;
    }
    free(tables);
  }
  s->inline_counts = st == MDR_OK ? counts : 0;
  return st;
}

void mdr_staging_inline_table(const mdr_staging *s, size_t g, unsigned char *out) {
  memset(out, 0, MDR_STAGE_INLINE_TABLE * sizeof(mdr_stage_input));
  if (g == 0 || g > s->inline_counts) return; /* no layout: the room stays zeroed, the device table serves */
  for (size_t i = 0; i < s->n_inputs; i++) {
    mdr_stage_input e = s->inputs[i];
    e.offset = s->inline_offset[g][i];
    memcpy(out + i * sizeof e, &e, sizeof e);
  }
}

uint64_t mdr_staging_inline_bytes(const mdr_staging *s, size_t g) {
  return g >= 1 && g <= s->inline_counts ? s->inline_bytes[g] : 0;
}

mdr_stage_desc mdr_staging_inline_desc(const mdr_staging *s, mdr_dptr token_ids, size_t g) {
  mdr_stage_desc d = mdr_staging_desc(s, token_ids, MDR_STAGE_FETCH | MDR_STAGE_INLINE, s->inline_copy_sequences[g]);
  if (s->inline_tables) d.inputs = s->inline_tables + (g - 1) * s->n_inputs * sizeof(mdr_stage_input);
  d.inline_bytes = s->inline_bytes[g];
  return d;
}

mdr_stage_desc mdr_staging_desc(const mdr_staging *s, mdr_dptr token_ids, uint32_t flags, uint32_t copy_sequences) {
  mdr_stage_desc d = {
      .ring = s->ring_dev,
      .slot_bytes = s->slot_bytes,
      .counter = s->block + BLOCK_COUNTER,
      .done = s->block + BLOCK_SYNC,
      .ack = s->ring_dev + s->slot_bytes * MDR_GRAPH_STAGING_SLOTS,
      .token_ids = token_ids,
      .count_out = s->block + BLOCK_COUNT,
      .slots = MDR_GRAPH_STAGING_SLOTS,
      .flags = flags,
      .n_inputs = (uint32_t)s->n_inputs,
      .inputs = s->n_inputs ? s->block + BLOCK_INPUTS : 0,
      .copy_sequences = copy_sequences,
  };
  return d;
}

uint32_t mdr_staging_spread(const mdr_staging *s, size_t g, size_t copy_s, int host_ids) {
  if (s->n_inputs == 0) return 0;
  uint64_t bytes = host_ids ? (uint64_t)g * 4u : 0u;
  for (size_t i = 0; i < s->n_inputs; i++) {
    if (s->inputs[i].src) return 0; /* a device-resident input: its pass is one block's */
    bytes += mdr_stage_input_rows(&s->inputs[i], g, copy_s) * s->inputs[i].row_bytes;
  }
  return mdr_stage_spread_of((bytes + 15u) / 16u);
}

mdr_dptr mdr_staging_count_ptr(const mdr_staging *s) { return s->block ? s->block + BLOCK_COUNT : 0; }
