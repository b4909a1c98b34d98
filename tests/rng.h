/* rng.h — the tests' one random generator (splitmix64), header-only so the
 * Criterion suites (through support.h) and the plain soak program share it.
 * Seeded by the caller, so every failure replays. */
#ifndef MDR_TEST_RNG_H
#define MDR_TEST_RNG_H

#include <stdint.h>

/* The next value of the sequence at *state. */
static inline uint64_t tb_rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A value in [lo, hi]. */
static inline uint64_t tb_rng_range(uint64_t *state, uint64_t lo, uint64_t hi) {
  return lo + tb_rng_next(state) % (hi - lo + 1);
}

#endif
