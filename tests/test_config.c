/* Tests for src/config.c: the presets of docs/SIZES.md §10.
 * Each expected config is the spec table's column, written out here. */
#include <criterion/criterion.h>
#include <string.h>

#include "mdr/config.h"

/* Every field of mdr_model_config, so a preset is compared in full. */
#define CONFIG_FIELDS(X)                                                                 \
  X(family) X(hidden_size) X(intermediate_size) X(vocab_size) X(num_attention_heads)     \
  X(num_key_value_heads) X(head_dim) X(attn_gated) X(linear_num_key_heads)               \
  X(linear_key_head_dim) X(linear_num_value_heads) X(linear_value_head_dim) X(num_experts) \
  X(num_experts_per_tok) X(zero_expert_num) X(moe_intermediate_size)                     \
  X(shared_expert_intermediate_size) X(moe_latent_size) X(mamba_num_heads)               \
  X(mamba_head_dim) X(ssm_state_size) X(n_groups) X(kv_lora_rank) X(q_lora_rank)         \
  X(qk_rope_head_dim) X(o_groups) X(o_lora_rank) X(hc_mult) X(hc_lowrank)                \
  X(index_n_heads) X(index_head_dim) X(index_topk) X(index_compress_ratio)               \
  X(adapter_max_rank) X(mrope_interleaved) X(num_ssm_layers)

static void assert_preset_is(const char *name, const mdr_model_config *want) {
  mdr_model_config got;
  memset(&got, 0xAB, sizeof got); /* every field must be written */
  cr_assert_eq(mdr_model_preset(name, &got), MDR_OK, "%s loads", name);
#define CHECK_FIELD_(f)                                                                   \
  cr_assert_eq((size_t)got.f, (size_t)want->f, "%s: %s is %zu, want %zu", name, #f,        \
               (size_t)got.f, (size_t)want->f);
  CONFIG_FIELDS(CHECK_FIELD_)
#undef CHECK_FIELD_
}

Test(config, qwen3_next_80b_is_the_spec_column) {
  const mdr_model_config want = {
      .family = MDR_FAMILY_QWEN3_NEXT, .hidden_size = 2048, .intermediate_size = 5120,
      .vocab_size = 151936, .num_attention_heads = 16, .num_key_value_heads = 2,
      .head_dim = 256, .attn_gated = true, .linear_num_key_heads = 16,
      .linear_key_head_dim = 128, .linear_num_value_heads = 32, .linear_value_head_dim = 128,
      .num_experts = 512, .num_experts_per_tok = 10, .moe_intermediate_size = 512,
      .shared_expert_intermediate_size = 512, .num_ssm_layers = 36};
  assert_preset_is("qwen3-next-80b", &want);
}

Test(config, glm_5_3_flash_tp2_is_the_spec_column) {
  const mdr_model_config want = {
      .family = MDR_FAMILY_GLM5_NEXT, .hidden_size = 4096, .intermediate_size = 12288,
      .vocab_size = 154880, .num_attention_heads = 32, .num_key_value_heads = 32,
      .head_dim = 256, .attn_gated = false, .linear_num_key_heads = 32,
      .linear_key_head_dim = 128, .linear_num_value_heads = 32, .linear_value_head_dim = 128,
      .num_experts = 288, .num_experts_per_tok = 8, .moe_intermediate_size = 2048,
      .shared_expert_intermediate_size = 2048, .kv_lora_rank = 512, .q_lora_rank = 1536,
      .hc_mult = 4, .index_n_heads = 32, .index_head_dim = 128, .index_topk = 2048,
      .num_ssm_layers = 36};
  assert_preset_is("glm-5.3-flash-tp2", &want);
}

Test(config, nemotron_h_is_the_spec_column) {
  const mdr_model_config want = {
      .family = MDR_FAMILY_NEMOTRON_H, .hidden_size = 2688, .intermediate_size = 1856,
      .vocab_size = 131072, .num_attention_heads = 32, .num_key_value_heads = 2,
      .head_dim = 128, .num_experts = 128, .num_experts_per_tok = 6,
      .moe_intermediate_size = 1856, .shared_expert_intermediate_size = 3712,
      .mamba_num_heads = 64, .mamba_head_dim = 64, .ssm_state_size = 128, .n_groups = 8,
      .num_ssm_layers = 23};
  assert_preset_is("nemotron-h", &want);
}

Test(config, deepseek_v4_flash_is_the_spec_column) {
  const mdr_model_config want = {
      .family = MDR_FAMILY_DEEPSEEK_V4, .hidden_size = 4096, .intermediate_size = 0,
      .vocab_size = 129280, .num_attention_heads = 64, .num_key_value_heads = 1,
      .head_dim = 512, .num_experts = 256, .num_experts_per_tok = 6,
      .moe_intermediate_size = 2048, .shared_expert_intermediate_size = 2048,
      .kv_lora_rank = 512, .q_lora_rank = 1024, .qk_rope_head_dim = 64, .o_groups = 8,
      .o_lora_rank = 1024, .hc_mult = 4, .index_n_heads = 64, .index_head_dim = 128,
      .index_topk = 512, .num_ssm_layers = 0};
  assert_preset_is("deepseek-v4-flash", &want);
}

Test(config, there_are_four_presets_in_spec_order) {
  static const char *const names[] = {"qwen3-next-80b", "glm-5.3-flash-tp2", "nemotron-h",
                                      "deepseek-v4-flash"};
  cr_assert_eq(mdr_model_preset_count(), 4);
  for (size_t i = 0; i < 4; i++) {
    cr_assert_str_eq(mdr_model_preset_name(i), names[i], "preset %zu", i);
    mdr_model_config c;
    cr_assert_eq(mdr_model_preset(mdr_model_preset_name(i), &c), MDR_OK, "%s loads", names[i]);
  }
  cr_assert_null(mdr_model_preset_name(4));
  cr_assert_null(mdr_model_preset_name((size_t)-1));
}

Test(config, unknown_or_null_names_are_rejected_and_out_untouched) {
  static const char *const bad[] = {"", "qwen3-next", "QWEN3-NEXT-80B", "nemotron-h ",
                                    "glm-5.3-flash", "deepseek_v4"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0] + 1; i++) {
    const char *name = i < sizeof bad / sizeof bad[0] ? bad[i] : NULL;
    mdr_model_config out, before;
    memset(&out, 0xAB, sizeof out);
    memcpy(&before, &out, sizeof out);
    cr_assert_eq(mdr_model_preset(name, &out), MDR_ERR_INVALID_ARGUMENT, "\"%s\"",
                 name ? name : "(null)");
    cr_assert_eq(memcmp(&out, &before, sizeof out), 0, "\"%s\" wrote out", name ? name : "(null)");
  }
}

Test(config, a_null_out_is_rejected) {
  cr_assert_eq(mdr_model_preset("qwen3-next-80b", NULL), MDR_ERR_INVALID_ARGUMENT);
}

Test(config, each_load_is_an_independent_copy) {
  mdr_model_config a, b;
  cr_assert_eq(mdr_model_preset("nemotron-h", &a), MDR_OK);
  a.hidden_size = 1;
  a.family = MDR_FAMILY_OTHER;
  cr_assert_eq(mdr_model_preset("nemotron-h", &b), MDR_OK);
  cr_assert_eq(b.hidden_size, 2688, "the preset table was modified through a copy");
  cr_assert_eq(b.family, MDR_FAMILY_NEMOTRON_H);
}
