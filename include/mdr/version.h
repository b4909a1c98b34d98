/* mdr — the version, and what a build of the library contains. */
#ifndef MDR_VERSION_H
#define MDR_VERSION_H

#include "mdr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MDR_VERSION_MAJOR 0
#define MDR_VERSION_MINOR 2
#define MDR_VERSION_PATCH 0
#define MDR_VERSION_NUMBER (MDR_VERSION_MAJOR * 10000 + MDR_VERSION_MINOR * 100 + MDR_VERSION_PATCH)
#define MDR_VERSION_STRINGIFY_(x) #x
#define MDR_VERSION_STRING_(a, b, c) \
  MDR_VERSION_STRINGIFY_(a) "." MDR_VERSION_STRINGIFY_(b) "." MDR_VERSION_STRINGIFY_(c)
/* "major.minor.patch" of these headers, e.g. "0.2.0". */
#define MDR_VERSION_STRING MDR_VERSION_STRING_(MDR_VERSION_MAJOR, MDR_VERSION_MINOR, MDR_VERSION_PATCH)

/* The version of the library linked at run time, as MDR_VERSION_NUMBER
 * (major*10000 + minor*100 + patch). Never fails; thread-safe. Compare it
 * with MDR_VERSION_NUMBER to detect headers and library of different
 * releases. */
MDR_API unsigned mdr_version_number(void);

/* The version of the library linked at run time as "major.minor.patch",
 * e.g. "0.2.0". Static string (never NULL, never freed); thread-safe. */
MDR_API const char *mdr_version_string(void);

/* The optional parts a build of libmdr was compiled with: bits of
 * mdr_build_features(). A feature compiled in may still be unavailable at
 * run time (no GPU, no driver): the calls that need it then return their
 * documented status (MDR_ERR_NO_DEVICE, MDR_ERR_UNSUPPORTED). */
typedef enum mdr_feature {
  MDR_FEATURE_CUDA = 1u,        /* the CUDA backend and the fused zeroing kernel */
  MDR_FEATURE_NCCL = 2u,        /* the NCCL communicator (include/mdr/comm.h) */
  MDR_FEATURE_NCCL_DEVICE = 4u, /* mdr's all-reduce kernels on NCCL's device API (NCCL 2.28+) */
  MDR_FEATURE_NVTX = 8u         /* NVTX ranges in an "mdr" domain */
} mdr_feature;

/* The mdr_feature bits this build of the library was compiled with, OR-ed
 * together (0 for a host-only build). Fixed at build time; never fails;
 * thread-safe. Test one with `mdr_build_features() & MDR_FEATURE_NCCL`. */
MDR_API unsigned mdr_build_features(void);

/* The same as words separated by one space, in bit order: "cuda", "nccl",
 * "nccl-device", "nvtx"; "" for a host-only build. For example
 * "cuda nccl nccl-device nvtx". Static string (never NULL, never freed);
 * thread-safe. */
MDR_API const char *mdr_build_features_string(void);

#ifdef __cplusplus
}
#endif
#endif
