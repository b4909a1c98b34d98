/* ar_norm_ref.h — the fused RMSNorm's reference, written from the contract
 * in include/mdr/comm.h ("The fused RMSNorm"), for the host-twin and GPU
 * suites. Independent of the library's code: the element formats come from
 * their definitions, and every binary32 step is computed in double and
 * rounded once to float (exact for a product; for a sum, quotient and
 * square root of floats the double result rounds to the correctly rounded
 * float, as double has more than 2 * 24 + 2 significand bits). */
#ifndef MDR_TEST_AR_NORM_REF_H
#define MDR_TEST_AR_NORM_REF_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* dt: 0 bf16, 1 fp16 (the MDR_DTYPE_ values). */
typedef struct nref_fmt {
  int p, emin, emax, bias, frac;
  uint32_t inf, sign;
} nref_fmt;

static inline const nref_fmt *nref_fmt_of(int dt) {
  static const nref_fmt bf16 = {8, -126, 127, 127, 7, 0x7f80u, 0x8000u};
  static const nref_fmt fp16 = {11, -14, 15, 15, 10, 0x7c00u, 0x8000u};
  return dt == 0 ? &bf16 : &fp16;
}

/* The value of bits h. */
static inline double nref_value(int dt, uint32_t h) {
  const nref_fmt *f = nref_fmt_of(dt);
  const uint32_t mag = h & ~f->sign & 0xffffu, ex = mag >> f->frac, man = mag & ((1u << f->frac) - 1);
  double v;
  if (ex == (f->inf >> f->frac)) v = man ? NAN : INFINITY;
  else if (ex == 0) v = ldexp((double)man, f->emin - f->frac);
  else v = ldexp((double)(man | (1u << f->frac)), (int)ex - f->bias - f->frac);
  return (h & f->sign) ? -v : v;
}

/* The nearest value of the format to x (a float), ties to even, as bits. */
static inline uint32_t nref_round(int dt, float xf) {
  const nref_fmt *f = nref_fmt_of(dt);
  const double x = (double)xf;
  const uint32_t sign = signbit(x) ? f->sign : 0;
  if (isnan(x)) return sign | f->inf | (1u << (f->frac - 1));
  if (isinf(x)) return sign | f->inf;
  const double a = fabs(x);
  if (a == 0) return sign;
  int e = ilogb(a);
  if (e < f->emin) e = f->emin;
  const double scaled = ldexp(a, f->p - 1 - e); /* exact */
  double q = floor(scaled);
  const double rest = scaled - q;
  if (rest > 0.5 || (rest == 0.5 && fmod(q, 2.0) == 1.0)) q += 1;
  if (q >= ldexp(1.0, f->p)) {
    q /= 2;
    e++;
  }
  if (e > f->emax) return sign | f->inf;
  const uint32_t hidden = 1u << (f->p - 1), qi = (uint32_t)q;
  if (qi < hidden) return sign | qi;
  return sign | ((uint32_t)(e + f->bias) << f->frac) | (qi - hidden);
}

/* One binary32 operation: its exact (or double) result rounded to float. */
static inline float nref_f(double v) { return (float)v; }

/* One row: r[0..h) the updated residual's bits, w[0..h) the weight's,
 * out[0..h) the normed row's bits. h a multiple of 8. */
static inline void nref_row(int dt, const uint32_t *r, const uint32_t *w, size_t h, float eps, uint32_t *out) {
  const size_t v = h / 8;
  size_t leaves = 1;
  while (leaves < v) leaves *= 2;
  float s[4096];
  for (size_t j = 0; j < leaves; j++) {
    s[j] = 0.0f;
    if (j >= v) continue;
    for (size_t k = 0; k < 8; k++) {
      const double x = nref_value(dt, r[8 * j + k]);
      const float sq = nref_f(x * x);
      s[j] = k == 0 ? sq : nref_f((double)s[j] + (double)sq);
    }
  }
  for (size_t half = leaves / 2; half >= 1; half /= 2)
    for (size_t j = 0; j < half; j++) s[j] = nref_f((double)s[j] + (double)s[j + half]);
  const float mean = nref_f((double)s[0] / (double)h);
  const float t = nref_f((double)mean + (double)eps);
  const float root = nref_f(sqrt((double)t));
  const float inv = nref_f(1.0 / (double)root);
  for (size_t i = 0; i < h; i++) {
    const float y = nref_f(nref_value(dt, r[i]) * (double)inv);
    out[i] = nref_round(dt, nref_f((double)y * nref_value(dt, w[i])));
  }
}

#endif
