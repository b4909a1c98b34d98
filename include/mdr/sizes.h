/* mdr — arena buffer sizes from a model config.
 *
 * The specification is docs/SIZES.md, installed with mdr as
 * <prefix>/share/doc/mdr/docs/SIZES.md ("SIZES.md" below): every buffer's
 * formula (§4), layout (§5), gating (§6) and zeroing coverage (§9).
 *
 * "The seed" is the inference engine whose arena mdr reproduces
 * (metrale-inference's GPU runtime, default environment): its buffer list,
 * sizes and zeroing helpers. "The seed's coverage" of a helper is exactly
 * the bytes that helper clears at a token count; mdr's helpers clear the
 * same bytes, no more and no less (SIZES.md §9, summarised at
 * mdr_arena_zero_all in arena.h).
 *
 * Buffer shapes (comments of MDR_BUFFER_LIST, from SIZES.md §4): the
 * element type, then the rows: "M rows" is token-major with M =
 * max_batch_tokens rows; "ceil16(M) rows" is padded to GEMM tiles of 16
 * rows; "not token-major" is a workspace whose size does not follow M row
 * by row; "rows of mixed widths" is the largest of terms with different row
 * counts. A buffer's bytes are mdr_sizes.bytes (0: the buffer is NULL). */
#ifndef MDR_SIZES_H
#define MDR_SIZES_H

#include <stdbool.h>
#include <stddef.h>

#include "mdr/config.h"
#include "mdr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The 46 buffers of a decode step, in the seed's order: X(enum, seed name). */
#define MDR_BUFFER_LIST(X)                                                                                      \
  X(MDR_BUF_HIDDEN_STATES, hidden_states)          /* BF16, M rows */                                           \
  X(MDR_BUF_RESIDUAL, residual)                    /* BF16, M rows */                                           \
  X(MDR_BUF_NORM_OUTPUT, norm_output)              /* BF16, M rows */                                           \
  X(MDR_BUF_QKV_OUTPUT, qkv_output)                /* BF16, ceil16(M) rows */                                   \
  X(MDR_BUF_ATTN_OUTPUT, attn_output)              /* BF16, M rows */                                           \
  X(MDR_BUF_GATE_LOGITS, gate_logits)              /* BF16, M rows */                                           \
  X(MDR_BUF_GATE_LOGITS_F32, gate_logits_f32)      /* F32, M rows */                                            \
  X(MDR_BUF_MOE_ROUTER_IN_F32, moe_router_in_f32)  /* F32, M rows */                                            \
  X(MDR_BUF_MOE_OUTPUT, moe_output)                /* BF16, ceil16(M) rows */                                   \
  X(MDR_BUF_LOGITS, logits)                        /* BF16, logits_rows rows */                                 \
  X(MDR_BUF_SSM_QKVZ, ssm_qkvz)                    /* BF16, rows of mixed widths */                             \
  X(MDR_BUF_SSM_BA, ssm_ba)                        /* BF16, M rows */                                           \
  X(MDR_BUF_SSM_DEINTERLEAVED, ssm_deinterleaved)  /* BF16, rows of mixed widths */                             \
  X(MDR_BUF_SSM_GATES, ssm_gates)                  /* F32, M rows */                                            \
  X(MDR_BUF_SSM_CONV_OUT_F32, ssm_conv_out_f32)    /* F32 (MLA: BF16 rope rows), M rows */                      \
  X(MDR_BUF_SCRATCH, scratch)                      /* bytes, not token-major */                                 \
  X(MDR_BUF_SSD_SCRATCH, ssd_scratch)              /* F32, not token-major */                                   \
  X(MDR_BUF_TOKEN_IDS, token_ids)                  /* u32, M rows */                                            \
  X(MDR_BUF_EXPERT_GATE_OUT, expert_gate_out)      /* BF16, ceil16(max(M,3)) rows */                            \
  X(MDR_BUF_EXPERT_UP_OUT, expert_up_out)          /* BF16, ceil16(max(M,3)) rows */                            \
  X(MDR_BUF_EXPERT_DOWN_OUT, expert_down_out)      /* BF16, ceil16(max(M,3)) rows */                            \
  X(MDR_BUF_SPLITK_WORKSPACE, splitk_workspace)    /* F32, not token-major */                                   \
  X(MDR_BUF_GDN_FLA_SCRATCH, gdn_fla_scratch)      /* BF16/F32, not token-major */                              \
  X(MDR_BUF_FFN_ACT_Q8, ffn_act_q8)                /* bytes, M rows + 1 MiB */                                  \
  X(MDR_BUF_FFN_ACT_A, ffn_act_a)                  /* int8, ceil16(M) rows */                                   \
  X(MDR_BUF_FFN_ACT_SCALE, ffn_act_scale)          /* 4-byte, ceil16(M) rows */                                 \
  X(MDR_BUF_FFN_GATE_UP_FUSED, ffn_gate_up_fused)  /* BF16, not token-major */                                  \
  X(MDR_BUF_FFN_ACT_SCALE_KMAJOR, ffn_act_scale_kmajor) /* F32, ceil16(M) rows */                               \
  X(MDR_BUF_FP8_ACT, fp8_act)                      /* FP8, ceil16(M) rows */                                    \
  X(MDR_BUF_FP8_ACT_SCALE, fp8_act_scale)          /* F32, ceil16(M) rows */                                    \
  X(MDR_BUF_FP8_ACT_SCALE_KMAJOR, fp8_act_scale_kmajor) /* F32, ceil16(M) rows */                               \
  X(MDR_BUF_Q2_DEQUANT_SCRATCH, q2_dequant_scratch) /* BF16, not token-major */                                 \
  X(MDR_BUF_Q2_ACT_Q8, q2_act_q8)                  /* bytes, M rows */                                          \
  X(MDR_BUF_O_LATENT, o_latent)                    /* BF16, M rows */                                           \
  X(MDR_BUF_NORM_UNIT_W, norm_unit_w)              /* BF16, not token-major */                                  \
  X(MDR_BUF_HC_STREAMS, hc_streams)                /* F32, M rows */                                            \
  X(MDR_BUF_HC_LOWRANK_SCRATCH, hc_lowrank_scratch) /* F32/BF16, not token-major */                             \
  X(MDR_BUF_QSA_SELECT_SCRATCH, qsa_select_scratch) /* mixed, not token-major */                                \
  X(MDR_BUF_HC_POST, hc_post)                      /* F32, M rows */                                            \
  X(MDR_BUF_HC_COMB, hc_comb)                      /* F32, M rows */                                            \
  X(MDR_BUF_LORA_XA, lora_xa)                      /* BF16, M rows */                                           \
  X(MDR_BUF_LORA_DELTA, lora_delta)                /* BF16, M rows */                                           \
  X(MDR_BUF_LORA_HACT, lora_hact)                  /* BF16, M rows */                                           \
  X(MDR_BUF_LORA_SEQ_SLOT, lora_seq_slot)          /* i32, M rows */                                            \
  X(MDR_BUF_MOE_FP8_SCRATCH, moe_fp8_scratch)      /* bytes, not token-major */                                 \
  X(MDR_BUF_SSM_ROWWISE_W_BF16, ssm_rowwise_w_bf16)

