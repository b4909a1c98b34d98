/* gpu_helpers.h — tiny CUDA kernels the GPU test cases enqueue as "caller
 * work" (only built with CUDA; C linkage). */
#ifndef MDR_TEST_GPU_HELPERS_H
#define MDR_TEST_GPU_HELPERS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A kernel that spins for about `ns` nanoseconds on `stream`. 0 or a cudaError_t. */
int tb_cuda_sleep(void *stream, uint64_t ns);
/* acc[0] += sum_i (i + 1) * ids[i] over n ids, acc[1] += n, on `stream`. */
int tb_cuda_accumulate(void *stream, const uint32_t *ids, size_t n, uint64_t *acc);
/* Same, with the count read on the device from *count (DYNAMIC bodies). */
int tb_cuda_accumulate_dev(void *stream, const uint32_t *ids, const uint32_t *count, uint64_t *acc);

#ifdef __cplusplus
}
#endif
#endif
