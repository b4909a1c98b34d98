/* fuzz_arena.h — what the fuzz targets build on: the host backend behind
 * the fault wrapper, and small arena sizes (a few buffers of M = m rows,
 * some of them in 16-row tiles, sized as a tiny model's would be, every
 * other entry 0: a NULL buffer). */
#ifndef MDR_FUZZ_ARENA_H
#define MDR_FUZZ_ARENA_H

#include <string.h>

#include "fault_backend.h"
#include "fuzz_provider.h"
#include "mdr/sizes.h"

/* A host backend and the fault wrapper over it (host: the plain backend,
 * whose allocations the wrapper does not count). */
static inline void fuzz_backends(mdr_backend **host, mdr_backend **fb) {
  FUZZ_CHECK(mdr_backend_host_create(host) == MDR_OK);
  FUZZ_CHECK(fault_backend_create(*host, fb) == MDR_OK);
}

static inline mdr_sizes fuzz_small_sizes(size_t m) {
  mdr_sizes s;
  memset(&s, 0, sizeof s);
  const size_t mp = (m + 15) / 16 * 16;
  s.max_batch_tokens = m;
  s.logits_rows = m;
  s.bytes[MDR_BUF_HIDDEN_STATES] = m * 64;
  s.bytes[MDR_BUF_RESIDUAL] = m * 64;
  s.bytes[MDR_BUF_QKV_OUTPUT] = mp * 96;
  s.bytes[MDR_BUF_MOE_OUTPUT] = mp * 64;
  s.bytes[MDR_BUF_LOGITS] = m * 100;
  s.bytes[MDR_BUF_SSM_QKVZ] = 256;
  s.bytes[MDR_BUF_SSM_BA] = m * 8 + 3;
  s.bytes[MDR_BUF_SCRATCH] = 4096;
  s.bytes[MDR_BUF_TOKEN_IDS] = m * 4 < 256 ? 256 : m * 4;
  s.bytes[MDR_BUF_EXPERT_DOWN_OUT] = mp * 40;
  s.bytes[MDR_BUF_SPLITK_WORKSPACE] = 4000;
  s.bytes[MDR_BUF_NORM_UNIT_W] = 128;
  return s;
}

#endif
