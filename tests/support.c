#include "support.h"

#include <stdlib.h>
#include <string.h>

#if defined(MDR_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

const char *tb_kind_name(tb_kind k) { return k == TB_CUDA ? "cuda" : "host"; }

mdr_backend *tb_backend(tb_kind k) {
  mdr_backend *b = NULL;
  if (k == TB_HOST) {
    cr_assert_eq(mdr_backend_host_create(&b), MDR_OK);
    return b;
  }
  mdr_status st = mdr_backend_cuda_create(0, &b);
  if (st == MDR_ERR_NO_DEVICE || st == MDR_ERR_UNSUPPORTED) {
    cr_assert_null(b);
    cr_skip_test("no CUDA device");
  }
  cr_assert_eq(st, MDR_OK, "cuda backend: %s", mdr_status_string(st));
  return b;
}

mdr_stream tb_stream(mdr_backend *b) {
  mdr_stream s = NULL;
  cr_assert_eq(mdr_backend_stream_create(b, &s), MDR_OK, "%s", mdr_backend_last_error(b));
  return s;
}

unsigned char tb_poison_of(mdr_buffer buf) { return (unsigned char)(0x80 + (unsigned)buf * 3); }

void tb_poison_arena(mdr_arena *a) {
  mdr_backend *b = mdr_arena_backend(a);
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    mdr_dptr p = mdr_arena_ptr(a, (mdr_buffer)i);
    if (!p) continue;
    cr_assert_eq(mdr_backend_fill(b, p, tb_poison_of((mdr_buffer)i), mdr_arena_bytes(a, (mdr_buffer)i)),
                 MDR_OK, "%s", mdr_backend_last_error(b));
  }
}

long tb_check_head(mdr_backend *b, mdr_dptr p, size_t bytes, size_t zero, unsigned char poison) {
  enum { STEP = 1 << 20 };
  unsigned char *buf = malloc(STEP), *want = malloc(STEP);
  cr_assert(buf && want);
  long bad = -1;
  for (size_t off = 0; off < bytes && bad < 0; off += STEP) {
    size_t n = bytes - off < STEP ? bytes - off : STEP;
    cr_assert_eq(mdr_backend_copy_d2h(b, buf, p + off, n), MDR_OK, "%s", mdr_backend_last_error(b));
    size_t z = zero <= off ? 0 : (zero - off < n ? zero - off : n);
    memset(want, 0, z);
    memset(want + z, poison, n - z);
    if (memcmp(buf, want, n) == 0) continue;
    for (size_t i = 0; i < n; i++)
      if (buf[i] != want[i]) {
        bad = (long)(off + i);
        break;
      }
  }
  free(buf);
  free(want);
  return bad;
}

void tb_expect_arena(mdr_arena *a, const size_t expect[MDR_BUF_COUNT], const char *what) {
  mdr_backend *b = mdr_arena_backend(a);
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    mdr_buffer buf = (mdr_buffer)i;
    mdr_dptr p = mdr_arena_ptr(a, buf);
    size_t bytes = mdr_arena_bytes(a, buf);
    if (!p) {
      cr_assert_eq(bytes, 0, "%s: NULL buffer %s has size %zu", what, mdr_buffer_name(buf), bytes);
      continue;
    }
    /* norm_unit_w was zeroed at create, then poisoned by the test. */
    long bad = tb_check_head(b, p, bytes, expect[i], tb_poison_of(buf));
    cr_assert_eq(bad, -1, "%s: %s (%zu bytes, expected %zu zero) wrong at byte %ld", what,
                 mdr_buffer_name(buf), bytes, expect[i], bad);
  }
}

mdr_sizes tb_preset_sizes(const char *preset, size_t m) {
  mdr_model_config c;
  mdr_limits l = {.max_batch_tokens = m, .max_seq_len = 4096, .kv_block_size = 16, .max_batch_size = 4};
  mdr_sizes s;
  cr_assert_eq(mdr_model_preset(preset, &c), MDR_OK, "preset %s", preset);
  cr_assert_eq(mdr_sizes_from_config(&c, &l, &s), MDR_OK, "sizes of %s at M=%zu", preset, m);
  return s;
}


/* §9, by name. */
const char *const tb_zero_all_names[] = {
    "hidden_states", "residual", "norm_output", "qkv_output", "attn_output", "gate_logits",
    "moe_output", "ssm_qkvz", "ssm_ba", "ssm_deinterleaved", "ssm_gates", "ssm_conv_out_f32",
    "splitk_workspace", "expert_gate_out", "expert_up_out", "expert_down_out", "logits", "scratch"};
