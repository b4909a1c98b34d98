/* backend_cuda.c — the CUDA backend: the runtime API behind the vtable.
 *
 * Every CUDA error is recorded in the backend's last-error text (call site,
 * error name and description), the error state is cleared with
 * cudaGetLastError, and a status is returned: allocation failures are
 * MDR_ERR_OUT_OF_MEMORY, capture and instantiation failures MDR_ERR_CAPTURE,
 * anything else MDR_ERR_BACKEND. Streams are non-blocking; capture is in
 * thread-local mode and never on the legacy stream.
 *
 * Device. A backend made for device d runs every call on d, whatever the
 * calling thread's current device is, and leaves the caller's current
 * device as it found it: calls that allocate, launch or capture switch to
 * d for their duration (DEVICE_SCOPE below); calls on a stream or exec
 * handle alone run in that handle's context and need no switch.
 *
 * Blocking calls (fill, copies) run on a private non-blocking stream of the
 * backend and wait for that stream only: never the legacy stream, never
 * the whole device, so they neither wait for an application's busy stream
 * nor break another thread's global-mode capture. When they return, the
 * data has landed; later work on any stream sees it.
 *
 * Graph nodes. The fused node a DYNAMIC cache re-targets is named by the
 * capture itself: right after the launch, cudaStreamGetCaptureInfo gives
 * the stream's capture dependencies, which are exactly the node the launch
 * became. An inline fused node (a small step's slot image in its
 * parameters) is named the same way and takes each step's image by a
 * kernel node update.
 *
 * Node updates go through the driver's cuGraphExecKernelNodeSetParams,
 * its entry point taken once at create (cudaGetDriverEntryPointByVersion)
 * with the function of every zeroing kernel (cudaGetFuncBySymbol, in the
 * backend's device's context): the runtime's own call maps the kernel's
 * host symbol to its function at every call, which an inline step pays on
 * every step. Without the entry point (a driver older than 12.0, a runtime
 * older than 12.5), with MDR_NODE_UPDATE_DRIVER off, or for a kernel whose
 * function the table lacks, the runtime's call does it; a failed driver update is done again by the
 * runtime's call, which either succeeds or records the error's name. */
#include "backend_impl.h"

#if defined(MDR_HAVE_CUDA)

#include <cuda.h> /* the driver's node-update types; the entry point comes from the runtime */
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_scope.h"
#include "env.h"
#include "zero_fused.h"

