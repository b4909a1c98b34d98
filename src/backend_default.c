/* backend_default.c — the backend a program gets when it does not choose:
 * CUDA on device 0 when there is one, else the host backend. It sits above
 * both backends, apart from the seam they share (backend.c). */
#include "mdr/backend.h"

mdr_status mdr_backend_create_default(mdr_backend **out) {
  if (!out) return MDR_ERR_INVALID_ARGUMENT;
  mdr_status st = mdr_backend_cuda_create(0, out);
  if (st == MDR_ERR_NO_DEVICE || st == MDR_ERR_UNSUPPORTED) st = mdr_backend_host_create(out);
  return st;
}
