/* mdr — arena buffer sizes from a model config.
 *
 * Implements docs/SIZES.md §2-§8 with the default environment (every lever
 * of §8 off). "section N" and "#N" below are that document's section and
 * buffer numbers; symbols in comments are its symbols (M, Mp, H, Hq, ...).
 * All arithmetic is size_t; every product and sum goes through the checked
 * helpers below, which set a sticky overflow flag instead of wrapping, so
 * the formulas read like the document and the caller checks the flag once
 * at the end. */
#include "mdr/sizes.h"

#include <string.h>

/* ---- buffer names (X-macro of sizes.h) ------------------------------------ */

static const char *const buffer_names[MDR_BUF_COUNT] = {
#define MDR_BUFFER_NAME_(e, name) [e] = #name,
    MDR_BUFFER_LIST(MDR_BUFFER_NAME_)
#undef MDR_BUFFER_NAME_
};

const char *mdr_buffer_name(mdr_buffer b) {
  if ((unsigned)b >= (unsigned)MDR_BUF_COUNT) return NULL;
  return buffer_names[b];
}

mdr_status mdr_buffer_from_name(const char *name, mdr_buffer *out) {
  if (name == NULL || out == NULL) return MDR_ERR_INVALID_ARGUMENT;
  for (int b = 0; b < MDR_BUF_COUNT; b++) {
    if (strcmp(name, buffer_names[b]) == 0) {
      *out = (mdr_buffer)b;
      return MDR_OK;
    }
  }
  return MDR_ERR_INVALID_ARGUMENT;
}

/* ---- checked arithmetic (section 1) --------------------------------------- */

/* The state of one sizing: the config, the derived quantities of sections 2.2
 * and 3, and the sticky overflow flag every checked helper sets. */
typedef struct sizer {
  const mdr_model_config *c;
  bool overflow;
  /* section 3: row extents and derived limits */
  size_t M, Mp, Mk, R, S, maxblk, logits_rows;
  /* section 2.2: derived config quantities */
  size_t qmul, qkv_dim, qkvz, ba, d_inner, d_xbc, in_proj, max_dim, moe_in, kproj;
  size_t Kf; /* section 4: max(H, I), the dense FFN's widest K */
  bool mla;
} sizer;

/* Product of n factors; 0 and the flag set on overflow. */
static size_t mul_n(sizer *z, const size_t *f, size_t n) {
  size_t p = 1;
  for (size_t i = 0; i < n; i++) {
    if (__builtin_mul_overflow(p, f[i], &p)) {
      z->overflow = true;
      return 0;
    }
  }
  return p;
}

/* Sum of n terms; 0 and the flag set on overflow. */
static size_t add_n(sizer *z, const size_t *t, size_t n) {
  size_t s = 0;
  for (size_t i = 0; i < n; i++) {
    if (__builtin_add_overflow(s, t[i], &s)) {
      z->overflow = true;
      return 0;
    }
  }
  return s;
}

static size_t max_n(const size_t *t, size_t n) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++) m = t[i] > m ? t[i] : m;
  return m;
}

/* Variadic front ends: MUL(z, a, b, c) = a*b*c checked; ADD likewise;
 * MAXOF(a, b, c) = the largest term. */
#define TERMS_(...) ((const size_t[]){__VA_ARGS__})
#define NTERMS_(...) (sizeof TERMS_(__VA_ARGS__) / sizeof(size_t))
#define MUL(z, ...) mul_n((z), TERMS_(__VA_ARGS__), NTERMS_(__VA_ARGS__))
#define ADD(z, ...) add_n((z), TERMS_(__VA_ARGS__), NTERMS_(__VA_ARGS__))
#define MAXOF(...) max_n(TERMS_(__VA_ARGS__), NTERMS_(__VA_ARGS__))

static size_t min2(size_t a, size_t b) { return a < b ? a : b; }

/* cdiv(a, b) = ceil(a / b); never overflows. */
static size_t cdiv(size_t a, size_t b) { return a / b + (a % b != 0); }

/* up(x, k) = cdiv(x, k) * k, checked. */
static size_t up(sizer *z, size_t x, size_t k) { return MUL(z, cdiv(x, k), k); }

static size_t ceil16(sizer *z, size_t x) { return up(z, x, 16); }

/* ---- derived quantities (sections 2.2 and 3) ------------------------------ */

