/* Tests for src/sizes.c: the arena sizing of docs/SIZES.md.
 *
 * Expected values come from the spec: section 11's worked example verbatim,
 * and, for the other presets and custom configs, arithmetic done by hand from
 * the formulas of sections 3-7, shown next to each value. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "mdr/config.h"
#include "mdr/sizes.h"

/* ---- helpers -------------------------------------------------------------- */

static mdr_model_config preset(const char *name) {
  mdr_model_config c;
  cr_assert_eq(mdr_model_preset(name, &c), MDR_OK, "preset %s", name);
  return c;
}

static mdr_limits limits(size_t M, size_t S, size_t B, size_t bs) {
  return (mdr_limits){.max_batch_tokens = M, .max_seq_len = S, .kv_block_size = B,
                      .max_batch_size = bs};
}

static mdr_sizes sizes_ex(const mdr_model_config *c, mdr_limits l, const mdr_sizes_options *o) {
  mdr_sizes s;
  cr_assert_eq(mdr_sizes_from_config_ex(c, &l, o, &s), MDR_OK, "sizing M=%zu", l.max_batch_tokens);
  return s;
}

static mdr_sizes sizes_of(const mdr_model_config *c, mdr_limits l) { return sizes_ex(c, l, NULL); }

static size_t total_of(const mdr_sizes *s) {
  size_t t;
  cr_assert_eq(mdr_sizes_total_bytes(s, &t), MDR_OK);
  return t;
}

static mdr_sizes_options trim_options(void) {
  mdr_sizes_options o;
  mdr_sizes_options_default(&o);
  o.glm_trim = true;
  return o;
}

typedef struct expect {
  mdr_buffer buf;
  size_t bytes;
} expect;

static void assert_expected(const mdr_sizes *s, const expect *e, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(s->bytes[e[i].buf], e[i].bytes, "%s: %s is %zu, want %zu", what,
                 mdr_buffer_name(e[i].buf), s->bytes[e[i].buf], e[i].bytes);
}

#define ASSERT_EXPECTED(s, table, what) \
  assert_expected((s), (table), sizeof(table) / sizeof((table)[0]), (what))

/* Section 7's list, written out apart from src/sizes.c. */
static const mdr_buffer glm_trimmed[18] = {
    MDR_BUF_QKV_OUTPUT,       MDR_BUF_ATTN_OUTPUT,        MDR_BUF_GATE_LOGITS,
    MDR_BUF_GATE_LOGITS_F32,  MDR_BUF_MOE_ROUTER_IN_F32,  MDR_BUF_SSM_QKVZ,
    MDR_BUF_SSM_BA,           MDR_BUF_SSM_DEINTERLEAVED,  MDR_BUF_SSM_GATES,
    MDR_BUF_SSM_CONV_OUT_F32, MDR_BUF_EXPERT_GATE_OUT,    MDR_BUF_EXPERT_UP_OUT,
    MDR_BUF_EXPERT_DOWN_OUT,  MDR_BUF_GDN_FLA_SCRATCH,    MDR_BUF_FP8_ACT,
    MDR_BUF_FP8_ACT_SCALE,    MDR_BUF_FP8_ACT_SCALE_KMAJOR, MDR_BUF_MOE_FP8_SCRATCH,
};

static bool is_glm_trimmed(int b) {
  for (size_t i = 0; i < 18; i++)
    if (glm_trimmed[i] == (mdr_buffer)b) return true;
  return false;
}

/* ---- section 11: the worked example --------------------------------------- */

/* Every row of the section 11 table, verbatim. */
static const size_t qwen_m4096[MDR_BUF_COUNT] = {
    [MDR_BUF_HIDDEN_STATES] = 16777216,       [MDR_BUF_RESIDUAL] = 16777216,
    [MDR_BUF_NORM_OUTPUT] = 16777216,         [MDR_BUF_QKV_OUTPUT] = 75497472,
    [MDR_BUF_ATTN_OUTPUT] = 33554432,         [MDR_BUF_GATE_LOGITS] = 4194304,
    [MDR_BUF_GATE_LOGITS_F32] = 8388608,      [MDR_BUF_MOE_ROUTER_IN_F32] = 33554432,
    [MDR_BUF_MOE_OUTPUT] = 16777216,          [MDR_BUF_LOGITS] = 48619520,
    [MDR_BUF_SSM_QKVZ] = 100663296,           [MDR_BUF_SSM_BA] = 524288,
    [MDR_BUF_SSM_DEINTERLEAVED] = 100663296,  [MDR_BUF_SSM_GATES] = 1048576,
    [MDR_BUF_SSM_CONV_OUT_F32] = 201326592,   [MDR_BUF_SCRATCH] = 2658688,
    [MDR_BUF_SSD_SCRATCH] = 0,                [MDR_BUF_TOKEN_IDS] = 16384,
    [MDR_BUF_EXPERT_GATE_OUT] = 41943040,     [MDR_BUF_EXPERT_UP_OUT] = 41943040,
    [MDR_BUF_EXPERT_DOWN_OUT] = 167772160,    [MDR_BUF_SPLITK_WORKSPACE] = 49536,
    [MDR_BUF_GDN_FLA_SCRATCH] = 210370560,    [MDR_BUF_FFN_ACT_Q8] = 0,
    [MDR_BUF_FFN_ACT_A] = 0,                  [MDR_BUF_FFN_ACT_SCALE] = 0,
    [MDR_BUF_FFN_GATE_UP_FUSED] = 0,          [MDR_BUF_FFN_ACT_SCALE_KMAJOR] = 0,
    [MDR_BUF_FP8_ACT] = 16777216,             [MDR_BUF_FP8_ACT_SCALE] = 524288,
    [MDR_BUF_FP8_ACT_SCALE_KMAJOR] = 524288,  [MDR_BUF_Q2_DEQUANT_SCRATCH] = 0,
    [MDR_BUF_Q2_ACT_Q8] = 0,                  [MDR_BUF_O_LATENT] = 256,
    [MDR_BUF_NORM_UNIT_W] = 4096,             [MDR_BUF_HC_STREAMS] = 256,
    [MDR_BUF_HC_LOWRANK_SCRATCH] = 256,       [MDR_BUF_QSA_SELECT_SCRATCH] = 256,
    [MDR_BUF_HC_POST] = 256,                  [MDR_BUF_HC_COMB] = 256,
    [MDR_BUF_LORA_XA] = 0,                    [MDR_BUF_LORA_DELTA] = 0,
    [MDR_BUF_LORA_HACT] = 0,                  [MDR_BUF_LORA_SEQ_SLOT] = 0,
    [MDR_BUF_MOE_FP8_SCRATCH] = 21840132,     [MDR_BUF_SSM_ROWWISE_W_BF16] = 0,
};

