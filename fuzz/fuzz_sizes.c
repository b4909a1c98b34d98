/* fuzz_sizes — libFuzzer target for mdr_sizes_from_config_ex.
 *
 * The input drives a model config (every count from 0 to SIZE_MAX, bools 0/1,
 * any family value), serve limits and the options (or NULL). Built with
 * ASan + UBSan (no recovery), so any undefined behaviour is a crash. On top,
 * these invariants trap when broken:
 *   - the status is a valid mdr_status, and the one the argument checks
 *     promise: splitk_sm_count 0 -> INVALID_ARGUMENT, else M == 0 ->
 *     OUT_OF_RANGE; otherwise OK or OVERFLOW;
 *   - on failure *out is untouched;
 *   - a formula that overflows size_t (computed here in 128 bits for a few
 *     buffers whose formula is unconditional) gives OVERFLOW;
 *   - on success: those buffers equal the 128-bit values, the sum of all 46
 *     entries does not overflow, logits_rows is min(M, max(160, max(bs,32)+1))
 *     and divides logits (what mdr_arena_create requires), the §7 trim leaves
 *     its entries NULL, total_bytes is at most the sum, and the call is
 *     deterministic and equal to mdr_sizes_from_config with NULL / default
 *     options. */
#include <stdbool.h>
#include <string.h>

#include "fuzz_provider.h"
#include "mdr/mdr.h"

typedef unsigned __int128 u128;

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

