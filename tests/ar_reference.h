/* ar_reference.h — the all-reduce suites' reference arithmetic, written
 * from the element formats' definitions, independently of src/ and
 * kernels/: rounding a float to bf16 or fp16 (to nearest, ties to even,
 * overflow to infinity) and widening them back, exactly, on doubles (no
 * libm). Shared by the all_reduce suite (host communicator and two GPUs)
 * and the ar_gpu harness (ranks on one GPU). */
#ifndef MDR_TEST_AR_REFERENCE_H
#define MDR_TEST_AR_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

/* A binary floating-point format of 16 bits. */
typedef struct ar_fmt {
  int p;          /* significand bits, the implicit one included */
  int emin, emax; /* exponent range of normal numbers */
  int bias, frac; /* exponent bias, stored fraction bits */
  uint32_t inf, sign;
} ar_fmt;
extern const ar_fmt ar_bf16, ar_fp16;

/* The nearest value of the format to x, ties to even, as bits; overflow
 * gives infinity; a NaN stays a (quiet) NaN of its sign. */
uint32_t ar_ref_round(const ar_fmt *f, float x);
/* The value of bits h of the format, exactly. */
float ar_ref_widen(const ar_fmt *f, uint32_t h);
/* Tables of every bf16 and fp16 value (filled once, thread-safe). */
const float *ar_ref_bf16_table(void);
const float *ar_ref_fp16_table(void);

/* Elements of dtype dt (the codes of mdr_dtype: 0 bf16, 1 fp16, 2 fp32)
 * at index i of p: their bits, set from bits, their value, and a value
 * rounded once to dt. */
uint32_t ar_elem_bits(const unsigned char *p, size_t i, int dt);
void ar_elem_set_bits(unsigned char *p, size_t i, int dt, uint32_t bits);
float ar_bits_float(uint32_t bits, int dt);
uint32_t ar_float_bits(float v, int dt);

#endif