Test(sizes, qwen3_next_worked_example_matches_byte_for_byte) {
  mdr_model_config c = preset("qwen3-next-80b");
  mdr_sizes s = sizes_of(&c, limits(4096, 65536, 16, 4));
  for (int b = 0; b < MDR_BUF_COUNT; b++)
    cr_assert_eq(s.bytes[b], qwen_m4096[b], "%s is %zu, want %zu", mdr_buffer_name(b), s.bytes[b],
                 qwen_m4096[b]);
  cr_assert_eq(s.max_batch_tokens, 4096);
  cr_assert_eq(s.logits_rows, 160, "logits_rows = min(4096, max(160, 32 + 1))");
}

Test(sizes, qwen3_next_worked_example_total_leaves_out_o_latent_and_norm_unit_w) {
  mdr_model_config c = preset("qwen3-next-80b");
  mdr_sizes s = sizes_of(&c, limits(4096, 65536, 16, 4));
  size_t table_sum = 0;
  for (int b = 0; b < MDR_BUF_COUNT; b++) table_sum += qwen_m4096[b];
  /* table sum 1,179,568,644 less o_latent 256 and norm_unit_w 4,096 */
  cr_assert_eq(table_sum - 256 - 4096, 1179564292);
  cr_assert_eq(total_of(&s), 1179564292);
}

/* The seed's own trim test (glm_trim_tests.rs) at its ship limits: the GLM
 * shape untrimmed totals 4,449,005,908 bytes and the trim removes
 * 3,590,249,220 of them. */
Test(sizes, glm_ship_limits_match_the_seed_totals) {
  mdr_model_config c = preset("glm-5.3-flash-tp2");
  mdr_sizes_options trim = trim_options();
  mdr_sizes full = sizes_of(&c, limits(8196, 65536, 16, 4));
  mdr_sizes trimmed = sizes_ex(&c, limits(8196, 65536, 16, 4), &trim);
  cr_assert_eq(total_of(&full), 4449005908u);
  cr_assert_eq(total_of(&full) - total_of(&trimmed), 3590249220u);
}

/* ---- other presets, derived by hand --------------------------------------- */

/* Nemotron-H, M = 100 (not a multiple of 16), S = 8192, B = 16, bs = 4.
 * Mp = Mk = 112, R = 32, maxblk = 8192/16 + 1 = 513, logits_rows = 100.
 * qkv_dim = (32 + 2*2)*128 = 4608; qkvz = 0; d_inner = 64*64 = 4096;
 * d_xbc = 4096 + 2*8*128 = 6144; in_proj = 4096 + 6144 + 64 = 10304;
 * max_dim = 4096; kproj = max(2688, 32*128, 4096, 0) = 4096. */
Test(sizes, nemotron_h_at_100_tokens_matches_hand_derived_sizes) {
  mdr_model_config c = preset("nemotron-h");
  mdr_sizes s = sizes_of(&c, limits(100, 8192, 16, 4));
  static const expect e[] = {
      {MDR_BUF_HIDDEN_STATES, 537600},     /* 100*2688*2 */
      {MDR_BUF_NORM_OUTPUT, 819200},       /* 100*max_dim 4096*2 */
      {MDR_BUF_QKV_OUTPUT, 1032192},       /* Mp 112*4608*2 */
      {MDR_BUF_ATTN_OUTPUT, 819200},       /* max(100*32*128*2, 100*4096*2) */
      {MDR_BUF_GATE_LOGITS, 25600},        /* 100*128*2 */
      {MDR_BUF_GATE_LOGITS_F32, 51200},    /* 100*128*4 */
      {MDR_BUF_MOE_ROUTER_IN_F32, 1075200}, /* 100*2688*4 */
      {MDR_BUF_MOE_OUTPUT, 602112},        /* 112*2688*2 */
      {MDR_BUF_LOGITS, 26214400},          /* logits_rows 100*131072*2 */
      /* max(0, 100*10304*2 = 2060800, (100+112)*2*128*2 = 108544, 100*3712*2 = 742400, 256) */
      {MDR_BUF_SSM_QKVZ, 2060800},
      {MDR_BUF_SSM_BA, 256},               /* ba = Lat = 0, no MLA: the floor */
      {MDR_BUF_SSM_DEINTERLEAVED, 1228800}, /* max(0, 100*6144*2, 100*32*128*2 = 819200) */
      {MDR_BUF_SSM_GATES, 256},            /* Lv = 0: the floor */
      {MDR_BUF_SSM_CONV_OUT_F32, 256},     /* qkvz = 0: the floor */
      /* decode/verify: 32768 + max(24*160 + 160*513*4 = 332160, 24*32 + 32*513*4 = 66432);
       * prefill 4800 + 3256 = 8056; staging 4992 + 32768 + 1448 + 64 = 39272 */
      {MDR_BUF_SCRATCH, 364928},
      /* nc = cdiv(100,64) + 1 = 3, g = 8: 64*3*64*4*2 + 3*8*64*64*4 = 98304 + 393216 */
      {MDR_BUF_SSD_SCRATCH, 491520},
      {MDR_BUF_TOKEN_IDS, 400},            /* 100*4 */
      {MDR_BUF_EXPERT_GATE_OUT, 2494464},  /* Mk 112 * max(6*1856, 1856) * 2 */
      {MDR_BUF_EXPERT_UP_OUT, 2494464},
      {MDR_BUF_EXPERT_DOWN_OUT, 3612672},  /* 112*6*2688*2 */
      {MDR_BUF_SPLITK_WORKSPACE, 24960},   /* 48*(128+2)*4 */
      {MDR_BUF_GDN_FLA_SCRATCH, 0},        /* Lv = 0 */
      {MDR_BUF_FP8_ACT, 458752},           /* 112*4096 */
      {MDR_BUF_FP8_ACT_SCALE, 14336},      /* 112*cdiv(4096,128)*4 */
      {MDR_BUF_NORM_UNIT_W, 8192},         /* max_dim 4096*2 */
      /* x = 600, Ks = 3712, nt64 = cdiv(2688,64) = 42; act = max(371200, 600*1856) = 1113600;
       * scales = max(100*29, 600*15)*4 = 36000 -> a256 36096;
       * items = (5 + 128 + 1)*42 = 5628, *8 = 45024 -> a256 45056;
       * 1113600 + 36096 + 45056 + 4 */
      {MDR_BUF_MOE_FP8_SCRATCH, 1194756},
  };
  ASSERT_EXPECTED(&s, e, "nemotron-h M=100");
  cr_assert_eq(s.logits_rows, 100, "logits_rows = min(100, max(160, 33))");
}