static void read_config(fuzz_in *in, mdr_model_config *c) {
  memset(c, 0, sizeof *c);
  uint8_t fam = fuzz_u8(in);
  c->family = (mdr_model_family)(fam < 0xF0 ? fam % MDR_FAMILY_COUNT : fam); /* some out of range */
  uint8_t flags = fuzz_u8(in);
  c->attn_gated = flags & 1;
  c->mrope_interleaved = (flags >> 1) & 1;
  size_t *fields[] = {
      &c->hidden_size, &c->intermediate_size, &c->vocab_size, &c->num_attention_heads,
      &c->num_key_value_heads, &c->head_dim, &c->linear_num_key_heads, &c->linear_key_head_dim,
      &c->linear_num_value_heads, &c->linear_value_head_dim, &c->num_experts,
      &c->num_experts_per_tok, &c->zero_expert_num, &c->moe_intermediate_size,
      &c->shared_expert_intermediate_size, &c->moe_latent_size, &c->mamba_num_heads,
      &c->mamba_head_dim, &c->ssm_state_size, &c->n_groups, &c->kv_lora_rank, &c->q_lora_rank,
      &c->qk_rope_head_dim, &c->o_groups, &c->o_lora_rank, &c->hc_mult, &c->hc_lowrank,
      &c->index_n_heads, &c->index_head_dim, &c->index_topk, &c->index_compress_ratio,
      &c->adapter_max_rank, &c->num_ssm_layers};
  /* Start from a preset half of the time, so deep paths are reached with
   * realistic values and only a few fields moved to the edges. */
  if (flags & 4) {
    mdr_model_preset(mdr_model_preset_name((flags >> 3) % mdr_model_preset_count()), c);
    size_t moves = fuzz_u8(in) % 6;
    for (size_t i = 0; i < moves; i++) {
      size_t f = fuzz_u8(in) % (sizeof fields / sizeof fields[0]);
      *fields[f] = fuzz_size(in);
    }
  } else {
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) *fields[i] = fuzz_size(in);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_in in = {data, size, 0};
  mdr_model_config c;
  read_config(&in, &c);
  mdr_limits l = {0};
  uint8_t lsel = fuzz_u8(&in);
  if (lsel & 1) { /* ordinary serve limits, M moved */
    l = (mdr_limits){.max_batch_tokens = fuzz_size(&in), .max_seq_len = 4096, .kv_block_size = 16,
                     .max_batch_size = 4};
  } else {
    l.max_batch_tokens = fuzz_size(&in);
    l.max_seq_len = fuzz_size(&in);
    l.kv_block_size = fuzz_size(&in);
    l.max_batch_size = fuzz_size(&in);
  }
  mdr_sizes_options o, def;
  mdr_sizes_options_default(&def);
  mdr_sizes_options_default(&o);
  uint8_t osel = fuzz_u8(&in);
  const mdr_sizes_options *op = NULL;
  if (osel & 1) {
    o.glm_trim = (osel >> 1) & 1;
    o.splitk_sm_count = (osel & 4) ? fuzz_size(&in) : 132;
    op = &o;
  }
  const mdr_sizes_options eff = op ? *op : def;

  mdr_sizes out, out2, sentinel;
  memset(&sentinel, 0xA5, sizeof sentinel);
  out = sentinel;
  mdr_status st = mdr_sizes_from_config_ex(&c, &l, op, &out);
  FUZZ_CHECK((unsigned)st < MDR_STATUS_COUNT);
  if (eff.splitk_sm_count == 0) {
    FUZZ_CHECK(st == MDR_ERR_INVALID_ARGUMENT);
  } else if (l.max_batch_tokens == 0) {
    FUZZ_CHECK(st == MDR_ERR_OUT_OF_RANGE);
  } else {
    FUZZ_CHECK(st == MDR_OK || st == MDR_ERR_OVERFLOW);
  }
  if (st != MDR_OK) FUZZ_CHECK(memcmp(&out, &sentinel, sizeof out) == 0);

  /* determinism, and the NULL / default options forms */
  out2 = sentinel;
  FUZZ_CHECK(mdr_sizes_from_config_ex(&c, &l, op, &out2) == st);
  if (st == MDR_OK) FUZZ_CHECK(memcmp(&out, &out2, sizeof out) == 0);
  if (!op) {
    out2 = sentinel;
    FUZZ_CHECK(mdr_sizes_from_config(&c, &l, &out2) == st);
    if (st == MDR_OK) FUZZ_CHECK(memcmp(&out, &out2, sizeof out) == 0);
  }
  if (st == MDR_ERR_INVALID_ARGUMENT || st == MDR_ERR_OUT_OF_RANGE) return 0;

  /* 128-bit oracles of unconditional formulas (spec §4) */
  const size_t M = l.max_batch_tokens;
  const u128 Mp = ((u128)M + 15) / 16 * 16;
  const size_t R = max2(l.max_batch_size, 32);
  const size_t rows_cap = R == SIZE_MAX ? SIZE_MAX : max2(160, R + 1);
  const size_t logits_rows = M < rows_cap ? M : rows_cap;
  const u128 hidden = (u128)M * c.hidden_size * 2;
  const u128 moe_output = Mp * c.hidden_size * 2;
  const u128 logits = (u128)logits_rows * c.vocab_size * 2;
  const u128 token_ids = (u128)M * 4 > 256 ? (u128)M * 4 : 256;
  const u128 splitk = (u128)eff.splitk_sm_count * ((u128)c.head_dim + 2) * 4;
  /* products of three 64-bit factors can exceed 128 bits: saturate */
  const u128 big = (u128)SIZE_MAX + 1;
  int oracle_overflow = hidden >= big || moe_output >= big || logits >= big || token_ids >= big ||
                        splitk >= big || Mp >= big || (c.hidden_size && hidden / c.hidden_size / 2 != M) ||
                        (c.hidden_size && moe_output / c.hidden_size / 2 != Mp) ||
                        (c.vocab_size && logits / c.vocab_size / 2 != logits_rows) ||
                        ((u128)c.head_dim + 2 != 0 && splitk / ((u128)c.head_dim + 2) / 4 != eff.splitk_sm_count);
  if (oracle_overflow) FUZZ_CHECK(st == MDR_ERR_OVERFLOW);
  if (st != MDR_OK) return 0;

  FUZZ_CHECK(out.max_batch_tokens == M);
  FUZZ_CHECK(out.logits_rows == logits_rows && out.logits_rows >= 1);
  FUZZ_CHECK(out.bytes[MDR_BUF_LOGITS] % out.logits_rows == 0);
  const bool trimmed = eff.glm_trim && c.family == MDR_FAMILY_GLM5_NEXT;
  FUZZ_CHECK(out.bytes[MDR_BUF_HIDDEN_STATES] == (size_t)hidden);
  FUZZ_CHECK(out.bytes[MDR_BUF_RESIDUAL] == (size_t)hidden);
  FUZZ_CHECK(out.bytes[MDR_BUF_MOE_OUTPUT] == (size_t)moe_output);
  FUZZ_CHECK(out.bytes[MDR_BUF_LOGITS] == (size_t)logits);
  FUZZ_CHECK(out.bytes[MDR_BUF_TOKEN_IDS] == (size_t)token_ids);
  FUZZ_CHECK(out.bytes[MDR_BUF_SPLITK_WORKSPACE] == (size_t)splitk);
  if (trimmed) {
    FUZZ_CHECK(out.bytes[MDR_BUF_QKV_OUTPUT] == 0 && out.bytes[MDR_BUF_SSM_QKVZ] == 0 &&
               out.bytes[MDR_BUF_EXPERT_GATE_OUT] == 0 && out.bytes[MDR_BUF_MOE_FP8_SCRATCH] == 0);
  } else {
    /* floored entries are never below their floor */
    FUZZ_CHECK(out.bytes[MDR_BUF_SSM_QKVZ] >= 256 && out.bytes[MDR_BUF_SSM_GATES] >= 256);
  }
  FUZZ_CHECK(out.bytes[MDR_BUF_SCRATCH] >= 65536);
  size_t sum = 0;
  for (int b = 0; b < MDR_BUF_COUNT; b++) FUZZ_CHECK(!__builtin_add_overflow(sum, out.bytes[b], &sum));
  size_t total = 0;
  FUZZ_CHECK(mdr_sizes_total_bytes(&out, &total) == MDR_OK);
  FUZZ_CHECK(total <= sum);
  FUZZ_CHECK(total + out.bytes[MDR_BUF_O_LATENT] + out.bytes[MDR_BUF_NORM_UNIT_W] == sum);
  return 0;
}