typedef struct cuda_backend {
  mdr_backend base;
  int device;
  int sm_count;
  cudaStream_t blocking; /* private stream of the blocking calls */
  /* the driver's node update, or NULL: the runtime's */
  PFN_cuGraphExecKernelNodeSetParams_v12000 node_set;
  mdr_cuda_kernel_fn fns[MDR_CUDA_ZERO_KERNELS]; /* symbol -> function, on this device */
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

/* Inside DEVICE_SCOPE: record a failure, restore the caller's device and
 * return. */
#define CU(call, what)                                       \
  do {                                                       \
    cudaError_t e_ = (call);                                 \
    if (e_ != cudaSuccess) {                                 \
      mdr_status st_ = cuda_fail(b, e_, what);               \
      device_leave(&scope_);                                 \
      return st_;                                            \
    }                                                        \
  } while (0)

/* The caller's current device, switched to the backend's for one call
 * (src/cuda_scope.h); a failure is recorded on b. */
static mdr_status device_enter_backend(mdr_backend *b, device_scope *g) {
  const char *what = "cudaSetDevice";
  const cudaError_t e = device_enter(cuda_of(b)->device, g, &what);
  return e == cudaSuccess ? MDR_OK : cuda_fail(b, e, what);
}

/* Open a scope on the backend's device for the rest of the function; leave
 * it with DEVICE_RETURN (or CU on failure). */
#define DEVICE_SCOPE(b)                                   \
  device_scope scope_;                                    \
  do {                                                    \
    mdr_status st0_ = device_enter_backend((b), &scope_); \
    if (st0_ != MDR_OK) return st0_;                      \
  } while (0)
#define DEVICE_RETURN(st)  \
  do {                     \
    device_leave(&scope_); \
    return (st);           \
  } while (0)
#define DEVICE_VOID(b, call)                                  \
  do {                                                        \
    device_scope scope_;                                      \
    if (device_enter_backend((b), &scope_) != MDR_OK) return; \
    (void)(call);                                             \
    device_leave(&scope_);                                    \
  } while (0)

static mdr_status cuda_alloc_device(mdr_backend *b, size_t n, mdr_dptr *out) {
  DEVICE_SCOPE(b);
  void *p = NULL;
  CU(cudaMalloc(&p, n), "cudaMalloc");
  *out = (mdr_dptr)(uintptr_t)p;
  DEVICE_RETURN(MDR_OK);
}

static void cuda_free_device(mdr_backend *b, mdr_dptr p) {
  DEVICE_VOID(b, cudaFree((void *)(uintptr_t)p));
}

static mdr_status cuda_alloc_pinned(mdr_backend *b, size_t n, void **host, mdr_dptr *dev) {
  DEVICE_SCOPE(b);
  void *h = NULL, *d = NULL;
  CU(cudaHostAlloc(&h, n, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
  cudaError_t e = cudaHostGetDevicePointer(&d, h, 0);
  if (e != cudaSuccess) {
    (void)cudaFreeHost(h);
    CU(e, "cudaHostGetDevicePointer");
  }
  *host = h;
  *dev = (mdr_dptr)(uintptr_t)d;
  DEVICE_RETURN(MDR_OK);
}

static void cuda_free_pinned(mdr_backend *b, void *host) {
  DEVICE_VOID(b, cudaFreeHost(host));
}

static mdr_status cuda_memset_async(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n,
                                    mdr_stream s) {
  DEVICE_SCOPE(b);
  CU(cudaMemsetAsync((void *)(uintptr_t)dst, v, n, (cudaStream_t)s), "cudaMemsetAsync");
  DEVICE_RETURN(MDR_OK);
}

/* The blocking calls: enqueued on the private stream, then that stream
 * (only) is waited for. */
static mdr_status cuda_copy_h2d(mdr_backend *b, mdr_dptr dst, const void *src, size_t n) {
  DEVICE_SCOPE(b);
  cudaStream_t q = cuda_of(b)->blocking;
  CU(cudaMemcpyAsync((void *)(uintptr_t)dst, src, n, cudaMemcpyHostToDevice, q), "cudaMemcpyAsync(H2D)");
  CU(cudaStreamSynchronize(q), "cudaStreamSynchronize after a copy to the device");
  DEVICE_RETURN(MDR_OK);
}

static mdr_status cuda_copy_d2h(mdr_backend *b, void *dst, mdr_dptr src, size_t n) {
  DEVICE_SCOPE(b);
  cudaStream_t q = cuda_of(b)->blocking;
  CU(cudaMemcpyAsync(dst, (const void *)(uintptr_t)src, n, cudaMemcpyDeviceToHost, q), "cudaMemcpyAsync(D2H)");
  CU(cudaStreamSynchronize(q), "cudaStreamSynchronize after a copy to the host");
  DEVICE_RETURN(MDR_OK);
}

static mdr_status cuda_fill(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n) {
  DEVICE_SCOPE(b);
  cudaStream_t q = cuda_of(b)->blocking;
  CU(cudaMemsetAsync((void *)(uintptr_t)dst, v, n, q), "cudaMemsetAsync (fill)");
  CU(cudaStreamSynchronize(q), "cudaStreamSynchronize after a fill");
  DEVICE_RETURN(MDR_OK);
}

static mdr_status cuda_stream_create(mdr_backend *b, mdr_stream *out) {
  DEVICE_SCOPE(b);
  cudaStream_t s = NULL;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  *out = s;
  DEVICE_RETURN(MDR_OK);
}

static void cuda_stream_destroy(mdr_backend *b, mdr_stream s) {
  DEVICE_VOID(b, cudaStreamDestroy((cudaStream_t)s));
}

/* Calls on a stream or exec handle alone (synchronize, query, capture
 * status, graph launch, node update) run in the handle's own context,
 * whatever the current device: no device switch, which a step would pay
 * for twice (~50 ns each, dev/step_overhead_probe). */
#define CU_HANDLE(call, what)                                    \
  do {                                                           \
    cudaError_t e_ = (call);                                     \
    if (e_ != cudaSuccess) return cuda_fail(b, e_, what);        \
  } while (0)

static mdr_status cuda_synchronize(mdr_backend *b, mdr_stream s) {
  CU_HANDLE(cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize");
  return MDR_OK;
}

static mdr_status cuda_stream_query(mdr_backend *b, mdr_stream s, int *idle) {
  cudaError_t e = cudaStreamQuery((cudaStream_t)s);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    *idle = 0;
    return MDR_OK;
  }
  CU_HANDLE(e, "cudaStreamQuery");
  *idle = 1;
  return MDR_OK;
}

static mdr_status cuda_capture_begin(mdr_backend *b, mdr_stream s) {
  if (!s) return mdr_backend_fail(b, MDR_ERR_CAPTURE, "cuda: capture on the legacy stream refused");
  DEVICE_SCOPE(b);
  CU(cudaStreamBeginCapture((cudaStream_t)s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  DEVICE_RETURN(MDR_OK);
}

static mdr_status cuda_capture_end(mdr_backend *b, mdr_stream s, void **graph) {
  DEVICE_SCOPE(b);
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture((cudaStream_t)s, &g);
  if (e != cudaSuccess || !g) {
    if (g) (void)cudaGraphDestroy(g);
    CU(e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture");
  }
  *graph = g;
  DEVICE_RETURN(MDR_OK);
}

static mdr_status cuda_is_capturing(mdr_backend *b, mdr_stream s, int *capturing) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CU_HANDLE(cudaStreamIsCapturing((cudaStream_t)s, &cs), "cudaStreamIsCapturing");
  *capturing = cs != cudaStreamCaptureStatusNone;
  return MDR_OK;
}

/* One call instantiates and, with a stream, uploads (no second API call). */
static mdr_status cuda_graph_instantiate(mdr_backend *b, void *graph, mdr_stream upload, void **exec) {
  DEVICE_SCOPE(b);
  cudaGraphExec_t x = NULL;
  cudaGraphInstantiateParams ip = {0};
  ip.flags = upload ? cudaGraphInstantiateFlagUpload : 0;
  ip.uploadStream = (cudaStream_t)upload;
  cudaError_t e = cudaGraphInstantiateWithParams(&x, (cudaGraph_t)graph, &ip);
  if (e == cudaSuccess && ip.result_out != cudaGraphInstantiateSuccess) e = cudaErrorInvalidValue;
  if (e != cudaSuccess) {
    if (x) (void)cudaGraphExecDestroy(x);
    cuda_fail(b, e, "cudaGraphInstantiateWithParams");
    DEVICE_RETURN(MDR_ERR_CAPTURE);
  }
  *exec = x;
  DEVICE_RETURN(MDR_OK);
}

static mdr_status cuda_graph_launch(mdr_backend *b, void *exec, mdr_stream s) {
  CU_HANDLE(cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)s), "cudaGraphLaunch");
  return MDR_OK;
}

static void cuda_graph_destroy(mdr_backend *b, void *graph) {
  DEVICE_VOID(b, cudaGraphDestroy((cudaGraph_t)graph));
}

static void cuda_exec_destroy(mdr_backend *b, void *exec) {
  DEVICE_VOID(b, cudaGraphExecDestroy((cudaGraphExec_t)exec));
}

/* An error earlier work left pending is returned by the next
 * cudaGetLastError, which the launchers call to check their own launch:
 * take it first, as the application's. */
static mdr_status cuda_take_pending_error(mdr_backend *b) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return MDR_OK;
  return mdr_backend_fail(b, cuda_status_of(e),
                          "cuda: an error was pending before this mdr call, left by earlier work outside mdr "
                          "(now cleared; nothing of this call was enqueued): %s (%s)",
                          cudaGetErrorName(e), cudaGetErrorString(e));
}

static mdr_status cuda_is_device_memory(mdr_backend *b, mdr_dptr p, size_t n, int *ok) {
  (void)b;
  *ok = 0;
  struct cudaPointerAttributes first, last;
  if (cudaPointerGetAttributes(&first, (const void *)(uintptr_t)p) != cudaSuccess ||
      cudaPointerGetAttributes(&last, (const void *)(uintptr_t)(p + (n ? n - 1 : 0))) != cudaSuccess) {
    (void)cudaGetLastError(); /* an unknown address: not device memory */
    return MDR_OK;
  }
  *ok = (first.type == cudaMemoryTypeDevice || first.type == cudaMemoryTypeManaged) &&
        (last.type == cudaMemoryTypeDevice || last.type == cudaMemoryTypeManaged);
  return MDR_OK;
}

/* The node a launch just captured on s became: the capture's dependencies
 * right after it, exactly one node. */
static mdr_status captured_node(mdr_backend *b, mdr_stream s, void **node) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t *deps = NULL;
  size_t ndeps = 0;
  CU_HANDLE(cudaStreamGetCaptureInfo((cudaStream_t)s, &cs, NULL, NULL, &deps, NULL, &ndeps),
            "cudaStreamGetCaptureInfo after the fused launch");
  if (cs != cudaStreamCaptureStatusActive || ndeps != 1)
    return mdr_backend_fail(b, MDR_ERR_CAPTURE,
                            "cuda: the fused launch is not one node of an active capture "
                            "(capturing %d, %zu dependencies)",
                            cs == cudaStreamCaptureStatusActive, ndeps);
  *node = deps[0];
  return MDR_OK;
}

static mdr_status cuda_zero_fused(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                  const mdr_stage_desc *stage, mdr_stream s, void **node) {
  mdr_status pending = cuda_take_pending_error(b);
  if (pending != MDR_OK) return pending;
  DEVICE_SCOPE(b);
  int e = mdr_cuda_zero_and_stage(segs, n, tokens, stage, s, cuda_of(b)->sm_count);
  if (e != 0) CU((cudaError_t)e, "zero-and-stage launch");
  DEVICE_RETURN(node ? captured_node(b, s, node) : MDR_OK);
}

static mdr_status cuda_fused_inline_launch(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                           const mdr_stage_desc *stage, mdr_stream s, void **node,
                                           mdr_stage_inline_launch *out) {
  mdr_status pending = cuda_take_pending_error(b);
  if (pending != MDR_OK) return pending;
  DEVICE_SCOPE(b);
  int e = mdr_cuda_zero_inline(segs, n, tokens, stage, s, cuda_of(b)->sm_count, out);
  if (e != 0) CU((cudaError_t)e, "zero-and-stage launch (inline)");
  DEVICE_RETURN(node ? captured_node(b, s, node) : MDR_OK);
}

/* The function of one of the zeroing kernels on the backend's device, or
 * NULL (not in the table). */
static CUfunction kernel_function(const cuda_backend *cb, const void *symbol) {
  for (size_t i = 0; i < MDR_CUDA_ZERO_KERNELS; i++) /* a NULL function: the runtime's update */
    if (cb->fns[i].symbol == symbol) return (CUfunction)cb->fns[i].function;
  return NULL;
}

/* Set a kernel node of exec to func<<<grid, block>>>(*param): the whole
 * argument, copied at the call (launches already enqueued keep theirs).
 * Through the driver when the backend has its entry point and the kernel's
 * function, else (or when the driver's call fails: the runtime's then
 * names the error) through the runtime. On failure the node is as it was. */
static mdr_status node_set(mdr_backend *b, void *exec, void *node, const void *func, const unsigned grid[3],
                           const unsigned block[3], void *param, const char *what) {
  const cuda_backend *cb = cuda_of(b);
  void *args[1] = {param};
  CUfunction f = cb->node_set ? kernel_function(cb, func) : NULL;
  if (f) {
    CUDA_KERNEL_NODE_PARAMS_v2 kp = {0};
    kp.func = f;
    kp.gridDimX = grid[0];
    kp.gridDimY = grid[1];
    kp.gridDimZ = grid[2];
    kp.blockDimX = block[0];
    kp.blockDimY = block[1];
    kp.blockDimZ = block[2];
    kp.kernelParams = args;
    if (cb->node_set((CUgraphExec)exec, (CUgraphNode)node, &kp) == CUDA_SUCCESS) return MDR_OK;
  }
  struct cudaKernelNodeParams kp = {0};
  kp.func = (void *)func;
  kp.gridDim = (dim3){grid[0], grid[1], grid[2]};
  kp.blockDim = (dim3){block[0], block[1], block[2]};
  kp.kernelParams = args;
  CU_HANDLE(cudaGraphExecKernelNodeSetParams((cudaGraphExec_t)exec, (cudaGraphNode_t)node, &kp), what);
  return MDR_OK;
}

/* A step's slot image into the inline node. */
static mdr_status cuda_fused_inline_update(mdr_backend *b, void *exec, void *node, const mdr_stage_inline_launch *l) {
  return node_set(b, exec, node, l->func, l->grid, l->block, (void *)l->param,
                  "cudaGraphExecKernelNodeSetParams (inline slot)");
}

static mdr_status cuda_fused_node_update(mdr_backend *b, void *exec, void *node, const mdr_zero_seg *rules,
                                         size_t n, uint64_t tokens, const mdr_stage_desc *stage) {
  mdr_cuda_launch l;
  if (mdr_cuda_zero_table_launch(rules, n, tokens, stage, cuda_of(b)->sm_count, &l) != 0)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT,
                            "cuda: plan table update of %zu rules to %llu tokens", n,
                            (unsigned long long)tokens);
  return node_set(b, exec, node, l.func, l.grid, l.block, l.param, "cudaGraphExecKernelNodeSetParams (fused node)");
}

