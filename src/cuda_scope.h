/* cuda_scope.h — a call's device scope (private): the calling thread's
 * current device, switched to the device a call runs on and switched back
 * when the call leaves, so that mdr never changes the device its caller
 * left current. Used by the CUDA backend (src/backend_cuda.c) and the NCCL
 * communicator (src/comm_nccl*.c), each of which records a failure in its
 * own words.
 *
 * C11 and the CUDA runtime's C API only. */
#ifndef MDR_CUDA_SCOPE_H
#define MDR_CUDA_SCOPE_H

#include <cuda_runtime_api.h>
#include <stddef.h>

typedef struct device_scope {
  int prev;     /* the caller's current device */
  int switched; /* 1: prev is restored on leaving */
} device_scope;

/* Make `device` current for one call. cudaSuccess, or the error of the call
 * that failed (named in *failed when failed is not NULL: "cudaGetDevice" or
 * "cudaSetDevice"), with CUDA's error state cleared and nothing switched:
 * device_leave is then a no-op. */
static inline cudaError_t device_enter(int device, device_scope *g, const char **failed) {
  g->switched = 0;
  cudaError_t e = cudaGetDevice(&g->prev);
  const char *what = "cudaGetDevice";
  if (e == cudaSuccess && g->prev != device) {
    e = cudaSetDevice(device);
    what = "cudaSetDevice";
    g->switched = e == cudaSuccess;
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (failed) *failed = what;
  }
  return e;
}

/* Restore the caller's device. A failure is ignored on purpose: the call's
 * own result stands and there is nothing left to undo; CUDA's error state
 * is cleared so that it is not taken for a later call's. */
static inline void device_leave(const device_scope *g) {
  if (g->switched && cudaSetDevice(g->prev) != cudaSuccess) (void)cudaGetLastError();
}

#endif