/* DeepSeek-V4-Flash, M = 300, S = 65536, B = 0 (maxblk 256), bs = 200.
 * Mp = Mk = 304, R = 200, logits_rows = min(300, max(160, 201)) = 201.
 * qkv_dim = (64 + 2)*512 = 33792; MLA: Rkv + Dr = 576; kproj = max(4096, 64*512) = 32768. */
Test(sizes, deepseek_v4_flash_at_300_tokens_matches_hand_derived_sizes) {
  mdr_model_config c = preset("deepseek-v4-flash");
  mdr_sizes s = sizes_of(&c, limits(300, 65536, 0, 200));
  static const expect e[] = {
      {MDR_BUF_QKV_OUTPUT, 20545536},      /* 304*33792*2 */
      {MDR_BUF_ATTN_OUTPUT, 22118400},     /* max(300*64*512*2 = 19660800, [mla] 300*64*576*2) */
      {MDR_BUF_GATE_LOGITS, 153600},       /* 300*256*2 */
      {MDR_BUF_MOE_OUTPUT, 2490368},       /* 304*4096*2 */
      {MDR_BUF_LOGITS, 51970560},          /* 201*129280*2 */
      /* max(0, 0, (300+304)*1*512*2 = 618496, 300*2048*2 = 1228800, 256) */
      {MDR_BUF_SSM_QKVZ, 1228800},
      {MDR_BUF_SSM_BA, 614400},            /* [mla] max(300*64*2, 300*1024*2) */
      {MDR_BUF_SSM_DEINTERLEAVED, 22118400}, /* [mla] 300*64*576*2 */
      {MDR_BUF_SSM_GATES, 256},
      {MDR_BUF_SSM_CONV_OUT_F32, 2457600}, /* [mla] 300*64*64*2 */
      /* 32768 + max(24*160 + 160*256*4 = 167680, 24*200 + 200*256*4 = 209600) */
      {MDR_BUF_SCRATCH, 242368},
      {MDR_BUF_EXPERT_GATE_OUT, 7471104},  /* 304 * max(6*2048, 0) * 2 */
      {MDR_BUF_EXPERT_DOWN_OUT, 14942208}, /* 304*6*4096*2 */
      {MDR_BUF_SPLITK_WORKSPACE, 98688},   /* 48*(512+2)*4 */
      {MDR_BUF_FFN_ACT_Q8, 0},             /* MoE model */
      {MDR_BUF_FP8_ACT, 9961472},          /* 304*32768 */
      {MDR_BUF_FP8_ACT_SCALE_KMAJOR, 311296}, /* 304*256*4 */
      {MDR_BUF_O_LATENT, 4915200},         /* max(300*8*1024*2, 256) */
      {MDR_BUF_HC_STREAMS, 19660800},      /* 300*4*4096*4 */
      {MDR_BUF_HC_POST, 4800},             /* max(300*4*4, 256) */
      {MDR_BUF_HC_COMB, 19200},            /* max(300*4*4*4, 256) */
      {MDR_BUF_HC_LOWRANK_SCRATCH, 256},   /* Hr = 0 */
      {MDR_BUF_QSA_SELECT_SCRATCH, 256},   /* Ic = 0 */
      /* x = 1800, Ks = 4096, nt64 = 64; act = max(1228800, 1800*2048) = 3686400;
       * scales = max(300*32, 1800*16)*4 = 115200; items = (15 + 256 + 1)*64 = 17408, *8 = 139264;
       * counter = 3686400 + 115200 + 139264 = 3940864; E == 256: small = a256(3940868) = 3941120,
       * sb = 256*64*8 = 131072; 3941120 + 131072 + 4 */
      {MDR_BUF_MOE_FP8_SCRATCH, 4072196},
  };
  ASSERT_EXPECTED(&s, e, "deepseek-v4-flash M=300");
  cr_assert_eq(s.logits_rows, 201, "logits_rows = min(300, max(160, 200 + 1))");
}

/* GLM-5.3-Flash TP2 (untrimmed), M = 256, S = 32768, B = 32, bs = 64.
 * Mp = Mk = 256, R = 64, maxblk = 1025, logits_rows = 160.
 * qkv_dim = (32 + 64)*256 = 24576; qkvz = 2*32*128*2 = 16384; ba = 64;
 * MLA with Dr = 0: Rkv + Dr = 512; kproj = max(4096, 32*256, 0, 32*128) = 8192. */
Test(sizes, glm_5_3_flash_tp2_at_256_tokens_matches_hand_derived_sizes) {
  mdr_model_config c = preset("glm-5.3-flash-tp2");
  mdr_sizes s = sizes_of(&c, limits(256, 32768, 32, 64));
  static const expect e[] = {
      {MDR_BUF_QKV_OUTPUT, 12582912},      /* 256*24576*2 */
      {MDR_BUF_ATTN_OUTPUT, 8388608},      /* max(256*32*256*2, [mla] 256*32*512*2) */
      {MDR_BUF_GATE_LOGITS_F32, 294912},   /* 256*288*4 */
      {MDR_BUF_LOGITS, 49561600},          /* 160*154880*2 */
      {MDR_BUF_SSM_QKVZ, 8388608},         /* max(256*16384*2, 512*32*256*2, 256*2048*2) */
      {MDR_BUF_SSM_BA, 786432},            /* max(256*64*2, [mla] max(0, 256*1536*2)) */
      {MDR_BUF_SSM_GATES, 65536},          /* 256*32*2*4 */
      {MDR_BUF_SSM_CONV_OUT_F32, 16777216}, /* max(256*16384*4, [mla] 256*32*0*2) */
      /* 32768 + max(24*160 + 160*1025*4 = 659840, 24*64 + 64*1025*4 = 263936) */
      {MDR_BUF_SCRATCH, 692608},
      {MDR_BUF_EXPERT_UP_OUT, 8388608},    /* 256 * max(8*2048, 12288) * 2 */
      {MDR_BUF_EXPERT_DOWN_OUT, 16777216}, /* 256*8*4096*2 */
      /* nt = cdiv(256,64) + 16 = 20: W, U, uc 20*32*64*128*2 = 10485760 each,
       * S 20*32*128*128*2 = 20971520, gc 20*32*64*4 = 163840 */
      {MDR_BUF_GDN_FLA_SCRATCH, 52592640},
      {MDR_BUF_FFN_ACT_A, 0},              /* I = 12288 but MoE: 0 */
      {MDR_BUF_FP8_ACT, 2097152},          /* 256*8192 */
      {MDR_BUF_FP8_ACT_SCALE, 65536},      /* 256*64*4 */
      {MDR_BUF_HC_STREAMS, 16777216},      /* 256*4*4096*4 */
      {MDR_BUF_HC_COMB, 16384},            /* 256*4*4*4 */
      /* x = 2048; act = max(256*4096, 2048*2048) = 4194304; scales = max(256*32, 2048*16)*4 =
       * 131072; items = (16 + 288 + 1)*64 = 19520, *8 = 156160 (a256 the same); E != 256 */
      {MDR_BUF_MOE_FP8_SCRATCH, 4481540},
  };
  ASSERT_EXPECTED(&s, e, "glm-5.3-flash-tp2 M=256");
}

