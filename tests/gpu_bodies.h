/* gpu_bodies.h — graph-cache bodies for the GPU test cases (CUDA builds
 * only): each step folds the arena's token_ids into a device accumulator
 * (tb_cuda_accumulate), so that a case can show every step read its own
 * ids, however far the host ran ahead. */
#ifndef MDR_TEST_GPU_BODIES_H
#define MDR_TEST_GPU_BODIES_H

#include <stdint.h>

#include "gpu_helpers.h"
#include "mdr/arena.h"
#include "mdr/graph.h"

typedef struct tb_acc_user {
  mdr_arena *a;
  uint64_t *acc; /* device: {sum of (i + 1) * id, ids} */
} tb_acc_user;

/* An EXACT or LADDER body: `tokens` ids. */
static inline mdr_status tb_acc_body(void *user, mdr_stream s, size_t tokens) {
  tb_acc_user *u = user;
  return tb_cuda_accumulate(s, (const uint32_t *)(uintptr_t)mdr_arena_token_ids(u->a), tokens, u->acc)
             ? MDR_ERR_BACKEND
             : MDR_OK;
}

/* A DYNAMIC body: the count read on the device. */
static inline mdr_status tb_acc_body_dynamic(void *user, mdr_stream s, mdr_dptr count, size_t max_tokens) {
  (void)max_tokens;
  tb_acc_user *u = user;
  return tb_cuda_accumulate_dev(s, (const uint32_t *)(uintptr_t)mdr_arena_token_ids(u->a),
                                (const uint32_t *)(uintptr_t)count, u->acc)
             ? MDR_ERR_BACKEND
             : MDR_OK;
}

#endif
