/* mdr example — the paged attention's plain-C part (see decode_model_paged.h). */
#include "decode_model_paged.h"

#include <math.h>
#include <string.h>

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float paged_bf16(uint16_t v) {
  uint32_t u = (uint32_t)v << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint16_t to_bf16(float f) { /* round to nearest even; the values here are finite */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

void paged_fill_bf16(uint16_t *v, size_t n, uint64_t *rng) {
  for (size_t i = 0; i < n; i++)
    v[i] = to_bf16((float)((double)(splitmix(rng) >> 11) * (2.0 / 9007199254740992.0) - 1.0));
}

void paged_init(paged_state *p, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->rng = seed ^ 0x5bd1e995ull;
  for (uint32_t b = 0; b < PAGED_BLOCKS; b++) p->free_list[b] = b;
  for (size_t i = PAGED_BLOCKS - 1; i > 0; i--) { /* Fisher-Yates */
    size_t j = (size_t)(splitmix(&p->rng) % (i + 1));
    uint32_t t = p->free_list[i];
    p->free_list[i] = p->free_list[j];
    p->free_list[j] = t;
  }
  p->n_free = PAGED_BLOCKS;
}

size_t paged_pick_sequences(paged_state *p, size_t tokens, size_t max_seqs) {
  size_t hi = tokens < max_seqs ? tokens : max_seqs;
  return 1 + (size_t)(splitmix(&p->rng) % hi);
}

static void release(paged_state *p, size_t s) {
  for (uint32_t k = 0; k < p->n_blocks[s]; k++) p->free_list[p->n_free++] = p->blocks[s][k];
  p->n_blocks[s] = 0;
  p->len[s] = 0;
}

void paged_next(paged_state *p, size_t tokens, size_t sequences, paged_step *out) {
  out->tokens = tokens;
  out->sequences = sequences;
  /* each sequence one token, the rest spread at random */
  size_t share[PAGED_MAX_SEQS];
  for (size_t s = 0; s < sequences; s++) share[s] = 1;
  for (size_t k = sequences; k < tokens; k++) share[splitmix(&p->rng) % sequences]++;
  size_t t = 0;
  for (size_t s = 0; s < sequences; s++) {
    if (p->len[s] + share[s] > PAGED_MAX_KEYS) release(p, s); /* the sequence ends; a new one starts */
    /* a share above PAGED_MAX_KEYS (large counts, few sequences) wraps its positions and keeps
     * PAGED_MAX_KEYS keys: the attention then reads min(seq_len, position + 1) of them */
    const uint32_t base = p->len[s];
    for (size_t k = 0; k < share[s]; k++) out->positions[t + k] = (base + (uint32_t)k) % PAGED_MAX_KEYS;
    uint32_t len = base + (uint32_t)share[s];
    if (len > PAGED_MAX_KEYS) len = PAGED_MAX_KEYS;
    p->len[s] = len;
    while (p->n_blocks[s] * PAGED_BLOCK < len) p->blocks[s][p->n_blocks[s]++] = p->free_list[--p->n_free];
    t += share[s];
    out->query_token[s] = (uint32_t)(t - 1);
    out->seq_lens[s] = len;
    for (uint32_t k = 0; k < PAGED_BLOCKS_PER_SEQ; k++)
      out->block_table[s * PAGED_BLOCKS_PER_SEQ + k] = k < p->n_blocks[s] ? p->blocks[s][k] : PAGED_PAD;
  }
}

size_t paged_input_bytes(int i, size_t max_tokens) {
  return (i == PAGED_IN_POSITIONS ? max_tokens
          : i == PAGED_IN_BLOCKS  ? (size_t)PAGED_MAX_SEQS * PAGED_BLOCKS_PER_SEQ
                                  : (size_t)PAGED_MAX_SEQS) *
         sizeof(uint32_t);
}

void paged_declare(mdr_step_input in[PAGED_INPUTS], const mdr_dptr dst[PAGED_INPUTS]) {
  static const char *const names[PAGED_INPUTS] = {"positions", "seq_lens", "query_token", "block_table"};
  for (int i = 0; i < PAGED_INPUTS; i++)
    in[i] = (mdr_step_input){.name = names[i],
                             .elem_bytes = sizeof(uint32_t),
                             .shape = i == PAGED_IN_POSITIONS ? MDR_INPUT_PER_TOKEN : MDR_INPUT_PER_SEQUENCE,
                             .width = i == PAGED_IN_BLOCKS ? PAGED_BLOCKS_PER_SEQ : 1,
                             .pad = PAGED_PAD,
                             .dest = MDR_INPUT_TO_DEVICE,
                             .address = dst[i]};
}

void paged_values(const paged_step *st, const uint32_t *ids, const void *values[1 + PAGED_INPUTS]) {
  values[0] = ids;
  values[1 + PAGED_IN_POSITIONS] = st->positions;
  values[1 + PAGED_IN_SEQ_LENS] = st->seq_lens;
  values[1 + PAGED_IN_QUERY] = st->query_token;
  values[1 + PAGED_IN_BLOCKS] = st->block_table;
}

size_t paged_elems(const paged_step *st, int i) {
  return i == PAGED_IN_POSITIONS ? st->tokens
         : i == PAGED_IN_BLOCKS  ? st->sequences * PAGED_BLOCKS_PER_SEQ
                                 : st->sequences;
}

void paged_attention_ref(const paged_step *st, const uint16_t *q_rows, size_t q_stride, const uint16_t *k_cache,
                         const uint16_t *v_cache, double *out) {
  const size_t D = PAGED_HEAD_DIM;
  double score[PAGED_MAX_KEYS];
  for (size_t s = 0; s < st->sequences; s++) {
    const uint32_t t = st->query_token[s], pos = st->positions[t];
    const uint32_t n = st->seq_lens[s] < pos + 1 ? st->seq_lens[s] : pos + 1;
    for (size_t h = 0; h < PAGED_HEADS; h++) {
      const uint16_t *q = q_rows + (size_t)t * q_stride + h * D;
      const double slope = ldexp(1.0, -(int)(h + 1));
      double mx = -INFINITY;
      for (uint32_t j = 0; j < n; j++) {
        const size_t blk = st->block_table[s * PAGED_BLOCKS_PER_SEQ + j / PAGED_BLOCK];
        const uint16_t *k = k_cache + (blk * PAGED_BLOCK + j % PAGED_BLOCK) * D;
        double dot = 0;
        for (size_t d = 0; d < D; d++) dot += (double)paged_bf16(q[d]) * paged_bf16(k[d]);
        score[j] = dot / sqrt((double)D) - slope * (double)(pos - j);
        if (score[j] > mx) mx = score[j];
      }
      double sum = 0;
      for (uint32_t j = 0; j < n; j++) sum += (score[j] = exp(score[j] - mx));
      double *o = out + (s * PAGED_HEADS + h) * D;
      for (size_t d = 0; d < D; d++) o[d] = 0;
      for (uint32_t j = 0; j < n; j++) {
        const size_t blk = st->block_table[s * PAGED_BLOCKS_PER_SEQ + j / PAGED_BLOCK];
        const uint16_t *v = v_cache + (blk * PAGED_BLOCK + j % PAGED_BLOCK) * D;
        for (size_t d = 0; d < D; d++) o[d] += score[j] / sum * paged_bf16(v[d]);
      }
    }
  }
}

size_t paged_compare(const float *got, const double *ref, size_t sequences, double *worst) {
  size_t bad = 0;
  *worst = 0;
  for (size_t i = 0; i < sequences * PAGED_HEADS * PAGED_HEAD_DIM; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (!(d <= 1e-3 + 1e-3 * fabs(ref[i]))) bad++; /* NaN counts */
    if (d > *worst || d != d) *worst = d;
  }
  return bad;
}