/* A dense model (E = 0): H 4096, I 11000, V 32000, Hq = Hkv = 32, D 128; M = 100.
 * Mp = Mk = 112; Kf = max(4096, 11000) = 11000; kproj = 4096. */
Test(sizes, dense_model_sizes_the_ffn_buffers_and_fixes_the_router_at_256) {
  mdr_model_config c = {.hidden_size = 4096, .intermediate_size = 11000, .vocab_size = 32000,
                        .num_attention_heads = 32, .num_key_value_heads = 32, .head_dim = 128};
  mdr_sizes s = sizes_of(&c, limits(100, 4096, 16, 8));
  static const expect e[] = {
      {MDR_BUF_GATE_LOGITS, 256},            /* dense: exactly 256 */
      {MDR_BUF_GATE_LOGITS_F32, 256},
      {MDR_BUF_MOE_ROUTER_IN_F32, 256},
      {MDR_BUF_EXPERT_GATE_OUT, 2464000},    /* Mk 112 * W = I 11000 * 2 */
      {MDR_BUF_EXPERT_UP_OUT, 2464000},
      {MDR_BUF_EXPERT_DOWN_OUT, 917504},     /* Mk 112 * H 4096 * 2 */
      {MDR_BUF_FFN_ACT_Q8, 5451776},         /* 100 * up(11000,256) = 11008 * 4 + 1048576 */
      {MDR_BUF_FFN_ACT_A, 1232000},          /* 112*11000 */
      {MDR_BUF_FFN_ACT_SCALE, 153664},       /* 112 * (11000/32 = 343) * 4 */
      {MDR_BUF_FFN_ACT_SCALE_KMAJOR, 38080}, /* 112 * (11000/128 = 85) * 4 */
      {MDR_BUF_FFN_GATE_UP_FUSED, 704000},   /* 16*2*11000*2 */
      {MDR_BUF_MOE_FP8_SCRATCH, 0},          /* E == 0 */
      {MDR_BUF_FP8_ACT, 458752},             /* 112*4096 */
      {MDR_BUF_SSM_QKVZ, 1736704},           /* max(0, 0, (100+112)*32*128*2, 0, 256) */
  };
  ASSERT_EXPECTED(&s, e, "dense M=100");
}

/* Qwen3-Next with LatentMoE (Lat 1024) and 64 zero experts, at the worked
 * example's limits. */
Test(sizes, latent_moe_and_zero_experts_widen_router_and_narrow_expert_down) {
  mdr_model_config c = preset("qwen3-next-80b");
  c.moe_latent_size = 1024;
  c.zero_expert_num = 64;
  mdr_sizes s = sizes_of(&c, limits(4096, 65536, 16, 4));
  static const expect e[] = {
      {MDR_BUF_GATE_LOGITS, 4718592},      /* 4096*(512+64)*2 */
      {MDR_BUF_GATE_LOGITS_F32, 9437184},  /* 4096*(512+64)*4 */
      {MDR_BUF_EXPERT_DOWN_OUT, 83886080}, /* Mk 4096 * K 10 * moe_in 1024 * 2 */
      {MDR_BUF_SSM_BA, 8388608},           /* max(4096*64*2, 4096*1024*2, 256) */
      {MDR_BUF_MOE_FP8_SCRATCH, 21840132}, /* reads H, not Lat: unchanged */
  };
  ASSERT_EXPECTED(&s, e, "qwen3-next latent");
}

/* Qwen3-Next serving LoRA adapters of rank <= 16, M = 100. */
Test(sizes, lora_scratch_is_sized_only_with_an_adapter_rank) {
  mdr_model_config c = preset("qwen3-next-80b");
  c.adapter_max_rank = 16;
  mdr_sizes s = sizes_of(&c, limits(100, 4096, 16, 4));
  static const expect e[] = {
      {MDR_BUF_LORA_XA, 3200},       /* 100*16*2 */
      {MDR_BUF_LORA_DELTA, 1638400}, /* 100 * max(2048, 5120, qmul 2 * 16*256 = 8192) * 2 */
      {MDR_BUF_LORA_HACT, 1024000},  /* 100*5120*2 */
      {MDR_BUF_LORA_SEQ_SLOT, 400},  /* 100*4 */
  };
  ASSERT_EXPECTED(&s, e, "qwen3-next lora");
}

/* DeepSeek-V4-Flash with a low-rank hyper-connection (Hr 16) and a QSA
 * indexer (Ic 4); Hc = 4, H = 4096, Ih = 64, Id = 128, It = 512. */
Test(sizes, hc_lowrank_and_qsa_scratch_follow_their_layouts) {
  mdr_model_config c = preset("deepseek-v4-flash");
  c.hc_lowrank = 16;
  c.index_compress_ratio = 4;
  mdr_sizes big = sizes_of(&c, limits(300, 65536, 16, 4));
  static const expect e_big[] = {
      /* max(t 64 * (4*4096 + 16) * 4 = 4198400, ts 300 * (2*4*4096 + 16 + 4) * 2) */
      {MDR_BUF_HC_LOWRANK_SCRATCH, 19672800},
      /* 2048*65*128*2 + 2048*64*128*4 + 2048*cdiv(65536,4)*4 + 2048*(512/4)*4
       * = 34078720 + 67108864 + 134217728 + 1048576 */
      {MDR_BUF_QSA_SELECT_SCRATCH, 236453888},
  };
  ASSERT_EXPECTED(&big, e_big, "deepseek-v4 hc/qsa M=300");

  /* M = 10: decode 10*16400*4 = 656000 beats prefill 10*32788*2 = 655760;
   * S = 65537: scores grow by one 2048*4 column to cdiv(65537,4) = 16385. */
  mdr_sizes small = sizes_of(&c, limits(10, 65537, 16, 4));
  static const expect e_small[] = {
      {MDR_BUF_HC_LOWRANK_SCRATCH, 656000},
      {MDR_BUF_QSA_SELECT_SCRATCH, 236462080}, /* 236453888 + 2048*4 */
  };
  ASSERT_EXPECTED(&small, e_small, "deepseek-v4 hc/qsa M=10");
}