static void derive_limits(sizer *z, const mdr_limits *l) {
  z->M = l->max_batch_tokens;
  z->Mp = ceil16(z, z->M);
  z->Mk = ceil16(z, MAXOF(z->M, 3));
  z->R = MAXOF(l->max_batch_size, 32);
  z->S = l->max_seq_len;
  z->maxblk = l->kv_block_size > 0 ? ADD(z, l->max_seq_len / l->kv_block_size, 1) : 256;
  /* 160 = the batched-verify row cap */
  z->logits_rows = min2(z->M, MAXOF(160, ADD(z, z->R, 1)));
}

static void derive_config(sizer *z) {
  const mdr_model_config *c = z->c;
  z->qmul = c->attn_gated ? 2 : 1;
  z->qkv_dim = MUL(z, ADD(z, MUL(z, c->num_attention_heads, z->qmul),
                          MUL(z, 2, c->num_key_value_heads)),
                   c->head_dim);
  z->qkvz = ADD(z, MUL(z, 2, c->linear_num_key_heads, c->linear_key_head_dim),
                MUL(z, 2, c->linear_num_value_heads, c->linear_value_head_dim));
  z->ba = MUL(z, 2, c->linear_num_value_heads);
  z->d_inner = MUL(z, c->mamba_num_heads, c->mamba_head_dim);
  z->d_xbc = ADD(z, z->d_inner, MUL(z, 2, c->n_groups, c->ssm_state_size));
  z->in_proj = ADD(z, z->d_inner, z->d_xbc, c->mamba_num_heads);
  z->max_dim = MAXOF(c->hidden_size, z->d_inner);
  z->moe_in = c->moe_latent_size > 0 ? c->moe_latent_size : c->hidden_size;
  z->mla = c->kv_lora_rank > 0;
  z->kproj = MAXOF(c->hidden_size, MUL(z, c->num_attention_heads, c->head_dim), z->d_inner,
                   MUL(z, c->linear_num_value_heads, c->linear_value_head_dim));
  z->Kf = MAXOF(c->hidden_size, c->intermediate_size);
}

/* ---- layouts (section 5) -------------------------------------------------- */

/* 5.1 DecodeMetaLayout: 24R bytes of per-row metadata, then the block table. */
static size_t meta_bytes(sizer *z, size_t rows, size_t maxblk) {
  return ADD(z, MUL(z, 24, rows), MUL(z, rows, maxblk, 4));
}

/* 5.2 layout 2: MoE top-K area, then the prefill chunk metadata. */
static size_t scratch_prefill(sizer *z, size_t ps) {
  size_t moe_area = MUL(z, 2, z->M, z->c->num_experts_per_tok, 4);
  size_t slot_off = up(z, MUL(z, z->M, 4, ps), 8);
  size_t bt_off = up(z, ADD(z, slot_off, MUL(z, z->M, 8)), 4);
  size_t sl_off = up(z, ADD(z, bt_off, MUL(z, z->maxblk, 4)), 4);
  size_t prefill_meta = ADD(z, sl_off, 4);
  return ADD(z, moe_area, prefill_meta);
}

/* 5.2 layout 3: batched decode or batched verify (R = 160), at scratch + 32768. */
static size_t scratch_decode(sizer *z) {
  return ADD(z, 32768, MAXOF(meta_bytes(z, 160, z->maxblk), meta_bytes(z, z->R, z->maxblk)));
}

/* 5.2 layout 4: kernel-batched prefill staging, n = 8 streams of c tokens. */
static size_t scratch_staging(sizer *z, size_t ps) {
  const size_t n = 8;
  size_t c = MAXOF(cdiv(z->M, n), 1);
  size_t T = MUL(z, n, c);
  size_t moe = up(z, MUL(z, T, z->c->num_experts_per_tok, 4, 2), 64);
  size_t meta = MUL(z, n, MAXOF(ADD(z, MUL(z, c, 16), 64), 4096));
  size_t pos = up(z, MUL(z, T, 4), 8);
  size_t slot = up(z, MUL(z, T, 8), 8);
  size_t ptrs = up(z, n * 8, 8);
  size_t cu = up(z, (n + 1) * 4, 8);
  size_t kvl = up(z, n * 4, 8);
  size_t stage = ADD(z, MUL(z, ps, pos), slot, MUL(z, 2, ptrs), cu, kvl);
  return ADD(z, moe, meta, stage, n * 8);
}

/* 5.2 scratch: the largest of its users' layouts, never below 65536. */
static size_t scratch_bytes(sizer *z) {
  size_t ps = z->c->mrope_interleaved ? 3 : 1; /* position streams */
  return MAXOF(65536, scratch_prefill(z, ps), scratch_decode(z), scratch_staging(z, ps));
}

