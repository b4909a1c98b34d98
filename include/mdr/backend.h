/* mdr — backends: where device memory, streams and graphs come from.
 *
 * Two backends implement the same private vtable:
 *   - "cuda": the CUDA runtime (non-blocking streams, thread-local capture);
 *   - "host": device memory is 256-byte aligned host memory, a stream runs
 *     each operation when it is enqueued, and between capture begin and end
 *     operations are recorded instead of run; a graph launch replays the
 *     recorded list in order. It exists so that every piece of logic above
 *     the backend is tested on machines without a GPU.
 *
 * Thread safety: a backend may be shared by several threads (allocation,
 * blocking copies, streams, arenas and caches of their own); a stream must
 * be used by one thread at a time. The last-error text is per thread and per
 * backend: the latest failure this backend recorded in the calling thread. */
#ifndef MDR_BACKEND_H
#define MDR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "mdr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mdr_backend mdr_backend;
/* A device address; 0 is NULL. On the host backend it is a host pointer. */
typedef uint64_t mdr_dptr;
/* A stream: on the CUDA backend a cudaStream_t, on the host backend an
 * object of the backend's own.
 *
 * An engine's own stream (CUDA backend). Any call that takes an mdr_stream
 * also takes a cudaStream_t the engine created, cast:
 * `(mdr_stream)engine_stream`. The rules:
 *   - the stream belongs to the backend's device (it was created while that
 *     device was current);
 *   - it is non-blocking (cudaStreamNonBlocking). A blocking stream works
 *     but orders itself with the legacy stream, which mdr never uses;
 *   - it is never a special handle: NULL / 0 (the legacy stream),
 *     cudaStreamLegacy or cudaStreamPerThread. A graph cache refuses NULL
 *     (MDR_ERR_INVALID_ARGUMENT) and a capture on it is MDR_ERR_CAPTURE;
 *   - the engine keeps it: never pass it to mdr_backend_stream_destroy, and
 *     destroy it only after every cache created on it is destroyed and the
 *     work mdr enqueued on it has finished;
 *   - one thread at a time enqueues on it through mdr (as for mdr's own
 *     streams); the engine's own kernels on it are ordered with mdr's work
 *     by the stream itself, so no extra synchronisation is needed.
 * On the host backend a stream comes from mdr_backend_stream_create only. */
typedef void *mdr_stream;

/* Create a CUDA backend on `device`. Every call made through it runs on that
 * device, whatever the calling thread's current device is, and leaves the
 * caller's current device as it was (create included). Its blocking calls
 * (fill, copies) use a private stream and wait for it only, never for the
 * whole device. Returns MDR_ERR_NO_DEVICE when there is no driver or no
 * such device, MDR_ERR_UNSUPPORTED in a build without CUDA,
 * MDR_ERR_INVALID_ARGUMENT for a NULL out or a negative device. On failure
 * *out is NULL. Caller owns *out; release with mdr_backend_destroy. */
MDR_API mdr_status mdr_backend_cuda_create(int device, mdr_backend **out);

/* Create a host backend. On failure *out is NULL. Caller owns *out; release
 * with mdr_backend_destroy. */
MDR_API mdr_status mdr_backend_host_create(mdr_backend **out);

/* The CUDA backend on device 0 when one is present, else the host backend.
 * Never fails for lack of a GPU. Caller owns *out. */
MDR_API mdr_status mdr_backend_create_default(mdr_backend **out);

/* Release a backend. Accepts NULL. Every arena, cache and stream made from it
 * must be destroyed first. */
MDR_API void mdr_backend_destroy(mdr_backend *b);

/* "cuda" or "host" (NULL backend: "none"). Static string. */
MDR_API const char *mdr_backend_name(const mdr_backend *b);

/* Text of the latest failure this backend recorded in the calling thread,
 * "" when none (and for a NULL backend). Every refusal on a valid backend
 * records its own text. Besides failures, a call that succeeds records one
 * note here: an environment switch set to a value it does not recognise
 * (for example MDR_POISON=y), which is then taken as off (README.md,
 * "Environment", installed as <prefix>/share/doc/mdr/README.md).
 * Borrowed; valid until the calling thread's next failure. */
MDR_API const char *mdr_backend_last_error(const mdr_backend *b);

/* Create a stream (CUDA: cudaStreamNonBlocking; never the legacy stream).
 * NULL b or out: MDR_ERR_INVALID_ARGUMENT. Caller owns *out; release with
 * mdr_backend_stream_destroy. Not capture-safe. */
MDR_API mdr_status mdr_backend_stream_create(mdr_backend *b, mdr_stream *out);

/* Destroy a stream made by mdr_backend_stream_create. Accepts NULL. */
MDR_API void mdr_backend_stream_destroy(mdr_backend *b, mdr_stream s);

/* Block until everything enqueued on `s` has run. Not capture-safe. */
MDR_API mdr_status mdr_backend_synchronize(mdr_backend *b, mdr_stream s);

/* Blocking copies and fill, for tests, tools and setup (not capture-safe).
 * n == 0 is a no-op returning MDR_OK; a 0 address with n > 0 is
 * MDR_ERR_INVALID_ARGUMENT. */
MDR_API mdr_status mdr_backend_copy_h2d(mdr_backend *b, mdr_dptr dst, const void *src, size_t n);
MDR_API mdr_status mdr_backend_copy_d2h(mdr_backend *b, void *dst, mdr_dptr src, size_t n);
MDR_API mdr_status mdr_backend_fill(mdr_backend *b, mdr_dptr dst, unsigned char value, size_t n);

/* Enqueue a memset of n bytes on `s`. Asynchronous and capture-safe: what a
 * capture body may use on any backend. */
MDR_API mdr_status mdr_backend_memset_async(mdr_backend *b, mdr_dptr dst, unsigned char value,
                                            size_t n, mdr_stream s);

/* Allocate / free n bytes of device memory outside any arena (for callers'
 * own buffers and tests). NULL b or out, or n == 0:
 * MDR_ERR_INVALID_ARGUMENT. Not capture-safe. Caller owns *out; release
 * with mdr_backend_free (which accepts 0). */
MDR_API mdr_status mdr_backend_alloc(mdr_backend *b, size_t n, mdr_dptr *out);
MDR_API void mdr_backend_free(mdr_backend *b, mdr_dptr p);

#ifdef __cplusplus
}
#endif
#endif