/* 64 experts per token with MRoPE (ps = 3), M = 4096, S = 1024, B = 16 (maxblk 65):
 * staging c = 512, T = 4096: moe up(4096*64*8, 64) = 2097152, meta 8*max(8256, 4096) = 66048,
 * stage = 3*16384 + 32768 + 2*64 + 40 + 32 = 82120, + 8*8 -> 2245384.
 * prefill 2097152 + (up(49152,8) + 32768 + 65*4 + 4 = 82184) = 2179336;
 * decode 32768 + 3840 + 160*65*4 = 78208. */
Test(sizes, mrope_triples_the_position_streams_of_the_staging_layout) {
  mdr_model_config c = {.hidden_size = 1024, .num_experts = 128, .num_experts_per_tok = 64,
                        .moe_intermediate_size = 256, .mrope_interleaved = true};
  cr_assert_eq(sizes_of(&c, limits(4096, 1024, 16, 4)).bytes[MDR_BUF_SCRATCH], 2245384);
  c.mrope_interleaved = false; /* stage loses 2*16384 */
  cr_assert_eq(sizes_of(&c, limits(4096, 1024, 16, 4)).bytes[MDR_BUF_SCRATCH], 2212616);
}

/* ---- row extents (section 3) ---------------------------------------------- */

/* Qwen3-Next: hidden_states = M*2048*2, moe_output = Mp*2048*2,
 * expert_gate_out = Mk * max(10*512, 5120) * 2. */
Test(sizes, mp_and_mk_round_tokens_up_to_sixteen_rows) {
  static const size_t M[] = {1, 2, 3, 15, 16, 17};
  static const size_t rows16[] = {16, 16, 16, 16, 16, 32};
  mdr_model_config c = preset("qwen3-next-80b");
  for (size_t i = 0; i < 6; i++) {
    mdr_sizes s = sizes_of(&c, limits(M[i], 65536, 16, 4));
    cr_assert_eq(s.bytes[MDR_BUF_HIDDEN_STATES], M[i] * 2048 * 2, "hidden_states at M=%zu", M[i]);
    cr_assert_eq(s.bytes[MDR_BUF_MOE_OUTPUT], rows16[i] * 2048 * 2, "moe_output (Mp) at M=%zu",
                 M[i]);
    cr_assert_eq(s.bytes[MDR_BUF_EXPERT_GATE_OUT], rows16[i] * 5120 * 2,
                 "expert_gate_out (Mk) at M=%zu", M[i]);
    cr_assert_eq(s.bytes[MDR_BUF_FP8_ACT], rows16[i] * 4096, "fp8_act (Mp) at M=%zu", M[i]);
    cr_assert_eq(s.max_batch_tokens, M[i]);
  }
}

Test(sizes, logits_rows_is_m_capped_at_the_verify_rows_or_the_decode_rows) {
  static const struct { size_t M, bs, rows; } cases[] = {
      {1, 4, 1},       /* min(1, 160) */
      {100, 4, 100},   /* min(100, 160) */
      {170, 4, 160},   /* min(170, max(160, 33)) */
      {4096, 159, 160}, /* R + 1 = 160 */
      {4096, 200, 201}, /* min(4096, max(160, 201)) */
  };
  mdr_model_config c = preset("qwen3-next-80b");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mdr_sizes s = sizes_of(&c, limits(cases[i].M, 65536, 16, cases[i].bs));
    cr_assert_eq(s.logits_rows, cases[i].rows, "logits_rows at M=%zu bs=%zu", cases[i].M,
                 cases[i].bs);
    cr_assert_eq(s.bytes[MDR_BUF_LOGITS], cases[i].rows * 151936 * 2, "logits at M=%zu",
                 cases[i].M);
  }
}

/* Qwen3-Next, M = 16, S = 65536: with B = 0 the block table has 256 entries,
 * decode/verify = 32768 + 24*160 + 160*256*4 = 200448 (staging: 1280 + 32768
 * + 392 + 64 = 34504). With B = 16: maxblk 4097, the worked example's 2658688. */
Test(sizes, block_size_zero_gives_a_256_entry_block_table) {
  mdr_model_config c = preset("qwen3-next-80b");
  cr_assert_eq(sizes_of(&c, limits(16, 65536, 0, 4)).bytes[MDR_BUF_SCRATCH], 200448);
  cr_assert_eq(sizes_of(&c, limits(16, 65536, 16, 4)).bytes[MDR_BUF_SCRATCH], 2658688);
  /* S = 1000, B = 16: maxblk 63, 32768 + 3840 + 160*63*4 = 76928 */
  cr_assert_eq(sizes_of(&c, limits(16, 1000, 16, 4)).bytes[MDR_BUF_SCRATCH], 76928);
}

/* ---- floors ---------------------------------------------------------------- */

/* Qwen3-Next, M = 1, S = 256, B = 16 (maxblk 17), bs = 1 (R = 32):
 * decode 32768 + 3840 + 160*17*4 = 47488; staging 640 + 32768 + 296 + 64 = 33768;
 * prefill 80 + 88 = 168: all below the 65536 floor. */
Test(sizes, scratch_never_drops_below_64_kib) {
  mdr_model_config c = preset("qwen3-next-80b");
  mdr_sizes s = sizes_of(&c, limits(1, 256, 16, 1));
  cr_assert_eq(s.bytes[MDR_BUF_SCRATCH], 65536);
}

