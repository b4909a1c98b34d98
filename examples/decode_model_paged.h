/* mdr example — the decode loop's paged attention, the part that is plain C:
 * the step inputs it declares, the paged KV cache's bookkeeping (sequences,
 * their lengths, a block allocator and block tables), each step's input
 * values, and the CPU reference of the attention kernel
 * (dk_paged_attention in decode_kernels.cu). Both decode loops use it: the
 * GPU one (decode_loop.c) and the host-backend one that CTest runs without
 * a GPU (decode_loop_host.c). No CUDA header.
 *
 * A step over `tokens` tokens serves `sequences` sequences (1 .. min(tokens,
 * PAGED_MAX_SEQS)); sequence s owns a contiguous run of the step's tokens
 * (at least one), and its last token is its query. Step inputs (mdr's
 * mdr_step_input, staged with the ids in one slot per step):
 *   positions     per token: the token's position in its sequence;
 *   seq_lens      per sequence: its length after this step (its keys);
 *   query_token   per sequence: the index of its query token in the step;
 *   block_table   per sequence x PAGED_BLOCKS_PER_SEQ: the KV-cache blocks
 *                 holding its keys, in order (pad rows: PAGED_PAD).
 * The KV cache is PAGED_MAX_SEQS * PAGED_BLOCKS_PER_SEQ blocks of
 * PAGED_BLOCK keys, one KV head of PAGED_HEAD_DIM (BF16), shared by the
 * PAGED_HEADS query heads; it is filled once from the seed (a real engine
 * would also write each step's keys at their slots). Blocks are handed out
 * from a shuffled free list, so block tables are not the identity. */
#ifndef MDR_EXAMPLE_DECODE_MODEL_PAGED_H
#define MDR_EXAMPLE_DECODE_MODEL_PAGED_H

#include <stddef.h>
#include <stdint.h>

#include <mdr/mdr.h>

#define PAGED_MAX_SEQS 32        /* max_sequences of the example's cache */
#define PAGED_BLOCK 16           /* keys per KV-cache block */
#define PAGED_BLOCKS_PER_SEQ 16  /* block-table width: a sequence holds up to 256 keys */
#define PAGED_MAX_KEYS (PAGED_BLOCK * PAGED_BLOCKS_PER_SEQ)
#define PAGED_BLOCKS (PAGED_MAX_SEQS * PAGED_BLOCKS_PER_SEQ)
#define PAGED_HEADS 4            /* query heads (the model's) */
#define PAGED_HEAD_DIM 256       /* the model's head dimension */
#define PAGED_PAD 0xFFFFFFFFu    /* pad of every paged input */

enum { PAGED_IN_POSITIONS, PAGED_IN_SEQ_LENS, PAGED_IN_QUERY, PAGED_IN_BLOCKS, PAGED_INPUTS };

/* One step's host values (packed at the step's counts). */
typedef struct paged_step {
  size_t tokens, sequences;
  uint32_t positions[8192];
  uint32_t seq_lens[PAGED_MAX_SEQS];
  uint32_t query_token[PAGED_MAX_SEQS];
  uint32_t block_table[PAGED_MAX_SEQS * PAGED_BLOCKS_PER_SEQ];
} paged_step;

/* The cache's sequences: slot s is the sequence a step's s-th row serves. */
typedef struct paged_state {
  uint32_t len[PAGED_MAX_SEQS];
  uint32_t blocks[PAGED_MAX_SEQS][PAGED_BLOCKS_PER_SEQ];
  uint32_t n_blocks[PAGED_MAX_SEQS];
  uint32_t free_list[PAGED_BLOCKS];
  size_t n_free;
  uint64_t rng;
} paged_state;

/* Every sequence empty; the free list shuffled from `seed`. */
void paged_init(paged_state *p, uint64_t seed);

/* The sequences of a step over `tokens` tokens, from the state's rng:
 * 1 .. min(tokens, max_seqs), mixed. */
size_t paged_pick_sequences(paged_state *p, size_t tokens, size_t max_seqs);

/* Advance the state by one step over `tokens` tokens and `sequences`
 * sequences and write its inputs to *out: the tokens are split at random
 * among the sequences (each at least one), each sequence grows by its
 * tokens (a sequence that would outgrow PAGED_MAX_KEYS starts again, its
 * blocks freed first), blocks are taken as needed. tokens <= 8192. */
void paged_next(paged_state *p, size_t tokens, size_t sequences, paged_step *out);

/* The step inputs of the example's cache, each to dst[i] (device memory of
 * max_bytes_of(i) bytes): positions per token up to max_tokens, the others
 * per sequence up to PAGED_MAX_SEQS. */
void paged_declare(mdr_step_input in[PAGED_INPUTS], const mdr_dptr dst[PAGED_INPUTS]);
/* Bytes of input i's destination at max_tokens. */
size_t paged_input_bytes(int i, size_t max_tokens);
/* The step's values in input order, token ids first: what
 * mdr_graph_cache_step_inputs takes. */
void paged_values(const paged_step *st, const uint32_t *ids, const void *values[1 + PAGED_INPUTS]);
/* Rows (elements) of input i at the step's counts. */
size_t paged_elems(const paged_step *st, int i);

/* The attention of one step, on the CPU in double precision: for each
 * sequence s < sequences and head h, with t = query_token[s], p =
 * positions[t], n = min(seq_lens[s], p + 1) keys j < n at block
 * block_table[s][j / PAGED_BLOCK], slot j % PAGED_BLOCK:
 *   score_j = q·k_j / sqrt(D) - slope_h * (p - j),  slope_h = 2^-(h+1)
 *   out[s][h] = sum_j softmax(score)_j v_j
 * q is BF16, row t of `q_rows` (row stride q_stride elements), head h at
 * h * PAGED_HEAD_DIM; k_cache and v_cache are BF16 [PAGED_BLOCKS][PAGED_BLOCK]
 * [PAGED_HEAD_DIM]; out is [sequences][PAGED_HEADS][PAGED_HEAD_DIM]. */
void paged_attention_ref(const paged_step *st, const uint16_t *q_rows, size_t q_stride, const uint16_t *k_cache,
                         const uint16_t *v_cache, double *out);

/* BF16 bits to float (exact). */
float paged_bf16(uint16_t v);

/* Fill n BF16 values in [-1, 1) from *rng. */
void paged_fill_bf16(uint16_t *v, size_t n, uint64_t *rng);

/* Compare `sequences` rows of kernel output `got` (float) with the
 * reference: |got - ref| <= 1e-3 + 1e-3 |ref| everywhere. Returns the
 * number of values outside it; *worst gets the largest difference. */
size_t paged_compare(const float *got, const double *ref, size_t sequences, double *worst);

#endif
