/* staging.c — the staging ring of a graph cache (graphs/staging.h). */
#include "staging.h"

#include <sched.h>
#include <string.h>

/* Layout of the device block. */
enum {
  BLOCK_COUNTER = 0, /* uint64: staged launches served */
  BLOCK_SYNC = 8,    /* mdr_stage_sync, 16 bytes */
  BLOCK_COUNT = 32,  /* uint32: the current step's real token count */
  MDR_STAGING_BLOCK_BYTES = 256
};
/* Bytes after the ring's last slot: the ack word, padded to the slots'
 * alignment. */
enum { ACK_BYTES = 256 };
/* Polls of the ack between two queries of the stream while waiting. */
enum { POLLS_PER_QUERY = 64 };

mdr_status mdr_staging_init(mdr_staging *s, mdr_backend *b, size_t max_tokens) {
  memset(s, 0, sizeof *s);
  s->b = b;
  s->slot_bytes = (size_t)mdr_stage_slot_bytes(max_tokens);
  const size_t ring_bytes = s->slot_bytes * MDR_GRAPH_STAGING_SLOTS;
  void *ring_host = NULL;
  mdr_status st = mdr_be_alloc_pinned(b, ring_bytes + ACK_BYTES, &ring_host, &s->ring_dev);
  if (st != MDR_OK) return st;
  s->ring_host = ring_host;
  memset(s->ring_host, 0, ring_bytes + ACK_BYTES);
  s->ack_host = (volatile uint64_t *)(s->ring_host + ring_bytes);
  st = mdr_be_alloc_device(b, MDR_STAGING_BLOCK_BYTES, &s->block);
  if (st == MDR_OK) st = mdr_be_fill(b, s->block, 0, MDR_STAGING_BLOCK_BYTES);
  if (st != MDR_OK) mdr_staging_fini(s);
  return st;
}

void mdr_staging_fini(mdr_staging *s) {
  if (!s->b) return;
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

mdr_status mdr_staging_wait(mdr_staging *s, mdr_stream stream) {
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

void mdr_staging_write(mdr_staging *s, const uint32_t *ids, size_t t, size_t copy, uint32_t pad_id) {
  unsigned char *slot = s->ring_host + (s->host_step % MDR_GRAPH_STAGING_SLOTS) * s->slot_bytes;
  mdr_stage_header h = {.tokens = (uint32_t)t, .copy_tokens = (uint32_t)copy};
  if (ids) {
    uint32_t *dst = (uint32_t *)(slot + MDR_STAGE_HEADER_BYTES);
    memcpy(dst, ids, t * sizeof *ids);
    for (size_t i = t; i < copy; i++) dst[i] = pad_id;
  }
  memcpy(slot, &h, sizeof h);
}

mdr_stage_desc mdr_staging_desc(const mdr_staging *s, mdr_dptr token_ids, uint32_t flags) {
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
  };
  return d;
}

mdr_dptr mdr_staging_count_ptr(const mdr_staging *s) { return s->block ? s->block + BLOCK_COUNT : 0; }