/* 5.3 GDN chunked prefill: W, U, S, uc (BF16) and gc (F32), back to back. */
static size_t gdn_fla_bytes(sizer *z) {
  const mdr_model_config *c = z->c;
  size_t Lv = c->linear_num_value_heads, Lkd = c->linear_key_head_dim,
         Lvd = c->linear_value_head_dim;
  if (!(Lv > 0 && Lkd == 128 && Lvd == 128)) return 0;
  size_t nt = ADD(z, cdiv(z->M, 64), 16);
  size_t w = MUL(z, nt, Lv, 64, Lkd, 2);
  size_t u = MUL(z, nt, Lv, 64, Lvd, 2);
  size_t s = MUL(z, nt, Lv, Lkd, Lvd, 2);
  size_t uc = MUL(z, nt, Lv, 64, Lvd, 2);
  size_t gc = MUL(z, nt, Lv, 64, 4);
  return ADD(z, w, u, s, uc, gc);
}

/* 5.4 Mamba-2 chunked scan: dt and dA_cumsum [Mh][nc][64], CB [nc][g][64][64], F32. */
static size_t ssd_bytes(sizer *z) {
  size_t Mh = z->c->mamba_num_heads;
  if (!(Mh > 0 && z->c->ssm_state_size > 0)) return 0;
  size_t nc = ADD(z, cdiv(z->M, 64), 1);
  size_t g = MAXOF(z->c->n_groups, 1);
  return ADD(z, MUL(z, Mh, nc, 64, 4, 2), MUL(z, nc, g, 64, 64, 4));
}

/* 5.5 low-rank hyper-connection scratch: decode split vs prefill GEMM slabs. */
static size_t hc_lowrank_bytes(sizer *z) {
  size_t Hc = z->c->hc_mult, Hr = z->c->hc_lowrank, H = z->c->hidden_size;
  if (!(Hc > 0 && Hr > 0)) return 256;
  size_t t = min2(z->M, 64);
  size_t ts = min2(z->M, 2048);
  size_t decode = MUL(z, t, ADD(z, MUL(z, Hc, H), Hr), 4);
  size_t prefill = MUL(z, ts, ADD(z, MUL(z, 2, Hc, H), Hr, Hc), 2);
  return MAXOF(decode, prefill);
}

/* 5.5 QSA selection scratch: 2048-row slabs of qk, q_post, scores, lists. */
static size_t qsa_select_bytes(sizer *z) {
  const mdr_model_config *c = z->c;
  size_t Ih = c->index_n_heads, Id = c->index_head_dim, It = c->index_topk,
         Ic = c->index_compress_ratio;
  if (!(It > 0 && Ic > 0)) return 256;
  size_t qk = MUL(z, 2048, ADD(z, Ih, 1), Id, 2);
  size_t q_post = MUL(z, 2048, Ih, Id, 4);
  size_t scores = MUL(z, 2048, cdiv(z->S, Ic), 4);
  size_t lists = MUL(z, 2048, It / Ic, 4);
  return ADD(z, qk, q_post, scores, lists);
}

/* 5.6 split-K workspace, Legacy policy: one [o[D], m, l] F32 slot per SM. */
static size_t splitk_bytes(sizer *z, size_t sm_count) {
  return MUL(z, sm_count, ADD(z, z->c->head_dim, 2), 4);
}

/* 5.7 grouped FP8 MoE slab for `rows` tokens; 256-aligned regions. */
static size_t moe_fp8_bytes(sizer *z, size_t rows) {
  const mdr_model_config *c = z->c;
  size_t E = c->num_experts, K = c->num_experts_per_tok, H = c->hidden_size,
         Im = c->moe_intermediate_size;
  if (E == 0) return 0;
  size_t x = MUL(z, rows, K);
  size_t Ks = MAXOF(H, c->shared_expert_intermediate_size);
  size_t nt64 = cdiv(MAXOF(H, Im), 64);
  size_t act = MAXOF(MUL(z, rows, Ks), MUL(z, x, Im));
  size_t scales = MUL(z, MAXOF(MUL(z, rows, cdiv(Ks, 128)), MUL(z, x, cdiv(Im, 128))), 4);
  size_t items = MUL(z, ADD(z, cdiv(x, 128), E, 1), nt64);
  size_t scale = up(z, act, 256);
  size_t worklist = ADD(z, scale, up(z, scales, 256));
  size_t counter = ADD(z, worklist, up(z, MUL(z, items, 8), 256));
  if (E != 256) return ADD(z, counter, 4);
  /* small-expert worklist and its counter, only for exactly 256 experts */
  size_t small = up(z, ADD(z, counter, 4), 256);
  size_t small_counter = ADD(z, small, up(z, MUL(z, E, nt64, 8), 256));
  return ADD(z, small_counter, 4);
}

