/* version.c — the runtime version and the features this build was
 * compiled with (the MDR_HAVE_* definitions CMakeLists.txt sets). */
#include "mdr/version.h"

#if defined(MDR_HAVE_CUDA)
#define MDR_F_CUDA_ MDR_FEATURE_CUDA
#define MDR_S_CUDA_ " cuda"
#else
#define MDR_F_CUDA_ 0u
#define MDR_S_CUDA_ ""
#endif
#if defined(MDR_HAVE_NCCL)
#define MDR_F_NCCL_ MDR_FEATURE_NCCL
#define MDR_S_NCCL_ " nccl"
#else
#define MDR_F_NCCL_ 0u
#define MDR_S_NCCL_ ""
#endif
#if defined(MDR_HAVE_NCCL_DEVICE)
#define MDR_F_NCCL_DEVICE_ MDR_FEATURE_NCCL_DEVICE
#define MDR_S_NCCL_DEVICE_ " nccl-device"
#else
#define MDR_F_NCCL_DEVICE_ 0u
#define MDR_S_NCCL_DEVICE_ ""
#endif
#if defined(MDR_HAVE_NVTX)
#define MDR_F_NVTX_ MDR_FEATURE_NVTX
#define MDR_S_NVTX_ " nvtx"
#else
#define MDR_F_NVTX_ 0u
#define MDR_S_NVTX_ ""
#endif

/* Every word carries a leading space; the string starts one past it. */
static const char k_features[] = " " MDR_S_CUDA_ MDR_S_NCCL_ MDR_S_NCCL_DEVICE_ MDR_S_NVTX_;

unsigned mdr_version_number(void) { return MDR_VERSION_NUMBER; }

const char *mdr_version_string(void) { return MDR_VERSION_STRING; }

unsigned mdr_build_features(void) {
  return (unsigned)MDR_F_CUDA_ | (unsigned)MDR_F_NCCL_ | (unsigned)MDR_F_NCCL_DEVICE_ | (unsigned)MDR_F_NVTX_;
}

const char *mdr_build_features_string(void) {
  return sizeof k_features > 2 ? k_features + 2 : "";
}