static mdr_status cuda_mem_used(mdr_backend *b, size_t *used) {
  DEVICE_SCOPE(b);
  size_t free_bytes = 0, total = 0;
  CU(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  *used = total - free_bytes;
  DEVICE_RETURN(MDR_OK);
}

static mdr_status cuda_graph_nodes(mdr_backend *b, void *graph, size_t *n) {
  DEVICE_SCOPE(b);
  size_t count = 0;
  CU(cudaGraphGetNodes((cudaGraph_t)graph, NULL, &count), "cudaGraphGetNodes");
  *n = count;
  DEVICE_RETURN(MDR_OK);
}

static void cuda_destroy(mdr_backend *b) {
  if (cuda_of(b)->blocking) DEVICE_VOID(b, cudaStreamDestroy(cuda_of(b)->blocking));
  free(b);
}

static const struct mdr_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .alloc_device = cuda_alloc_device,
    .free_device = cuda_free_device,
    .alloc_pinned = cuda_alloc_pinned,
    .free_pinned = cuda_free_pinned,
    .memset_async = cuda_memset_async,
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
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .exec_destroy = cuda_exec_destroy,
    .zero_fused = cuda_zero_fused,
    .fused_node_update = cuda_fused_node_update,
    .fused_inline_launch = cuda_fused_inline_launch,
    .fused_inline_update = cuda_fused_inline_update,
    .take_pending_error = cuda_take_pending_error,
    .is_device_memory = cuda_is_device_memory,
    .mem_used = cuda_mem_used,
    .graph_nodes = cuda_graph_nodes,
};