/* ---- per-buffer formulas (section 4), grouped by user --------------------- */

/* The "[if mla] M*Hq*(Rkv+Dr)*2" term of attn_output and ssm_deinterleaved. */
static size_t mla_attn_bytes(sizer *z) {
  const mdr_model_config *c = z->c;
  if (!z->mla) return 0;
  return MUL(z, z->M, c->num_attention_heads, ADD(z, c->kv_lora_rank, c->qk_rope_head_dim), 2);
}

/* #1-#10: activations, router and logits. */
static void size_activations(sizer *z, size_t *b) {
  const mdr_model_config *c = z->c;
  size_t M = z->M, H = c->hidden_size, Hq = c->num_attention_heads, D = c->head_dim;
  size_t E = c->num_experts, EZ = ADD(z, E, c->zero_expert_num);

  b[MDR_BUF_HIDDEN_STATES] = MUL(z, M, H, 2);
  b[MDR_BUF_RESIDUAL] = MUL(z, M, H, 2);
  b[MDR_BUF_NORM_OUTPUT] = MUL(z, M, z->max_dim, 2);
  b[MDR_BUF_QKV_OUTPUT] = MUL(z, z->Mp, z->qkv_dim, 2);
  b[MDR_BUF_ATTN_OUTPUT] =
      MAXOF(MUL(z, M, Hq, D, 2), MUL(z, M, z->d_inner, 2), mla_attn_bytes(z));
  /* the router buffers are exactly 256 bytes on a dense model */
  b[MDR_BUF_GATE_LOGITS] = E > 0 ? MUL(z, M, EZ, 2) : 256;
  b[MDR_BUF_GATE_LOGITS_F32] = E > 0 ? MUL(z, M, EZ, 4) : 256;
  b[MDR_BUF_MOE_ROUTER_IN_F32] = E > 0 ? MUL(z, M, H, 4) : 256;
  b[MDR_BUF_MOE_OUTPUT] = MUL(z, z->Mp, H, 2);
  b[MDR_BUF_LOGITS] = MUL(z, z->logits_rows, c->vocab_size, 2);
}

/* #11-#15: the SSM staging buffers, which MLA and Mamba-2 models re-use;
 * each is floored at 256 bytes. */
static void size_ssm_staging(sizer *z, size_t *b) {
  const mdr_model_config *c = z->c;
  size_t M = z->M, Mp = z->Mp, Hq = c->num_attention_heads, D = c->head_dim;
  size_t Dr = c->qk_rope_head_dim;
  size_t mla_ba = z->mla ? MAXOF(MUL(z, M, Dr, 2), MUL(z, M, c->q_lora_rank, 2)) : 0;
  size_t mla_rope = z->mla ? MUL(z, M, Hq, Dr, 2) : 0;

  b[MDR_BUF_SSM_QKVZ] =
      MAXOF(MUL(z, Mp, z->qkvz, 2), MUL(z, M, z->in_proj, 2),
            MUL(z, ADD(z, M, Mp), c->num_key_value_heads, D, 2),
            MUL(z, M, c->shared_expert_intermediate_size, 2), 256);
  b[MDR_BUF_SSM_BA] = MAXOF(MUL(z, M, z->ba, 2), MUL(z, M, c->moe_latent_size, 2), mla_ba, 256);
  b[MDR_BUF_SSM_DEINTERLEAVED] = MAXOF(MUL(z, Mp, z->qkvz, 2), MUL(z, M, z->d_xbc, 2),
                                       MUL(z, M, Hq, D, 2), mla_attn_bytes(z), 256);
  b[MDR_BUF_SSM_GATES] = MAXOF(MUL(z, M, c->linear_num_value_heads, 2, 4), 256);
  b[MDR_BUF_SSM_CONV_OUT_F32] = MAXOF(MUL(z, M, z->qkvz, 4), mla_rope, 256);
}