Test(sizes, small_buffers_are_floored_at_256_bytes) {
  mdr_model_config qwen = preset("qwen3-next-80b");
  mdr_sizes s = sizes_of(&qwen, limits(1, 256, 16, 1));
  static const expect e_qwen[] = {
      {MDR_BUF_SSM_BA, 256},      /* max(1*64*2 = 128, 256) */
      {MDR_BUF_TOKEN_IDS, 256},   /* max(1*4, 256) */
      {MDR_BUF_O_LATENT, 256},    /* Og = 0 */
      {MDR_BUF_HC_STREAMS, 256},  /* Hc = 0 */
      {MDR_BUF_HC_POST, 256},
      {MDR_BUF_HC_COMB, 256},
      {MDR_BUF_HC_LOWRANK_SCRATCH, 256},
      {MDR_BUF_QSA_SELECT_SCRATCH, 256},
      {MDR_BUF_SSM_QKVZ, 393216}, /* no floor needed: Mp 16 * 12288 * 2 */
  };
  ASSERT_EXPECTED(&s, e_qwen, "qwen3-next M=1");

  mdr_model_config ds = preset("deepseek-v4-flash");
  mdr_sizes d = sizes_of(&ds, limits(1, 256, 16, 1));
  static const expect e_ds[] = {
      {MDR_BUF_SSM_GATES, 256},   /* Lv = 0 */
      {MDR_BUF_HC_POST, 256},     /* max(1*4*4 = 16, 256) */
      {MDR_BUF_HC_COMB, 256},     /* max(1*4*4*4 = 64, 256) */
      {MDR_BUF_HC_STREAMS, 65536}, /* 1*4*4096*4: no floor term */
      {MDR_BUF_O_LATENT, 16384},  /* 1*8*1024*2 */
  };
  ASSERT_EXPECTED(&d, e_ds, "deepseek-v4 M=1");

  mdr_model_config dense = {.hidden_size = 64, .intermediate_size = 128, .vocab_size = 10,
                            .num_attention_heads = 1, .num_key_value_heads = 1, .head_dim = 64};
  mdr_sizes n = sizes_of(&dense, limits(1, 256, 16, 1));
  static const expect e_dense[] = {
      {MDR_BUF_GATE_LOGITS, 256},       {MDR_BUF_GATE_LOGITS_F32, 256},
      {MDR_BUF_MOE_ROUTER_IN_F32, 256}, {MDR_BUF_SSM_CONV_OUT_F32, 256},
      {MDR_BUF_SSM_DEINTERLEAVED, 256}, /* max(0, 0, 1*1*64*2 = 128, 256) */
  };
  ASSERT_EXPECTED(&n, e_dense, "dense M=1");
}

/* ---- gating (section 6) ---------------------------------------------------- */

#define COMMON_ZEROS                                                                     \
  MDR_BUF_FFN_ACT_Q8, MDR_BUF_FFN_ACT_A, MDR_BUF_FFN_ACT_SCALE, MDR_BUF_FFN_GATE_UP_FUSED, \
      MDR_BUF_FFN_ACT_SCALE_KMAJOR, MDR_BUF_Q2_DEQUANT_SCRATCH, MDR_BUF_Q2_ACT_Q8,         \
      MDR_BUF_LORA_XA, MDR_BUF_LORA_DELTA, MDR_BUF_LORA_HACT, MDR_BUF_LORA_SEQ_SLOT,     \
      MDR_BUF_SSM_ROWWISE_W_BF16

/* Exactly `zeros` are 0 (NULL), every other entry is allocated. */
static void assert_null_set(const mdr_sizes *s, const mdr_buffer *zeros, size_t n,
                            const char *what) {
  for (int b = 0; b < MDR_BUF_COUNT; b++) {
    bool want_zero = false;
    for (size_t i = 0; i < n; i++) want_zero |= zeros[i] == (mdr_buffer)b;
    if (want_zero)
      cr_assert_eq(s->bytes[b], 0, "%s: %s should be NULL, is %zu", what, mdr_buffer_name(b),
                   s->bytes[b]);
    else
      cr_assert_neq(s->bytes[b], 0, "%s: %s should be allocated", what, mdr_buffer_name(b));
  }
}

Test(sizes, each_preset_leaves_exactly_its_unused_buffers_null) {
  /* MoE models: no ffn_*; no LoRA; levers off. */
  static const mdr_buffer qwen[] = {COMMON_ZEROS, MDR_BUF_SSD_SCRATCH};
  static const mdr_buffer glm[] = {COMMON_ZEROS, MDR_BUF_SSD_SCRATCH};
  static const mdr_buffer nemotron[] = {COMMON_ZEROS, MDR_BUF_GDN_FLA_SCRATCH};
  static const mdr_buffer deepseek[] = {COMMON_ZEROS, MDR_BUF_SSD_SCRATCH,
                                        MDR_BUF_GDN_FLA_SCRATCH};
  static const struct { const char *name; const mdr_buffer *zeros; size_t n; } cases[] = {
      {"qwen3-next-80b", qwen, sizeof qwen / sizeof qwen[0]},
      {"glm-5.3-flash-tp2", glm, sizeof glm / sizeof glm[0]},
      {"nemotron-h", nemotron, sizeof nemotron / sizeof nemotron[0]},
      {"deepseek-v4-flash", deepseek, sizeof deepseek / sizeof deepseek[0]},
  };
  static const size_t M[] = {1, 100, 4096};
  for (size_t i = 0; i < 4; i++) {
    mdr_model_config c = preset(cases[i].name);
    for (size_t m = 0; m < 3; m++) {
      mdr_sizes s = sizes_of(&c, limits(M[m], 65536, 16, 4));
      assert_null_set(&s, cases[i].zeros, cases[i].n, cases[i].name);
    }
  }
}

/* The always-allocated buffers with a floor stay allocated even for an
 * all-zero config (the others scale with H, V or D, which a real model has). */
Test(sizes, floored_always_allocated_buffers_survive_an_empty_config) {
  mdr_model_config empty = {0};
  mdr_sizes s = sizes_of(&empty, limits(1, 0, 16, 0));
  static const expect e[] = {
      /* maxblk = 0/16 + 1 = 1: decode 32768 + 3840 + 160*1*4 = 37248 < the floor */
      {MDR_BUF_SCRATCH, 65536},
      {MDR_BUF_SPLITK_WORKSPACE, 384}, /* 48*(0+2)*4 */
      {MDR_BUF_O_LATENT, 256},          {MDR_BUF_HC_STREAMS, 256},
      {MDR_BUF_HC_POST, 256},           {MDR_BUF_HC_COMB, 256},
      {MDR_BUF_HC_LOWRANK_SCRATCH, 256}, {MDR_BUF_QSA_SELECT_SCRATCH, 256},
      {MDR_BUF_TOKEN_IDS, 256},
  };
  ASSERT_EXPECTED(&s, e, "empty config M=1");
}

/* Every formula is non-decreasing in M, so a step with fewer tokens never
 * needs more than the arena holds. */
