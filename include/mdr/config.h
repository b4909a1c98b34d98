/* mdr — model configuration and serve limits (SIZES.md §2: docs/SIZES.md,
 * installed as <prefix>/share/doc/mdr/docs/SIZES.md). */
#ifndef MDR_CONFIG_H
#define MDR_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "mdr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Model family; only the optional GLM-5.3 arena trim looks at it (§7). */
typedef enum mdr_model_family {
  MDR_FAMILY_OTHER = 0,
  MDR_FAMILY_QWEN3_NEXT,
  MDR_FAMILY_GLM5_NEXT,      /* model_type glm5_next / glm5_next_text */
  MDR_FAMILY_NEMOTRON_H,
  MDR_FAMILY_DEEPSEEK_V4,
  MDR_FAMILY_COUNT
} mdr_model_family;

/* The config fields the sizing reads; every count is a non-negative integer,
 * an absent field is 0 / false. Symbols in comments are those of
 * SIZES.md §2.2. */
typedef struct mdr_model_config {
  mdr_model_family family;
  size_t hidden_size;                     /* H   */
  size_t intermediate_size;               /* I   */
  size_t vocab_size;                      /* V   */
  size_t num_attention_heads;             /* Hq  */
  size_t num_key_value_heads;             /* Hkv */
  size_t head_dim;                        /* D   */
  bool attn_gated;
  size_t linear_num_key_heads;            /* Lk  */
  size_t linear_key_head_dim;             /* Lkd */
  size_t linear_num_value_heads;          /* Lv  */
  size_t linear_value_head_dim;           /* Lvd */
  size_t num_experts;                     /* E   */
  size_t num_experts_per_tok;             /* K   */
  size_t zero_expert_num;                 /* Z   */
  size_t moe_intermediate_size;           /* Im  */
  size_t shared_expert_intermediate_size; /* Is  */
  size_t moe_latent_size;                 /* Lat */
  size_t mamba_num_heads;                 /* Mh  */
  size_t mamba_head_dim;                  /* Mhd */
  size_t ssm_state_size;                  /* N   */
  size_t n_groups;                        /* G   */
  size_t kv_lora_rank;                    /* Rkv */
  size_t q_lora_rank;                     /* Rq  */
  size_t qk_rope_head_dim;                /* Dr  */
  size_t o_groups;                        /* Og  */
  size_t o_lora_rank;                     /* Or  */
  size_t hc_mult;                         /* Hc  */
  size_t hc_lowrank;                      /* Hr  */
  size_t index_n_heads;                   /* Ih  */
  size_t index_head_dim;                  /* Id  */
  size_t index_topk;                      /* It  */
  size_t index_compress_ratio;            /* Ic  */
  size_t adapter_max_rank;                /* Ar  */
  bool mrope_interleaved;
  size_t num_ssm_layers;                  /* only the ROWWISE lever reads it */
} mdr_model_config;

/* Serve limits (§2.1). */
typedef struct mdr_limits {
  size_t max_batch_tokens; /* M: rows of the token-major buffers; must be >= 1 */
  size_t max_seq_len;      /* S */
  size_t kv_block_size;    /* B; 0 = unknown (256-entry block table) */
  size_t max_batch_size;   /* bs */
} mdr_limits;

/* Fill *out with a named preset (§10): "qwen3-next-80b", "glm-5.3-flash-tp2",
 * "nemotron-h", "deepseek-v4-flash". Unknown or NULL name / NULL out:
 * MDR_ERR_INVALID_ARGUMENT, *out untouched. Thread-safe. */
MDR_API mdr_status mdr_model_preset(const char *name, mdr_model_config *out);

/* The preset names, in the order above; i >= mdr_model_preset_count() gives
 * NULL. Static strings. */
MDR_API size_t mdr_model_preset_count(void);
MDR_API const char *mdr_model_preset_name(size_t i);

#ifdef __cplusplus
}
#endif
#endif
