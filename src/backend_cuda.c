/* backend_cuda.c — the CUDA backend: the runtime API behind the vtable.
 *
 * Every CUDA error is recorded in the backend's last-error text (call site,
 * error name and description), the error state is cleared with
 * cudaGetLastError, and a status is returned: allocation failures are
 * MDR_ERR_OUT_OF_MEMORY, capture and instantiation failures MDR_ERR_CAPTURE,
 * anything else MDR_ERR_BACKEND. Streams are non-blocking; capture is in
 * thread-local mode and never on the legacy stream. */
#include "backend_impl.h"

#if defined(MDR_HAVE_CUDA)

#include <cuda_runtime.h>
#include <stdlib.h>

#include "zero_fused.h"

typedef struct cuda_backend {
  mdr_backend base;
  int device;
  int sm_count;
} cuda_backend;

static cuda_backend *cuda_of(mdr_backend *b) { return (cuda_backend *)b; }

static mdr_status cuda_status_of(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation: return MDR_ERR_OUT_OF_MEMORY;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: return MDR_ERR_NO_DEVICE;
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorStreamCaptureWrongThread:
    case cudaErrorCapturedEvent:
    case cudaErrorGraphExecUpdateFailure: return MDR_ERR_CAPTURE;
    default: return MDR_ERR_BACKEND;
  }
}

/* Record a failed call and clear the (non-sticky) error state. */
static mdr_status cuda_fail(mdr_backend *b, cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  return mdr_backend_fail(b, cuda_status_of(e), "cuda: %s: %s (%s)", what, cudaGetErrorName(e),
                          cudaGetErrorString(e));
}

#define CU(call, what)                              \
  do {                                              \
    cudaError_t e_ = (call);                        \
    if (e_ != cudaSuccess) return cuda_fail(b, e_, what); \
  } while (0)

static mdr_status cuda_alloc_device(mdr_backend *b, size_t n, mdr_dptr *out) {
  void *p = NULL;
  CU(cudaMalloc(&p, n), "cudaMalloc");
  *out = (mdr_dptr)(uintptr_t)p;
  return MDR_OK;
}

static void cuda_free_device(mdr_backend *b, mdr_dptr p) {
  (void)b;
  (void)cudaFree((void *)(uintptr_t)p);
}