/* #17-#19 expert outputs (Mk rows) and #39 the grouped FP8 MoE slab. */
static void size_experts(sizer *z, size_t *b) {
  const mdr_model_config *c = z->c;
  size_t E = c->num_experts, K = c->num_experts_per_tok, I = c->intermediate_size;
  size_t W = E > 0 ? MAXOF(MUL(z, K, c->moe_intermediate_size), I) : I;

  b[MDR_BUF_EXPERT_GATE_OUT] = MUL(z, z->Mk, W, 2);
  b[MDR_BUF_EXPERT_UP_OUT] = MUL(z, z->Mk, W, 2);
  b[MDR_BUF_EXPERT_DOWN_OUT] =
      E > 0 ? MUL(z, z->Mk, K, z->moe_in, 2) : MUL(z, z->Mk, c->hidden_size, 2);
  b[MDR_BUF_MOE_FP8_SCRATCH] = moe_fp8_bytes(z, z->M); /* the arena sizes at rows = M */
}

/* #25-#28: hyper-connection streams; 256 bytes on a model without them. */
static void size_hyper_connections(sizer *z, size_t *b) {
  size_t M = z->M, Hc = z->c->hc_mult;
  b[MDR_BUF_HC_STREAMS] = Hc > 0 ? MUL(z, M, Hc, z->c->hidden_size, 4) : 256;
  b[MDR_BUF_HC_POST] = Hc > 0 ? MAXOF(MUL(z, M, Hc, 4), 256) : 256;
  b[MDR_BUF_HC_COMB] = Hc > 0 ? MAXOF(MUL(z, M, Hc, Hc, 4), 256) : 256;
  b[MDR_BUF_HC_LOWRANK_SCRATCH] = hc_lowrank_bytes(z);
}

/* #31-#35: dense-FFN quantisation buffers; 0 on a MoE model. Kf/32 and
 * Kf/128 are floor divisions; only ffn_act_q8 pads Kf up to 256. */
static void size_dense_ffn(sizer *z, size_t *b) {
  if (z->c->num_experts > 0) return;
  size_t Mp = z->Mp, Kf = z->Kf;
  b[MDR_BUF_FFN_ACT_Q8] = ADD(z, MUL(z, z->M, up(z, Kf, 256), 4), 1048576);
  b[MDR_BUF_FFN_ACT_A] = MUL(z, Mp, Kf);
  b[MDR_BUF_FFN_ACT_SCALE] = MUL(z, Mp, Kf / 32, 4);
  b[MDR_BUF_FFN_ACT_SCALE_KMAJOR] = MUL(z, Mp, Kf / 128, 4);
  /* 16 = ceil16 of the fused decode band's largest M */
  b[MDR_BUF_FFN_GATE_UP_FUSED] = MUL(z, 16, 2, z->c->intermediate_size, 2);
}

/* #36-#38: FP8 prefill activations at the widest K (kproj), 128-wide scales. */
static void size_fp8(sizer *z, size_t *b) {
  size_t scale_bytes = MUL(z, z->Mp, cdiv(z->kproj, 128), 4);
  b[MDR_BUF_FP8_ACT] = MUL(z, z->Mp, z->kproj);
  b[MDR_BUF_FP8_ACT_SCALE] = scale_bytes;
  b[MDR_BUF_FP8_ACT_SCALE_KMAJOR] = scale_bytes;
}

/* #40-#43: LoRA scratch; 0 without adapters. */
static void size_lora(sizer *z, size_t *b) {
  const mdr_model_config *c = z->c;
  size_t M = z->M, I = c->intermediate_size;
  if (c->adapter_max_rank == 0) return;
  size_t widest = MAXOF(c->hidden_size, I, MUL(z, z->qmul, c->num_attention_heads, c->head_dim));
  b[MDR_BUF_LORA_XA] = MUL(z, M, c->adapter_max_rank, 2);
  b[MDR_BUF_LORA_DELTA] = MUL(z, M, widest, 2);
  b[MDR_BUF_LORA_HACT] = MUL(z, M, I, 2);
  b[MDR_BUF_LORA_SEQ_SLOT] = MUL(z, M, 4);
}

/* Section 7: the entries the GLM-5.3 arena trim leaves NULL. */
static const mdr_buffer glm_trimmed_buffers[] = {
    MDR_BUF_QKV_OUTPUT,        MDR_BUF_ATTN_OUTPUT,         MDR_BUF_GATE_LOGITS,
    MDR_BUF_GATE_LOGITS_F32,   MDR_BUF_MOE_ROUTER_IN_F32,   MDR_BUF_SSM_QKVZ,
    MDR_BUF_SSM_BA,            MDR_BUF_SSM_DEINTERLEAVED,   MDR_BUF_SSM_GATES,
    MDR_BUF_SSM_CONV_OUT_F32,  MDR_BUF_EXPERT_GATE_OUT,     MDR_BUF_EXPERT_UP_OUT,
    MDR_BUF_EXPERT_DOWN_OUT,   MDR_BUF_GDN_FLA_SCRATCH,     MDR_BUF_FP8_ACT,
    MDR_BUF_FP8_ACT_SCALE,     MDR_BUF_FP8_ACT_SCALE_KMAJOR, MDR_BUF_MOE_FP8_SCRATCH,
};

