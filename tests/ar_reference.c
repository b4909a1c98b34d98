/* ar_reference.c — see ar_reference.h. */
#include "ar_reference.h"

#include <math.h> /* macros only (isnan, signbit, INFINITY, NAN): no libm */
#include <pthread.h>
#include <string.h>

const ar_fmt ar_bf16 = {8, -126, 127, 127, 7, 0x7f80u, 0x8000u};
const ar_fmt ar_fp16 = {11, -14, 15, 15, 10, 0x7c00u, 0x8000u};

/* Exact helpers on doubles (no libm: a CPU-only build links none). */
static double pow2(int k) { /* 2^k, k in [-1022, 1023] */
  const uint64_t u = (uint64_t)(k + 1023) << 52;
  double d;
  memcpy(&d, &u, 8);
  return d;
}
static double scale2(double a, int k) { /* a * 2^k, exact for the values here */
  while (k > 1000) {
    a *= pow2(1000);
    k -= 1000;
  }
  while (k < -1000) {
    a *= pow2(-1000);
    k += 1000;
  }
  return a * pow2(k);
}
static int exponent_of(double a) { /* floor(log2(a)) of a normal double a > 0 */
  uint64_t u;
  memcpy(&u, &a, 8);
  return (int)((u >> 52) & 0x7ff) - 1023;
}
static double round_half_even(double q) { /* q in [0, 2^52): the nearest integer, ties to even */
  const double t = (double)(uint64_t)q, frac = q - t;
  if (frac > 0.5 || (frac == 0.5 && ((uint64_t)t & 1u))) return t + 1;
  return t;
}

uint32_t ar_ref_round(const ar_fmt *f, float x) {
  const uint32_t sign = signbit(x) ? f->sign : 0;
  if (isnan(x)) return sign | f->inf | (1u << (f->frac - 1));
  if (isinf(x)) return sign | f->inf;
  const double a = x < 0 ? -(double)x : (double)x; /* every float is a normal double */
  if (a == 0) return sign;
  int E = exponent_of(a);
  if (E < f->emin) E = f->emin; /* subnormal: the spacing of the smallest binade */
  double q = round_half_even(scale2(a, f->p - 1 - E)); /* the significand in units of the last place */
  if (q >= pow2(f->p)) { /* rounded up into the next binade */
    q /= 2;
    E++;
  }
  if (E > f->emax) return sign | f->inf;
  const uint32_t hidden = 1u << (f->p - 1), qi = (uint32_t)q;
  if (qi < hidden) return sign | qi;
  return sign | ((uint32_t)(E + f->bias) << f->frac) | (qi - hidden);
}

float ar_ref_widen(const ar_fmt *f, uint32_t h) {
  const uint32_t mag = h & ~f->sign & 0xffffu;
  const uint32_t ex = mag >> f->frac, man = mag & ((1u << f->frac) - 1);
  double v;
  if (ex == (f->inf >> f->frac)) {
    v = man ? NAN : INFINITY;
  } else if (ex == 0) {
    v = scale2((double)man, f->emin - f->frac);
  } else {
    v = scale2((double)(man | (1u << f->frac)), (int)ex - f->bias - f->frac);
  }
  return (float)((h & f->sign) ? -v : v);
}

static float g_bf16_tab[65536], g_fp16_tab[65536];
static pthread_once_t g_tab_once = PTHREAD_ONCE_INIT;
static void tab_init(void) {
  for (uint32_t h = 0; h < 65536; h++) {
    g_bf16_tab[h] = ar_ref_widen(&ar_bf16, h);
    g_fp16_tab[h] = ar_ref_widen(&ar_fp16, h);
  }
}
const float *ar_ref_bf16_table(void) {
  pthread_once(&g_tab_once, tab_init);
  return g_bf16_tab;
}
const float *ar_ref_fp16_table(void) {
  pthread_once(&g_tab_once, tab_init);
  return g_fp16_tab;
}


uint32_t ar_elem_bits(const unsigned char *p, size_t i, int dt) {
  if (dt == 2) {
    uint32_t u;
    memcpy(&u, p + 4 * i, 4);
    return u;
  }
  uint16_t h;
  memcpy(&h, p + 2 * i, 2);
  return h;
}

void ar_elem_set_bits(unsigned char *p, size_t i, int dt, uint32_t bits) {
  if (dt == 2) {
    memcpy(p + 4 * i, &bits, 4);
  } else {
    const uint16_t h = (uint16_t)bits;
    memcpy(p + 2 * i, &h, 2);
  }
}

float ar_bits_float(uint32_t bits, int dt) {
  if (dt == 2) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  return dt == 0 ? ar_ref_bf16_table()[bits & 0xffff] : ar_ref_fp16_table()[bits & 0xffff];
}

uint32_t ar_float_bits(float v, int dt) {
  if (dt == 2) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
  }
  return ar_ref_round(dt == 0 ? &ar_bf16 : &ar_fp16, v);
}