Test(sizes, every_buffer_grows_monotonically_with_max_batch_tokens) {
  for (size_t i = 0; i < mdr_model_preset_count(); i++) {
    mdr_model_config c = preset(mdr_model_preset_name(i));
    mdr_sizes prev = sizes_of(&c, limits(1, 65536, 16, 4));
    for (size_t M = 2; M <= 600; M++) {
      mdr_sizes s = sizes_of(&c, limits(M, 65536, 16, 4));
      for (int b = 0; b < MDR_BUF_COUNT; b++)
        cr_assert_geq(s.bytes[b], prev.bytes[b], "%s: %s shrinks from M=%zu to M=%zu",
                      mdr_model_preset_name(i), mdr_buffer_name(b), M - 1, M);
      prev = s;
    }
  }
}

/* ---- GLM trim (section 7) ------------------------------------------------- */

Test(sizes, glm_trim_zeroes_the_eighteen_entries_and_total_drops_by_their_sum) {
  mdr_model_config c = preset("glm-5.3-flash-tp2");
  mdr_sizes_options trim = trim_options();
  mdr_sizes full = sizes_of(&c, limits(256, 32768, 32, 64));
  mdr_sizes cut = sizes_ex(&c, limits(256, 32768, 32, 64), &trim);
  size_t removed = 0;
  for (int b = 0; b < MDR_BUF_COUNT; b++) {
    if (is_glm_trimmed(b)) {
      cr_assert_neq(full.bytes[b], 0, "%s is sized without the trim", mdr_buffer_name(b));
      cr_assert_eq(cut.bytes[b], 0, "%s is NULL with the trim", mdr_buffer_name(b));
      removed += full.bytes[b];
    } else {
      cr_assert_eq(cut.bytes[b], full.bytes[b], "%s is unchanged by the trim", mdr_buffer_name(b));
    }
  }
  /* The 18 untrimmed values of the hand-derived GLM test above:
   * 12582912 + 8388608 + 147456 + 294912 + 4194304 + 8388608 + 786432 + 8388608 + 65536
   * + 16777216 + 8388608 + 8388608 + 16777216 + 52592640 + 2097152 + 65536 + 65536 + 4481540 */
  cr_assert_eq(removed, 152871428);
  cr_assert_eq(total_of(&full) - total_of(&cut), removed);
  cr_assert_eq(cut.logits_rows, full.logits_rows);
  cr_assert_eq(cut.max_batch_tokens, full.max_batch_tokens);
}

Test(sizes, glm_trim_is_keyed_on_the_family_not_on_shared_fields) {
  mdr_sizes_options trim = trim_options();
  mdr_model_config ds = preset("deepseek-v4-flash");
  mdr_sizes a = sizes_of(&ds, limits(256, 65536, 16, 4));
  mdr_sizes b = sizes_ex(&ds, limits(256, 65536, 16, 4), &trim);
  for (int i = 0; i < MDR_BUF_COUNT; i++)
    cr_assert_eq(b.bytes[i], a.bytes[i], "deepseek-v4-flash: %s trimmed", mdr_buffer_name(i));

  /* The GLM shape under another family is not trimmed either. */
  mdr_model_config twin = preset("glm-5.3-flash-tp2");
  twin.family = MDR_FAMILY_DEEPSEEK_V4;
  mdr_sizes t = sizes_ex(&twin, limits(256, 65536, 16, 4), &trim);
  cr_assert_neq(t.bytes[MDR_BUF_QKV_OUTPUT], 0, "glm twin: qkv_output trimmed");
}

Test(sizes, defaults_are_untrimmed_with_48_split_k_slots) {
  mdr_sizes_options o = {.glm_trim = true, .splitk_sm_count = 7};
  mdr_sizes_options_default(&o);
  cr_assert_eq(o.glm_trim, false);
  cr_assert_eq(o.splitk_sm_count, 48);
  mdr_sizes_options_default(NULL); /* harmless */

  mdr_model_config c = preset("glm-5.3-flash-tp2");
  mdr_sizes plain = sizes_of(&c, limits(256, 65536, 16, 4));
  mdr_sizes dflt = sizes_ex(&c, limits(256, 65536, 16, 4), &o);
  mdr_sizes viaplain;
  mdr_limits l = limits(256, 65536, 16, 4);
  cr_assert_eq(mdr_sizes_from_config(&c, &l, &viaplain), MDR_OK);
  for (int b = 0; b < MDR_BUF_COUNT; b++) {
    cr_assert_eq(dflt.bytes[b], plain.bytes[b], "%s", mdr_buffer_name(b));
    cr_assert_eq(viaplain.bytes[b], plain.bytes[b], "%s", mdr_buffer_name(b));
  }
  cr_assert_neq(plain.bytes[MDR_BUF_QKV_OUTPUT], 0, "qkv_output untrimmed by default");
}

/* 5.6 Legacy: slots = SM count; Qwen3-Next D = 256. */
Test(sizes, splitk_workspace_scales_with_the_sm_count) {
  mdr_model_config c = preset("qwen3-next-80b");
  mdr_sizes_options o;
  mdr_sizes_options_default(&o);
  o.splitk_sm_count = 132;
  mdr_sizes s = sizes_ex(&c, limits(4096, 65536, 16, 4), &o);
  cr_assert_eq(s.bytes[MDR_BUF_SPLITK_WORKSPACE], 136224, "132*(256+2)*4");
  /* independent of M, R and bs */
  mdr_sizes t = sizes_ex(&c, limits(7, 100, 4, 100), &o);
  cr_assert_eq(t.bytes[MDR_BUF_SPLITK_WORKSPACE], 136224);
}

/* ---- errors ---------------------------------------------------------------- */

/* Calls the sizing on a poisoned out struct; checks the status and that the
 * struct is byte-for-byte untouched. */
static void assert_rejected(const mdr_model_config *c, mdr_limits l, const mdr_sizes_options *o,
                            mdr_status want, const char *what) {
  mdr_sizes out, before;
  memset(&out, 0xAB, sizeof out);
  memcpy(&before, &out, sizeof out);
  cr_assert_eq(mdr_sizes_from_config_ex(c, &l, o, &out), want, "%s: status", what);
  cr_assert_eq(memcmp(&out, &before, sizeof out), 0, "%s: out was written", what);
}

Test(sizes, zero_max_batch_tokens_is_out_of_range) {
  mdr_model_config c = preset("qwen3-next-80b");
  assert_rejected(&c, limits(0, 65536, 16, 4), NULL, MDR_ERR_OUT_OF_RANGE, "M=0");
}

