/* bench_cuda.h — the raw CUDA kernels mdr-bench needs and the library does
 * not provide: an empty kernel (launch-overhead floors) and a blocker kernel
 * that holds a stream until the host releases it, so that a step's whole
 * work is queued before the GPU starts it and the events around it measure
 * GPU time only (the nvbench "blocking kernel" method).
 *
 * Plain C may include this header; it needs no CUDA header. Streams are
 * cudaStream_t passed as void *. Every launcher returns 0 or the
 * cudaError_t of the launch (read with cudaGetLastError, which clears it). */
#ifndef MDR_BENCH_CUDA_H
#define MDR_BENCH_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One block of one thread that does nothing. */
int bench_cuda_launch_empty(void *stream);

/* One thread that spins until the host-mapped word *release >= generation,
 * or until timeout_ns of GPU time have passed; then it sets *timed_out = 1.
 * release and timed_out are device addresses of mapped pinned memory. */
int bench_cuda_launch_blocker(void *stream, const volatile uint32_t *release, uint32_t generation,
                              uint64_t timeout_ns, uint32_t *timed_out);

#ifdef __cplusplus
}
#endif
#endif
