/* mdr — status codes shared by every public function.
 *
 * Every fallible mdr function returns an mdr_status; results go through
 * out-params. Details of a backend failure are in mdr_backend_last_error(). */
#ifndef MDR_STATUS_H
#define MDR_STATUS_H

#include "mdr/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X-macro: one line per status, (enum name, text for mdr_status_string). */
#define MDR_STATUS_LIST(X)                                                            \
  X(MDR_OK, "ok")                                                                     \
  X(MDR_ERR_INVALID_ARGUMENT, "invalid argument (NULL handle/out-param, unknown name or enum)") \
  X(MDR_ERR_OUT_OF_RANGE, "argument out of range")                                    \
  X(MDR_ERR_OVERFLOW, "size computation overflowed size_t")                           \
  X(MDR_ERR_OUT_OF_MEMORY, "device, pinned or host allocation failed")                \
  X(MDR_ERR_NO_DEVICE, "no CUDA driver or device")                                    \
  X(MDR_ERR_BACKEND, "backend call failed (see mdr_backend_last_error)")              \
  X(MDR_ERR_CAPTURE, "stream capture or graph instantiation failed")                  \
  X(MDR_ERR_UNSUPPORTED, "not supported by this backend or build")                    \
  X(MDR_ERR_STATE, "call not valid in the object's current state")

typedef enum mdr_status {
#define MDR_STATUS_ENUM_(name, text) name,
  MDR_STATUS_LIST(MDR_STATUS_ENUM_)
#undef MDR_STATUS_ENUM_
  MDR_STATUS_COUNT
} mdr_status;

/* Human-readable text for a status. Never NULL: an out-of-range value gives
 * "unknown status". Returns a static string; thread-safe. */
MDR_API const char *mdr_status_string(mdr_status s);

#ifdef __cplusplus
}
#endif
#endif