mdr_status mdr_backend_cuda_create(int device, mdr_backend **out) {
  if (!out) return MDR_ERR_INVALID_ARGUMENT;
  *out = NULL;
  if (device < 0) return MDR_ERR_INVALID_ARGUMENT;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return MDR_ERR_NO_DEVICE;
  }
  if (device >= count) return MDR_ERR_NO_DEVICE;
  cuda_backend *cb = calloc(1, sizeof *cb);
  if (!cb) return MDR_ERR_OUT_OF_MEMORY;
  mdr_backend_init_base(&cb->base, &cuda_ops);
  cb->device = device;
  mdr_backend *b = &cb->base;
  device_scope scope_;
  mdr_status st = device_enter_backend(b, &scope_);
  if (st != MDR_OK) {
    free(cb);
    return MDR_ERR_NO_DEVICE;
  }
  /* the kernels are loaded here, not at an engine's first step (module
   * loading can wait for the whole device) */
  if (cudaDeviceGetAttribute(&cb->sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cb->sm_count <= 0 || cudaStreamCreateWithFlags(&cb->blocking, cudaStreamNonBlocking) != cudaSuccess ||
      mdr_cuda_zero_preload(cb->fns) != 0) {
    (void)cudaGetLastError();
    if (cb->blocking) (void)cudaStreamDestroy(cb->blocking);
    device_leave(&scope_);
    free(cb);
    return MDR_ERR_NO_DEVICE;
  }
  /* the driver's node update (12.0's signature); without it, the runtime's
   * (cudaGetDriverEntryPointByVersion is the runtime's from 12.5 on) */
#if CUDART_VERSION >= 12050
  if (mdr_env_switch_or(b, "MDR_NODE_UPDATE_DRIVER", "cuda backend", 1)) {
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    void *fn = NULL;
    if (cudaGetDriverEntryPointByVersion("cuGraphExecKernelNodeSetParams", &fn, 12000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      memcpy(&cb->node_set, &fn, sizeof fn); /* a data pointer to a function pointer, as with dlsym */
    (void)cudaGetLastError();
  }
#endif
  device_leave(&scope_);
  *out = b;
  return MDR_OK;
}

int mdr_be_cuda_driver_node_update(const mdr_backend *b) {
  return b->ops == &cuda_ops && cuda_of((mdr_backend *)b)->node_set != NULL;
}

int mdr_be_cuda_device(const mdr_backend *b) { return b->ops == &cuda_ops ? cuda_of((mdr_backend *)b)->device : -1; }

#else /* no CUDA in this build */

int mdr_be_cuda_device(const mdr_backend *b) {
  (void)b;
  return -1;
}

int mdr_be_cuda_driver_node_update(const mdr_backend *b) {
  (void)b;
  return 0;
}

mdr_status mdr_backend_cuda_create(int device, mdr_backend **out) {
  if (!out) return MDR_ERR_INVALID_ARGUMENT;
  *out = NULL;
  if (device < 0) return MDR_ERR_INVALID_ARGUMENT;
  return MDR_ERR_UNSUPPORTED;
}

#endif
