/* mdr — named model presets (docs/SIZES.md §10).
 *
 * Every field is the value in that section's table; fields it does not list are
 * 0 / false (designated initializers leave them zero). */
#include "mdr/config.h"

#include <string.h>

typedef struct preset {
  const char *name;
  mdr_model_config config;
} preset;

static const preset presets[] = {
    /* The seed's hard-coded Qwen3-Next-80B NVFP4 preset. */
    {"qwen3-next-80b",
     {.family = MDR_FAMILY_QWEN3_NEXT,
      .hidden_size = 2048,
      .intermediate_size = 5120,
      .vocab_size = 151936,
      .num_attention_heads = 16,
      .num_key_value_heads = 2,
      .head_dim = 256,
      .attn_gated = true,
      .linear_num_key_heads = 16,
      .linear_key_head_dim = 128,
      .linear_num_value_heads = 32,
      .linear_value_head_dim = 128,
      .num_experts = 512,
      .num_experts_per_tok = 10,
      .moe_intermediate_size = 512,
      .shared_expert_intermediate_size = 512,
      .num_ssm_layers = 36}},
    /* One TP2 rank of GLM-5.3-Flash, built on the Qwen3-Next preset as the
     * seed's trim tests do (linear-attention geometry kept, Lk = 32). */
    {"glm-5.3-flash-tp2",
     {.family = MDR_FAMILY_GLM5_NEXT,
      .hidden_size = 4096,
      .intermediate_size = 12288,
      .vocab_size = 154880,
      .num_attention_heads = 32,
      .num_key_value_heads = 32,
      .head_dim = 256,
      .attn_gated = false,
      .linear_num_key_heads = 32,
      .linear_key_head_dim = 128,
      .linear_num_value_heads = 32,
      .linear_value_head_dim = 128,
      .num_experts = 288,
      .num_experts_per_tok = 8,
      .moe_intermediate_size = 2048,
      .shared_expert_intermediate_size = 2048,
      .kv_lora_rank = 512,
      .q_lora_rank = 1536,
      .hc_mult = 4,
      .index_n_heads = 32,
      .index_head_dim = 128,
      .index_topk = 2048,
      .num_ssm_layers = 36}},
    /* The seed's Nemotron-H parser fixture (hybrid Mamba-2 / MoE). */
    {"nemotron-h",
     {.family = MDR_FAMILY_NEMOTRON_H,
      .hidden_size = 2688,
      .intermediate_size = 1856,
      .vocab_size = 131072,
      .num_attention_heads = 32,
      .num_key_value_heads = 2,
      .head_dim = 128,
      .num_experts = 128,
      .num_experts_per_tok = 6,
      .moe_intermediate_size = 1856,
      .shared_expert_intermediate_size = 3712,
      .mamba_num_heads = 64,
      .mamba_head_dim = 64,
      .ssm_state_size = 128,
      .n_groups = 8,
      .num_ssm_layers = 23}},
    /* The seed's deepseek_v4 parser fixture after the parser's defaults;
     * o_groups 8 from the released checkpoint. */
    {"deepseek-v4-flash",
     {.family = MDR_FAMILY_DEEPSEEK_V4,
      .hidden_size = 4096,
      .intermediate_size = 0,
      .vocab_size = 129280,
      .num_attention_heads = 64,
      .num_key_value_heads = 1,
      .head_dim = 512,
      .num_experts = 256,
      .num_experts_per_tok = 6,
      .moe_intermediate_size = 2048,
      .shared_expert_intermediate_size = 2048,
      .kv_lora_rank = 512,
      .q_lora_rank = 1024,
      .qk_rope_head_dim = 64,
      .o_groups = 8,
      .o_lora_rank = 1024,
      .hc_mult = 4,
      .index_n_heads = 64,
      .index_head_dim = 128,
      .index_topk = 512,
      .num_ssm_layers = 0}},
};

#define PRESET_COUNT (sizeof presets / sizeof presets[0])

mdr_status mdr_model_preset(const char *name, mdr_model_config *out) {
  if (name == NULL || out == NULL) return MDR_ERR_INVALID_ARGUMENT;
  for (size_t i = 0; i < PRESET_COUNT; i++) {
    if (strcmp(name, presets[i].name) == 0) {
      *out = presets[i].config;
      return MDR_OK;
    }
  }
  return MDR_ERR_INVALID_ARGUMENT;
}

size_t mdr_model_preset_count(void) { return PRESET_COUNT; }

const char *mdr_model_preset_name(size_t i) {
  return i < PRESET_COUNT ? presets[i].name : NULL;
}
