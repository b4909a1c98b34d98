/* fuzz_provider.h — reads typed values from a libFuzzer input, in order;
 * past the end every read gives 0. Shared by the fuzz targets. */
#ifndef MDR_FUZZ_PROVIDER_H
#define MDR_FUZZ_PROVIDER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Abort on a broken invariant: a crash libFuzzer records as a finding,
 * after the invariant and its line (the targets' calls are inlined, so the
 * stack alone does not place it). */
#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);  \
      __builtin_trap();                                                                   \
    }                                                                                     \
  } while (0)

/* Undefined behaviour is fatal (a finding). One definition per target: each
 * target includes this header once. */
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "halt_on_error=1:print_stacktrace=1"; }

typedef struct fuzz_in {
  const uint8_t *data;
  size_t size, pos;
} fuzz_in;

static inline int fuzz_more(const fuzz_in *in) { return in->pos < in->size; }

static inline uint8_t fuzz_u8(fuzz_in *in) { return in->pos < in->size ? in->data[in->pos++] : 0; }

/* n bytes, little-endian (n <= 8). */
static inline uint64_t fuzz_bytes(fuzz_in *in, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; i++) v |= (uint64_t)fuzz_u8(in) << (8 * i);
  return v;
}

/* A size drawn to hit both ordinary values and the edges of size_t: 0, one
 * to eight bytes, powers of two, values next to SIZE_MAX and to 2^32. */
static inline size_t fuzz_size(fuzz_in *in) {
  uint8_t sel = fuzz_u8(in);
  switch (sel % 10) {
    case 0: return 0;
    case 1:
    case 2: return (size_t)fuzz_u8(in);
    case 3:
    case 4: return (size_t)fuzz_bytes(in, 2);
    case 5: return (size_t)fuzz_bytes(in, 4);
    case 6: return (size_t)fuzz_bytes(in, 8);
    case 7: return (size_t)1 << (fuzz_u8(in) % (8 * sizeof(size_t)));
    case 8: return SIZE_MAX - (size_t)fuzz_u8(in);
    default: {
      size_t p = (size_t)1 << (16 + fuzz_u8(in) % 32);
      return p + (size_t)(int8_t)fuzz_u8(in);
    }
  }
}

/* A small count: mostly 0 .. 63, with the byte's top bit a value up to 65535. */
static inline size_t fuzz_count(fuzz_in *in) {
  uint8_t b = fuzz_u8(in);
  return b & 0x80 ? (size_t)fuzz_bytes(in, 2) : (size_t)(b & 0x3F);
}

#endif
