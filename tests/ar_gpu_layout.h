/* ar_gpu_layout.h — a rank's slab in the one-GPU harnesses of mdr's
 * all-reduce kernels: tests/test_ar_gpu.c (ranks as threads, every slab in
 * one cudaMalloc) and tests/ar_gpu_procs.c (ranks as processes, a
 * cudaMalloc each, shared through CUDA IPC). Offsets are bytes from the
 * slab's base, which is the rank's window base: the same on every rank.
 *
 *   BUF_OFF     AREA bytes: the calls' rows, each call at its own offset
 *   RES_OFF     AREA bytes: their residual rows, at the same offsets
 *   NORM_OFF    AREA bytes: the fused RMSNorm's output rows, likewise
 *   WGT_OFF     AREA bytes: its weight, one row at the call's offset
 *   COUNT_OFF   MAX_CALLS count words (uint32), word k for a batch's call k
 *   REGION_OFF  the comm region (kernels/ar_protocol.h), 256-byte aligned,
 *               REGION_BYTES(n) for n ranks with 2 MiB one-shot slots */
#ifndef MDR_TEST_AR_GPU_LAYOUT_H
#define MDR_TEST_AR_GPU_LAYOUT_H

#include <stddef.h>

#include "ar_protocol.h"

enum {
  AREA = 8 << 20,   /* bytes of a slab's rows; its residual, norm and weight rows as many */
  MAX_CALLS = 4096, /* calls in one batch (one count word each) */
  GUARD = 64        /* bytes past a call's bound, checked untouched */
};

#define BUF_OFF ((size_t)0)
#define RES_OFF ((size_t)AREA)
#define NORM_OFF ((size_t)2 * AREA) /* the fused RMSNorm's output rows */
#define WGT_OFF ((size_t)3 * AREA)  /* its weight: a call's row at its offset */
#define COUNT_OFF ((size_t)4 * AREA)
#define REGION_OFF (((size_t)COUNT_OFF + MAX_CALLS * 4u + 255u) & ~(size_t)255u)
#define REGION_BYTES(n) MDR_ARP_REGION_BYTES(n, MDR_ARP_ONE_SHOT_MAX_BYTES)
#define SLAB_BYTES(n) ((REGION_OFF + REGION_BYTES(n) + 255u) & ~(size_t)255u)

#endif