static const char *const k_prefill_names[] = {"hidden_states", "residual", "gate_logits",
                                              "expert_gate_out", "expert_up_out",
                                              "expert_down_out", "moe_output"};

static int in_list(const char *const *list, size_t n, mdr_buffer buf) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(list[i], mdr_buffer_name(buf)) == 0) return 1;
  return 0;
}

/* The spec's pseudo-code, transcribed. */
static size_t ref_head(size_t n, size_t m, size_t t) {
  if (m < 1) m = 1;
  if (t >= m) return n;
  if (n % m == 0) return n / m * t;
  size_t m16 = (m + 15) / 16 * 16;
  if (n % m16 == 0) {
    size_t t16 = (t + 15) / 16 * 16;
    return n / m16 * (t16 < m16 ? t16 : m16);
  }
  return n;
}


void tb_expected(const mdr_arena *a, tb_helper h, size_t t, mdr_rows_policy pol,
                     size_t out[MDR_BUF_COUNT]) {
  const mdr_sizes *s = mdr_arena_sizes(a);
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    mdr_buffer b = (mdr_buffer)i;
    size_t n = s->bytes[i];
    out[i] = 0;
    if (h == TB_ZERO_PREFILL) {
      if (in_list(k_prefill_names, 7, b)) out[i] = n;
    } else if (in_list(tb_zero_all_names, 18, b)) {
      const char *name = mdr_buffer_name(b);
      int whole = !strcmp(name, "splitk_workspace") || !strcmp(name, "logits") || !strcmp(name, "scratch");
      if (h == TB_ZERO_ALL) out[i] = n;
      else if (!strcmp(name, "logits") && pol == MDR_ROWS_ALL)
        out[i] = (t < s->logits_rows ? t : s->logits_rows) * (n / s->logits_rows);
      else if (whole) out[i] = n;
      else out[i] = ref_head(n, s->max_batch_tokens, t); /* at every t, 0 included */
    }
  }
}


mdr_sizes tb_small_sizes(void) {
  enum { M = TB_SMALL_M, MP = TB_SMALL_MP };
  mdr_sizes s;
  memset(&s, 0, sizeof s);
  s.max_batch_tokens = M;
  s.logits_rows = M;
  s.bytes[MDR_BUF_HIDDEN_STATES] = M * 64;
  s.bytes[MDR_BUF_RESIDUAL] = M * 64;
  s.bytes[MDR_BUF_NORM_OUTPUT] = M * 32;
  s.bytes[MDR_BUF_QKV_OUTPUT] = MP * 96;
  s.bytes[MDR_BUF_ATTN_OUTPUT] = M * 48;
  s.bytes[MDR_BUF_GATE_LOGITS] = M * 18;
  s.bytes[MDR_BUF_MOE_OUTPUT] = MP * 64;
  s.bytes[MDR_BUF_LOGITS] = M * 100;
  s.bytes[MDR_BUF_SSM_QKVZ] = 256;  /* floored, a multiple of neither M nor Mp: whole */
  s.bytes[MDR_BUF_SSM_BA] = M * 8 + 3;
  s.bytes[MDR_BUF_SSM_DEINTERLEAVED] = MP * 24;
  s.bytes[MDR_BUF_SSM_CONV_OUT_F32] = M * 4 * 3;
  s.bytes[MDR_BUF_SCRATCH] = 65536;
  s.bytes[MDR_BUF_TOKEN_IDS] = M * 4 < 256 ? 256 : M * 4;
  s.bytes[MDR_BUF_EXPERT_GATE_OUT] = MP * 32;
  s.bytes[MDR_BUF_EXPERT_UP_OUT] = MP * 32;
  s.bytes[MDR_BUF_EXPERT_DOWN_OUT] = MP * 40;
  s.bytes[MDR_BUF_SPLITK_WORKSPACE] = 4000;
  s.bytes[MDR_BUF_O_LATENT] = 256;
  s.bytes[MDR_BUF_NORM_UNIT_W] = 128;
  s.bytes[MDR_BUF_HC_STREAMS] = 256;
  s.bytes[MDR_BUF_FP8_ACT] = MP * 16;
  return s; /* ssm_gates, gate_logits_f32, … stay NULL */
}

size_t tb_first_not(const unsigned char *p, size_t n, unsigned char v) {
  unsigned char ref[4096];
  size_t i = 0;
  if (n >= sizeof ref) {
    memset(ref, v, sizeof ref);
    for (; i + sizeof ref <= n; i += sizeof ref)
      if (memcmp(p + i, ref, sizeof ref) != 0) break;
  }
  for (; i < n; i++)
    if (p[i] != v) return i;
  return n;
}