static mdr_status cuda_alloc_pinned(mdr_backend *b, size_t n, void **host, mdr_dptr *dev) {
  void *h = NULL, *d = NULL;
  CU(cudaHostAlloc(&h, n, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
  cudaError_t e = cudaHostGetDevicePointer(&d, h, 0);
  if (e != cudaSuccess) {
    (void)cudaFreeHost(h);
    return cuda_fail(b, e, "cudaHostGetDevicePointer");
  }
  *host = h;
  *dev = (mdr_dptr)(uintptr_t)d;
  return MDR_OK;
}

static void cuda_free_pinned(mdr_backend *b, void *host) {
  (void)b;
  (void)cudaFreeHost(host);
}

static mdr_status cuda_memset_async(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n,
                                    mdr_stream s) {
  CU(cudaMemsetAsync((void *)(uintptr_t)dst, v, n, (cudaStream_t)s), "cudaMemsetAsync");
  return MDR_OK;
}

static mdr_status cuda_copy_h2d_async(mdr_backend *b, mdr_dptr dst, const void *src, size_t n,
                                      mdr_stream s) {
  CU(cudaMemcpyAsync((void *)(uintptr_t)dst, src, n, cudaMemcpyHostToDevice, (cudaStream_t)s),
     "cudaMemcpyAsync(H2D)");
  return MDR_OK;
}

static mdr_status cuda_copy_h2d(mdr_backend *b, mdr_dptr dst, const void *src, size_t n) {
  CU(cudaMemcpy((void *)(uintptr_t)dst, src, n, cudaMemcpyHostToDevice), "cudaMemcpy(H2D)");
  return MDR_OK;
}

static mdr_status cuda_copy_d2h(mdr_backend *b, void *dst, mdr_dptr src, size_t n) {
  CU(cudaMemcpy(dst, (const void *)(uintptr_t)src, n, cudaMemcpyDeviceToHost), "cudaMemcpy(D2H)");
  return MDR_OK;
}

static mdr_status cuda_fill(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n) {
  CU(cudaMemset((void *)(uintptr_t)dst, v, n), "cudaMemset");
  CU(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemset");
  return MDR_OK;
}

static mdr_status cuda_stream_create(mdr_backend *b, mdr_stream *out) {
  cudaStream_t s = NULL;
  CU(cudaSetDevice(cuda_of(b)->device), "cudaSetDevice");
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  *out = s;
  return MDR_OK;
}

static void cuda_stream_destroy(mdr_backend *b, mdr_stream s) {
  (void)b;
  (void)cudaStreamDestroy((cudaStream_t)s);
}

static mdr_status cuda_synchronize(mdr_backend *b, mdr_stream s) {
  CU(cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize");
  return MDR_OK;
}

static mdr_status cuda_stream_query(mdr_backend *b, mdr_stream s, int *idle) {
  cudaError_t e = cudaStreamQuery((cudaStream_t)s);
  if (e == cudaErrorNotReady) {
    *idle = 0;
    return MDR_OK;
  }
  CU(e, "cudaStreamQuery");
  *idle = 1;
  return MDR_OK;
}

static mdr_status cuda_capture_begin(mdr_backend *b, mdr_stream s) {
  if (!s) return mdr_backend_fail(b, MDR_ERR_CAPTURE, "cuda: capture on the legacy stream refused");
  CU(cudaStreamBeginCapture((cudaStream_t)s, cudaStreamCaptureModeThreadLocal),
     "cudaStreamBeginCapture");
  return MDR_OK;
}

static mdr_status cuda_capture_end(mdr_backend *b, mdr_stream s, void **graph) {
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture((cudaStream_t)s, &g);
  if (e != cudaSuccess || !g) {
    if (g) (void)cudaGraphDestroy(g);
    return cuda_fail(b, e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated,
                     "cudaStreamEndCapture");
  }
  *graph = g;
  return MDR_OK;
}

static mdr_status cuda_is_capturing(mdr_backend *b, mdr_stream s, int *capturing) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CU(cudaStreamIsCapturing((cudaStream_t)s, &cs), "cudaStreamIsCapturing");
  *capturing = cs != cudaStreamCaptureStatusNone;
  return MDR_OK;
}

static mdr_status cuda_graph_instantiate(mdr_backend *b, void *graph, void **exec) {
  cudaGraphExec_t x = NULL;
  cudaError_t e = cudaGraphInstantiate(&x, (cudaGraph_t)graph, 0);
  if (e != cudaSuccess) {
    cuda_fail(b, e, "cudaGraphInstantiate");
    return MDR_ERR_CAPTURE;
  }
  *exec = x;
  return MDR_OK;
}

static mdr_status cuda_graph_upload(mdr_backend *b, void *exec, mdr_stream s) {
  CU(cudaGraphUpload((cudaGraphExec_t)exec, (cudaStream_t)s), "cudaGraphUpload");
  return MDR_OK;
}

static mdr_status cuda_graph_launch(mdr_backend *b, void *exec, mdr_stream s) {
  CU(cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)s), "cudaGraphLaunch");
  return MDR_OK;
}

static void cuda_graph_destroy(mdr_backend *b, void *graph) {
  (void)b;
  (void)cudaGraphDestroy((cudaGraph_t)graph);
}

static void cuda_exec_destroy(mdr_backend *b, void *exec) {
  (void)b;
  (void)cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

static mdr_status cuda_zero_fused(mdr_backend *b, const mdr_zero_seg *segs, size_t n,
                                  uint64_t tokens, const mdr_stage_desc *stage, mdr_stream s) {
  int e = mdr_cuda_zero_fused(segs, n, tokens, stage, s, cuda_of(b)->sm_count);
  if (e != 0) return cuda_fail(b, (cudaError_t)e, "zero_fused launch");
  return MDR_OK;
}

static mdr_status cuda_fused_node_find(mdr_backend *b, void *graph, void **node) {
  int e = mdr_cuda_zero_fused_find(graph, node);
  if (e != 0) return cuda_fail(b, (cudaError_t)e, "finding the fused node");
  return MDR_OK;
}

static mdr_status cuda_fused_node_update(mdr_backend *b, void *exec, void *node,
                                         const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                         const mdr_stage_desc *stage) {
  int e = mdr_cuda_zero_fused_update(exec, node, segs, n, tokens, stage, cuda_of(b)->sm_count);
  if (e != 0) return cuda_fail(b, (cudaError_t)e, "cudaGraphExecKernelNodeSetParams (fused node)");
  return MDR_OK;
}

static void cuda_destroy(mdr_backend *b) { free(b); }

static const struct mdr_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .alloc_device = cuda_alloc_device,
    .free_device = cuda_free_device,
    .alloc_pinned = cuda_alloc_pinned,
    .free_pinned = cuda_free_pinned,
    .memset_async = cuda_memset_async,
    .copy_h2d_async = cuda_copy_h2d_async,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .fill = cuda_fill,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .synchronize = cuda_synchronize,
    .stream_query = cuda_stream_query,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .is_capturing = cuda_is_capturing,
    .graph_instantiate = cuda_graph_instantiate,
    .graph_upload = cuda_graph_upload,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .exec_destroy = cuda_exec_destroy,
    .zero_fused = cuda_zero_fused,
    .fused_node_find = cuda_fused_node_find,
    .fused_node_update = cuda_fused_node_update,
};

mdr_status mdr_backend_cuda_create(int device, mdr_backend **out) {
  if (!out || device < 0) return MDR_ERR_INVALID_ARGUMENT;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0 || device >= count) {
    (void)cudaGetLastError();
    return MDR_ERR_NO_DEVICE;
  }
  int sms = 0;
  if (cudaSetDevice(device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return MDR_ERR_NO_DEVICE;
  }
  cuda_backend *cb = calloc(1, sizeof *cb);
  if (!cb) return MDR_ERR_OUT_OF_MEMORY;
  cb->base.ops = &cuda_ops;
  cb->device = device;
  cb->sm_count = sms;
  *out = &cb->base;
  return MDR_OK;
}

#else /* no CUDA in this build */

mdr_status mdr_backend_cuda_create(int device, mdr_backend **out) {
  if (!out || device < 0) return MDR_ERR_INVALID_ARGUMENT;
  return MDR_ERR_UNSUPPORTED;
}

#endif