Test(sizes, null_arguments_and_zero_sm_count_are_invalid) {
  mdr_model_config c = preset("qwen3-next-80b");
  mdr_limits l = limits(16, 65536, 16, 4);
  mdr_sizes out;
  cr_assert_eq(mdr_sizes_from_config(NULL, &l, &out), MDR_ERR_INVALID_ARGUMENT, "NULL config");
  cr_assert_eq(mdr_sizes_from_config(&c, NULL, &out), MDR_ERR_INVALID_ARGUMENT, "NULL limits");
  cr_assert_eq(mdr_sizes_from_config(&c, &l, NULL), MDR_ERR_INVALID_ARGUMENT, "NULL out");
  cr_assert_eq(mdr_sizes_from_config_ex(&c, &l, NULL, NULL), MDR_ERR_INVALID_ARGUMENT);
  assert_rejected(NULL, l, NULL, MDR_ERR_INVALID_ARGUMENT, "NULL config (ex)");
  mdr_sizes_options o = {.glm_trim = false, .splitk_sm_count = 0};
  assert_rejected(&c, l, &o, MDR_ERR_INVALID_ARGUMENT, "splitk_sm_count 0");
}

Test(sizes, huge_inputs_overflow_instead_of_wrapping) {
  mdr_model_config c = preset("qwen3-next-80b");
  assert_rejected(&c, limits(SIZE_MAX / 2, 65536, 16, 4), NULL, MDR_ERR_OVERFLOW, "huge M");
  assert_rejected(&c, limits(SIZE_MAX, 65536, 16, 4), NULL, MDR_ERR_OVERFLOW, "M = SIZE_MAX");
  /* maxblk = S/1 + 1 and R + 1 overflow on their own */
  assert_rejected(&c, limits(16, SIZE_MAX, 1, 4), NULL, MDR_ERR_OVERFLOW, "huge S");
  assert_rejected(&c, limits(16, 65536, 16, SIZE_MAX), NULL, MDR_ERR_OVERFLOW, "huge bs");

  mdr_model_config wide = c;
  wide.hidden_size = SIZE_MAX / 4;
  assert_rejected(&wide, limits(16, 65536, 16, 4), NULL, MDR_ERR_OVERFLOW, "huge hidden_size");
  /* 2^62 fits as a width but M*H*2 with M = 4 does not */
  wide.hidden_size = (size_t)1 << 62;
  assert_rejected(&wide, limits(4, 65536, 16, 4), NULL, MDR_ERR_OVERFLOW, "H = 2^62");
}

/* logits = 160 * (SIZE_MAX/320) * 2 = SIZE_MAX - 255 fits, but the arena's
 * sum of all entries does not: the sizing refuses what cannot be allocated. */
Test(sizes, entries_whose_sum_overflows_are_rejected) {
  mdr_model_config c = preset("qwen3-next-80b");
  c.vocab_size = SIZE_MAX / 320;
  assert_rejected(&c, limits(4096, 65536, 16, 4), NULL, MDR_ERR_OVERFLOW, "huge vocab");
}

Test(sizes, total_bytes_sums_all_but_o_latent_and_norm_unit_w) {
  mdr_sizes s = {.max_batch_tokens = 1, .logits_rows = 1};
  for (int b = 0; b < MDR_BUF_COUNT; b++) s.bytes[b] = 1;
  s.bytes[MDR_BUF_O_LATENT] = 1000;
  s.bytes[MDR_BUF_NORM_UNIT_W] = 1000;
  size_t t = 0;
  cr_assert_eq(mdr_sizes_total_bytes(&s, &t), MDR_OK);
  cr_assert_eq(t, MDR_BUF_COUNT - 2);

  /* overflow: out untouched */
  s.bytes[MDR_BUF_LOGITS] = SIZE_MAX;
  t = 12345;
  cr_assert_eq(mdr_sizes_total_bytes(&s, &t), MDR_ERR_OVERFLOW);
  cr_assert_eq(t, 12345);
  /* o_latent and norm_unit_w are left out even when huge */
  s.bytes[MDR_BUF_LOGITS] = 1;
  s.bytes[MDR_BUF_O_LATENT] = SIZE_MAX;
  s.bytes[MDR_BUF_NORM_UNIT_W] = SIZE_MAX;
  cr_assert_eq(mdr_sizes_total_bytes(&s, &t), MDR_OK);
  cr_assert_eq(t, MDR_BUF_COUNT - 2);

  cr_assert_eq(mdr_sizes_total_bytes(NULL, &t), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_sizes_total_bytes(&s, NULL), MDR_ERR_INVALID_ARGUMENT);
}

/* ---- names ----------------------------------------------------------------- */

Test(sizes, every_buffer_name_round_trips) {
  for (int b = 0; b < MDR_BUF_COUNT; b++) {
    const char *name = mdr_buffer_name(b);
    cr_assert_not_null(name, "buffer %d has no name", b);
    mdr_buffer back = MDR_BUF_COUNT;
    cr_assert_eq(mdr_buffer_from_name(name, &back), MDR_OK, "%s", name);
    cr_assert_eq(back, (mdr_buffer)b, "%s maps back to %d", name, (int)back);
  }
  cr_assert_eq(MDR_BUF_COUNT, 46);
  cr_assert_str_eq(mdr_buffer_name(MDR_BUF_HIDDEN_STATES), "hidden_states");
  cr_assert_str_eq(mdr_buffer_name(MDR_BUF_FFN_ACT_SCALE_KMAJOR), "ffn_act_scale_kmajor");
  cr_assert_str_eq(mdr_buffer_name(MDR_BUF_SSM_ROWWISE_W_BF16), "ssm_rowwise_w_bf16");
}

Test(sizes, out_of_range_buffers_have_no_name) {
  cr_assert_null(mdr_buffer_name(MDR_BUF_COUNT));
  cr_assert_null(mdr_buffer_name((mdr_buffer)(MDR_BUF_COUNT + 100)));
  cr_assert_null(mdr_buffer_name((mdr_buffer)-1));
}

Test(sizes, unknown_buffer_names_are_rejected_and_out_untouched) {
  static const char *const bad[] = {"", "hidden", "HIDDEN_STATES", "hidden_states ",
                                    "MDR_BUF_LOGITS", "glm_trimmed"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    mdr_buffer out = MDR_BUF_LOGITS;
    cr_assert_eq(mdr_buffer_from_name(bad[i], &out), MDR_ERR_INVALID_ARGUMENT, "\"%s\"", bad[i]);
    cr_assert_eq(out, MDR_BUF_LOGITS, "\"%s\" wrote out", bad[i]);
  }
  mdr_buffer out;
  cr_assert_eq(mdr_buffer_from_name(NULL, &out), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_buffer_from_name("logits", NULL), MDR_ERR_INVALID_ARGUMENT);
}