typedef enum mdr_buffer {
#define MDR_BUFFER_ENUM_(e, name) e,
  MDR_BUFFER_LIST(MDR_BUFFER_ENUM_)
#undef MDR_BUFFER_ENUM_
  MDR_BUF_COUNT
} mdr_buffer;

/* The seed's name of a buffer, e.g. "hidden_states"; NULL if out of range.
 * Static string. */
MDR_API const char *mdr_buffer_name(mdr_buffer b);

/* The buffer whose seed name is `name`: MDR_OK and *out set, or
 * MDR_ERR_INVALID_ARGUMENT (NULL arguments or unknown name). */
MDR_API mdr_status mdr_buffer_from_name(const char *name, mdr_buffer *out);

typedef struct mdr_sizes {
  size_t bytes[MDR_BUF_COUNT]; /* allocated byte size; 0 means the buffer is NULL */
  size_t max_batch_tokens;     /* M */
  size_t logits_rows;          /* rows of the row-major logits buffer */
} mdr_sizes;

/* Options of the sizing; mdr_sizes_options_default gives the defaults of
 * SIZES.md (untrimmed, split-K Legacy with 48 SMs). */
typedef struct mdr_sizes_options {
  bool glm_trim;           /* apply §7 when the family is MDR_FAMILY_GLM5_NEXT */
  size_t splitk_sm_count;  /* §5.6 Legacy slots; 0 is rejected */
} mdr_sizes_options;
/* Fill *o with those defaults (glm_trim false, splitk_sm_count 48). NULL o:
 * nothing happens. */
MDR_API void mdr_sizes_options_default(mdr_sizes_options *o);

/* Every formula of SIZES.md with default options (untrimmed). Returns:
 *   NULL c, l or out          -> MDR_ERR_INVALID_ARGUMENT
 *   l->max_batch_tokens == 0  -> MDR_ERR_OUT_OF_RANGE
 *   a product or sum that overflows size_t -> MDR_ERR_OVERFLOW
 * On failure *out is untouched. Pure function; thread-safe. */
MDR_API mdr_status mdr_sizes_from_config(const mdr_model_config *c, const mdr_limits *l, mdr_sizes *out);

/* The same with options (NULL o: defaults). o->splitk_sm_count == 0 gives
 * MDR_ERR_INVALID_ARGUMENT. */
MDR_API mdr_status mdr_sizes_from_config_ex(const mdr_model_config *c, const mdr_limits *l,
                                            const mdr_sizes_options *o, mdr_sizes *out);

/* The seed's total_bytes: every entry except o_latent and norm_unit_w.
 * MDR_ERR_OVERFLOW if the sum overflows. */
MDR_API mdr_status mdr_sizes_total_bytes(const mdr_sizes *s, size_t *out);

#ifdef __cplusplus
}
#endif
#endif