static void apply_glm_trim(size_t *b) {
  for (size_t i = 0; i < sizeof glm_trimmed_buffers / sizeof glm_trimmed_buffers[0]; i++)
    b[glm_trimmed_buffers[i]] = 0;
}

/* total_bytes (section 4) leaves out the preflight reserve. */
static bool counted_in_total(int b) {
  return b != MDR_BUF_O_LATENT && b != MDR_BUF_NORM_UNIT_W;
}

/* ---- public entry points -------------------------------------------------- */

void mdr_sizes_options_default(mdr_sizes_options *o) {
  if (o == NULL) return;
  o->glm_trim = false;
  o->splitk_sm_count = 48; /* section 5.6: targets without a declared sm_count */
}

mdr_status mdr_sizes_from_config(const mdr_model_config *c, const mdr_limits *l, mdr_sizes *out) {
  return mdr_sizes_from_config_ex(c, l, NULL, out);
}

mdr_status mdr_sizes_from_config_ex(const mdr_model_config *c, const mdr_limits *l,
                                    const mdr_sizes_options *o, mdr_sizes *out) {
  mdr_sizes_options opt;
  mdr_sizes_options_default(&opt);
  if (o != NULL) opt = *o;
  if (c == NULL || l == NULL || out == NULL || opt.splitk_sm_count == 0)
    return MDR_ERR_INVALID_ARGUMENT;
  if (l->max_batch_tokens == 0) return MDR_ERR_OUT_OF_RANGE;

  sizer z = {.c = c};
  derive_limits(&z, l);
  derive_config(&z);

  /* Buffers no group sets stay 0: the lever-gated #44-#46 (section 8), and
   * the dense-FFN / LoRA entries their groups skip. */
  mdr_sizes s = {.max_batch_tokens = z.M, .logits_rows = z.logits_rows};
  size_activations(&z, s.bytes);
  size_ssm_staging(&z, s.bytes);
  s.bytes[MDR_BUF_SCRATCH] = scratch_bytes(&z);
  size_experts(&z, s.bytes);
  s.bytes[MDR_BUF_SPLITK_WORKSPACE] = splitk_bytes(&z, opt.splitk_sm_count);
  s.bytes[MDR_BUF_GDN_FLA_SCRATCH] = gdn_fla_bytes(&z);
  s.bytes[MDR_BUF_SSD_SCRATCH] = ssd_bytes(&z);
  s.bytes[MDR_BUF_O_LATENT] = MAXOF(MUL(&z, z.M, c->o_groups, c->o_lora_rank, 2), 256);
  s.bytes[MDR_BUF_NORM_UNIT_W] = MUL(&z, z.max_dim, 2);
  size_hyper_connections(&z, s.bytes);
  s.bytes[MDR_BUF_QSA_SELECT_SCRATCH] = qsa_select_bytes(&z);
  s.bytes[MDR_BUF_TOKEN_IDS] = MAXOF(MUL(&z, z.M, 4), 256);
  size_dense_ffn(&z, s.bytes);
  size_fp8(&z, s.bytes);
  size_lora(&z, s.bytes);

  if (opt.glm_trim && c->family == MDR_FAMILY_GLM5_NEXT) apply_glm_trim(s.bytes);

  /* The arena allocates every entry in one slab: their sum must fit too. */
  add_n(&z, s.bytes, MDR_BUF_COUNT);
  if (z.overflow) return MDR_ERR_OVERFLOW;
  *out = s;
  return MDR_OK;
}

mdr_status mdr_sizes_total_bytes(const mdr_sizes *s, size_t *out) {
  if (s == NULL || out == NULL) return MDR_ERR_INVALID_ARGUMENT;
  size_t total = 0;
  for (int b = 0; b < MDR_BUF_COUNT; b++) {
    if (counted_in_total(b) && __builtin_add_overflow(total, s->bytes[b], &total))
      return MDR_ERR_OVERFLOW;
  }
  *out = total;
  return MDR_OK;
}
